//! The lab of `ferrolb-bench-lab compare-cpu` (issue #11): one speaker of one [`Implementation`]
//! owning an address, so that its CPU time can be read idle and while client floods cross the
//! bridge (the phases of `ferrolb-bench-lab cpu`, run by the binary).
//!
//! A fresh lab of one node and two clients: pool `198.51.100.0/24` in the implementation's own
//! CRDs, Service `default/bench` (TCP 80, `externalTrafficPolicy: Cluster`, one ready endpoint on
//! the node — MetalLB announces only Services with one) holding the given address in its status
//! as a controller would write it, and the node's speaker started; returned once the node
//! answers ARP for the address alone.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::bail;

use super::{Implementation, Lab};
use crate::objects::{apply_endpoints, create_service, lb_service, set_ingress};

/// How long the speaker may take to answer alone for the address.
const READY: Duration = Duration::from_secs(60);

/// Starts the lab of the module docs for `implementation`; `ferrolb_speaker` (`None`: the
/// workspace's debug build) and `ferrolb_args` are used for ferrolb only.
///
/// # Errors
/// The lab or the speaker did not start, or the node did not answer ARP for `ip` alone within
/// 60 s.
pub async fn start(
    implementation: Implementation,
    ip: Ipv4Addr,
    ferrolb_speaker: Option<PathBuf>,
    ferrolb_args: &[String],
) -> anyhow::Result<Lab> {
    let mut lab = Lab::start_implementation(implementation, 1, 2).await?;
    if let Some(bin) = ferrolb_speaker {
        lab.set_speaker_bin(bin);
    }
    let client = lab.client().await?;
    lab.advertise_pool("bench", &["198.51.100.0/24"]).await?;
    create_service(
        &client,
        &lb_service("default", "bench", &[("TCP", 80)], "Cluster"),
    )
    .await?;
    apply_endpoints(
        &client,
        "default",
        "bench",
        80,
        &[("192.0.2.11", Some("node-1"), true, true, false)],
    )
    .await?;
    set_ingress(&client, "default", "bench", &[&ip.to_string()]).await?;
    lab.start_every_speaker(ferrolb_args)?;
    let mac = lab.node("node-1").mac.clone();
    let started = Instant::now();
    loop {
        let answers = lab.arp_answers(0, ip).await?;
        if answers.len() == 1 && answers.contains(&mac) {
            return Ok(lab);
        }
        if started.elapsed() > READY {
            bail!(
                "{}: node-1 does not answer ARP for {ip} alone after {READY:?}: {answers:?}",
                implementation.name()
            );
        }
        tokio::time::sleep(crate::poll::INTERVAL).await;
    }
}
