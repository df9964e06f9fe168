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
//! 0. **Refuse another install**: a controller Deployment (labels below) in any other namespace
//!    would re-assign what is released and shares the CRDs: nothing is done (exit status 1).
//! 1. **Stop the controller**: every Deployment in the namespace labelled
//!    `app.kubernetes.io/name=ferrolb, app.kubernetes.io/component=controller` (the kustomize base
//!    and the Helm chart both) is scaled to 0. Its replicas stop the way a rolling update stops
//!    them — the namespace is alive, so they keep every status (R1) — and the leader releases its
//!    Lease.
//! 2. **Wait until nobody leads, then hold the Lease** (R13): the Lease has no live holder (none,
//!    or `renewTime + leaseDurationSeconds` past on this machine's clock) and has not changed for
//!    a lease duration, unless no controller pod is left. Then this command writes itself
//!    ([`HOLDER`]) into the Lease, conditional on the version it read, for longer than the rest of
//!    the command takes: a replica that comes back (a GitOps tool scaling the Deployment up, a pod
//!    on a partitioned node) finds the Lease held and cannot lead. If a controller still leads
//!    after `--timeout`, or a controller Deployment exists without its Lease (a renamed Lease:
//!    `--lease-name`), nothing is released and nothing deleted (exit status 1; scale the
//!    Deployment back up to undo the stop).
//! 3. **Release** every status ferrolb wrote: the controller's own release
//!    ([`ferrolb_controller::k8s::uninstall::release_all`]: Services whose
//!    `status.loadBalancer.ingress` the field manager `ferrolb-controller` owns, never another
//!    writer's, each write conditional on the `resourceVersion` it was listed at; a Normal
//!    `IPReleased` Event each), until a complete listing finds none. The speakers stop answering
//!    for those addresses as their watches see the empty status. A Service left (a write
//!    refused, the deadline, statuses still appearing) stops the command before step 4 (exit
//!    status 2, the Lease given back), so it can simply be run again.
//! 4. **Delete** (unless `--release-only`) the membership-key Secret the controller made in the
//!    namespace (label `app.kubernetes.io/managed-by=ferrolb-controller`,
//!    [`ferrolb_controller::k8s::memberlist_secret::MANAGED_BY`]; a key the user made is never
//!    touched) — no install tool knows of it, so this happens in a shared namespace too. Then,
//!    only if the namespace is provably the install's own ([`namespace_is_ours`], issue #27 item
//!    10: its name is the install's, [`INSTALL_NAMESPACE`], *and* it carries the label
//!    `app.kubernetes.io/part-of=ferrolb` the install put there; a kustomize overlay with
//!    `namespace:` renames the base's Namespace object and so labels a shared namespace too,
//!    which is why the label alone proves nothing; otherwise nothing else is deleted): the
//!    namespace (with the speakers, the controller, a membership Secret of the user's, the
//!    Lease), the ClusterRoleBindings labelled `app.kubernetes.io/part-of=ferrolb` that bind a
//!    ServiceAccount of the namespace and the labelled ClusterRoles they refer to, the speakers'
//!    admission policy (a ValidatingAdmissionPolicy and its Binding named
//!    [`SPEAKER_ADMISSION_POLICY`] with that label, issue #27 item 5: cluster-scoped, so deleting
//!    the namespace leaves them), and — unless `--keep-crds` — the CRDs that are provably ferrolb's ([`crd_is_ours`]: one of the names
//!    ferrolb installs and the install's label; every IPAddressPool, L2Advertisement and
//!    L2Announcement with them); then wait until they are gone.
//!
//! With `--release-only` the install stays (controller at 0 replicas) for `helm uninstall` or
//! `kubectl delete -k deploy/` to remove. Nothing here is MetalLB behaviour: MetalLB leaves its
//! statuses behind on uninstall (docs/install.md, "Uninstall").

use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::events::Reporter;
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::time::Instant;

use ferrolb_controller::k8s::memberlist_secret;
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

/// The holder identity this command writes into the controller's Lease while it releases and
/// deletes, so that no controller replica can lead meanwhile (R13).
pub const HOLDER: &str = "ferrolb-uninstall";

/// The label value marking an object as part of an install (`app.kubernetes.io/part-of`).
const PART_OF: (&str, &str) = ("app.kubernetes.io/part-of", "ferrolb");

/// The namespace the install creates (`deploy/namespace.yaml`; the chart's `namespace.name` with
/// `namespace.create: true`): the only namespace this command deletes ([`namespace_is_ours`]).
pub const INSTALL_NAMESPACE: &str = "ferrolb-system";

/// The name of the speakers' ValidatingAdmissionPolicy and of its Binding
/// (`deploy/speaker-admission.yaml`, the chart's `speaker-admission.yaml`; issue #27 item 5): the
/// only admission objects this command deletes ([`admission_is_ours`]).
pub const SPEAKER_ADMISSION_POLICY: &str = "ferrolb-speaker-own-node";

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

/// Whether `binding` grants its role to a ServiceAccount of `namespace` (so it belongs to the
/// install there, not to another one with the same labels). Pure.
pub fn binds_namespace(binding: &ClusterRoleBinding, namespace: &str) -> bool {
    binding
        .subjects
        .iter()
        .flatten()
        .any(|s| s.kind == "ServiceAccount" && s.namespace.as_deref() == Some(namespace))
}

/// Runs the steps of the module docs; `say` gets one line per step as it happens.
///
/// # Errors
/// An API call failed (other than "not found"); a controller Deployment of another install
/// exists; a controller still led when `timeout` passed (nothing released, nothing deleted); or
/// the deletions did not finish within `timeout`. Statuses left by the release are not an
/// error: see [`Outcome::released_all`].
pub async fn run(
    client: &Client,
    opts: &Options,
    say: &mut dyn FnMut(String),
) -> anyhow::Result<Outcome> {
    let others = other_installs(client, &opts.namespace).await?;
    if !others.is_empty() {
        bail!(
            "a ferrolb controller is installed outside namespace {} too: {}; it would re-assign what this command releases (and the CRDs are shared): nothing done — uninstall that one first, or name its namespace with --namespace",
            opts.namespace,
            others.join(", ")
        );
    }
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
    let held = take_lease(client, opts, !outcome.scaled.is_empty()).await?;
    say(format!(
        "no controller leads; Lease {}/{} {}",
        opts.namespace,
        opts.lease_name,
        if held {
            format!("held by {HOLDER} until the end")
        } else {
            "absent (no install here)".into()
        }
    ));

    let publisher = Publisher::new(
        client.clone(),
        Reporter {
            controller: HOLDER.into(),
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
        give_back_lease(client, opts, held).await?;
        return Ok(outcome);
    }
    say(format!(
        "every Service status of ours released ({} Services)",
        outcome.release.released.len()
    ));
    if opts.release_only {
        say("--release-only: nothing deleted".into());
        give_back_lease(client, opts, held).await?;
        return Ok(outcome);
    }
    outcome.deleted = delete_controller_key(client, &opts.namespace).await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if let Some(ns) = namespaces.get_opt(&opts.namespace).await?
        && !namespace_is_ours(&ns.metadata)
    {
        let key = if outcome.deleted.is_empty() {
            String::new()
        } else {
            format!(
                "deleted only the membership key the controller made ({}); ",
                outcome.deleted.join(", ")
            )
        };
        let why = if is_part_of(&ns.metadata) {
            format!(
                "labelled {}={}, but not named {INSTALL_NAMESPACE}: an overlay or a chart value pointed the install at it, and it may hold more than ferrolb",
                PART_OF.0, PART_OF.1
            )
        } else {
            format!(
                "no {}={} label: installed into a shared namespace?",
                PART_OF.0, PART_OF.1
            )
        };
        say(format!(
            "namespace {} is not ferrolb's own ({why}): {key}nothing else deleted; remove the install with the tool that made it (helm uninstall; for a kustomize overlay, drop the Namespace object from it first, or `kubectl delete -k` deletes the namespace)",
            opts.namespace
        ));
        give_back_lease(client, opts, held).await?;
        return Ok(outcome);
    }
    outcome.deleted.extend(delete_install(client, opts).await?);
    say(format!("deleted: {}", outcome.deleted.join(", ")));
    wait_until_gone(client, opts, &outcome.deleted).await?;
    say("gone".into());
    Ok(outcome)
}

/// Whether an object carries `app.kubernetes.io/part-of=ferrolb`. Pure.
pub fn is_part_of(meta: &ObjectMeta) -> bool {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(PART_OF.0))
        .is_some_and(|v| v == PART_OF.1)
}

/// Whether a namespace is provably the install's own, so deleting it deletes nothing else
/// (issue #27 item 10): named [`INSTALL_NAMESPACE`] *and* labelled [`PART_OF_SELECTOR`]. The
/// label alone is no proof: a kustomize overlay with `namespace: shared` renames the base's
/// Namespace object to `shared`, and `kubectl apply` then adds the label to that existing,
/// shared namespace. Pure.
pub fn namespace_is_ours(meta: &ObjectMeta) -> bool {
    meta.name.as_deref() == Some(INSTALL_NAMESPACE) && is_part_of(meta)
}

/// Whether a CRD is provably ferrolb's (issue #27 item 10): its name is one of those ferrolb
/// installs ([`ferrolb_crds::manifests::crds`]) *and* it carries the install's label
/// [`PART_OF_SELECTOR`]. Another CRD of the `ferrolb.io` group (a later version's, someone
/// else's), or ours applied by hand without the label, is kept. Pure.
pub fn crd_is_ours(crd: &CustomResourceDefinition) -> bool {
    let name = crd.metadata.name.as_deref().unwrap_or_default();
    is_part_of(&crd.metadata)
        && ferrolb_crds::manifests::crds()
            .iter()
            .any(|(_, c)| c.metadata.name.as_deref() == Some(name))
}

/// Whether a ValidatingAdmissionPolicy or ValidatingAdmissionPolicyBinding is provably
/// ferrolb's (issue #27 items 5 and 10): named [`SPEAKER_ADMISSION_POLICY`] *and* labelled
/// [`PART_OF_SELECTOR`], as the kustomize base and the chart make both. Another policy, or ours
/// applied by hand without the label, is kept. Pure.
pub fn admission_is_ours(meta: &ObjectMeta) -> bool {
    meta.name.as_deref() == Some(SPEAKER_ADMISSION_POLICY) && is_part_of(meta)
}

/// `namespace/name` of every controller Deployment outside `namespace`.
async fn other_installs(client: &Client, namespace: &str) -> anyhow::Result<Vec<String>> {
    let all: Api<Deployment> = Api::all(client.clone());
    Ok(all
        .list(&ListParams::default().labels(CONTROLLER_SELECTOR))
        .await
        .context("listing controller Deployments")?
        .items
        .iter()
        .filter(|d| d.namespace().as_deref() != Some(namespace))
        .map(|d| format!("{}/{}", d.namespace().unwrap_or_default(), d.name_any()))
        .collect())
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

/// Waits until nobody leads ([`nobody_leads`]), then writes [`HOLDER`] into the Lease (created if
/// absent while the namespace exists) with a `resourceVersion` precondition and a duration
/// covering the rest of the command, so that a replica coming back (a GitOps tool scaling the
/// Deployment up again, a pod on a partitioned node) cannot lead while statuses are released and
/// the install deleted. Returns whether the Lease is held (`false`: no namespace, no install).
///
/// # Errors
/// A controller still led after `opts.timeout`; a controller Deployment exists
/// (`expect_lease`) but its Lease does not (a renamed Lease: `--lease-name`); an API call failed.
async fn take_lease(client: &Client, opts: &Options, expect_lease: bool) -> anyhow::Result<bool> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), &opts.namespace);
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let deadline = Instant::now() + opts.timeout;
    loop {
        let lease = nobody_leads(client, opts, deadline).await?;
        let hold = hold_spec(opts.timeout);
        let result = match lease {
            Some(mut lease) => {
                lease.spec = Some(hold);
                // `replace` sends the resourceVersion read: a write by anyone since is a 409.
                leases
                    .replace(&opts.lease_name, &PostParams::default(), &lease)
                    .await
            }
            None if expect_lease => bail!(
                "a controller Deployment exists in {} but no Lease {}: pass the controller's Lease name with --lease-name (its FERROLB_LEASE_NAME); nothing released, nothing deleted",
                opts.namespace,
                opts.lease_name
            ),
            None if namespaces.get_opt(&opts.namespace).await?.is_none() => return Ok(false),
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(opts.lease_name.clone()),
                        namespace: Some(opts.namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(hold),
                };
                leases.create(&PostParams::default(), &lease).await
            }
        };
        match result {
            Ok(_) => return Ok(true),
            // Someone wrote the Lease between the read and the write: look again.
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => {
                return Err(e).with_context(|| {
                    format!("taking Lease {}/{}", opts.namespace, opts.lease_name)
                });
            }
        }
    }
}

/// The Lease spec [`HOLDER`] writes: held from now for twice `timeout` plus a minute (the
/// release and the deletions are each bounded by `timeout`), whole seconds as the API takes
/// them.
fn hold_spec(timeout: Duration) -> LeaseSpec {
    let secs = timeout.as_secs().saturating_mul(2).saturating_add(60);
    let now = MicroTime(Timestamp::now());
    LeaseSpec {
        holder_identity: Some(HOLDER.into()),
        lease_duration_seconds: Some(i32::try_from(secs).unwrap_or(i32::MAX)),
        acquire_time: Some(now.clone()),
        renew_time: Some(now),
        ..LeaseSpec::default()
    }
}

/// Clears [`HOLDER`] from the Lease when the command ends without deleting the install (so a
/// controller scaled up again leads at once); a Lease someone else holds by then is left alone.
async fn give_back_lease(client: &Client, opts: &Options, held: bool) -> anyhow::Result<()> {
    if !held {
        return Ok(());
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), &opts.namespace);
    let Some(mut lease) = leases.get_opt(&opts.lease_name).await? else {
        return Ok(());
    };
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    if spec.holder_identity.as_deref() != Some(HOLDER) {
        return Ok(());
    }
    spec.holder_identity = None;
    match leases
        .replace(&opts.lease_name, &PostParams::default(), &lease)
        .await
    {
        Ok(_) | Err(kube::Error::Api(_)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Waits until nobody leads, at most until `deadline`, and returns the Lease as last read
/// (`None`: there is none). Nobody leads when the Lease has no live holder ([`live_holder`], this
/// machine's clock against `renewTime`) *and* has not changed (its `resourceVersion`) for
/// `leaseDurationSeconds` — so a holder that renews is live whatever the clocks say — unless no
/// controller pod is left at all. A stopping standby that sees the leader release, or a pod on a
/// node that no longer answers, would have taken the Lease within that window.
async fn nobody_leads(
    client: &Client,
    opts: &Options,
    deadline: Instant,
) -> anyhow::Result<Option<Lease>> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), &opts.namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &opts.namespace);
    let mut last_change: Option<(String, Instant)> = None;
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
        let version = lease
            .as_ref()
            .and_then(|l| l.resource_version())
            .unwrap_or_default();
        let unchanged_for = match &last_change {
            Some((v, at)) if *v == version => at.elapsed(),
            _ => {
                last_change = Some((version, Instant::now()));
                Duration::ZERO
            }
        };
        let why = match lease
            .as_ref()
            .and_then(|l| live_holder(l, Timestamp::now()))
        {
            Some(holder) => {
                format!(
                    "{holder} still holds Lease {}/{}",
                    opts.namespace, opts.lease_name
                )
            }
            None => {
                let left = pods
                    .list(&ListParams::default().labels(CONTROLLER_SELECTOR))
                    .await
                    .with_context(|| format!("listing controller pods in {}", opts.namespace))?
                    .items
                    .len();
                if left == 0 || unchanged_for >= window {
                    return Ok(lease);
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

/// Deletes the Secrets in `namespace` that the controller created (the membership key, labelled
/// [`memberlist_secret::MANAGED_BY`]); returns `secret/<namespace>/<name>` of each one deleted.
/// A Secret without that label (a key the user made) is never deleted here.
async fn delete_controller_key(client: &Client, namespace: &str) -> anyhow::Result<Vec<String>> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let made = ListParams::default().labels(memberlist_secret::MANAGED_BY_SELECTOR);
    let mut deleted = Vec::new();
    let listed = match secrets.list_metadata(&made).await {
        Ok(list) => list.items,
        Err(kube::Error::Api(e)) if e.code == 404 => Vec::new(),
        Err(e) => {
            return Err(e)
                .with_context(|| format!("listing the controller's Secrets in {namespace}"));
        }
    };
    for s in listed {
        let name = s.name_any();
        if gone_if_404(secrets.delete(&name, &DeleteParams::background()).await)
            .with_context(|| format!("deleting Secret {namespace}/{name}"))?
        {
            deleted.push(format!("secret/{namespace}/{name}"));
        }
    }
    Ok(deleted)
}

/// Deletes the namespace (the caller checked [`namespace_is_ours`]), the ClusterRoleBindings
/// labelled part-of=ferrolb that bind a ServiceAccount of the namespace and the labelled
/// ClusterRoles they refer to, the speakers' admission policy and its binding
/// ([`admission_is_ours`]), and (unless `keep_crds`) the CRDs that are ours
/// ([`crd_is_ours`]); returns `kind/name` of each one deleted (not-found skipped).
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
    let mut roles_bound = Vec::new();
    for b in bindings.list(&part_of).await?.items {
        if !binds_namespace(&b, &opts.namespace) {
            continue;
        }
        roles_bound.push(b.role_ref.name.clone());
        if gone_if_404(bindings.delete(&b.name_any(), &dp).await)? {
            deleted.push(format!("clusterrolebinding/{}", b.name_any()));
        }
    }
    let roles: Api<ClusterRole> = Api::all(client.clone());
    for r in roles.list(&part_of).await?.items {
        if roles_bound.contains(&r.name_any())
            && gone_if_404(roles.delete(&r.name_any(), &dp).await)?
        {
            deleted.push(format!("clusterrole/{}", r.name_any()));
        }
    }
    // The binding first, then the policy it names.
    let admission_bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    for b in admission_bindings.list(&part_of).await?.items {
        if admission_is_ours(&b.metadata)
            && gone_if_404(admission_bindings.delete(&b.name_any(), &dp).await)?
        {
            deleted.push(format!("validatingadmissionpolicybinding/{}", b.name_any()));
        }
    }
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    for p in policies.list(&part_of).await?.items {
        if admission_is_ours(&p.metadata) && gone_if_404(policies.delete(&p.name_any(), &dp).await)?
        {
            deleted.push(format!("validatingadmissionpolicy/{}", p.name_any()));
        }
    }
    if !opts.keep_crds {
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for c in crds.list(&ListParams::default()).await?.items {
            let name = c.name_any();
            if crd_is_ours(&c) && gone_if_404(crds.delete(&name, &dp).await)? {
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
    fn only_bindings_to_the_install_namespace_are_the_install_s() {
        let binding = |subjects: serde_json::Value| -> ClusterRoleBinding {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "b"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "r"},
                "subjects": subjects
            }))
            .unwrap()
        };
        let sa = |ns: &str| serde_json::json!({"kind": "ServiceAccount", "name": "ferrolb-controller", "namespace": ns});
        assert!(binds_namespace(
            &binding(serde_json::json!([sa("ferrolb-system")])),
            "ferrolb-system"
        ));
        assert!(!binds_namespace(
            &binding(serde_json::json!([sa("other")])),
            "ferrolb-system"
        ));
        assert!(!binds_namespace(
            &binding(
                serde_json::json!([{"kind": "User", "name": "ferrolb-system", "apiGroup": "rbac.authorization.k8s.io"}])
            ),
            "ferrolb-system"
        ));
        assert!(!binds_namespace(
            &binding(serde_json::json!(null)),
            "ferrolb-system"
        ));
    }

    #[test]
    fn only_the_install_namespace_with_its_label_is_ours() {
        let ns = |name: &str, labelled: bool| -> ObjectMeta {
            serde_json::from_value(serde_json::json!({
                "name": name,
                "labels": if labelled {
                    serde_json::json!({"app.kubernetes.io/part-of": "ferrolb"})
                } else {
                    serde_json::json!({})
                },
            }))
            .unwrap()
        };
        assert!(namespace_is_ours(&ns("ferrolb-system", true)));
        assert!(!namespace_is_ours(&ns("ferrolb-system", false)));
        // An overlay's `namespace: team-a` labels the shared namespace it points at.
        assert!(!namespace_is_ours(&ns("team-a", true)));
        assert!(!namespace_is_ours(&ns("default", true)));
    }

    #[test]
    fn only_our_crd_names_with_the_label_are_ours() {
        let crd = |name: &str, labelled: bool| -> CustomResourceDefinition {
            let mut c = ferrolb_crds::manifests::crds().remove(0).1;
            c.metadata.name = Some(name.into());
            if labelled {
                c.metadata.labels = Some([(PART_OF.0.into(), PART_OF.1.into())].into());
            }
            c
        };
        for ours in [
            "ipaddresspools.ferrolb.io",
            "l2advertisements.ferrolb.io",
            "l2announcements.ferrolb.io",
        ] {
            assert!(crd_is_ours(&crd(ours, true)), "{ours}");
            assert!(!crd_is_ours(&crd(ours, false)), "{ours} without the label");
        }
        assert!(!crd_is_ours(&crd("widgets.ferrolb.io", true)));
    }

    #[test]
    fn only_the_speaker_policy_with_the_label_is_ours() {
        let meta = |name: &str, labelled: bool| -> ObjectMeta {
            ObjectMeta {
                name: Some(name.into()),
                labels: labelled.then(|| [(PART_OF.0.into(), PART_OF.1.into())].into()),
                ..ObjectMeta::default()
            }
        };
        assert!(admission_is_ours(&meta(SPEAKER_ADMISSION_POLICY, true)));
        assert!(!admission_is_ours(&meta(SPEAKER_ADMISSION_POLICY, false)));
        assert!(!admission_is_ours(&meta("someone-elses-policy", true)));
        // The name is the one the install ships, policy and binding alike (the chart's template
        // is generated from this file).
        let shipped = include_str!("../../deploy/speaker-admission.yaml");
        let kinds: Vec<&str> = shipped
            .lines()
            .filter_map(|l| l.strip_prefix("kind: "))
            .collect();
        assert_eq!(
            kinds,
            [
                "ValidatingAdmissionPolicy",
                "ValidatingAdmissionPolicyBinding"
            ]
        );
        let names = shipped
            .lines()
            .filter(|l| l.trim() == format!("name: {SPEAKER_ADMISSION_POLICY}"))
            .count();
        assert_eq!(names, 2, "{shipped}");
    }

    #[test]
    fn part_of_is_the_label_value_ferrolb() {
        let meta = |labels: serde_json::Value| -> ObjectMeta {
            serde_json::from_value(serde_json::json!({"name": "n", "labels": labels})).unwrap()
        };
        assert!(is_part_of(&meta(
            serde_json::json!({"app.kubernetes.io/part-of": "ferrolb"})
        )));
        assert!(!is_part_of(&meta(
            serde_json::json!({"app.kubernetes.io/part-of": "other"})
        )));
        assert!(!is_part_of(&meta(serde_json::json!({}))));
        assert!(!is_part_of(&ObjectMeta::default()));
    }

    #[test]
    fn the_hold_outlasts_the_release_and_the_deletions() {
        let spec = hold_spec(Duration::from_secs(120));
        assert_eq!(spec.holder_identity.as_deref(), Some(HOLDER));
        assert_eq!(spec.lease_duration_seconds, Some(300));
        let lease = Lease {
            spec: Some(spec),
            ..Lease::default()
        };
        assert_eq!(live_holder(&lease, Timestamp::now()), Some(HOLDER.into()));
    }
}
