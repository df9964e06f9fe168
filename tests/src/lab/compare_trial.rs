//! One trial of `ferrolb-bench-lab compare` (issue #11): a fresh lab of one [`Implementation`]
//! wired as the demo is (`super::demo`) — a backend pod per node (at most
//! [`MAX_PODS`]), a real kube-proxy (nftables mode) in every node namespace, Service
//! `default/bench` (TCP [`PORT`] → [`POD_PORT`], `externalTrafficPolicy: Cluster`) whose
//! EndpointSlice lists the pods, ready, with their nodes — holding [`IP`] in its status as a
//! controller would write it (both speakers find the pool `198.51.100.0/24` from the IP, each in
//! its own CRDs). Every node's speaker is started; once exactly one node answers ARP, every
//! kube-proxy has rules for the IP and a quiet period has passed, an HTTP request from the client
//! must be answered through the owner; then the owner's speaker gets the signal and
//! [`takeover_http::signal_and_time`] measures both figures.

use std::net::{IpAddr, SocketAddrV4};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::compare::{IP, TrialSetup};
use super::http_client;
use super::kube_proxy::ProxyMode;
use super::pods::{MAX_PODS, POD_PORT};
use super::takeover_http::{self, Figures};
use super::{Implementation, Lab, within_netns};
use crate::objects::{EndpointSpec, apply_endpoints, create_service, lb_service, set_ingress};

/// The Service port clients connect to at [`IP`].
pub const PORT: u16 = 80;
/// How long the lab may take to reach one owner, kube-proxy rules and a first HTTP answer.
const READY: Duration = Duration::from_secs(60);

/// Runs one trial of `implementation` (see the module docs) and returns both figures of its
/// signal: signal → first gratuitous ARP from another node, and signal → first HTTP answer
/// through that node (each an error of its own if it did not come within `setup.timeout`).
///
/// # Errors
/// The lab, its pods or kube-proxies did not come up; within 60 s there was not exactly one ARP
/// owner, kube-proxy had no rules, or HTTP was not answered through the owner; another node
/// answered ARP after the quiet period (the owner may move once per quiet period while the lab
/// settles, within 60 s); or the measurement itself could not run.
pub async fn trial(implementation: Implementation, setup: &TrialSetup) -> anyhow::Result<Figures> {
    let mut lab = Lab::start_implementation(implementation, setup.nodes, 1).await?;
    if let Some(bin) = &setup.ferrolb_speaker {
        lab.set_speaker_bin(bin.clone());
    }
    let pod_specs: Vec<(String, String)> = lab
        .nodes
        .iter()
        .take(MAX_PODS)
        .enumerate()
        .map(|(i, n)| (format!("web-{}", i + 1), n.name.clone()))
        .collect();
    let pod_refs: Vec<(&str, &str)> = pod_specs
        .iter()
        .map(|(p, n)| (p.as_str(), n.as_str()))
        .collect();
    // Declared after the lab: dropped (stopped) before it.
    let pods = lab.add_pods(&pod_refs)?;
    let names: Vec<String> = lab.nodes.iter().map(|n| n.name.clone()).collect();
    let mut proxies = Vec::new();
    for name in &names {
        proxies.push(lab.start_kube_proxy(name, ProxyMode::Nftables)?);
    }
    let client = lab.client().await?;
    lab.advertise_pool("bench", &["198.51.100.0/24"]).await?;
    create_service(&client, &service()).await?;
    let addresses: Vec<String> = pods.pods.iter().map(|p| p.ip.to_string()).collect();
    let endpoints: Vec<EndpointSpec<'_>> = pods
        .pods
        .iter()
        .zip(&addresses)
        .map(|(p, a)| (a.as_str(), Some(p.node.as_str()), true, true, false))
        .collect();
    apply_endpoints(&client, "default", "bench", i32::from(POD_PORT), &endpoints).await?;
    set_ingress(&client, "default", "bench", &[&IP.to_string()]).await?;
    lab.start_every_speaker(&setup.ferrolb_args)?;
    let mut owner = one_owner(&lab, implementation).await?;
    for proxy in &proxies {
        proxy.wait_for_rules(IpAddr::V4(IP), READY).await?;
    }
    // Speakers start one after another: one that joins after the others have settled may win
    // the IP and take it over once (a hand-over, not a fault). The trial starts from an owner
    // that kept the IP for a whole quiet period; two answers, or a move in each of the
    // quiet periods that fit in READY, fail the trial.
    let settled_by = tokio::time::Instant::now() + READY;
    loop {
        tokio::time::sleep(setup.settle).await;
        let answers = lab.arp_answers(0, IP).await?;
        if answers.len() == 1 && answers.contains(&lab.node(&owner).mac) {
            break;
        }
        let moved = match answers.iter().collect::<Vec<_>>()[..] {
            [mac] => lab.node_by_mac(mac).map(|n| n.name.clone()),
            _ => None,
        };
        match moved {
            Some(next) if tokio::time::Instant::now() < settled_by => {
                println!(
                    "{}: {IP} moved from {owner} to {next} while the lab settled; waiting another quiet period",
                    implementation.name()
                );
                owner = next;
            }
            _ => bail!(
                "{}: after the quiet period ARP answers for {IP} are {answers:?}, not {owner}'s alone",
                implementation.name()
            ),
        }
    }
    let addr = SocketAddrV4::new(IP, PORT);
    http_through(&lab, addr, &owner)
        .await
        .with_context(|| format!("{}: before the signal", implementation.name()))?;
    takeover_http::signal_and_time(&mut lab, 0, addr, &owner, setup.signal, setup.timeout).await
}

/// Service `default/bench`: one unnamed TCP port [`PORT`] → [`POD_PORT`] (kube-proxy pairs
/// Service and EndpointSlice ports by name, and the lab's slices have unnamed ports).
fn service() -> Service {
    let mut svc = lb_service("default", "bench", &[("TCP", i32::from(PORT))], "Cluster");
    for port in svc
        .spec
        .iter_mut()
        .flat_map(|s| s.ports.iter_mut().flatten())
    {
        port.name = None;
        port.target_port = Some(IntOrString::Int(i32::from(POD_PORT)));
    }
    svc
}

/// Waits (at most [`READY`]) until exactly one node answers ARP for [`IP`]; returns its name.
async fn one_owner(lab: &Lab, implementation: Implementation) -> anyhow::Result<String> {
    match lab.wait_for_sole_answerer(0, IP, READY).await? {
        Some(owner) => Ok(owner),
        None => bail!(
            "{}: not exactly one ARP answer for {IP} within {READY:?}: {:?}",
            implementation.name(),
            lab.arp_answers(0, IP).await?
        ),
    }
}

/// Sends `GET /hostname` from client 0 to `addr` (1 s timeout, every 200 ms, at most
/// [`READY`]) until one is answered through node `owner`'s MAC; returns the backend's name.
/// Leaves the client's neighbor entry naming the owner, as for a client already talking to it.
async fn http_through(lab: &Lab, addr: SocketAddrV4, owner: &str) -> anyhow::Result<String> {
    let owner_mac = lab.node(owner).mac.clone();
    let netns = lab.clients.first().context("no client")?.netns.clone();
    let owner = owner.to_owned();
    tokio::task::spawn_blocking(move || {
        within_netns(&netns, move || {
            let deadline = Instant::now() + READY;
            loop {
                let a = http_client::attempt(addr, Duration::from_secs(1));
                if a.answered_via()
                    .is_some_and(|m| m.eq_ignore_ascii_case(&owner_mac))
                {
                    return Ok(a.outcome.unwrap_or_default());
                }
                if Instant::now() >= deadline {
                    bail!(
                        "no HTTP answer from {addr} through {owner} within {READY:?}, last: {a:?}"
                    );
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        })
    })
    .await?
}
