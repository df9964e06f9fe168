//! `ferrolb uninstall`: removes ferrolb from a cluster in one command and leaves no Service status
//! of ours behind (issue #14), with the user's own credentials.
//!
//! Why a command of its own: `kubectl delete -k deploy/` (or `helm uninstall`) deletes the
//! controller's ClusterRole, ClusterRoleBinding and ServiceAccount in the same request burst as
//! its namespace, before the kubelet stops any pod; whatever the controller does on its way out is
//! then refused (403), or — once its ServiceAccount is gone and the API server's 10 s cache of
//! authenticated tokens has expired — not even authenticated (401). So the release has to happen
//! *before* anything is deleted, by someone whose rights survive the uninstall. The steps:
//!
//! 1. **Stop the controller**: every Deployment in the namespace labelled
//!    `app.kubernetes.io/name=ferrolb, app.kubernetes.io/component=controller` (the kustomize base
//!    and the Helm chart both) is scaled to 0. Its replicas stop the way a rolling update stops
//!    them — the namespace is alive, so they keep every status (R1) — and the leader releases its
//!    Lease.
//! 2. **Wait until nobody leads** (R13): the Lease has no holder, or its holder's
//!    `renewTime + leaseDurationSeconds` has passed (a replica on a dead node), and either no
//!    controller pod is left or the Lease stayed free for a whole lease duration. Until then a
//!    leader could re-assign what step 3 releases, so nothing is released and nothing deleted
//!    if this does not happen within `--timeout` (exit status 1; scale the Deployment back up to
//!    undo). The comparison uses this machine's clock against the holder's `renewTime`.
//! 3. **Release** every status ferrolb wrote: the controller's own release
//!    ([`ferrolb_controller::k8s::uninstall::release_all`]: Services whose
//!    `status.loadBalancer.ingress` the field manager `ferrolb-controller` owns, never another
//!    writer's; a Normal `IPReleased` Event each). The speakers stop answering for those
//!    addresses as their watches see the empty status. A Service left (a write refused, the
//!    deadline) stops the command before step 4 (exit status 2), so it can simply be run again.
//! 4. **Delete** (unless `--release-only`): the namespace (with the speakers, the controller,
//!    the membership Secret, the Lease), every ClusterRole and ClusterRoleBinding labelled
//!    `app.kubernetes.io/part-of=ferrolb`, and — unless `--keep-crds` — the CRDs of the
//!    `ferrolb.io` group (every IPAddressPool, L2Advertisement and L2Announcement with them);
//!    then wait until they are gone.
//!
//! With `--release-only` the install stays (controller at 0 replicas) for `helm uninstall` or
//! `kubectl delete -k deploy/` to remove. Nothing here is MetalLB behaviour: MetalLB leaves its
//! statuses behind on uninstall (docs/install.md, "Uninstall").

use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::events::Reporter;
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::time::Instant;

use ferrolb_controller::k8s::uninstall::{Report, release_all};
use ferrolb_runtime::events::Publisher;

/// The label selector of the controller's Deployment (kustomize base and Helm chart).
pub const CONTROLLER_SELECTOR: &str =
    "app.kubernetes.io/name=ferrolb,app.kubernetes.io/component=controller";

/// The label every object of an install carries (kustomize `labels`, the chart's
/// `ferrolb.labels`).
pub const PART_OF_SELECTOR: &str = "app.kubernetes.io/part-of=ferrolb";

/// The API group of ferrolb's CRDs.
pub const GROUP: &str = "ferrolb.io";

/// The end of each `IPReleased` Event message this command writes (R14).
pub const WHY: &str = "ferrolb is being uninstalled (ferrolb uninstall)";

/// Status writes in flight while releasing.
const CONCURRENCY: usize = 16;

/// How often the waits look again.
const POLL: Duration = Duration::from_millis(250);

/// What `ferrolb uninstall` is asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    /// The namespace ferrolb is installed in (`ferrolb-system`).
    pub namespace: String,
    /// The controller's Lease in that namespace (`ferrolb-controller`, its `--lease-name`).
    pub lease_name: String,
    /// Stop the controller and release the statuses, delete nothing.
    pub release_only: bool,
    /// Keep the CRDs (and so every pool) when deleting.
    pub keep_crds: bool,
    /// Bound of each wait: the controller stopping, the releases, the deletions.
    pub timeout: Duration,
}

/// How the command ended (the binary turns it into the exit status).
#[derive(Debug, Default)]
pub struct Outcome {
    /// The controller Deployments scaled to 0.
    pub scaled: Vec<String>,
    /// What the release did.
    pub release: Report,
    /// The objects deleted (`kind/name`), empty with `--release-only` or when the release left
    /// statuses.
    pub deleted: Vec<String>,
}

impl Outcome {
    /// Whether every status of ours was released (nothing left, the search complete).
    pub fn released_all(&self) -> bool {
        self.release.left.is_empty() && self.release.incomplete.is_none()
    }
}

/// The holder of `lease` if it still leads at `now` — it has a holder whose
/// `renewTime + leaseDurationSeconds` (the `coordination.k8s.io/v1` Lease fields) is not yet past —
/// else `None`. A holder without a renew time or duration counts as leading (never assume a
/// Lease expired that does not say so). Pure.
pub fn live_holder(lease: &Lease, now: Timestamp) -> Option<String> {
    let spec = lease.spec.as_ref()?;
    let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty())?;
    let (Some(renewed), Some(secs)) = (spec.renew_time.as_ref(), spec.lease_duration_seconds)
    else {
        return Some(holder.to_owned());
    };
    let expired = renewed
        .0
        .checked_add(SignedDuration::from_secs(i64::from(secs.max(0))))
        .is_ok_and(|expires| expires <= now);
    (!expired).then(|| holder.to_owned())
}

/// Whether a CRD named `name` is one of ferrolb's (`<plural>.ferrolb.io`). Pure.
pub fn is_ours_crd(name: &str) -> bool {
    name.strip_suffix(GROUP)
        .is_some_and(|plural| plural.ends_with('.') && plural.len() > 1)
}

/// Runs the steps of the module docs; `say` gets one line per step as it happens.
///
/// # Errors
/// An API call failed (other than "not found"), or the controller still led when `timeout`
/// passed (nothing released, nothing deleted), or the deletions did not finish within `timeout`.
/// Statuses left by the release are not an error: see [`Outcome::released_all`].
pub async fn run(
    client: &Client,
    opts: &Options,
    say: &mut dyn FnMut(String),
) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome {
        scaled: stop_controllers(client, &opts.namespace).await?,
        ..Outcome::default()
    };
    if outcome.scaled.is_empty() {
        say(format!(
            "no controller Deployment in namespace {} ({CONTROLLER_SELECTOR})",
            opts.namespace
        ));
    } else {
        say(format!(
            "scaled to 0 replicas: {}",
            outcome.scaled.join(", ")
        ));
    }
    wait_until_nobody_leads(client, opts).await?;
    say(format!(
        "no controller leads (Lease {}/{})",
        opts.namespace, opts.lease_name
    ));

    let publisher = Publisher::new(
        client.clone(),
        Reporter {
            controller: "ferrolb-uninstall".into(),
            instance: std::env::var("HOSTNAME").ok(),
        },
    );
    let deadline = Instant::now() + opts.timeout;
    outcome.release = release_all(client, &publisher, WHY, CONCURRENCY, deadline).await;
    for key in &outcome.release.released {
        say(format!("released the status of Service {key}"));
    }
    if !outcome.released_all() {
        for (key, why) in &outcome.release.left {
            say(format!("NOT released: Service {key}: {why}"));
        }
        if let Some(why) = &outcome.release.incomplete {
            say(format!("the search for statuses did not finish: {why}"));
        }
        say("nothing deleted; run the command again".into());
        return Ok(outcome);
    }
    say(format!(
        "every Service status of ours released ({} Services)",
        outcome.release.released.len()
    ));
    if opts.release_only {
        say("--release-only: nothing deleted".into());
        return Ok(outcome);
    }
    outcome.deleted = delete_install(client, opts).await?;
    say(format!("deleted: {}", outcome.deleted.join(", ")));
    wait_until_gone(client, opts, &outcome.deleted).await?;
    say("gone".into());
    Ok(outcome)
}

/// Scales every controller Deployment in `namespace` to 0; returns their names (none when the
/// namespace or the Deployment does not exist).
async fn stop_controllers(client: &Client, namespace: &str) -> anyhow::Result<Vec<String>> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let list = api
        .list(&ListParams::default().labels(CONTROLLER_SELECTOR))
        .await
        .with_context(|| format!("listing the controller Deployments in {namespace}"))?;
    let mut names = Vec::new();
    for d in list.items {
        let name = d.name_any();
        let scale = json!({"spec": {"replicas": 0}});
        api.patch_scale(&name, &PatchParams::default(), &Patch::Merge(&scale))
            .await
            .with_context(|| format!("scaling Deployment {namespace}/{name} to 0"))?;
        names.push(name);
    }
    Ok(names)
}

/// Waits until nobody leads, at most `opts.timeout`: the controller's Lease has no live holder
/// ([`live_holder`]) and either no controller pod is left, or the Lease has stayed free for its
/// whole `leaseDurationSeconds` (15 s if unset) — the time in which a replica still stopping (a
/// standby that saw the leader release, a pod on a node that no longer answers) would have taken
/// it.
async fn wait_until_nobody_leads(client: &Client, opts: &Options) -> anyhow::Result<()> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), &opts.namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &opts.namespace);
    let deadline = Instant::now() + opts.timeout;
    let mut free_since: Option<Instant> = None;
    loop {
        let lease = leases
            .get_opt(&opts.lease_name)
            .await
            .with_context(|| format!("reading Lease {}/{}", opts.namespace, opts.lease_name))?;
        let window = Duration::from_secs(
            lease
                .as_ref()
                .and_then(|l| l.spec.as_ref())
                .and_then(|s| s.lease_duration_seconds)
                .and_then(|s| u64::try_from(s).ok())
                .unwrap_or(15),
        );
        let holder = lease.and_then(|l| live_holder(&l, Timestamp::now()));
        let why = match holder {
            Some(holder) => {
                free_since = None;
                format!(
                    "{holder} still holds Lease {}/{}",
                    opts.namespace, opts.lease_name
                )
            }
            None => {
                let since = *free_since.get_or_insert_with(Instant::now);
                let left = pods
                    .list(&ListParams::default().labels(CONTROLLER_SELECTOR))
                    .await
                    .with_context(|| format!("listing controller pods in {}", opts.namespace))?
                    .items
                    .len();
                if left == 0 || since.elapsed() >= window {
                    return Ok(());
                }
                format!("{left} controller pods are still stopping")
            }
        };
        if Instant::now() >= deadline {
            bail!(
                "{why} after {:?}: a controller could still re-assign the addresses; nothing released, nothing deleted (scale the Deployment back up to undo the stop)",
                opts.timeout
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Deletes the namespace, the labelled ClusterRoles and ClusterRoleBindings and (unless
/// `keep_crds`) ferrolb's CRDs; returns `kind/name` of each one deleted (not-found skipped).
async fn delete_install(client: &Client, opts: &Options) -> anyhow::Result<Vec<String>> {
    let mut deleted = Vec::new();
    let dp = DeleteParams::background();
    let ns: Api<Namespace> = Api::all(client.clone());
    if gone_if_404(ns.delete(&opts.namespace, &dp).await)
        .with_context(|| format!("deleting namespace {}", opts.namespace))?
    {
        deleted.push(format!("namespace/{}", opts.namespace));
    }
    let part_of = ListParams::default().labels(PART_OF_SELECTOR);
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    for b in bindings.list(&part_of).await?.items {
        if gone_if_404(bindings.delete(&b.name_any(), &dp).await)? {
            deleted.push(format!("clusterrolebinding/{}", b.name_any()));
        }
    }
    let roles: Api<ClusterRole> = Api::all(client.clone());
    for r in roles.list(&part_of).await?.items {
        if gone_if_404(roles.delete(&r.name_any(), &dp).await)? {
            deleted.push(format!("clusterrole/{}", r.name_any()));
        }
    }
    if !opts.keep_crds {
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for c in crds.list(&ListParams::default()).await?.items {
            let name = c.name_any();
            if is_ours_crd(&name) && gone_if_404(crds.delete(&name, &dp).await)? {
                deleted.push(format!("customresourcedefinition/{name}"));
            }
        }
    }
    Ok(deleted)
}

/// `Ok(true)`: deleted (or being deleted); `Ok(false)`: it did not exist.
fn gone_if_404<T>(result: Result<T, kube::Error>) -> Result<bool, kube::Error> {
    match result {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Waits until the namespace and the CRDs deleted are gone, at most `opts.timeout`.
async fn wait_until_gone(
    client: &Client,
    opts: &Options,
    deleted: &[String],
) -> anyhow::Result<()> {
    let ns: Api<Namespace> = Api::all(client.clone());
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let deadline = Instant::now() + opts.timeout;
    loop {
        let mut left = Vec::new();
        for what in deleted {
            let exists = match what.split_once('/') {
                Some(("namespace", name)) => ns.get_opt(name).await?.is_some(),
                Some(("customresourcedefinition", name)) => crds.get_opt(name).await?.is_some(),
                _ => false,
            };
            if exists {
                left.push(what.as_str());
            }
        }
        if left.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!(
                "still being deleted after {:?}: {} (every status of ours was released already)",
                opts.timeout,
                left.join(", ")
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn lease(holder: Option<&str>, renewed: Option<i64>, secs: Option<i32>) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                renew_time: renewed.map(|s| MicroTime(Timestamp::from_second(s).unwrap())),
                lease_duration_seconds: secs,
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        }
    }

    #[test]
    fn a_holder_leads_until_its_lease_expires() {
        let at = |s| Timestamp::from_second(s).unwrap();
        let held = lease(Some("a"), Some(1000), Some(15));
        assert_eq!(live_holder(&held, at(1000)), Some("a".into()));
        assert_eq!(live_holder(&held, at(1014)), Some("a".into()));
        assert_eq!(
            live_holder(&held, at(1015)),
            None,
            "expired at renew + 15 s"
        );
        assert_eq!(
            live_holder(&lease(None, Some(1000), Some(15)), at(1000)),
            None
        );
        assert_eq!(
            live_holder(&lease(Some(""), Some(1000), Some(15)), at(1000)),
            None
        );
        assert_eq!(live_holder(&Lease::default(), at(1000)), None);
        // A Lease that does not say when it expires is never assumed expired.
        assert_eq!(
            live_holder(&lease(Some("a"), None, Some(15)), at(9999)),
            Some("a".into())
        );
        assert_eq!(
            live_holder(&lease(Some("a"), Some(1000), None), at(9999)),
            Some("a".into())
        );
    }

    #[test]
    fn only_the_ferrolb_io_group_is_ours() {
        assert!(is_ours_crd("ipaddresspools.ferrolb.io"));
        assert!(is_ours_crd("l2announcements.ferrolb.io"));
        assert!(!is_ours_crd("ipaddresspools.metallb.io"));
        assert!(!is_ours_crd("ferrolb.io"));
        assert!(!is_ours_crd(".ferrolb.io"));
        assert!(!is_ours_crd("pools.notferrolb.io"));
    }
}
