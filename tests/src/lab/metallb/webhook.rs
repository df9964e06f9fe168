//! MetalLB's controller with its validating admission webhook (issue #11, field case C-08).
//!
//! MetalLB checks pool entries (and overlaps between pools) only in this webhook; its CRD schema
//! accepts any string. The lab's default controller runs with webhooks off
//! ([`super::start_controller`]); [`start_controller_with_webhook`] runs the same binary with
//! them on, wired as follows:
//!
//! - **Certificate.** A CA and a serving certificate for IP `127.0.0.1` (`rcgen`, per lab), in
//!   `<lab dir>/metallb-webhook/`. Certificate rotation stays off (`--disable-cert-rotation`).
//!   MetalLB v0.15.2 passes `--cert-dir` only to its rotator: its webhook server (controller-runtime
//!   v0.20.4, port [`WEBHOOK_PORT`] on all addresses) reads `tls.crt`/`tls.key` from
//!   `$TMPDIR/k8s-webhook-server/serving-certs`, so the controller gets both `--cert-dir` and
//!   `TMPDIR` pointing there. Once these files exist, every (re)start of the lab's controller
//!   ([`super::start_controller`], [`Lab::start_metallb_controller`]) serves the webhook.
//! - **Path.** The controller stays in its own namespace (loopback and the API relay only). The
//!   API server, in the root namespace, calls `https://127.0.0.1:<port>/validate-…`: a listener
//!   of the test process on the root namespace's loopback (an ephemeral port), whose connections
//!   are forwarded to `127.0.0.1:9443` inside the controller's namespace. TLS is end to end
//!   between the API server and MetalLB; the forwarder only copies bytes.
//! - **Registration.** A `ValidatingWebhookConfiguration` named as MetalLB's own
//!   ([`CONFIGURATION`]) with the six webhooks of MetalLB's `config/webhook/manifests.yaml`
//!   (names, paths, rules, `failurePolicy: Fail`, `sideEffects: None`), `clientConfig.url`
//!   instead of a Service and the CA as `caBundle`.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::{Api, DynamicObject, PostParams};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::NAMESPACE;
use crate::lab::{Lab, sh, within_netns};

/// The port MetalLB's webhook server listens on (fixed in its `internal/k8s/k8s.go`).
pub const WEBHOOK_PORT: u16 = 9443;

/// The name of the `ValidatingWebhookConfiguration` (MetalLB's `validatingWebhookName`).
pub const CONFIGURATION: &str = "metallb-webhook-configuration";

/// MetalLB v0.15.2's `config/webhook/manifests.yaml`: webhook name, path, API version,
/// resource, operations.
const WEBHOOKS: [(&str, &str, &str, &str, &[&str]); 6] = [
    (
        "bgppeersvalidationwebhook.metallb.io",
        "/validate-metallb-io-v1beta2-bgppeer",
        "v1beta2",
        "bgppeers",
        &["CREATE", "UPDATE"],
    ),
    (
        "bfdprofilevalidationwebhook.metallb.io",
        "/validate-metallb-io-v1beta1-bfdprofile",
        "v1beta1",
        "bfdprofiles",
        &["CREATE", "DELETE"],
    ),
    (
        "bgpadvertisementvalidationwebhook.metallb.io",
        "/validate-metallb-io-v1beta1-bgpadvertisement",
        "v1beta1",
        "bgpadvertisements",
        &["CREATE", "UPDATE"],
    ),
    (
        "communityvalidationwebhook.metallb.io",
        "/validate-metallb-io-v1beta1-community",
        "v1beta1",
        "communities",
        &["CREATE", "UPDATE"],
    ),
    (
        "ipaddresspoolvalidationwebhook.metallb.io",
        "/validate-metallb-io-v1beta1-ipaddresspool",
        "v1beta1",
        "ipaddresspools",
        &["CREATE", "UPDATE"],
    ),
    (
        "l2advertisementvalidationwebhook.metallb.io",
        "/validate-metallb-io-v1beta1-l2advertisement",
        "v1beta1",
        "l2advertisements",
        &["CREATE", "UPDATE"],
    ),
];

/// Where the controller finds its serving certificate (see the module docs).
pub(super) struct ServingDirs {
    /// The controller's `TMPDIR`.
    pub tmp_dir: PathBuf,
    /// `$TMPDIR/k8s-webhook-server/serving-certs`, also its `--cert-dir`.
    pub cert_dir: PathBuf,
}

fn serving_dirs_of(lab_dir: &Path) -> ServingDirs {
    let tmp_dir = lab_dir.join("metallb-webhook").join("tmp");
    let cert_dir = tmp_dir.join("k8s-webhook-server").join("serving-certs");
    ServingDirs { tmp_dir, cert_dir }
}

/// The serving certificate's directories if [`start_controller_with_webhook`] wrote them for
/// `lab` (then the controller is started with its webhook on); `None` otherwise.
pub(super) fn serving_dirs(lab: &Lab) -> Option<ServingDirs> {
    let dirs = serving_dirs_of(lab.dir());
    dirs.cert_dir.join("tls.crt").is_file().then_some(dirs)
}

/// The webhook's forwarder (see the module docs); dropping it stops accepting connections
/// (connections already forwarded end with the lab). The `ValidatingWebhookConfiguration` stays
/// registered (`failurePolicy: Fail`), so after the drop every `metallb.io` write in that lab is
/// refused: keep the `Webhook` for the rest of the test.
pub struct Webhook {
    relay: JoinHandle<()>,
    port: u16,
}

impl Webhook {
    /// The port the API server calls on its loopback.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        self.relay.abort();
    }
}

/// (Re)starts the lab's MetalLB controller with its validating webhook (see the module docs),
/// registers the webhook with the API server and waits until the API server gets answers from
/// it. Keep the returned [`Webhook`] as long as the webhook is needed.
///
/// # Errors
/// Not a MetalLB lab, a certificate, process or object could not be made, or the webhook did
/// not answer within 60 s.
pub async fn start_controller_with_webhook(lab: &mut Lab) -> anyhow::Result<Webhook> {
    let ca = write_certs(lab.dir())?;
    lab.start_metallb_controller()?;
    let pid = lab.metallb_controller_pid()?;
    let netns = sh("ip", &["netns", "identify", &pid.to_string()])?
        .trim()
        .to_owned();
    anyhow::ensure!(
        !netns.is_empty(),
        "MetalLB's controller is in no named namespace"
    );
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
    let port = listener.local_addr()?.port();
    let webhook = Webhook {
        relay: tokio::spawn(forward(listener, netns)),
        port,
    };
    let client = lab.client().await?;
    register(&client, &ca, port).await?;
    wait_answering(&client).await?;
    Ok(webhook)
}

/// Writes a fresh CA and a serving certificate for `127.0.0.1` signed by it; returns the CA's
/// PEM.
fn write_certs(lab_dir: &Path) -> anyhow::Result<String> {
    let dirs = serving_dirs_of(lab_dir);
    std::fs::create_dir_all(&dirs.cert_dir)?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;
    let key = KeyPair::generate()?;
    let cert = CertificateParams::new(vec!["127.0.0.1".to_owned()])?.signed_by(&key, &ca)?;
    for (path, pem) in [
        (dirs.cert_dir.join("tls.crt"), cert.pem()),
        (dirs.cert_dir.join("tls.key"), key.serialize_pem()),
        (lab_dir.join("metallb-webhook").join("ca.crt"), ca.pem()),
    ] {
        std::fs::write(&path, pem).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(ca.pem())
}

/// Forwards every connection to `listener` to `127.0.0.1:`[`WEBHOOK_PORT`] in `netns`.
async fn forward(listener: TcpListener, netns: String) {
    while let Ok((mut inbound, _)) = listener.accept().await {
        let netns = netns.clone();
        tokio::spawn(async move {
            let connect = move || {
                within_netns(&netns, || {
                    let s = std::net::TcpStream::connect((Ipv4Addr::LOCALHOST, WEBHOOK_PORT))?;
                    s.set_nonblocking(true)?;
                    Ok(s)
                })
            };
            let Ok(Ok(outbound)) = tokio::task::spawn_blocking(connect).await else {
                return;
            };
            if let Ok(mut outbound) = TcpStream::from_std(outbound) {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
    }
}

/// Creates (or replaces) [`CONFIGURATION`] calling `https://127.0.0.1:<port>` with CA `ca`.
async fn register(client: &kube::Client, ca: &str, port: u16) -> anyhow::Result<()> {
    let ca_bundle = serde_json::to_value(ByteString(ca.as_bytes().to_vec()))?;
    let webhooks: Vec<serde_json::Value> = WEBHOOKS
        .iter()
        .map(|(name, path, version, resource, operations)| {
            serde_json::json!({
                "name": name,
                "admissionReviewVersions": ["v1"],
                "clientConfig": {
                    "url": format!("https://127.0.0.1:{port}{path}"),
                    "caBundle": ca_bundle,
                },
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "rules": [{
                    "apiGroups": ["metallb.io"],
                    "apiVersions": [version],
                    "operations": operations,
                    "resources": [resource],
                }],
            })
        })
        .collect();
    let config: ValidatingWebhookConfiguration = serde_json::from_value(serde_json::json!({
        "metadata": { "name": CONFIGURATION },
        "webhooks": webhooks,
    }))?;
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    if api.get_opt(CONFIGURATION).await?.is_some() {
        api.delete(CONFIGURATION, &Default::default()).await?;
    }
    api.create(&PostParams::default(), &config).await?;
    Ok(())
}

/// Waits until the webhook is in the API server's admission chain and answering: a dry-run
/// creation of a self-overlapping `IPAddressPool` (which MetalLB's CRD schema accepts and its
/// webhook refuses) is denied by "admission webhook". A success would only mean that the API
/// server has not loaded the configuration yet, so it is retried like a failed call.
async fn wait_answering(client: &kube::Client) -> anyhow::Result<()> {
    let pools: Api<DynamicObject> = super::pools(client);
    let probe: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
        "metadata": { "name": "webhook-probe", "namespace": NAMESPACE },
        "spec": { "addresses": ["203.0.113.240/28", "203.0.113.248/29"] },
    }))?;
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let last = match pools.create(&dry_run, &probe).await {
            Ok(_) => "the self-overlapping probe pool was accepted (webhook not consulted yet)"
                .to_owned(),
            Err(kube::Error::Api(e))
                if e.message.contains("admission webhook") && e.message.contains("denied") =>
            {
                return Ok(());
            }
            Err(e) => e.to_string(),
        };
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!("MetalLB's webhook did not answer within 60 s: {last}");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
