//! Issue #27 item 7 — a tenant's large objects cannot push the speaker (or the controller) past
//! its memory limit: every watched object is trimmed before it is stored (`speaker/core/src/trim.rs`,
//! `controller/src/service.rs`), and the initial state is read one object at a time (streaming
//! list) or in pages of `LIST_PAGE_SIZE` objects, never in pages of kube-rs's default 500 objects
//! (`runtime/src/reflector.rs`). Real processes against the real API server of the lab.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferrolb_controller::k8s::uninstall::release_all;
use ferrolb_runtime::reflector::LIST_PAGE_SIZE;
use ferrolb_tests::cluster::{ClusterOptions, TestCluster, workspace_bin};
use ferrolb_tests::controller::{ControllerOptions, ControllerProcess};
use ferrolb_tests::lab::Lab;
use ferrolb_tests::lab::bench::proc_status_kib;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use kube::api::{ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};

/// Services created, each with [`ANNOTATION_BYTES`] in one annotation.
const SERVICES: usize = 500;
/// 100 KiB: well under the API server's 256 KiB limit on an object's annotations.
const ANNOTATION_BYTES: usize = 100 * 1024;
/// Labels on each such Service besides the annotation, none of which a pool reads: keys of 19
/// bytes, values of 63 (Kubernetes' limit), ≈ 26 KiB of JSON per Service, ≈ 45 KiB as a map in
/// memory — over 20 MiB for the 500 if a binary kept them (the controller did, issue #27 item 7).
const LABELS: usize = 300;
/// The JSON bytes of one Service's [`LABELS`] (key, value, quotes and separators).
const LABEL_BYTES: usize = LABELS * (19 + 63 + 6);
/// What the speaker and the controller keep of one such Service, with room to spare: the trimmed
/// object (name, namespace, uid, resourceVersion, creationTimestamp, spec with one port; no
/// annotation, or one of ours capped at 576 bytes) is under a KiB of strings and structs, plus
/// the store's map entry.
const STORED_PER_SERVICE: u64 = 4 * 1024;
/// What a process may hold beyond what it stores while it reads: at most one page of
/// [`LIST_PAGE_SIZE`] untrimmed objects, about three times (the response body, its text, the
/// decoded objects) — rounded up to four. A streaming list holds one object at a time, far less.
const IN_FLIGHT: u64 = 4 * LIST_PAGE_SIZE as u64 * (ANNOTATION_BYTES + LABEL_BYTES) as u64;
/// Allocator and runtime noise between two starts of the same binary (arenas, thread stacks,
/// TLS sessions), measured well under this.
const NOISE: u64 = 4 * 1024 * 1024;

/// The annotation that carries the bytes, by Service: one nobody reads, and ferrolb's own three,
/// whose values the controller keeps — bounded by `cap_annotation` (issue #27), or the store
/// would hold them whole.
const ANNOTATION_KEYS: [&str; 4] = [
    "example.com/tenant-blob",
    "ferrolb.io/allow-shared-ip",
    "ferrolb.io/address-pool",
    "ferrolb.io/loadBalancerIPs",
];

/// Headless Service `big-<i>` in `default`, with `annotation_bytes` in one annotation
/// ([`ANNOTATION_KEYS`], in turn) and, when that is not 0, [`LABELS`] labels.
fn service(i: usize, annotation_bytes: usize) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(format!("big-{i:04}")),
            namespace: Some("default".into()),
            labels: (annotation_bytes > 0).then(|| {
                (0..LABELS)
                    .map(|l| {
                        (
                            format!("tenant.example/l{l:03}"),
                            format!("{i:04}{}", "v".repeat(59)),
                        )
                    })
                    .collect()
            }),
            annotations: (annotation_bytes >= 4).then(|| {
                [(
                    ANNOTATION_KEYS[i % ANNOTATION_KEYS.len()].to_owned(),
                    // Differs per Service, so no layer can share it.
                    format!("{i:04}{}", "x".repeat(annotation_bytes - 4)),
                )]
                .into()
            }),
            ..ObjectMeta::default()
        },
        // Headless: the lab's ClusterIP range (a /26) has room for 62 Services only.
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            ports: Some(vec![ServicePort {
                port: 80,
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// Polls `ready` every 100 ms until it is true (60 s at most).
async fn until<F, Fut>(what: &str, mut ready: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !ready().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} not ready after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Starts node-1's speaker, waits until it is ready (its watch stores hold their initial
/// state), and returns its peak resident memory (`VmHWM`) in bytes; the speaker is stopped.
async fn speaker_peak(lab: &mut Lab) -> u64 {
    lab.start_speaker("node-1", &[]).unwrap();
    until("speaker", || async {
        matches!(lab.speaker_http("node-1", "/readyz").await, Ok((200, _)))
    })
    .await;
    let pid = lab.speaker_pid("node-1").unwrap();
    let peak = proc_status_kib(pid, "VmHWM:").unwrap() * 1024;
    lab.signal_speaker("node-1", "TERM").unwrap();
    peak
}

/// The same for a controller.
async fn controller_peak(lab: &Lab, identity: &str) -> u64 {
    let controller = ControllerProcess::start(
        lab.cluster().kubeconfig(),
        lab.dir(),
        &ControllerOptions::new(identity),
    )
    .unwrap();
    until("controller", || async {
        matches!(controller.get("/readyz").await, Some((200, _)))
    })
    .await;
    let pid = controller.process().pid().unwrap();
    let peak = proc_status_kib(pid, "VmHWM:").unwrap() * 1024;
    controller.stop(Duration::from_secs(5));
    peak
}

/// Runs `ferrolb uninstall --release-only` against the lab (it lists every Service looking for
/// statuses of ours to release, then deletes nothing) under `ferrolb-test-peak`, and returns
/// the command's peak resident memory in bytes (issue #27 item 7: the release lists Services one
/// object at a time, or in pages of `LIST_PAGE_SIZE`).
fn uninstall_peak(lab: &Lab) -> u64 {
    let out = std::process::Command::new(workspace_bin("ferrolb-test-peak").unwrap())
        .arg(workspace_bin("ferrolb").unwrap())
        .args(["uninstall", "--release-only", "--kubeconfig"])
        .arg(lab.cluster().kubeconfig())
        .output()
        .expect("running ferrolb uninstall");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "ferrolb uninstall failed: {stderr}");
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("peak_rss_kib="))
        .and_then(|kib| kib.trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no peak_rss_kib in: {stderr}"))
        * 1024
}

/// Creates `n` Services ([`service`]), eight requests at a time.
async fn create_services(client: &Client, n: usize, annotation_bytes: usize) {
    let api: Api<Service> = Api::namespaced(client.clone(), "default");
    let created: Vec<_> = futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &service(i, annotation_bytes))
                    .await
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    for c in created {
        c.expect("create a Service");
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// The speaker's and the controller's peak RSS after reading 500 Services of 100 KiB each
/// plus 300 labels (62 MiB the API server holds) stays within what they store plus one page in
/// flight: each is started once with no such Service (its own baseline) and once with all of
/// them, and the second peak may exceed the first by at most
/// `SERVICES × STORED_PER_SERVICE + IN_FLIGHT + NOISE` (≈ 16 MiB), a quarter of the objects'
/// size. Storing the annotations or the labels (no pool reads them), or reading the list in pages
/// of 500 (kube-rs's default, before the fix: one 49 MiB response without the labels), exceeds
/// it (issue #27 item 7).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speaker_memory_stays_bounded_by_what_it_stores() {
    let allowance = SERVICES as u64 * STORED_PER_SERVICE + IN_FLIGHT + NOISE;
    let annotations = (SERVICES * ANNOTATION_BYTES) as u64;
    assert!(
        allowance * 3 < annotations && allowance < 2 * (SERVICES * LABEL_BYTES) as u64,
        "the test must tell storing the annotations, or the labels, from not"
    );
    let mut lab = Lab::start(1, 0).await.expect("lab");
    let client = lab.client().await.unwrap();

    let speaker_before = speaker_peak(&mut lab).await;
    let controller_before = controller_peak(&lab, "mem-a").await;
    let uninstall_before = uninstall_peak(&lab);

    create_services(&client, SERVICES, ANNOTATION_BYTES).await;

    let speaker_after = speaker_peak(&mut lab).await;
    let controller_after = controller_peak(&lab, "mem-b").await;
    let uninstall_after = uninstall_peak(&lab);

    println!(
        "MEASURED peak RSS (VmHWM), MiB: speaker {:.1} → {:.1}, controller {:.1} → {:.1}, \
         `ferrolb uninstall --release-only` {:.1} → {:.1}; \
         {SERVICES} Services × ({} KiB of annotation + {LABELS} labels) = {:.1} MiB; allowance {:.1} MiB",
        mib(speaker_before),
        mib(speaker_after),
        mib(controller_before),
        mib(controller_after),
        mib(uninstall_before),
        mib(uninstall_after),
        ANNOTATION_BYTES / 1024,
        mib(annotations + (SERVICES * LABEL_BYTES) as u64),
        mib(allowance),
    );
    assert!(
        speaker_after <= speaker_before + allowance,
        "speaker peak {:.1} MiB > {:.1} MiB without the Services + {:.1} MiB",
        mib(speaker_after),
        mib(speaker_before),
        mib(allowance)
    );
    assert!(
        controller_after <= controller_before + allowance,
        "controller peak {:.1} MiB > {:.1} MiB without the Services + {:.1} MiB",
        mib(controller_after),
        mib(controller_before),
        mib(allowance)
    );
    assert!(
        uninstall_after <= uninstall_before + allowance,
        "ferrolb uninstall peak {:.1} MiB > {:.1} MiB without the Services + {:.1} MiB",
        mib(uninstall_after),
        mib(uninstall_before),
        mib(allowance)
    );
}

/// A client of `cluster` that records the path and query of every request it sends.
async fn recording_client(cluster: &TestCluster) -> (Client, Arc<Mutex<Vec<String>>>) {
    let kubeconfig = Kubeconfig::read_from(cluster.kubeconfig()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&log);
    let layer = tower::util::MapRequestLayer::new(move |req: http::Request<kube::client::Body>| {
        record.lock().unwrap().push(req.uri().to_string());
        req
    });
    let client = kube::client::ClientBuilder::try_from(config)
        .unwrap()
        .with_layer(&layer)
        .build();
    (client, log)
}

/// Services [`initial_read`] finds: the 45 it creates and `default/kubernetes`.
const READ_SERVICES: usize = 46;

/// Runs one watch of every Service (the reflector both binaries use) against an API server
/// started with `apiserver_args` holding 45 small Services and `default/kubernetes` until its
/// store holds all 46; returns the requests it sent and the objects it stored. Then runs the
/// uninstall's search for statuses to release (`release_all`, none of them ours) and returns
/// its requests too.
///
/// Two waits make the count exact without hiding a request: the API server's bootstrap
/// controller creates `default/kubernetes` some time after `/readyz` (on a loaded machine, after
/// our 45), so it is awaited before the watch starts; and a streaming list is served from the
/// watch cache with `resourceVersion=0` ("any" semantics, how kube-runtime asks), which may lag
/// the last create by a moment, so its store is ready with a state the same watch then brings up
/// to date — every request is still recorded and asserted on by the callers.
async fn initial_read(apiserver_args: &[&str]) -> (Vec<String>, usize, Vec<String>) {
    let cluster = TestCluster::start_with(ClusterOptions {
        install_crds: false,
        apiserver_args: apiserver_args.iter().map(ToString::to_string).collect(),
        ..ClusterOptions::default()
    })
    .await
    .expect("test cluster");
    let setup = cluster.client().await.unwrap();
    create_services(&setup, 45, 0).await;
    let default: Api<Service> = Api::namespaced(setup, "default");
    tokio::time::timeout(Duration::from_secs(60), async {
        while default.get_opt("kubernetes").await.ok().flatten().is_none() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("the API server creates default/kubernetes within 60 s");
    let (client, log) = recording_client(&cluster).await;
    let (store, task) = ferrolb_runtime::reflector::spawn(
        Api::<Service>::all(client.clone()),
        Arc::new(tokio::sync::Notify::new()),
        |_| {},
    );
    tokio::time::timeout(Duration::from_secs(30), store.wait_until_ready())
        .await
        .expect("the store holds its initial state within 30 s")
        .unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(30), async {
        while store.state().len() < READ_SERVICES {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let stored = store.state().len();
    task.abort();
    let requests = std::mem::take(&mut *log.lock().unwrap());
    let publisher = ferrolb_runtime::events::Publisher::new(
        client.clone(),
        kube::runtime::events::Reporter {
            controller: "memory-bounds".into(),
            instance: None,
        },
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let report = release_all(&client, &publisher, "test", 4, deadline).await;
    assert!(
        report.released.is_empty() && report.left.is_empty() && report.incomplete.is_none(),
        "nothing of ours to release, and a complete search: {report:?}"
    );
    let release = std::mem::take(&mut *log.lock().unwrap());
    (requests, stored, release)
}

/// The initial state is never read in large pages: where the API server streams
/// lists (`WatchList`, the default of 1.32 and of 1.34 on) it is read from one watch with
/// `sendInitialEvents=true`, one object per event, and no LIST; where it refuses them
/// (`WatchList=false`, the default of 1.33), from LISTs of `LIST_PAGE_SIZE` objects each, never
/// with `resourceVersion=0` (for which the API server ignores `limit`). Issue #27 item 7.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initial_state_is_streamed_or_paged_never_read_whole() {
    let is_list = |r: &String| !r.contains("watch=true");
    let (requests, stored, release) = initial_read(&[]).await;
    println!("WatchList on: {requests:#?}\nrelease on uninstall: {release:#?}");
    assert_eq!(stored, READ_SERVICES, "45 Services and default/kubernetes");
    assert!(
        requests[0].contains("watch=true") && requests[0].contains("sendInitialEvents=true"),
        "a streaming list first: {requests:?}"
    );
    assert!(
        !requests.iter().any(is_list),
        "no LIST where lists stream: {requests:?}"
    );

    // The uninstall's search (issue #27 item 7): one streaming list, most-recent semantics
    // (resourceVersion "" with NotOlderThan), no LIST.
    assert_eq!(release.len(), 1, "one streaming list: {release:?}");
    let most_recent = |r: &str| r.contains("resourceVersion=&") || r.ends_with("resourceVersion=");
    assert!(
        release[0].contains("sendInitialEvents=true")
            && release[0].contains("resourceVersionMatch=NotOlderThan")
            && most_recent(&release[0]),
        "{release:?}"
    );

    let (requests, stored, release) = initial_read(&["--feature-gates=WatchList=false"]).await;
    println!("WatchList off: {requests:#?}\nrelease on uninstall: {release:#?}");
    assert_eq!(stored, READ_SERVICES, "45 Services and default/kubernetes");
    assert!(
        requests[0].contains("sendInitialEvents=true"),
        "a streaming list is tried first: {requests:?}"
    );
    let lists: Vec<&String> = requests.iter().filter(|r| is_list(r)).collect();
    assert_eq!(
        lists.len(),
        stored.div_ceil(LIST_PAGE_SIZE as usize),
        "pages of {LIST_PAGE_SIZE}: {lists:?}"
    );
    for l in &lists {
        assert!(l.contains(&format!("limit={LIST_PAGE_SIZE}")), "{l}");
        assert!(!l.contains("resourceVersion=0"), "{l}");
    }
    // The uninstall's search: the streaming list refused, then LISTs of `LIST_PAGE_SIZE`.
    assert!(
        release[0].contains("sendInitialEvents=true"),
        "a streaming list is tried first: {release:?}"
    );
    let pages: Vec<&String> = release[1..].iter().collect();
    assert_eq!(
        pages.len(),
        READ_SERVICES.div_ceil(LIST_PAGE_SIZE as usize),
        "pages of {LIST_PAGE_SIZE}: {release:?}"
    );
    for p in &pages {
        assert!(
            is_list(p) && p.contains(&format!("limit={LIST_PAGE_SIZE}")),
            "{p}"
        );
        assert!(!p.contains("resourceVersion=0"), "{p}");
    }
}
