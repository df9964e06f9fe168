//! Issue #27 item 1, "No manual key step": the controller creates the speakers' membership-key
//! Secret when it is absent, and the speakers read it through the API, waiting — alive, not
//! ready — until it exists. On the real API server, with the real binaries:
//!
//! - `the_controller_creates_one_key_and_never_replaces_one`: two controller replicas started
//!   together in a namespace without the Secret make exactly one, holding 64 hex digits the
//!   speakers' parser accepts, labelled `app.kubernetes.io/managed-by=ferrolb-controller`; a
//!   restart leaves it unchanged (same resourceVersion); a Secret the user made (a two-key
//!   rotation ring) is left exactly as it is; with `--create-memberlist-secret=false` nothing is
//!   created.
//! - `speakers_wait_not_ready_until_the_controller_creates_the_key` (lab, two nodes): speakers
//!   started without a key file and without the Secret keep running for 6 s with `/livez` 200
//!   and `/readyz` 503 naming the Secret (before issue #27 a missing key was a start-up error: a
//!   crash loop, or `ContainerCreating` with the Secret mounted); once a controller runs, the
//!   Secret appears, both speakers become ready, and they form one membership with its key.
//!
//! Fast tier.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ferrolb_speaker::membership::KeyRing;
use ferrolb_tests::cluster::TestCluster;
use ferrolb_tests::controller::{ControllerOptions, ControllerProcess};
use ferrolb_tests::lab::Lab;
use ferrolb_tests::{namespace, poll};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};

/// One test at a time: each starts its own cluster and the machine is small.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const SECRET: &str = "ferrolb-memberlist";

fn controller(
    cluster: &TestCluster,
    identity: &str,
    home: &str,
    args: &[&str],
) -> ControllerProcess {
    let opts = ControllerOptions::new(identity)
        .lease_namespace(home)
        .args(args);
    ControllerProcess::start(cluster.kubeconfig(), cluster.dir(), &opts).expect("start controller")
}

/// Waits until `ctl`'s log holds `line`.
async fn logged(ctl: &ControllerProcess, line: &str) {
    poll::until(
        &format!("the controller logs {line:?}"),
        Duration::from_secs(30),
        || async { ctl.log_tail(200).contains(line) },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}:\n{}", ctl.log_tail(40)));
}

async fn secret(client: &Client, ns: &str) -> Option<Secret> {
    Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(SECRET)
        .await
        .unwrap()
}

fn key_of(secret: &Secret) -> Vec<u8> {
    secret.data.as_ref().unwrap()["key"].0.clone()
}

#[tokio::test]
async fn the_controller_creates_one_key_and_never_replaces_one() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::start().await.expect("test cluster");
    let client = cluster.client().await.unwrap();

    // Two replicas at once, no Secret: exactly one is created, and it is a valid key.
    let home = namespace::fresh(&client, "ferrolb-key").await.unwrap();
    let a = controller(&cluster, "key-a", &home, &[]);
    let b = controller(&cluster, "key-b", &home, &[]);
    let made = poll::until_some("the key Secret", Duration::from_secs(30), || async {
        secret(&client, &home).await
    })
    .await
    .unwrap_or_else(|e| panic!("{e}:\n{}", a.log_tail(40)));
    let key = key_of(&made);
    let text = std::str::from_utf8(&key).unwrap();
    assert!(
        text.len() == 65
            && text.ends_with('\n')
            && text[..64].bytes().all(|b| b.is_ascii_hexdigit()),
        "not 64 hex digits and a newline ({} bytes)",
        text.len()
    );
    assert_eq!(KeyRing::parse(&key).unwrap().keys().len(), 1);
    assert_eq!(
        made.labels()
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("ferrolb-controller")
    );
    assert_eq!(made.type_.as_deref(), Some("Opaque"));
    let list = Api::<Secret>::namespaced(client.clone(), &home)
        .list(&Default::default())
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1, "one Secret, whoever won the race");
    let creators = [&a, &b]
        .iter()
        .filter(|c| {
            c.log_tail(200)
                .contains("created the speakers' membership key")
        })
        .count();
    assert_eq!(creators, 1, "exactly one replica created it");

    // A restart finds it and leaves it alone.
    a.stop(Duration::from_secs(5));
    b.stop(Duration::from_secs(5));
    let c = controller(&cluster, "key-c", &home, &[]);
    logged(&c, "the speakers' membership key exists; left as it is").await;
    let after = secret(&client, &home).await.unwrap();
    assert_eq!(after.resource_version(), made.resource_version());
    assert_eq!(key_of(&after), key);
    c.stop(Duration::from_secs(5));

    // A key the user made (a rotation's two lines, no label) is never replaced.
    let mine = namespace::fresh(&client, "user-key").await.unwrap();
    let ring = "00112233445566778899aabbccddeeff0123456789abcdeffedcba9876543210\n\
                ffeeddccbbaa99887766554433221100fedcba98765432100123456789abcdef\n";
    let users: Secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(SECRET.into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "key".to_owned(),
            ByteString(ring.as_bytes().to_vec()),
        )])),
        ..Default::default()
    };
    let users = Api::<Secret>::namespaced(client.clone(), &mine)
        .create(&PostParams::default(), &users)
        .await
        .unwrap();
    let d = controller(&cluster, "key-d", &mine, &[]);
    logged(&d, "the speakers' membership key exists; left as it is").await;
    let after = secret(&client, &mine).await.unwrap();
    assert_eq!(after.resource_version(), users.resource_version());
    assert_eq!(key_of(&after), ring.as_bytes());
    d.stop(Duration::from_secs(5));

    // --create-memberlist-secret=false (the chart's memberlist.existingSecret): nothing created.
    let none = namespace::fresh(&client, "no-key").await.unwrap();
    let e = controller(
        &cluster,
        "key-e",
        &none,
        &["--create-memberlist-secret=false"],
    );
    poll::until(
        "the controller is ready",
        Duration::from_secs(30),
        || async { e.get("/readyz").await.map(|(code, _)| code) == Some(200) },
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(secret(&client, &none).await.is_none(), "{}", e.log_tail(40));
    assert!(
        !e.log_tail(200).contains("membership key"),
        "{}",
        e.log_tail(40)
    );
}

#[tokio::test]
async fn speakers_wait_not_ready_until_the_controller_creates_the_key() {
    let _serial = SERIAL.lock().await;
    let mut lab = Lab::start(2, 0).await.expect("lab");
    let client = lab.client().await.unwrap();
    let ns = namespace::fresh(&client, "ferrolb-system").await.unwrap();
    let nodes = ["node-1", "node-2"];
    let args = ["--namespace", ns.as_str(), "--memberlist-secret", SECRET];
    for node in nodes {
        lab.start_speaker_key_from_secret(node, &args).unwrap();
    }

    // No Secret: alive, not ready, saying why — for 6 s, well past the watches' sync and any
    // start-up error.
    let started = Instant::now();
    let mut seen_waiting = [false; 2];
    while started.elapsed() < Duration::from_secs(6) {
        for (i, node) in nodes.iter().enumerate() {
            assert!(
                lab.speaker_exit(node).is_none(),
                "the speaker of {node} exited without its key:\n{}",
                lab.speaker_log(node, 30)
            );
            let Ok((live, _)) = lab.speaker_http(node, "/livez").await else {
                continue; // not listening yet
            };
            assert_eq!(live, 200);
            let (ready, why) = lab.speaker_http(node, "/readyz").await.unwrap();
            assert_eq!(ready, 503, "{node} ready without a key: {why}");
            if why.contains(&format!("Secret {ns}/{SECRET} does not exist yet")) {
                seen_waiting[i] = true;
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(
        seen_waiting,
        [true, true],
        "/readyz never named the missing Secret:\n{}",
        lab.speaker_log("node-1", 30)
    );

    // The controller creates it; both speakers read it, become ready and see each other.
    let ctl = ControllerProcess::start(
        lab.cluster().kubeconfig(),
        lab.dir(),
        &ControllerOptions::new("key-lab").lease_namespace(&ns),
    )
    .unwrap();
    let made = poll::until_some("the key Secret", Duration::from_secs(30), || async {
        secret(&client, &ns).await
    })
    .await
    .unwrap_or_else(|e| panic!("{e}:\n{}", ctl.log_tail(40)));
    assert!(KeyRing::parse(&key_of(&made)).is_ok());
    for node in nodes {
        poll::until(
            &format!("{node} ready with two members"),
            Duration::from_secs(30),
            || async {
                let ready = lab.speaker_http(node, "/readyz").await.map(|r| r.0).ok() == Some(200);
                let members = lab
                    .speaker_http(node, "/metrics")
                    .await
                    .ok()
                    .and_then(|(_, m)| {
                        m.lines()
                            .find(|l| l.starts_with("ferrolb_speaker_members "))
                            .and_then(|l| l.split_whitespace().last())
                            .and_then(|v| v.parse::<f64>().ok())
                    });
                ready && members == Some(2.0)
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}:\n{}", lab.speaker_log(node, 30)));
    }
    assert!(
        lab.speaker_log("node-1", 200)
            .contains("membership key ring read"),
        "{}",
        lab.speaker_log("node-1", 30)
    );
}
