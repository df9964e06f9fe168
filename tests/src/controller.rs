//! The one controller-process fixture of the e2e tests, the controller benchmark and the demo: a
//! real `ferrolb-controller` against the test cluster, its admin endpoints on a free loopback
//! port, its log next to the cluster's, stopped when dropped.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::cluster::{Supervised, target_dir, workspace_bin};

/// A running `ferrolb-controller`.
pub struct ControllerProcess {
    process: Supervised,
    /// Port of its admin endpoints (`/livez`, `/readyz`, `/metrics`) on 127.0.0.1.
    pub port: u16,
}

/// How to start one.
#[derive(Debug, Clone)]
pub struct ControllerOptions {
    /// `--identity` (also names the log file `controller-<identity>.log`).
    pub identity: String,
    /// The binary; `None`: the workspace's debug build.
    pub binary: Option<PathBuf>,
    /// `--lease-namespace`: the controller's own namespace, as the manifests set it from the
    /// downward API (`default` unless a test says otherwise; deleting it is the uninstall signal,
    /// issue #14).
    pub lease_namespace: String,
    /// Arguments after the fixture's own (`--kubeconfig`, `--admin-address`,
    /// `--lease-namespace`, `--identity`).
    pub extra: Vec<String>,
}

impl ControllerOptions {
    /// The debug build as `identity`, no extra arguments.
    pub fn new(identity: &str) -> ControllerOptions {
        ControllerOptions {
            identity: identity.to_owned(),
            binary: None,
            lease_namespace: "default".to_owned(),
            extra: Vec::new(),
        }
    }

    /// Runs it with `--lease-namespace=<namespace>`, its own namespace.
    #[must_use]
    pub fn lease_namespace(mut self, namespace: &str) -> ControllerOptions {
        namespace.clone_into(&mut self.lease_namespace);
        self
    }

    /// Adds arguments.
    #[must_use]
    pub fn args<S: AsRef<str>>(mut self, args: &[S]) -> ControllerOptions {
        self.extra
            .extend(args.iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Runs `target/release/ferrolb-controller` when it was built, else the debug build.
    #[must_use]
    pub fn prefer_release(mut self) -> ControllerOptions {
        if let Some(release) = release_binary() {
            self.binary = Some(release);
        }
        self
    }
}

/// `target/release/ferrolb-controller`, if it was built.
pub fn release_binary() -> Option<PathBuf> {
    let release = target_dir().join("release").join("ferrolb-controller");
    release.is_file().then_some(release)
}

impl ControllerProcess {
    /// Starts the controller against the cluster whose kubeconfig is `kubeconfig`, logging into
    /// `dir`.
    ///
    /// # Errors
    /// The binary could not be built or started, or no free port was found.
    pub fn start(
        kubeconfig: &Path,
        dir: &Path,
        opts: &ControllerOptions,
    ) -> anyhow::Result<ControllerProcess> {
        let bin = match &opts.binary {
            Some(b) => b.clone(),
            None => workspace_bin("ferrolb-controller")?,
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let mut args = vec![
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--admin-address=127.0.0.1:{port}"),
            format!("--lease-namespace={}", opts.lease_namespace),
            format!("--identity={}", opts.identity),
        ];
        // The lab's speakers report in their default namespace, whatever the controller's own.
        if !opts
            .extra
            .iter()
            .any(|a| a.starts_with("--announcement-namespace"))
        {
            args.push("--announcement-namespace=ferrolb-system".to_owned());
        }
        args.extend(opts.extra.iter().cloned());
        let log = dir.join(format!("controller-{}.log", opts.identity));
        let process = Supervised::spawn(&opts.identity, &bin, &args, &log, false)?;
        Ok(ControllerProcess { process, port })
    }

    /// The process (signals, pid, log).
    pub fn process(&self) -> &Supervised {
        &self.process
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        self.process.log_tail(lines)
    }

    /// Stops it (SIGTERM, SIGKILL after `grace`).
    pub fn stop(&self, grace: Duration) {
        self.process.stop(grace);
    }

    /// `GET path` on the admin port: `(status code, body)`, `None` if it does not answer.
    pub async fn get(&self, path: &str) -> Option<(u16, String)> {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut buf = String::new();
        s.read_to_string(&mut buf).await.ok()?;
        let code = buf.split_whitespace().nth(1)?.parse().ok()?;
        let body = buf
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default();
        Some((code, body))
    }

    /// The value of one `/metrics` sample (`name` with its labels, e.g. `x_total{manager="m"}`),
    /// `None` when absent or the endpoint does not answer.
    pub async fn metric(&self, sample: &str) -> Option<f64> {
        let (_, body) = self.get("/metrics").await?;
        body.lines()
            .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    }
}
