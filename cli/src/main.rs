//! `ferrolb`: ferrolb's command-line tool. Every flag can also be set from the environment
//! variable named in `--help` (the flag wins).
//!
//! `ferrolb migrate [FILES...] [--from-cluster]` writes the `ferrolb.io/v1beta1` objects converted
//! from MetalLB's configuration to stdout (YAML, ready for `kubectl apply -f -`) and its findings
//! to stderr, one line each, then a summary line. Exit status: 0 when nothing needs attention, 2
//! when something was omitted or changed or a Service's addresses will change (the output is
//! still complete for what could be converted), 1 on an error (nothing on stdout).
//!
//! `ferrolb status [--output text|json]` (also `kubectl ferrolb status`, through the
//! `kubectl-ferrolb` link the release ships) prints one screen on the install
//! (`ferrolb_cli::status`). Exit status: 0 nothing needs attention, 2 something does (listed
//! last), 1 on an error.
//!
//! `ferrolb uninstall [--release-only] [--keep-crds]` stops the controller, releases every
//! Service status it wrote and deletes the install (`ferrolb_cli::uninstall`). Exit status: 0
//! done, 2 a status could not be released (nothing deleted; run it again), 1 on an error.

use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::{ArgAction, Args, Parser, Subcommand};
use ferrolb_cli::migrate::{self, Document, services};
use ferrolb_cli::{cluster, status, uninstall};
use ferrolb_crds::service::{ClassFilter, DEFAULT_LB_CLASS};

/// ferrolb's command-line tool.
#[derive(Debug, Parser)]
#[command(name = "ferrolb", version, about = "ferrolb's command-line tool")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Convert MetalLB's configuration (IPAddressPool and L2Advertisement of metallb.io, or the
    /// legacy ConfigMap) into ferrolb.io/v1beta1 objects on stdout, and report on stderr what
    /// could not be converted and what ferrolb will do with each LoadBalancer Service. Exit
    /// status 0: nothing needs attention; 2: read stderr; 1: error.
    Migrate(MigrateArgs),
    /// Uninstall ferrolb and leave no Service status of ours behind: scale the controller to 0,
    /// wait until no replica leads, release every status it wrote (Normal IPReleased Events),
    /// then delete what is provably the install's: the namespace (only ferrolb-system labelled
    /// app.kubernetes.io/part-of=ferrolb; another is kept, and then everything else too), the
    /// cluster RBAC with that label and ferrolb's CRDs with that label. Exit status 0: done; 2:
    /// a status was not released (nothing deleted, run it again); 1: error.
    Uninstall(UninstallArgs),
    /// One screen on the install, read-only: pools (used/free, conditions), each IP's node and
    /// interfaces, pending Services and why, excluded nodes and why, the membership key, the
    /// member count each speaker reports and whether they agree, the Kubernetes version against
    /// the floor (1.32), kube-proxy's mode and strictARP, Pod Security labels, and whether
    /// MetalLB still runs. Also `kubectl ferrolb status`. Exit status 0: nothing needs attention;
    /// 2: something does (listed last); 1: error.
    Status(StatusArgs),
}

/// `--output` of `ferrolb status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Output {
    /// One screen for a terminal.
    Text,
    /// The report as JSON (field names documented in docs/troubleshooting.md).
    Json,
}

#[derive(Debug, Args)]
struct StatusArgs {
    /// kubeconfig file; default: the in-cluster configuration, then `$KUBECONFIG` /
    /// `~/.kube/config`.
    #[arg(long, env = "FERROLB_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// The namespace ferrolb is installed in.
    #[arg(long, env = "FERROLB_NAMESPACE", default_value = "ferrolb-system")]
    namespace: String,
    /// The membership-key Secret in --namespace (only whether it exists is read).
    #[arg(
        long,
        env = "FERROLB_MEMBERLIST_SECRET",
        default_value = "ferrolb-memberlist"
    )]
    memberlist_secret: String,
    /// The speakers' DaemonSet in --namespace (read for --exclude-lb-label).
    #[arg(
        long,
        env = "FERROLB_SPEAKER_DAEMONSET",
        default_value = "ferrolb-speaker"
    )]
    speaker_daemonset: String,
    /// The namespace MetalLB (or minikube's metallb addon) runs in.
    #[arg(
        long,
        env = "FERROLB_METALLB_NAMESPACE",
        default_value = "metallb-system"
    )]
    metallb_namespace: String,
    /// The `--lb-class` ferrolb's controller runs with.
    #[arg(long, env = "FERROLB_LB_CLASS", default_value = DEFAULT_LB_CLASS)]
    lb_class: String,
    /// The `--default-class` ferrolb's controller runs with.
    #[arg(long, env = "FERROLB_DEFAULT_CLASS", default_value_t = true, action = ArgAction::Set)]
    default_class: bool,
    /// `text` (one screen) or `json` (for scripts).
    #[arg(
        long,
        short = 'o',
        env = "FERROLB_OUTPUT",
        value_enum,
        default_value = "text"
    )]
    output: Output,
}

#[derive(Debug, Args)]
struct UninstallArgs {
    /// kubeconfig file; default: the in-cluster configuration, then `$KUBECONFIG` /
    /// `~/.kube/config`.
    #[arg(long, env = "FERROLB_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// The namespace ferrolb is installed in.
    #[arg(long, env = "FERROLB_NAMESPACE", default_value = "ferrolb-system")]
    namespace: String,
    /// The controller's Lease (its --lease-name) in --namespace.
    #[arg(long, env = "FERROLB_LEASE_NAME", default_value = "ferrolb-controller")]
    lease_name: String,
    /// Stop the controller and release the statuses, delete nothing (then `helm uninstall` or
    /// `kubectl delete -k deploy/`).
    #[arg(long, env = "FERROLB_RELEASE_ONLY", action = ArgAction::SetTrue)]
    release_only: bool,
    /// Keep the ferrolb.io CRDs, and so every pool (as `helm uninstall` does).
    #[arg(long, env = "FERROLB_KEEP_CRDS", action = ArgAction::SetTrue)]
    keep_crds: bool,
    /// Bound of each wait (the controller stopping, the releases, the deletions), e.g. `2m`.
    #[arg(long, env = "FERROLB_UNINSTALL_TIMEOUT", default_value = "2m", value_parser = ferrolb_runtime::duration::parse)]
    timeout: std::time::Duration,
}

#[derive(Debug, Args)]
struct MigrateArgs {
    /// Files with MetalLB configuration: YAML or JSON, any number of documents, List objects, the
    /// legacy ConfigMap or its `config` text alone. `-` reads stdin; with no files and no
    /// --from-cluster, stdin is read.
    files: Vec<PathBuf>,
    /// Also read the cluster, read-only: MetalLB's objects and legacy ConfigMap in
    /// --metallb-namespace, every Service, Node and Namespace.
    #[arg(long, env = "FERROLB_MIGRATE_FROM_CLUSTER", action = ArgAction::SetTrue)]
    from_cluster: bool,
    /// kubeconfig file for --from-cluster; default: the in-cluster configuration, then
    /// `$KUBECONFIG` / `~/.kube/config`.
    #[arg(long, env = "FERROLB_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// The namespace MetalLB runs in and reads its configuration from (--from-cluster).
    #[arg(
        long,
        env = "FERROLB_METALLB_NAMESPACE",
        default_value = "metallb-system"
    )]
    metallb_namespace: String,
    /// The name of MetalLB's legacy ConfigMap (MetalLB's `--config`) in --metallb-namespace
    /// (--from-cluster).
    #[arg(long, env = "FERROLB_METALLB_CONFIG_MAP", default_value = "config")]
    metallb_config_map: String,
    /// The `--lb-class` ferrolb's controller will run with (for the Service report).
    #[arg(long, env = "FERROLB_LB_CLASS", default_value = DEFAULT_LB_CLASS)]
    lb_class: String,
    /// The `--default-class` ferrolb's controller will run with (for the Service report).
    #[arg(long, env = "FERROLB_DEFAULT_CLASS", default_value_t = true, action = ArgAction::Set)]
    default_class: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Migrate(args) => match run_migrate(args) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("ferrolb migrate: error: {e:#}");
                ExitCode::from(1)
            }
        },
        Command::Status(args) => match run_status(args) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("ferrolb status: error: {e:#}");
                ExitCode::from(1)
            }
        },
        Command::Uninstall(args) => match run_uninstall(args) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("ferrolb uninstall: error: {e:#}");
                ExitCode::from(1)
            }
        },
    }
}

fn run_migrate(args: MigrateArgs) -> anyhow::Result<ExitCode> {
    let mut files = args.files.clone();
    if files.is_empty() && !args.from_cluster {
        if std::io::stdin().is_terminal() {
            bail!(
                "nothing to read: give files with MetalLB configuration, - for stdin, or --from-cluster (see --help)"
            );
        }
        files.push(PathBuf::from("-"));
    }
    let mut docs: Vec<Document> = Vec::new();
    for file in &files {
        let (source, text) = if file.as_os_str() == "-" {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("reading stdin")?;
            ("-".to_owned(), text)
        } else {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("reading {}", file.display()))?;
            (file.display().to_string(), text)
        };
        docs.extend(migrate::parse_documents(&source, &text)?);
    }
    let mut nodes = Vec::new();
    let mut namespaces = Vec::new();
    if args.from_cluster {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        let input = runtime.block_on(async {
            let client = ferrolb_runtime::client::client(args.kubeconfig.as_deref()).await?;
            cluster::read(&client, &args.metallb_namespace, &args.metallb_config_map).await
        })?;
        docs.extend(input.documents);
        nodes = input.nodes;
        namespaces = input.namespaces;
    }

    let conversion = migrate::convert(&docs);
    let class = ClassFilter {
        lb_class: args.lb_class.clone(),
        default_class: args.default_class,
    };
    let report = services::report(&conversion, &nodes, &namespaces, &class, Instant::now());
    let yaml = migrate::render(&conversion).context("writing YAML")?;

    let findings: Vec<_> = conversion.findings.iter().chain(&report).collect();
    let attention = findings
        .iter()
        .filter(|f| f.level.needs_attention())
        .count();
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(yaml.as_bytes())
        .and_then(|()| stdout.flush())
        .context("writing to stdout")?;
    let mut stderr = std::io::stderr().lock();
    for f in &findings {
        writeln!(stderr, "{f}")?;
    }
    let count = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    writeln!(
        stderr,
        "ferrolb migrate: converted {} and {}; {}",
        count(conversion.pools.len(), "IPAddressPool"),
        count(conversion.advertisements.len(), "L2Advertisement"),
        match attention {
            0 => "nothing needs attention".to_owned(),
            1 => "1 line above needs attention (exit status 2)".to_owned(),
            n => format!("{n} lines above need attention (exit status 2)"),
        }
    )?;
    Ok(if attention == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}

fn run_status(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let opts = status::collect::Options {
        namespace: args.namespace,
        key_secret: args.memberlist_secret,
        speaker_daemonset: args.speaker_daemonset,
        metallb_namespace: args.metallb_namespace,
        class: ClassFilter {
            lb_class: args.lb_class,
            default_class: args.default_class,
        },
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let collected = runtime.block_on(async {
        let client = ferrolb_runtime::client::client(args.kubeconfig.as_deref()).await?;
        status::collect::read(&client, &opts).await
    })?;
    let report = status::report(&collected);
    let text = match args.output {
        Output::Text => status::render(&report),
        Output::Json => serde_json::to_string_pretty(&report).context("writing JSON")? + "\n",
    };
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .context("writing to stdout")?;
    Ok(if report.attention.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}

fn run_uninstall(args: UninstallArgs) -> anyhow::Result<ExitCode> {
    let opts = uninstall::Options {
        namespace: args.namespace,
        lease_name: args.lease_name,
        release_only: args.release_only,
        keep_crds: args.keep_crds,
        timeout: args.timeout,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let outcome = runtime.block_on(async {
        let client = ferrolb_runtime::client::client(args.kubeconfig.as_deref()).await?;
        uninstall::run(&client, &opts, &mut |line| {
            eprintln!("ferrolb uninstall: {line}");
        })
        .await
    })?;
    Ok(if outcome.released_all() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn flags_parse_and_every_flag_has_an_environment_variable() {
        Cli::command().debug_assert();
        let cli =
            Cli::try_parse_from(["ferrolb", "migrate", "a.yaml", "-", "--from-cluster"]).unwrap();
        let Command::Migrate(m) = cli.command else {
            panic!("not migrate")
        };
        assert_eq!(m.files, [PathBuf::from("a.yaml"), PathBuf::from("-")]);
        assert!(m.from_cluster && m.default_class);
        assert_eq!(m.metallb_namespace, "metallb-system");
        assert_eq!(m.metallb_config_map, "config");
        let cli = Cli::try_parse_from(["ferrolb", "uninstall", "--release-only"]).unwrap();
        let Command::Uninstall(u) = cli.command else {
            panic!("not uninstall")
        };
        assert!(u.release_only && !u.keep_crds);
        assert_eq!(
            (u.namespace.as_str(), u.lease_name.as_str()),
            ("ferrolb-system", "ferrolb-controller")
        );
        assert_eq!(u.timeout, std::time::Duration::from_secs(120));
        let cli = Cli::try_parse_from(["kubectl-ferrolb", "status", "-o", "json"]).unwrap();
        let Command::Status(s) = cli.command else {
            panic!("not status")
        };
        assert_eq!(s.output, Output::Json);
        assert_eq!(
            (s.namespace.as_str(), s.memberlist_secret.as_str()),
            ("ferrolb-system", "ferrolb-memberlist")
        );
        let cmd = Cli::command();
        for arg in cmd.get_subcommands().flat_map(|c| c.get_arguments()) {
            if arg.is_positional() || ["help"].contains(&arg.get_id().as_str()) {
                continue;
            }
            let env = arg.get_env().map(|e| e.to_string_lossy().into_owned());
            assert!(
                env.as_deref().is_some_and(|e| e.starts_with("FERROLB_")),
                "--{} has no FERROLB_ environment variable",
                arg.get_id()
            );
        }
    }
}
