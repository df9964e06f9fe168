//! A real Kubernetes control plane for tests: etcd + kube-apiserver on loopback, with generated
//! certificates, the ferrolb CRDs installed and an admin kubeconfig.
//!
//! No controller-manager, scheduler or kubelet run: tests create what those would (Nodes,
//! EndpointSlices) themselves. Namespaces therefore never finish deleting; every cluster is thrown
//! away whole when its [`TestCluster`] is dropped, which kills both processes and removes the state
//! directory, also when a test fails.
//!
//! Address plan (documentation ranges only): Service ClusterIPs come from `192.0.2.128/26` and
//! `2001:db8:ffff::/112` (dual-stack, so PreferDualStack Services get both families); nodes use
//! `192.0.2.0/25`; pools use `198.51.100.0/24`, `203.0.113.0/24` and `2001:db8::/32`.

mod binaries;
mod certs;
mod kubectl;
mod process;

pub use binaries::{cached_bin_dir, helm_bin, k8s_bin, repo_root, target_dir, workspace_bin};
pub use kubectl::kubectl;
pub use process::Supervised;

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// The IPv4 ClusterIP range of the test cluster.
pub const SERVICE_CIDR_V4: &str = "192.0.2.128/26";
/// The IPv6 ClusterIP range of the test cluster.
pub const SERVICE_CIDR_V6: &str = "2001:db8:ffff::/112";

/// The ClusterIP of the `default/kubernetes` Service (the first address of [`SERVICE_CIDR_V4`]),
/// which in-cluster clients connect to; it is in the serving certificate of every lab's cluster.
pub const KUBERNETES_SERVICE_IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 129);

/// How to start a cluster.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Address the API server listens on. `127.0.0.1` by default; the lab uses `0.0.0.0` so node
    /// namespaces reach it on the bridge address.
    pub bind_address: IpAddr,
    /// Extra IP SANs for the serving certificate (e.g. the lab bridge address).
    pub extra_server_ips: Vec<IpAddr>,
    /// Keep the state directory here instead of a temporary one (the CLI uses this).
    pub state_dir: Option<PathBuf>,
    /// Leave etcd and the API server running when the handle is dropped (the CLI's `up`).
    pub detach: bool,
    /// Install the ferrolb CRDs and wait until they are Established.
    pub install_crds: bool,
    /// Extra `kube-apiserver` arguments, e.g. `--feature-gates=WatchList=false` (an API server
    /// that refuses streaming lists, as 1.33's default, issue #27 item 7).
    pub apiserver_args: Vec<String>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            bind_address: IpAddr::V4(Ipv4Addr::LOCALHOST),
            extra_server_ips: Vec::new(),
            state_dir: None,
            detach: false,
            install_crds: true,
            apiserver_args: Vec::new(),
        }
    }
}

/// A running etcd + kube-apiserver. Dropping it stops both and removes the state (unless
/// detached).
pub struct TestCluster {
    dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    apiserver: Supervised,
    etcd: Supervised,
    port: u16,
    kubeconfig: PathBuf,
}

impl TestCluster {
    /// Starts a fresh cluster with default options (loopback, CRDs installed).
    ///
    /// # Errors
    /// A binary is missing, a process failed to start, or the API server did not become ready
    /// within 90 s (its log is in the error).
    pub async fn start() -> anyhow::Result<TestCluster> {
        TestCluster::start_with(ClusterOptions::default()).await
    }

    /// Starts a fresh cluster.
    ///
    /// # Errors
    /// As [`TestCluster::start`].
    pub async fn start_with(opts: ClusterOptions) -> anyhow::Result<TestCluster> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match TestCluster::start_once(opts.clone()).await {
                Err(e)
                    if !opts.detach
                        && attempt < 3
                        && format!("{e:#}").contains("address already in use") =>
                {
                    tracing::warn!(
                        attempt,
                        "test cluster port taken; retrying with other ports"
                    );
                }
                result => return result,
            }
        }
    }

    async fn start_once(opts: ClusterOptions) -> anyhow::Result<TestCluster> {
        let (tmp, dir) = match &opts.state_dir {
            Some(d) => {
                std::fs::create_dir_all(d)?;
                (None, d.clone())
            }
            None => {
                let t = tempfile::Builder::new()
                    .prefix("ferrolb-cluster-")
                    .tempdir()?;
                let p = t.path().to_path_buf();
                (Some(t), p)
            }
        };
        let mut server_ips = vec![IpAddr::V4(Ipv4Addr::LOCALHOST)];
        if !opts.bind_address.is_unspecified() && !server_ips.contains(&opts.bind_address) {
            server_ips.push(opts.bind_address);
        }
        server_ips.extend(opts.extra_server_ips.iter().copied());
        let certs = certs::write_all(&dir, &server_ips)?;

        let etcd_port = free_port()?;
        let peer_port = free_port()?;
        let etcd = Supervised::spawn(
            "etcd",
            &k8s_bin("etcd")?,
            &[
                "--name=ferrolb-test".into(),
                format!("--data-dir={}", dir.join("etcd").display()),
                format!("--listen-client-urls=http://127.0.0.1:{etcd_port}"),
                format!("--advertise-client-urls=http://127.0.0.1:{etcd_port}"),
                format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"),
                format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"),
                format!("--initial-cluster=ferrolb-test=http://127.0.0.1:{peer_port}"),
                "--unsafe-no-fsync".into(),
                "--log-level=warn".into(),
            ],
            &dir.join("etcd.log"),
            opts.detach,
        )?;
        write_pidfile(&dir, "etcd", &etcd, opts.detach)?;

        let port = free_port()?;
        let advertise = if opts.bind_address.is_unspecified() {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        } else {
            opts.bind_address
        };
        let mut apiserver_args = vec![
            format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
            format!("--bind-address={}", opts.bind_address),
            format!("--advertise-address={advertise}"),
            format!("--secure-port={port}"),
            format!("--tls-cert-file={}", certs.server_cert.display()),
            format!("--tls-private-key-file={}", certs.server_key.display()),
            format!("--client-ca-file={}", certs.ca.display()),
            format!("--service-account-key-file={}", certs.sa_pub.display()),
            format!(
                "--service-account-signing-key-file={}",
                certs.sa_key.display()
            ),
            "--service-account-issuer=https://kubernetes.default.svc".into(),
            format!("--service-cluster-ip-range={SERVICE_CIDR_V4},{SERVICE_CIDR_V6}"),
            "--authorization-mode=RBAC".into(),
            "--endpoint-reconciler-type=none".into(),
            "--allow-privileged=true".into(),
            "--profiling=false".into(),
            format!("--cert-dir={}", dir.join("cert-dir").display()),
            "--v=1".into(),
        ];
        apiserver_args.extend(opts.apiserver_args.iter().cloned());
        let apiserver = Supervised::spawn(
            "kube-apiserver",
            &k8s_bin("kube-apiserver")?,
            &apiserver_args,
            &dir.join("kube-apiserver.log"),
            opts.detach,
        )?;
        write_pidfile(&dir, "kube-apiserver", &apiserver, opts.detach)?;

        let kubeconfig = dir.join("kubeconfig");
        // Clients connect where the server listens: loopback unless it is bound to one address.
        let connect = if opts.bind_address.is_unspecified() {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        } else {
            opts.bind_address
        };
        write_kubeconfig(
            &kubeconfig,
            &format!("https://{}", SocketAddr::new(connect, port)),
            &certs,
        )?;
        let cluster = TestCluster {
            dir,
            // A detached cluster outlives this handle, so its directory must too.
            _tmp: if opts.detach {
                tmp.map(tempfile::TempDir::keep);
                None
            } else {
                tmp
            },
            apiserver,
            etcd,
            port,
            kubeconfig,
        };
        cluster.wait_ready(Duration::from_secs(90)).await?;
        if opts.install_crds {
            cluster.install_crds().await?;
        }
        Ok(cluster)
    }

    /// Stops kube-apiserver, then etcd (SIGTERM, SIGKILL after 5 s), keeping their data: a power
    /// cut of the control plane (issue #29 O5). [`TestCluster::start_again`] undoes it.
    pub fn stop(&self) {
        self.apiserver.stop(Duration::from_secs(5));
        self.etcd.stop(Duration::from_secs(5));
    }

    /// Starts etcd and kube-apiserver again after [`TestCluster::stop`], with the same
    /// arguments, data directory and ports; returns once the API server is ready. Clients
    /// reconnect on their own.
    ///
    /// # Errors
    /// A process could not be started again, or the API server was not ready within 90 s.
    pub async fn start_again(&self) -> anyhow::Result<()> {
        self.etcd.restart(Duration::ZERO)?;
        self.apiserver.restart(Duration::ZERO)?;
        self.wait_ready(Duration::from_secs(90)).await
    }

    /// The state directory (certificates, logs, kubeconfig, etcd data).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The kube-apiserver's process id, while it runs.
    pub fn apiserver_pid(&self) -> Option<u32> {
        self.apiserver.pid()
    }

    /// The API server's port (on every address it binds).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The admin kubeconfig, pointing at the bound address (`https://127.0.0.1:<port>` by default).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Writes (once) and returns an admin kubeconfig that reaches the API server at `ip` instead of
    /// loopback — for processes in lab namespaces (`ip` must be in the serving certificate).
    ///
    /// # Errors
    /// Writing the file failed.
    pub fn kubeconfig_for(&self, ip: IpAddr) -> anyhow::Result<PathBuf> {
        let path = self.dir.join(format!("kubeconfig-{ip}"));
        let certs = self.cert_files();
        write_kubeconfig(
            &path,
            &format!("https://{}", SocketAddr::new(ip, self.port)),
            &certs,
        )?;
        Ok(path)
    }

    /// Writes an admin kubeconfig named `file` in the state directory with server URL `server`
    /// (e.g. a relay's `https://127.0.0.1:6443` inside a lab namespace; the host must be in the
    /// serving certificate).
    ///
    /// # Errors
    /// Writing the file failed.
    pub fn kubeconfig_at(&self, server: &str, file: &str) -> anyhow::Result<PathBuf> {
        let path = self.dir.join(file);
        write_kubeconfig(&path, server, &self.cert_files())?;
        Ok(path)
    }

    fn cert_files(&self) -> certs::CertFiles {
        certs::CertFiles {
            ca: self.dir.join("ca.crt"),
            server_cert: self.dir.join("apiserver.crt"),
            server_key: self.dir.join("apiserver.key"),
            admin_cert: self.dir.join("admin.crt"),
            admin_key: self.dir.join("admin.key"),
            sa_key: self.dir.join("sa.key"),
            sa_pub: self.dir.join("sa.pub"),
        }
    }

    /// A new admin client.
    ///
    /// # Errors
    /// The kubeconfig could not be read or the client not built.
    pub async fn client(&self) -> anyhow::Result<Client> {
        let kc = Kubeconfig::read_from(&self.kubeconfig)?;
        let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
        Ok(Client::try_from(config)?)
    }

    async fn wait_ready(&self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        let mut last_err = String::new();
        while Instant::now() < deadline {
            if let Some(status) = self.apiserver.exit_status() {
                bail!(
                    "kube-apiserver exited ({status}):\n{}",
                    self.apiserver.log_tail(40)
                );
            }
            if let Some(status) = self.etcd.exit_status() {
                bail!("etcd exited ({status}):\n{}", self.etcd.log_tail(40));
            }
            match self.readyz().await {
                Ok(()) => return Ok(()),
                Err(e) => last_err = format!("{e:#}"),
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        bail!(
            "kube-apiserver not ready after {timeout:?} ({last_err}):\n{}",
            self.apiserver.log_tail(40)
        )
    }

    async fn readyz(&self) -> anyhow::Result<()> {
        let client = self.client().await?;
        let req = http::Request::get("/readyz").body(Vec::new())?;
        let body = client.request_text(req).await?;
        if body.trim() == "ok" {
            Ok(())
        } else {
            bail!("readyz: {body}")
        }
    }

    /// Applies the ferrolb CRDs (server-side apply) and waits until each is Established; also
    /// creates the install namespace `ferrolb-system`, where speakers write their L2Announcement
    /// reports by default.
    ///
    /// # Errors
    /// The API server refused a CRD or it did not become Established within 30 s.
    pub async fn install_crds(&self) -> anyhow::Result<()> {
        let client = self.client().await?;
        let pp = PatchParams::apply("ferrolb-tests").force();
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        let ns: k8s_openapi::api::core::v1::Namespace =
            serde_json::from_value(serde_json::json!({
                "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": "ferrolb-system" },
            }))?;
        namespaces
            .patch("ferrolb-system", &pp, &Patch::Apply(&ns))
            .await
            .context("creating namespace ferrolb-system")?;
        let api: Api<CustomResourceDefinition> = Api::all(client);
        for (_, crd) in ferrolb_crds::manifests::crds() {
            let name = crd.metadata.name.clone().unwrap_or_default();
            api.patch(&name, &pp, &Patch::Apply(&crd))
                .await
                .with_context(|| format!("applying CRD {name}"))?;
            let cond = kube::runtime::conditions::is_crd_established();
            tokio::time::timeout(
                Duration::from_secs(30),
                kube::runtime::wait::await_condition(api.clone(), &name, cond),
            )
            .await
            .with_context(|| format!("CRD {name} not Established"))??;
        }
        Ok(())
    }
}

/// A detached process's pid goes to `<dir>/<name>.pid` at once, so `ferrolb-testcluster down` can
/// stop it even when the start-up fails half-way.
fn write_pidfile(dir: &Path, name: &str, process: &Supervised, detach: bool) -> anyhow::Result<()> {
    if let (true, Some(pid)) = (detach, process.pid()) {
        std::fs::write(dir.join(format!("{name}.pid")), pid.to_string())?;
    }
    Ok(())
}

/// A port that is free now, chosen below Linux's default ephemeral range (32768–60999) so that the
/// outgoing connections of other tests cannot take it between this check and the server's bind.
/// (A collision is still possible; [`TestCluster::start_with`] retries on "address already in use".)
fn free_port() -> anyhow::Result<u16> {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let seed = (std::process::id() % 997) as u16 * 12;
    for _ in 0..2000 {
        let port = 20000 + (seed + NEXT.fetch_add(1, Ordering::Relaxed)) % 12000;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn write_kubeconfig(path: &Path, server: &str, certs: &certs::CertFiles) -> anyhow::Result<()> {
    let yaml = format!(
        "apiVersion: v1
kind: Config
clusters:
- name: ferrolb-test
  cluster:
    server: {server}
    certificate-authority: {ca}
users:
- name: admin
  user:
    client-certificate: {cert}
    client-key: {key}
contexts:
- name: ferrolb-test
  context:
    cluster: ferrolb-test
    user: admin
current-context: ferrolb-test
",
        ca = certs.ca.display(),
        cert = certs.admin_cert.display(),
        key = certs.admin_key.display(),
    );
    std::fs::write(path, yaml).with_context(|| format!("writing {}", path.display()))
}
