//! `ferrolb-testcluster`: start or stop the test cluster by hand.
//!
//! ```text
//! ferrolb-testcluster up   [--dir DIR] [--bind 0.0.0.0 --san 192.0.2.1]   # prints KUBECONFIG=…
//! ferrolb-testcluster down [--dir DIR]                                    # stops it, removes DIR
//! ```
//! The default directory is `$FERROLB_CACHE/testcluster` (`~/.cache/ferrolb/testcluster`).

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use ferrolb_tests::cluster::{ClusterOptions, TestCluster};

#[derive(Parser)]
#[command(about = "Start or stop the ferrolb test cluster (etcd + kube-apiserver on loopback)")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start etcd and kube-apiserver, install the CRDs, write DIR/kubeconfig.
    Up {
        /// State directory (certificates, logs, etcd data, kubeconfig).
        #[arg(long, env = "FERROLB_TESTCLUSTER_DIR")]
        dir: Option<PathBuf>,
        /// Address the API server binds.
        #[arg(long, default_value = "127.0.0.1")]
        bind: IpAddr,
        /// Extra IP SANs for the serving certificate.
        #[arg(long)]
        san: Vec<IpAddr>,
    },
    /// Stop the processes started by `up` and remove DIR.
    Down {
        /// State directory given to `up`.
        #[arg(long, env = "FERROLB_TESTCLUSTER_DIR")]
        dir: Option<PathBuf>,
    },
}

fn default_dir() -> PathBuf {
    let cache = std::env::var_os("FERROLB_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("/tmp"))
                .join(".cache/ferrolb")
        });
    cache.join("testcluster")
}

fn stop(dir: &Path) -> anyhow::Result<()> {
    for name in ["kube-apiserver", "etcd"] {
        let pidfile = dir.join(format!("{name}.pid"));
        let Ok(pid) = std::fs::read_to_string(&pidfile) else {
            continue;
        };
        let pid = pid.trim().to_owned();
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status();
        for _ in 0..100 {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid])
                .status();
        }
    }
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Cmd::Up { dir, bind, san } => {
            let dir = dir.unwrap_or_else(default_dir);
            if dir.exists() {
                eprintln!(
                    "replacing the test cluster in {} (its objects are discarded)",
                    dir.display()
                );
            }
            stop(&dir)?;
            let started = TestCluster::start_with(ClusterOptions {
                bind_address: bind,
                extra_server_ips: san,
                state_dir: Some(dir.clone()),
                detach: true,
                install_crds: true,
                apiserver_args: Vec::new(),
            })
            .await;
            let cluster = match started {
                Ok(c) => c,
                Err(e) => {
                    stop(&dir)?;
                    return Err(e);
                }
            };
            println!("KUBECONFIG={}", cluster.kubeconfig().display());
        }
        Cmd::Down { dir } => stop(&dir.unwrap_or_else(default_dir))?,
    }
    Ok(())
}
