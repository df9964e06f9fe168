//! The admission policy `deploy/speaker-admission.yaml` on the real API server (issue #27 item 5):
//! a speaker's token writes only L2Announcements naming the Node its Pod is bound to.
//!
//! Two speaker Pods bound to `node-a` and `node-b` (`spec.nodeName` set; nothing runs them) get
//! tokens by TokenRequest with a `boundObjectRef` to their Pod, as the kubelet mounts them; the
//! API server then puts the Pod's node in `authentication.kubernetes.io/node-name`. A third token
//! is bound to no Pod. Each writes as the speaker does (server-side apply, field manager
//! `ferrolb-speaker`). Without the policy every write below is allowed by RBAC, so the denials
//! fail the test.

use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use ferrolb_crds::{L2Announcement, L2AnnouncementSpec, announcement_name};
use ferrolb_tests::cluster::TestCluster;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use super::{CONTROLLER_SA, NS};

/// How long the API server may take to load a new policy.
const POLICY_LOADED: Duration = Duration::from_secs(30);

/// Runs every check; `admin` is the cluster's admin client.
///
/// # Errors
/// A write was allowed or denied against the policy, or a fixture could not be made.
pub async fn check(admin: &Client, cluster: &TestCluster) -> anyhow::Result<()> {
    let a = bound_token(admin, "node-a").await?;
    let b = bound_token(admin, "node-b").await?;
    let unbound = token(admin, None).await?;
    let as_a = client_with(cluster, Auth::Token(a)).await?;
    let as_b = client_with(cluster, Auth::Token(b)).await?;
    let as_unbound = client_with(cluster, Auth::Token(unbound)).await?;
    let as_controller = client_with(cluster, Auth::Impersonate(CONTROLLER_SA)).await?;

    // node-a's token naming node-b: denied once the API server has loaded the policy.
    let started = Instant::now();
    loop {
        match apply(&as_a, "198.51.100.2", "node-b", "eth0").await {
            Err(denial) => {
                ensure!(
                    denial.contains("bound to node node-a") && denial.contains("names node node-b"),
                    "denied, but not by the policy: {denial}"
                );
                break;
            }
            Ok(()) if started.elapsed() < POLICY_LOADED => {
                // Undo, so that the denial below is of a CREATE as well as of an UPDATE.
                let _ = Api::<L2Announcement>::namespaced(admin.clone(), NS)
                    .delete(&name("198.51.100.2"), &DeleteParams::default())
                    .await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Ok(()) => bail!("node-a's token wrote a report naming node-b for {POLICY_LOADED:?}"),
        }
    }

    // Its own node: create, then update.
    allowed(
        apply(&as_a, "198.51.100.1", "node-a", "eth0").await,
        "a creates for a",
    )?;
    allowed(
        apply(&as_a, "198.51.100.1", "node-a", "eth1").await,
        "a updates for a",
    )?;
    // node-b, and vice versa.
    allowed(
        apply(&as_b, "198.51.100.2", "node-b", "eth0").await,
        "b creates for b",
    )?;
    denied(
        apply(&as_b, "198.51.100.3", "node-a", "eth0").await,
        "b creates for a",
    )?;
    denied(
        apply(&as_b, "198.51.100.2", "node-a", "eth0").await,
        "b updates for a",
    )?;
    denied(
        apply(&as_a, "198.51.100.1", "node-b", "eth0").await,
        "a updates for b",
    )?;
    // A failover: node-b's speaker takes over the report node-a wrote, naming itself.
    allowed(
        apply(&as_b, "198.51.100.1", "node-b", "eth0").await,
        "b takes a's over",
    )?;
    // A token bound to no Pod carries no node: every write is denied.
    let no_node = apply(&as_unbound, "198.51.100.4", "node-a", "eth0").await;
    match &no_node {
        Err(e) if e.contains("bound to no node") => {}
        other => bail!("an unbound token's write: {other:?}"),
    }
    denied(
        apply(&as_unbound, "198.51.100.2", "node-b", "eth0").await,
        "unbound updates",
    )?;

    // Deletes are nobody's but the controller's: RBAC, not the policy.
    let reports_a = Api::<L2Announcement>::namespaced(as_a.clone(), NS);
    let delete = reports_a
        .delete(&name("198.51.100.2"), &DeleteParams::default())
        .await;
    ensure!(
        matches!(&delete, Err(kube::Error::Api(e)) if e.code == 403),
        "a speaker deleted a report: {delete:?}"
    );
    // The controller's identity is not matched by the policy: it deletes the stale report.
    Api::<L2Announcement>::namespaced(as_controller, NS)
        .delete(&name("198.51.100.2"), &DeleteParams::default())
        .await
        .context("the controller deletes a report")?;
    // Nor is an administrator's: any node.
    allowed(
        apply(admin, "198.51.100.5", "node-c", "eth0").await,
        "admin",
    )?;

    let reports = Api::<L2Announcement>::namespaced(admin.clone(), NS);
    for ip in ["198.51.100.1", "198.51.100.5"] {
        let _ = reports.delete(&name(ip), &DeleteParams::default()).await;
    }
    for node in ["node-a", "node-b"] {
        let _ = Api::<Pod>::namespaced(admin.clone(), NS)
            .delete(&pod_name(node), &DeleteParams::default())
            .await;
    }
    Ok(())
}

fn name(ip: &str) -> String {
    announcement_name(ip.parse().unwrap())
}

fn pod_name(node: &str) -> String {
    format!("ferrolb-speaker-{node}")
}

fn allowed(r: Result<(), String>, what: &str) -> anyhow::Result<()> {
    r.map_err(|e| anyhow::anyhow!("{what}: denied: {e}"))
}

fn denied(r: Result<(), String>, what: &str) -> anyhow::Result<()> {
    match r {
        Err(e) if e.contains("may write only L2Announcements naming its own node") => Ok(()),
        Err(e) => bail!("{what}: denied, but not by the policy: {e}"),
        Ok(()) => bail!("{what}: allowed"),
    }
}

/// Writes the report of `ip` naming `node` as the speaker does; `Err` carries the API's message.
async fn apply(client: &Client, ip: &str, node: &str, interface: &str) -> Result<(), String> {
    let api = Api::<L2Announcement>::namespaced(client.clone(), NS);
    let object = L2Announcement::new(
        &name(ip),
        L2AnnouncementSpec {
            ip: ip.to_owned(),
            node: node.to_owned(),
            interfaces: vec![interface.to_owned()],
            services: vec!["default/web".to_owned()],
            since: None,
            held_by: None,
            membership: None,
            networks: Vec::new(),
            in_use: Vec::new(),
            unanswered: Vec::new(),
        },
    );
    api.patch(
        &name(ip),
        &PatchParams::apply("ferrolb-speaker").force(),
        &Patch::Apply(&object),
    )
    .await
    .map(|_| ())
    .map_err(|e| match e {
        kube::Error::Api(e) => format!("{} ({})", e.message, e.code),
        e => e.to_string(),
    })
}

/// A speaker Pod bound to `node` (what the DaemonSet makes; no kubelet runs it) and a token bound
/// to it.
async fn bound_token(admin: &Client, node: &str) -> anyhow::Result<String> {
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": { "name": pod_name(node) },
        "spec": {
            "nodeName": node,
            "serviceAccountName": "ferrolb-speaker",
            "automountServiceAccountToken": false,
            "containers": [{ "name": "speaker", "image": "ferrolb:0.1.0" }],
        },
    }))?;
    let pod = Api::<Pod>::namespaced(admin.clone(), NS)
        .create(&PostParams::default(), &pod)
        .await
        .with_context(|| format!("creating the speaker Pod on {node}"))?;
    token(
        admin,
        Some(BoundObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: pod.metadata.name,
            uid: pod.metadata.uid,
        }),
    )
    .await
}

/// A token of the speaker ServiceAccount, bound to `bound` (or to nothing).
async fn token(admin: &Client, bound: Option<BoundObjectReference>) -> anyhow::Result<String> {
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            bound_object_ref: bound,
            expiration_seconds: Some(600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let answer = Api::<ServiceAccount>::namespaced(admin.clone(), NS)
        .create_token_request("ferrolb-speaker", &PostParams::default(), &request)
        .await
        .context("TokenRequest for the speaker ServiceAccount")?;
    answer
        .status
        .and_then(|s| s.token)
        .context("TokenRequest without a token")
}

enum Auth {
    Token(String),
    Impersonate(&'static str),
}

/// A client of the cluster that authenticates with a token, or the admin impersonating someone.
async fn client_with(cluster: &TestCluster, auth: Auth) -> anyhow::Result<Client> {
    let kc = Kubeconfig::read_from(cluster.kubeconfig())?;
    let mut config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    match auth {
        Auth::Token(token) => {
            config.auth_info = kube::config::AuthInfo {
                token: Some(token.into()),
                ..kube::config::AuthInfo::default()
            };
        }
        Auth::Impersonate(who) => config.auth_info.impersonate = Some(who.to_owned()),
    }
    Ok(Client::try_from(config)?)
}
