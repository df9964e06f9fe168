//! Issue #14: uninstalling ferrolb leaves no Service status of ours behind — on the real API
//! server, with the real `ferrolb-controller` binary as a process.
//!
//! The uninstall signal is the deletion of the controller's own namespace (the Lease namespace,
//! which the manifests set to the pod's namespace): on SIGTERM the leader reads it, and only if it
//! is being deleted releases every status it wrote. The test cluster has no namespace controller,
//! so a deleted namespace stays `Terminating` with its `deletionTimestamp` set — exactly the state
//! an uninstall puts it in before the kubelet stops the pods.
//!
//! Steps: two replicas, a pool, Services of our class (one class-less, one with
//! `loadBalancerClass: ferrolb.io/l2`) and one of another class carrying a foreign ingress entry.
//! (a) SIGTERM to the leader with its namespace alive (a rolling update, a drain): it exits 0 and
//! no Service is written at all; the standby takes over. (b) A third replica starts, the namespace
//! is deleted, SIGTERM to the standby: nothing is written; SIGTERM to the leader: by the time it
//! exits (0, within the pod's `terminationGracePeriodSeconds` of 10 s) every status ferrolb wrote
//! is empty, each of those Services has a Normal `IPReleased` Event saying ferrolb is being
//! uninstalled, and the foreign Service is untouched (same resourceVersion, same entry).
//!
//! `kubectl delete -k deploy/` also deletes the controller's RBAC in the same command, before
//! the pods are stopped, so the leader is refused (403) by the time it would read its namespace
//! (docs/install.md, "Uninstall"). The docs' manual alternative to `ferrolb uninstall` deletes the
//! pools first, while the controller still runs: the second test checks that this releases every
//! status of ours (R7: an address that left every pool, no pool left) and no foreign one.
//!
//! The one-command uninstall is `ferrolb uninstall` (the third test, with the real binary): it
//! scales the controller Deployment to 0, refuses to release anything while a controller still
//! holds the Lease, then releases every status of ours with the user's credentials and deletes
//! the install. (Its whole run on real pods is in `tests/tests/real_nodes.rs`.) It also deletes
//! the membership-key Secret the controller made (issue #27) — in a shared namespace too, where
//! nothing else is deleted — and never a Secret the user made; `--release-only` deletes nothing.
//! It deletes only what it can prove is the install's (issue #27 item 10): the namespace only
//! when it is `ferrolb-system` with the install's label, CRDs only of ferrolb's names with that
//! label; the fourth test installs through an overlay into a shared namespace (labelled by the
//! overlay's renamed Namespace object) and checks that nothing of the namespace, its other
//! tenants or the CRDs is deleted, and that a status another writer co-owns is left.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use ferrolb_crds::IPAddressPool;
use ferrolb_tests::cluster::{TestCluster, workspace_bin};
use ferrolb_tests::controller::{ControllerOptions, ControllerProcess};

use ferrolb_tests::objects::{create_pool, create_service, ingress_ips, lb_service, set_ingress};
use ferrolb_tests::{namespace, poll};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret, Service};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Client, ResourceExt};

/// One test at a time: each starts its own cluster and the machine is small.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `terminationGracePeriodSeconds` of the controller pod in `deploy/controller.yaml`.
const GRACE: Duration = Duration::from_secs(10);

fn start(cluster: &TestCluster, identity: &str, home: &str) -> ControllerProcess {
    let opts = ControllerOptions::new(identity)
        .lease_namespace(home)
        .args(&["--lease-duration=3s", "--lease-grace=1s"]);
    ControllerProcess::start(cluster.kubeconfig(), cluster.dir(), &opts).expect("start controller")
}

async fn holder(client: &Client, home: &str) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), home)
        .get_opt("ferrolb-controller")
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
}

async fn wait_holder(client: &Client, home: &str, identity: &str) {
    poll::until(
        &format!("{identity} holds the Lease"),
        Duration::from_secs(20),
        || async { holder(client, home).await.as_deref() == Some(identity) },
    )
    .await
    .unwrap();
}

/// `(ingress IPs, resourceVersion)` of each Service, in order.
async fn snapshot(client: &Client, ns: &str, names: &[&str]) -> Vec<(Vec<String>, String)> {
    let api = Api::<Service>::namespaced(client.clone(), ns);
    let mut out = Vec::new();
    for name in names {
        let svc = api.get(name).await.unwrap();
        out.push((
            ingress_ips(&svc),
            svc.resource_version().unwrap_or_default(),
        ));
    }
    out
}

/// SIGTERM, then the exit status and how long the process took; fails after [`GRACE`] (the
/// kubelet's SIGKILL).
async fn terminate(ctl: &ControllerProcess) -> (ExitStatus, Duration) {
    let sent = Instant::now();
    ctl.process().signal("TERM");
    loop {
        if let Some(status) = ctl.process().exit_status() {
            return (status, sent.elapsed());
        }
        assert!(
            sent.elapsed() < GRACE,
            "still running {GRACE:?} after SIGTERM:\n{}",
            ctl.log_tail(40)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `(type, note)` of the `IPReleased` Events regarding a Service.
async fn released_events(client: &Client, ns: &str, name: &str) -> Vec<(String, String)> {
    ferrolb_tests::lab::scenario::typed_events_for(client, ns, name)
        .await
        .unwrap()
        .into_iter()
        .filter(|(_, reason, _)| reason == "IPReleased")
        .map(|(type_, _, note)| (type_, note))
        .collect()
}

#[tokio::test]
async fn uninstall_releases_every_status_we_wrote_and_nothing_else() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::start().await.expect("test cluster");
    let client = cluster.client().await.unwrap();
    create_pool(&client, "pool", &["198.51.100.0/28"])
        .await
        .unwrap();
    // The controller's own namespace (ferrolb-system in a real install) and the users' one.
    let home = namespace::fresh(&client, "ferrolb-home").await.unwrap();
    let apps = namespace::fresh(&client, "apps").await.unwrap();
    let names = ["web", "classed", "foreign"];
    create_service(
        &client,
        &lb_service(&apps, "web", &[("TCP", 80)], "Cluster"),
    )
    .await
    .unwrap();
    let mut classed = lb_service(&apps, "classed", &[("TCP", 80)], "Cluster");
    classed.spec.as_mut().unwrap().load_balancer_class = Some("ferrolb.io/l2".into());
    create_service(&client, &classed).await.unwrap();
    let mut foreign = lb_service(&apps, "foreign", &[("TCP", 80)], "Cluster");
    foreign.spec.as_mut().unwrap().load_balancer_class = Some("other.example/lb".into());
    create_service(&client, &foreign).await.unwrap();
    // Another implementation's entry (field manager ferrolb-tests), on a Service of its class.
    set_ingress(&client, &apps, "foreign", &["203.0.113.77"])
        .await
        .unwrap();

    let one = start(&cluster, "home-1", &home);
    wait_holder(&client, &home, "home-1").await;
    let two = start(&cluster, "home-2", &home);
    poll::until(
        "both Services have an address",
        Duration::from_secs(20),
        || async {
            let s = snapshot(&client, &apps, &names).await;
            s[0].0.len() == 1 && s[1].0.len() == 1
        },
    )
    .await
    .unwrap();
    let before = snapshot(&client, &apps, &names).await;
    assert_eq!(before[2].0, vec!["203.0.113.77"]);
    assert_ne!(before[0].0, before[1].0);

    // (a) The namespace is alive (a rolling update, a drain): the leader exits, nothing changes.
    let (status, took) = terminate(&one).await;
    assert!(status.success(), "{status}:\n{}", one.log_tail(40));
    assert_eq!(
        snapshot(&client, &apps, &names).await,
        before,
        "a restart releases nothing:\n{}",
        one.log_tail(40)
    );
    eprintln!("(a) leader exited in {took:?}, statuses kept");
    wait_holder(&client, &home, "home-2").await;
    let three = start(&cluster, "home-3", &home);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        snapshot(&client, &apps, &names).await,
        before,
        "a takeover writes nothing"
    );

    // (b) Uninstall: the namespace is deleted and stays Terminating (no namespace controller).
    let namespaces = Api::<Namespace>::all(client.clone());
    namespaces
        .delete(&home, &DeleteParams::default())
        .await
        .unwrap();
    let ns = namespaces.get(&home).await.unwrap();
    assert!(ns.metadata.deletion_timestamp.is_some(), "{ns:?}");
    assert_eq!(holder(&client, &home).await.as_deref(), Some("home-2"));

    // The standby does nothing.
    let (status, _) = terminate(&three).await;
    assert!(status.success(), "{status}:\n{}", three.log_tail(40));
    assert_eq!(
        snapshot(&client, &apps, &names).await,
        before,
        "a standby releases nothing:\n{}",
        three.log_tail(40)
    );

    // The leader releases every status it wrote before it exits.
    let (status, took) = terminate(&two).await;
    eprintln!("(b) leader exited in {took:?}");
    assert!(status.success(), "{status}:\n{}", two.log_tail(40));
    let after = snapshot(&client, &apps, &names).await;
    assert!(
        after[0].0.is_empty() && after[1].0.is_empty(),
        "statuses left behind: {after:?}\n{}",
        two.log_tail(40)
    );
    assert_eq!(after[2], before[2], "the foreign Service is untouched");
    let log = std::fs::read_to_string(two.process().log_path()).unwrap();
    assert!(
        log.contains("released every Service status ferrolb wrote"),
        "{log}"
    );
    for (name, (ips, _)) in names.iter().zip(&before).take(2) {
        let events = released_events(&client, &apps, name).await;
        let want = format!(
            "released {}: ferrolb is being uninstalled (its namespace {home} is being deleted)",
            ips[0]
        );
        assert!(
            events
                .iter()
                .any(|(t, note)| t == "Normal" && *note == want),
            "{name}: {events:?}"
        );
    }
    assert!(released_events(&client, &apps, "foreign").await.is_empty());
    // Each replica said why it released or kept the statuses.
    let log = std::fs::read_to_string(one.process().log_path()).unwrap();
    assert!(log.contains("namespace alive"), "{log}");
    let log = std::fs::read_to_string(three.process().log_path()).unwrap();
    assert!(log.contains("not leading"), "{log}");
}

#[tokio::test]
async fn deleting_the_pools_first_releases_every_status_we_wrote() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::start().await.expect("test cluster");
    let client = cluster.client().await.unwrap();
    create_pool(&client, "pool-a", &["198.51.100.0/30"])
        .await
        .unwrap();
    create_pool(&client, "pool-b", &["203.0.113.0/30"])
        .await
        .unwrap();
    let apps = namespace::fresh(&client, "apps").await.unwrap();
    let names = ["a", "b", "c", "foreign"];
    for name in &names[..3] {
        create_service(&client, &lb_service(&apps, name, &[("TCP", 80)], "Cluster"))
            .await
            .unwrap();
    }
    let mut foreign = lb_service(&apps, "foreign", &[("TCP", 80)], "Cluster");
    foreign.spec.as_mut().unwrap().load_balancer_class = Some("other.example/lb".into());
    create_service(&client, &foreign).await.unwrap();
    set_ingress(&client, &apps, "foreign", &["192.0.2.77"])
        .await
        .unwrap();
    let ctl = start(&cluster, "pools-first", "default");
    poll::until(
        "every Service has an address",
        Duration::from_secs(20),
        || async {
            snapshot(&client, &apps, &names[..3])
                .await
                .iter()
                .all(|(ips, _)| ips.len() == 1)
        },
    )
    .await
    .unwrap();
    let foreign_before = snapshot(&client, &apps, &["foreign"]).await;
    // `kubectl delete -k deploy/examples/…` (or `kubectl delete ipaddresspools --all`).
    let pools = Api::<IPAddressPool>::all(client.clone());
    for pool in ["pool-a", "pool-b"] {
        pools.delete(pool, &DeleteParams::default()).await.unwrap();
    }
    poll::until(
        "every status of ours is released",
        Duration::from_secs(20),
        || async {
            snapshot(&client, &apps, &names[..3])
                .await
                .iter()
                .all(|(ips, _)| ips.is_empty())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}:\n{}", ctl.log_tail(40)));
    assert_eq!(
        snapshot(&client, &apps, &["foreign"]).await,
        foreign_before,
        "the foreign Service is untouched"
    );
}

/// Runs `ferrolb uninstall <args>` against `cluster`: (exit status, stderr).
fn ferrolb_uninstall(cluster: &TestCluster, args: &[&str]) -> (i32, String) {
    let out = Command::new(workspace_bin("ferrolb").expect("ferrolb binary"))
        .arg("uninstall")
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig())
        .args(args)
        .output()
        .expect("running ferrolb uninstall");
    (
        out.status.code().expect("ferrolb exited"),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn labelled_role(name: &str, part_of: bool) -> ClusterRole {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {
            "name": name,
            "labels": if part_of {
                serde_json::json!({"app.kubernetes.io/part-of": "ferrolb"})
            } else {
                serde_json::json!({})
            }
        },
        "rules": []
    }))
    .unwrap()
}

fn binding(name: &str, role: &str, sa_namespace: &str) -> ClusterRoleBinding {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "ferrolb"}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": "ferrolb-controller", "namespace": sa_namespace}]
    }))
    .unwrap()
}

fn controller_deployment() -> Deployment {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "ferrolb-controller", "labels": {
            "app.kubernetes.io/name": "ferrolb", "app.kubernetes.io/component": "controller"}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "c"}},
            "template": {"metadata": {"labels": {"app": "c"}},
                         "spec": {"containers": [{"name": "c", "image": "ferrolb:0.1.0"}]}}
        }
    }))
    .unwrap()
}

#[tokio::test]
async fn ferrolb_uninstall_waits_for_no_leader_then_releases_and_deletes() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::start().await.expect("test cluster");
    let client = cluster.client().await.unwrap();
    create_pool(&client, "pool", &["198.51.100.0/28"])
        .await
        .unwrap();
    // The install's own namespace by name (issue #27 item 10: no other is ever deleted; the
    // test cluster makes it, unlabelled); each test has a cluster of its own.
    let home = "ferrolb-system".to_owned();
    match Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": home}})).unwrap(),
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("creating {home}: {e}"),
    }
    let apps = namespace::fresh(&client, "apps").await.unwrap();
    let names = ["web", "foreign"];
    create_service(
        &client,
        &lb_service(&apps, "web", &[("TCP", 80)], "Cluster"),
    )
    .await
    .unwrap();
    let mut foreign = lb_service(&apps, "foreign", &[("TCP", 80)], "Cluster");
    foreign.spec.as_mut().unwrap().load_balancer_class = Some("other.example/lb".into());
    create_service(&client, &foreign).await.unwrap();
    set_ingress(&client, &apps, "foreign", &["203.0.113.77"])
        .await
        .unwrap();
    // The install's objects as the API holds them (the test cluster runs no Deployment
    // controller: the Deployment is only scaled, the process below is the controller).
    let deployments = Api::<Deployment>::namespaced(client.clone(), &home);
    deployments
        .create(&PostParams::default(), &controller_deployment())
        .await
        .unwrap();
    let roles = Api::<ClusterRole>::all(client.clone());
    for (name, part_of) in [
        ("ferrolb-test-ours", true),
        ("ferrolb-test-unbound", true),
        ("someone-elses", false),
    ] {
        roles
            .create(&PostParams::default(), &labelled_role(name, part_of))
            .await
            .unwrap();
    }
    let bindings = Api::<ClusterRoleBinding>::all(client.clone());
    for b in [
        binding("ferrolb-test-ours", "ferrolb-test-ours", &home),
        binding(
            "ferrolb-test-other-install",
            "ferrolb-test-ours",
            "elsewhere",
        ),
    ] {
        bindings.create(&PostParams::default(), &b).await.unwrap();
    }
    // The speakers' admission policy as the install ships it (issue #27 item 5), labelled as
    // the kustomize base labels it, beside another labelled policy of another name (kept).
    let (policies, policy_bindings) = create_admission_policies(&client).await;

    // A Secret of the user's beside the key the controller makes (issue #27).
    let secrets = Api::<Secret>::namespaced(client.clone(), &home);
    let users: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "users-own"},
        "stringData": {"key": "not ferrolb's"}
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &users)
        .await
        .unwrap();

    let ctl = start(&cluster, "cli-1", &home);
    wait_holder(&client, &home, "cli-1").await;
    poll::until(
        "the controller made the membership key",
        Duration::from_secs(20),
        || async {
            secrets
                .get_opt("ferrolb-memberlist")
                .await
                .unwrap()
                .is_some()
        },
    )
    .await
    .unwrap();
    poll::until("web has an address", Duration::from_secs(20), || async {
        snapshot(&client, &apps, &names).await[0].0.len() == 1
    })
    .await
    .unwrap();
    let before = snapshot(&client, &apps, &names).await;

    // Another install's controller Deployment (another namespace): nothing is done at all.
    let elsewhere = Api::<Deployment>::namespaced(client.clone(), &apps);
    elsewhere
        .create(&PostParams::default(), &controller_deployment())
        .await
        .unwrap();
    let (code, err) = ferrolb_uninstall(&cluster, &["--namespace", &home, "--timeout", "3s"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "installed outside namespace {home} too: {apps}/ferrolb-controller"
        )),
        "{err}"
    );
    assert_eq!(
        deployments
            .get("ferrolb-controller")
            .await
            .unwrap()
            .spec
            .replicas,
        Some(2)
    );
    elsewhere
        .delete("ferrolb-controller", &DeleteParams::default())
        .await
        .unwrap();

    // A controller still leads (here a process the Deployment's scale cannot stop): nothing is
    // released, nothing deleted, exit status 1.
    let (code, err) = ferrolb_uninstall(&cluster, &["--namespace", &home, "--timeout", "3s"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("cli-1 still holds Lease"), "{err}");
    assert!(
        err.contains("scaled to 0 replicas: ferrolb-controller"),
        "{err}"
    );
    let scaled = deployments.get("ferrolb-controller").await.unwrap();
    assert_eq!(scaled.spec.replicas, Some(0));
    assert_eq!(snapshot(&client, &apps, &names).await, before, "{err}");
    assert!(roles.get_opt("ferrolb-test-ours").await.unwrap().is_some());
    assert!(ctl.process().exit_status().is_none());

    // The controller stops the way a scale-down stops it (namespace alive: keeps the statuses,
    // releases the Lease); now the statuses are released, with an Event each, and the Lease is
    // given back.
    let (status, _) = terminate(&ctl).await;
    assert!(status.success(), "{status}:\n{}", ctl.log_tail(40));
    assert_eq!(snapshot(&client, &apps, &names).await, before);
    let (code, err) = ferrolb_uninstall(
        &cluster,
        &["--namespace", &home, "--release-only", "--timeout", "20s"],
    );
    assert_eq!(code, 0, "{err}");
    let after = snapshot(&client, &apps, &names).await;
    assert!(after[0].0.is_empty(), "{after:?}\n{err}");
    assert_eq!(after[1], before[1], "the foreign Service is untouched");
    let want = format!(
        "released {}: ferrolb is being uninstalled (ferrolb uninstall)",
        before[0].0[0]
    );
    let events = released_events(&client, &apps, "web").await;
    assert!(
        events
            .iter()
            .any(|(t, note)| t == "Normal" && *note == want),
        "{events:?}"
    );
    assert!(released_events(&client, &apps, "foreign").await.is_empty());
    assert!(
        err.contains("held by ferrolb-uninstall until the end"),
        "{err}"
    );
    assert!(err.contains("--release-only: nothing deleted"), "{err}");
    assert!(
        secrets
            .get_opt("ferrolb-memberlist")
            .await
            .unwrap()
            .is_some(),
        "--release-only deleted the key"
    );
    assert_eq!(
        holder(&client, &home).await,
        None,
        "the Lease is given back"
    );
    assert!(roles.get_opt("ferrolb-test-ours").await.unwrap().is_some());

    // The namespace is not labelled part-of=ferrolb (a shared namespace): nothing is deleted.
    let (code, err) = ferrolb_uninstall(&cluster, &["--namespace", &home, "--timeout", "3s"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("is not ferrolb's own"), "{err}");
    assert!(roles.get_opt("ferrolb-test-ours").await.unwrap().is_some());
    assert!(
        policies.get_opt(SPEAKER_POLICY).await.unwrap().is_some()
            && policy_bindings
                .get_opt(SPEAKER_POLICY)
                .await
                .unwrap()
                .is_some(),
        "the admission policy of a shared-namespace install was deleted: {err}"
    );
    // ... but the key the controller made, which no install tool knows of, is; the user's stays.
    assert!(
        err.contains(&format!(
            "deleted only the membership key the controller made (secret/{home}/ferrolb-memberlist)"
        )),
        "{err}"
    );
    assert!(
        secrets
            .get_opt("ferrolb-memberlist")
            .await
            .unwrap()
            .is_none(),
        "{err}"
    );
    assert!(
        secrets.get_opt("users-own").await.unwrap().is_some(),
        "{err}"
    );
    let namespaces = Api::<Namespace>::all(client.clone());
    assert!(
        namespaces
            .get(&home)
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_none()
    );

    // ferrolb's own namespace: the whole uninstall. The namespace, the labelled binding of its
    // ServiceAccount and the role that binding names, and (not kept) the CRDs are deleted —
    // not another install's binding, an unbound or unlabelled role. This API server has no
    // namespace controller, so the namespace stays Terminating and the command ends with exit
    // status 1 naming it.
    let label =
        serde_json::json!({"metadata": {"labels": {"app.kubernetes.io/part-of": "ferrolb"}}});
    namespaces
        .patch(
            &home,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&label),
        )
        .await
        .unwrap();
    // The CRDs as an install labels them (the test cluster installed them unlabelled) — but
    // for one of ferrolb's applied by hand, and beside a CRD of the group that is not one of
    // ferrolb's names (issue #27 item 10: neither is proven ours, both are kept).
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    for ours in ["ipaddresspools.ferrolb.io", "l2announcements.ferrolb.io"] {
        crds.patch(
            ours,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&label),
        )
        .await
        .unwrap();
    }
    crds.create(&PostParams::default(), &widgets_crd())
        .await
        .unwrap();
    let (code, err) = ferrolb_uninstall(&cluster, &["--namespace", &home, "--timeout", "3s"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!("still being deleted after 3s: namespace/{home}")),
        "{err}"
    );
    assert!(
        namespaces
            .get(&home)
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    assert!(
        bindings
            .get_opt("ferrolb-test-ours")
            .await
            .unwrap()
            .is_none(),
        "{err}"
    );
    assert!(
        roles.get_opt("ferrolb-test-ours").await.unwrap().is_none(),
        "{err}"
    );
    for kept in ["ferrolb-test-unbound", "someone-elses"] {
        assert!(
            roles.get_opt(kept).await.unwrap().is_some(),
            "{kept}: {err}"
        );
    }
    // The speakers' admission policy and its binding are cluster-scoped: deleting the namespace
    // leaves them, so the command deletes them (issue #27 item 5); another policy stays.
    assert!(
        policies.get_opt(SPEAKER_POLICY).await.unwrap().is_none(),
        "{err}"
    );
    assert!(
        policy_bindings
            .get_opt(SPEAKER_POLICY)
            .await
            .unwrap()
            .is_none(),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "validatingadmissionpolicybinding/{SPEAKER_POLICY}, validatingadmissionpolicy/{SPEAKER_POLICY}"
        )),
        "{err}"
    );
    assert!(
        policies
            .get_opt("someone-elses-policy")
            .await
            .unwrap()
            .is_some(),
        "{err}"
    );
    assert!(
        bindings
            .get_opt("ferrolb-test-other-install")
            .await
            .unwrap()
            .is_some(),
        "{err}"
    );
    poll::until(
        "the labelled ferrolb CRDs gone",
        Duration::from_secs(20),
        || async {
            let left: Vec<String> = crds
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .iter()
                .filter(|c| c.spec.group == "ferrolb.io")
                .map(|c| c.name_any())
                .collect();
            left == ["l2advertisements.ferrolb.io", "widgets.ferrolb.io"]
        },
    )
    .await
    .unwrap();
    assert_eq!(snapshot(&client, &apps, &names).await[1], before[1]);
}

/// The name of the speakers' admission policy and binding (`deploy/speaker-admission.yaml`).
const SPEAKER_POLICY: &str = "ferrolb-speaker-own-node";

/// Creates the speakers' ValidatingAdmissionPolicy and its Binding from
/// `deploy/speaker-admission.yaml`, with the label the kustomize base adds, and a labelled policy
/// of another name (someone else's: `ferrolb uninstall` must keep it).
async fn create_admission_policies(
    client: &Client,
) -> (
    Api<ValidatingAdmissionPolicy>,
    Api<ValidatingAdmissionPolicyBinding>,
) {
    let text = std::fs::read_to_string(
        ferrolb_tests::cluster::repo_root().join("deploy/speaker-admission.yaml"),
    )
    .unwrap();
    let mut docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).unwrap();
    docs.retain(|d| !d.is_null());
    for d in &mut docs {
        d["metadata"]["labels"]["app.kubernetes.io/part-of"] = "ferrolb".into();
    }
    let policies = Api::<ValidatingAdmissionPolicy>::all(client.clone());
    let bindings = Api::<ValidatingAdmissionPolicyBinding>::all(client.clone());
    let mut other = docs[0].clone();
    other["metadata"]["name"] = "someone-elses-policy".into();
    for d in [&docs[0], &other] {
        policies
            .create(
                &PostParams::default(),
                &serde_json::from_value(d.clone()).unwrap(),
            )
            .await
            .unwrap();
    }
    assert_eq!(docs[1]["metadata"]["name"], SPEAKER_POLICY);
    bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(docs[1].clone()).unwrap(),
        )
        .await
        .unwrap();
    (policies, bindings)
}

/// A CRD of the `ferrolb.io` group that is not one of ferrolb's, with the install's label.
fn widgets_crd() -> CustomResourceDefinition {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "widgets.ferrolb.io",
                     "labels": {"app.kubernetes.io/part-of": "ferrolb"}},
        "spec": {
            "group": "ferrolb.io",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true,
                          "schema": {"openAPIV3Schema": {"type": "object",
                              "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    }))
    .unwrap()
}

/// Issue #27 item 10: ferrolb installed with a kustomize overlay whose `namespace:` points at a
/// namespace other tenants use. Kustomize renames the base's Namespace object to it, so
/// `kubectl apply -k` leaves the install's label on the shared namespace — the label proves
/// nothing. `ferrolb uninstall --namespace <it>` releases our statuses (but not one another
/// writer co-owns), deletes the key the controller made, and nothing else: not the namespace,
/// not its other tenants' objects, not the cluster RBAC, not the CRDs.
#[tokio::test]
async fn an_overlay_into_a_shared_namespace_deletes_nothing_but_the_key() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::start().await.expect("test cluster");
    let client = cluster.client().await.unwrap();
    create_pool(&client, "pool", &["198.51.100.0/28"])
        .await
        .unwrap();
    let shared = namespace::fresh(&client, "team-shared").await.unwrap();
    let namespaces = Api::<Namespace>::all(client.clone());
    let label =
        serde_json::json!({"metadata": {"labels": {"app.kubernetes.io/part-of": "ferrolb"}}});
    namespaces
        .patch(
            &shared,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&label),
        )
        .await
        .unwrap();
    // Another tenant's object in the shared namespace.
    let configmaps =
        Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &shared);
    configmaps
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": "tenant-config"}, "data": {"k": "v"}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    // The install's objects, labelled as the overlay labels them.
    Api::<Deployment>::namespaced(client.clone(), &shared)
        .create(&PostParams::default(), &controller_deployment())
        .await
        .unwrap();
    let roles = Api::<ClusterRole>::all(client.clone());
    roles
        .create(
            &PostParams::default(),
            &labelled_role("ferrolb-test-ours", true),
        )
        .await
        .unwrap();
    let bindings = Api::<ClusterRoleBinding>::all(client.clone());
    bindings
        .create(
            &PostParams::default(),
            &binding("ferrolb-test-ours", "ferrolb-test-ours", &shared),
        )
        .await
        .unwrap();
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    for ours in [
        "ipaddresspools.ferrolb.io",
        "l2advertisements.ferrolb.io",
        "l2announcements.ferrolb.io",
    ] {
        crds.patch(
            ours,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&label),
        )
        .await
        .unwrap();
    }

    let apps = namespace::fresh(&client, "apps").await.unwrap();
    let names = ["web", "co-owned"];
    for name in names {
        create_service(&client, &lb_service(&apps, name, &[("TCP", 80)], "Cluster"))
            .await
            .unwrap();
    }
    let ctl = start(&cluster, "shared-1", &shared);
    wait_holder(&client, &shared, "shared-1").await;
    poll::until("both have an address", Duration::from_secs(20), || async {
        snapshot(&client, &apps, &names)
            .await
            .iter()
            .all(|(ips, _)| ips.len() == 1)
    })
    .await
    .unwrap();
    let (status, _) = terminate(&ctl).await;
    assert!(
        status.success(),
        "{status}:
{}",
        ctl.log_tail(40)
    );
    // Another writer applies the very entries ferrolb wrote: both own the field now.
    let services = Api::<Service>::namespaced(client.clone(), &apps);
    let written = services
        .get("co-owned")
        .await
        .unwrap()
        .status
        .unwrap()
        .load_balancer
        .unwrap()
        .ingress
        .unwrap();
    let same = serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "status": {"loadBalancer": {"ingress": written}}
    });
    services
        .patch_status(
            "co-owned",
            &kube::api::PatchParams::apply("other-lb"),
            &kube::api::Patch::Apply(&same),
        )
        .await
        .unwrap();
    let co_owned = services.get("co-owned").await.unwrap();
    let owners: Vec<String> = co_owned
        .managed_fields()
        .iter()
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.pointer("/f:status/f:loadBalancer/f:ingress").is_some())
        })
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(
        owners.contains(&"ferrolb-controller".to_owned())
            && owners.contains(&"other-lb".to_owned()),
        "{owners:?}"
    );
    let before = snapshot(&client, &apps, &names).await;

    let (code, err) = ferrolb_uninstall(&cluster, &["--namespace", &shared, "--timeout", "20s"]);
    assert_eq!(code, 0, "{err}");
    let after = snapshot(&client, &apps, &names).await;
    assert!(
        after[0].0.is_empty(),
        "web released: {after:?}
{err}"
    );
    assert_eq!(
        after[1], before[1],
        "the co-owned status is untouched
{err}"
    );
    assert!(released_events(&client, &apps, "co-owned").await.is_empty());
    assert!(
        err.contains(&format!(
            "namespace {shared} is not ferrolb's own (labelled app.kubernetes.io/part-of=ferrolb, but not named ferrolb-system"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "deleted only the membership key the controller made (secret/{shared}/ferrolb-memberlist)"
        )),
        "{err}"
    );
    let ns = namespaces.get(&shared).await.unwrap();
    assert!(ns.metadata.deletion_timestamp.is_none(), "{err}");
    assert!(
        configmaps.get_opt("tenant-config").await.unwrap().is_some(),
        "{err}"
    );
    assert!(
        bindings
            .get_opt("ferrolb-test-ours")
            .await
            .unwrap()
            .is_some(),
        "{err}"
    );
    assert!(
        roles.get_opt("ferrolb-test-ours").await.unwrap().is_some(),
        "{err}"
    );
    for ours in [
        "ipaddresspools.ferrolb.io",
        "l2advertisements.ferrolb.io",
        "l2announcements.ferrolb.io",
    ] {
        let crd = crds.get(ours).await.unwrap();
        assert!(crd.metadata.deletion_timestamp.is_none(), "{ours}: {err}");
    }
}
