//! Field case C-03's speaker half ("Pool deleted while in use … the speaker stops announcing
//! `203.0.113.1/.2`", `shared/cases.md`; metallb#1591, #1755, #2076), written once for either
//! [`Implementation`]: ferrolb runs it in CI (`tests/tests/speaker_lab.rs`), MetalLB opt-in
//! (`tests/tests/metallb_cases.rs`), and docs/comparison.md reports both.
//!
//! Three nodes, `pool-a` `198.51.100.0/24` and `pool-b` `203.0.113.0/24`, each advertised from
//! every node in the implementation's own CRDs; `svc-a` holds `198.51.100.1`, `svc-b`
//! `203.0.113.1`, `svc-c` `203.0.113.2` (status written by the test, one ready endpoint each, no
//! controller running: the statuses stay as a controller that has not reacted yet leaves them).
//! Controls (a failed one is an error of the harness, not a verdict): before the deletion exactly
//! one node answers ARP for each address; and one more `pool-a` address per node, picked so that
//! the implementation's own rule ([`super::owner_choice`]) makes that node its owner, is answered
//! by exactly one node, all three nodes among them — before and after the deletion, so "nobody
//! answers" cannot come from a speaker that died or went deaf. Then `pool-b` is deleted (only
//! the pool; its advertisement stays): nobody may answer for `203.0.113.1/.2` any more, although
//! the Services' status still holds them, while `198.51.100.1` is still answered by exactly one
//! node. No controller runs: this is the speaker with a status a controller has not moved yet
//! (the controller down, or slower than the speakers).

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use k8s_openapi::api::core::v1::Service;
use kube::Api;

use super::{Implementation, Lab, owner_choice};
use crate::objects::{apply_endpoints, create_service, ingress_ips, lb_service, set_ingress};
use crate::verdicts::Verdicts;

/// How long the speakers may take to converge, and to stop answering after the deletion.
const SETTLE: Duration = Duration::from_secs(20);

/// The Services of the case: name, the address its status holds, its one ready endpoint.
const HELD: [(&str, Ipv4Addr, &str); 3] = [
    ("svc-a", Ipv4Addr::new(198, 51, 100, 1), "192.0.2.201"),
    ("svc-b", Ipv4Addr::new(203, 0, 113, 1), "192.0.2.202"),
    ("svc-c", Ipv4Addr::new(203, 0, 113, 2), "192.0.2.203"),
];

/// Runs the case against `implementation`'s speakers (ferrolb's with `ferrolb_args`) and returns
/// its verdicts (the caller decides to [`Verdicts::finish`]).
///
/// # Errors
/// The lab could not be set up, or the harness itself failed (a probe, an API call, or a
/// Service's status changed although no controller runs).
pub async fn speaker_half(
    implementation: Implementation,
    ferrolb_args: &[String],
) -> anyhow::Result<Verdicts> {
    let mut v = Verdicts::new("C-03");
    let mut lab = Lab::start_implementation(implementation, 3, 1).await?;
    let client = lab.client().await?;
    lab.advertise_pool("pool-a", &["198.51.100.0/24"]).await?;
    lab.advertise_pool("pool-b", &["203.0.113.0/24"]).await?;
    for (name, ip, endpoint) in HELD {
        create_service(
            &client,
            &lb_service("default", name, &[("TCP", 80)], "Cluster"),
        )
        .await?;
        set_ingress(&client, "default", name, &[&ip.to_string()]).await?;
        apply_endpoints(
            &client,
            "default",
            name,
            80,
            &[(endpoint, Some("node-1"), true, true, false)],
        )
        .await?;
    }
    let names: Vec<String> = lab.nodes.iter().map(|n| n.name.clone()).collect();
    let live = liveness_ips(implementation, &names)?;
    for (i, ip) in live.iter().enumerate() {
        let name = format!("svc-live-{}", i + 1);
        create_service(
            &client,
            &lb_service("default", &name, &[("TCP", 80)], "Cluster"),
        )
        .await?;
        set_ingress(&client, "default", &name, &[&ip.to_string()]).await?;
        apply_endpoints(
            &client,
            "default",
            &name,
            80,
            &[("192.0.2.210", Some("node-1"), true, true, false)],
        )
        .await?;
    }
    lab.start_every_speaker(ferrolb_args)?;
    for (name, ip, _) in HELD {
        if lab.wait_for_sole_answerer(0, ip, SETTLE).await?.is_none() {
            bail!(
                "control: before pool-b is deleted, not exactly one node answers for {ip} ({name}) within {SETTLE:?}"
            );
        }
    }
    every_node_answers(&lab, &live, "before pool-b is deleted").await?;
    lab.delete_pool("pool-b").await?;
    let deleted = tokio::time::Instant::now();
    for (name, ip, _) in &HELD[1..] {
        let answers = lab.wait_for_owner(0, *ip, None, SETTLE).await?;
        println!(
            "C-03 {} {ip}: {} ({:.1} s after pool-b was deleted)",
            implementation.name(),
            if answers.is_empty() {
                "nobody answers"
            } else {
                "still answered"
            },
            deleted.elapsed().as_secs_f64()
        );
        let mut later = BTreeSet::new();
        for _ in 0..5 {
            later.extend(lab.arp_answers(0, *ip).await?);
        }
        v.check(
            answers.is_empty() && later.is_empty(),
            &format!("pool-b deleted: nobody answers ARP for {ip} ({name}) any more"),
            format!(
                "answered by {:?}, then by {:?} over five more probes",
                node_names(&lab, &answers),
                node_names(&lab, &later)
            ),
        );
    }
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    for (name, ip, _) in &HELD[1..] {
        let status = ingress_ips(&services.get(name).await?);
        ensure!(
            status == [ip.to_string()],
            "setup: {name}'s status should still hold {ip} (no controller runs), got {status:?}"
        );
    }
    every_node_answers(&lab, &live, "after pool-b was deleted").await?;
    for name in &names {
        ensure!(
            lab.speaker_exit(name).is_none(),
            "control: {name}'s speaker exited during the case"
        );
    }
    let (ip_a, answers_a) = (HELD[0].1, lab.arp_answers(0, HELD[0].1).await?);
    v.check(
        answers_a.len() == 1,
        &format!("{ip_a} (pool-a, svc-a) is still answered by exactly one node"),
        format!("answered by {:?}", node_names(&lab, &answers_a)),
    );
    Ok(v)
}

/// One `pool-a` address per node (from `198.51.100.2` up) whose owner under `implementation`'s
/// rule, over all `nodes`, is that node; in the order of `nodes`.
fn liveness_ips(implementation: Implementation, nodes: &[String]) -> anyhow::Result<Vec<Ipv4Addr>> {
    nodes
        .iter()
        .map(|node| {
            (2..=250u8)
                .map(|last| Ipv4Addr::new(198, 51, 100, last))
                .find(|ip| {
                    owner_choice::expected_owner(
                        implementation,
                        (*ip).into(),
                        nodes.iter().map(String::as_str),
                    )
                    .as_deref()
                        == Some(node.as_str())
                })
                .with_context(|| format!("no pool-a address of {node}'s own"))
        })
        .collect()
}

/// Control: every address of `live` is answered by exactly one node (within [`SETTLE`]), and
/// together they are answered by every node of the lab.
async fn every_node_answers(lab: &Lab, live: &[Ipv4Addr], when: &str) -> anyhow::Result<()> {
    let mut answering = BTreeSet::new();
    for ip in live {
        let owner = lab
            .wait_for_sole_answerer(0, *ip, SETTLE)
            .await?
            .with_context(|| format!("control {when}: not exactly one node answers for {ip}"))?;
        answering.insert(owner);
    }
    ensure!(
        answering.len() == lab.nodes.len(),
        "control {when}: the liveness addresses {live:?} are answered by {answering:?} only, not by every node"
    );
    Ok(())
}

/// The node names behind `macs` (a MAC that is no node's as itself).
fn node_names(lab: &Lab, macs: &BTreeSet<String>) -> Vec<String> {
    macs.iter()
        .map(|mac| {
            lab.node_by_mac(mac)
                .map_or_else(|| mac.clone(), |n| n.name.clone())
        })
        .collect()
}
