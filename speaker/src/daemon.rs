//! The speaker's main loop: stores + membership + responder → plan → answers and Events.
//!
//! On every wake-up (a watch event, a membership change, or a 250 ms tick for interface state)
//! the loop recomputes the whole [`crate::plan::Plan`] and hands the owned set to the responder.
//! Membership changes re-announce every IP this node still owns (S4). A node whose announce
//! interfaces all lost carrier leaves the membership, so the others take its IPs at once; it
//! rejoins (new generation) when carrier returns. On SIGTERM it leaves explicitly (S3).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use tokio::sync::Notify;

use crate::eligibility::Interfaces;
use crate::events::Announcer;
use crate::http::{self, Health};
use crate::l2::{L2Config, Responder};
use crate::membership::{KeyRing, Membership, MembershipConfig, MembershipSettings};
use crate::metrics::SpeakerMetrics;
use crate::plan::plan;
use crate::view::{ViewSettings, node_addresses};
use crate::watch::Stores;

/// Everything the daemon needs, from the CLI.
#[derive(Clone, Debug)]
pub struct SpeakerConfig {
    /// This node's name (`spec.nodeName` of the speaker pod).
    pub node_name: String,
    /// Which Services, and `--ignore-exclude-lb`.
    pub view: ViewSettings,
    /// The membership key file.
    pub key_file: PathBuf,
    /// UDP port of the membership.
    pub memberlist_port: u16,
    /// The address peers reach us at; default: this Node's first InternalIP.
    pub advertise_address: Option<IpAddr>,
    /// Membership timings.
    pub membership: MembershipConfig,
    /// Responder settings.
    pub l2: L2Config,
    /// Where `/livez`, `/readyz`, `/metrics` listen.
    pub metrics_address: SocketAddr,
}

async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = term => {},
        _ = tokio::signal::ctrl_c() => {},
    }
}

/// Runs the speaker until SIGTERM/SIGINT.
///
/// # Errors
/// Start-up failures: the key file, the membership socket, the packet sockets, the HTTP address.
pub async fn run(client: Client, config: SpeakerConfig) -> anyhow::Result<()> {
    let keys = KeyRing::from_file(&config.key_file)
        .with_context(|| format!("membership key {}", config.key_file.display()))?;
    let changed = Arc::new(Notify::new());
    let (stores, _watches) = Stores::start(&client, &changed);

    let l2_counters = Arc::new(crate::l2::Counters::default());
    let metrics = Arc::new(SpeakerMetrics {
        l2: l2_counters.clone(),
        membership: std::sync::Mutex::new(None),
        owned_ips: Default::default(),
    });
    let health = Arc::new(Health {
        ready: Default::default(),
        registry: metrics.registry(),
    });
    let listener_health = health.clone();
    let metrics_address = config.metrics_address;
    tokio::spawn(async move {
        if let Err(e) = http::serve(metrics_address, listener_health).await {
            tracing::error!(error = %e, %metrics_address, "HTTP endpoints failed");
        }
    });

    tokio::time::timeout(Duration::from_secs(120), stores.wait_ready())
        .await
        .context("watch stores did not sync within 120 s")??;
    let advertise = match config.advertise_address {
        Some(ip) => ip,
        None => own_internal_ip(&stores, &config.node_name).with_context(|| {
            format!(
                "Node {} has no InternalIP; pass --advertise-address",
                config.node_name
            )
        })?,
    };
    let responder = Responder::start(config.l2.clone(), l2_counters)
        .context("starting the ARP/NDP responder")?;
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "ferrolb.io/speaker".into(),
            instance: Some(config.node_name.clone()),
        },
    );
    let mut announcer = Announcer::new(recorder, &config.node_name);

    let settings = |generation: Option<u64>| MembershipSettings {
        node_name: config.node_name.clone(),
        bind_addr: SocketAddr::new(advertise, config.memberlist_port),
        advertise_addr: Some(SocketAddr::new(advertise, config.memberlist_port)),
        keys: keys.clone(),
        config: config.membership.clone(),
        generation,
    };
    let mut membership = Some(
        Membership::start(settings(None))
            .await
            .context("starting the membership")?,
    );
    if let (Ok(mut slot), Some(m)) = (metrics.membership.lock(), membership.as_ref()) {
        *slot = Some(m.counters_handle());
    }
    let mut members = membership.as_ref().map(Membership::members);
    health.ready.store(true, Ordering::Relaxed);
    tracing::info!(node = %config.node_name, %advertise, "speaker running");

    let mut last_alive: BTreeSet<String> = BTreeSet::new();
    let mut shutdown = std::pin::pin!(shutdown_signal());
    loop {
        let members_changed = async {
            match members.as_mut() {
                Some(rx) => {
                    if rx.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = &mut shutdown => break,
            _ = changed.notified() => {},
            _ = members_changed => {},
            _ = tokio::time::sleep(Duration::from_millis(250)) => {},
        }

        let view = stores.view(&config.view);
        let carrier = responder.carrier(&Interfaces::All);
        // Carrier gates membership: without any announce interface we must not look alive.
        match (&membership, carrier) {
            (Some(_), false) => {
                tracing::warn!("no announce interface has carrier; leaving the membership");
                if let Some(m) = membership.take() {
                    m.leave(Duration::from_millis(500)).await;
                }
                members = None;
            }
            (None, true) => {
                tracing::info!("carrier is back; rejoining the membership");
                match Membership::start(settings(None)).await {
                    Ok(m) => {
                        if let Ok(mut slot) = metrics.membership.lock() {
                            *slot = Some(m.counters_handle());
                        }
                        members = Some(m.members());
                        membership = Some(m);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "could not rejoin the membership; retrying")
                    }
                }
            }
            _ => {}
        }
        if let Some(m) = &membership {
            m.set_peers(peer_addresses(
                &stores,
                &config.node_name,
                config.memberlist_port,
            ));
        }
        let alive: BTreeSet<String> = members
            .as_ref()
            .map(|rx| rx.borrow().clone())
            .unwrap_or_default();
        let plan = plan(&view, &alive, &config.node_name, Some(carrier));
        let previously_owned: BTreeSet<IpAddr> = responder
            .interfaces()
            .iter()
            .flat_map(|s| s.owned.clone())
            .collect();
        responder.set_owned(plan.owned.clone());
        if alive != last_alive {
            // S4: re-confirm ownership after any membership change.
            if plan.owned.keys().any(|ip| previously_owned.contains(ip)) {
                responder.reannounce();
            }
            tracing::info!(members = ?alive, "membership changed");
            last_alive = alive;
        }
        metrics
            .owned_ips
            .store(plan.owned.len() as u64, Ordering::Relaxed);
        let statuses = responder.interfaces();
        let owned = plan.owned.clone();
        announcer
            .publish(&plan, &stores, |ip| interfaces_for(ip, &owned, &statuses))
            .await;
    }

    tracing::info!("shutting down: withdrawing and leaving the membership");
    responder.set_owned(BTreeMap::new());
    if let Some(m) = membership.take() {
        m.leave(Duration::from_secs(1)).await;
    }
    Ok(())
}

/// The interface names an owned IP is answered on, for Events.
fn interfaces_for(
    ip: IpAddr,
    owned: &BTreeMap<IpAddr, Interfaces>,
    statuses: &[crate::l2::InterfaceStatus],
) -> Vec<String> {
    if !owned.contains_key(&ip) {
        return Vec::new();
    }
    let serving = statuses.iter().filter(|s| match ip {
        IpAddr::V4(_) => s.arp,
        IpAddr::V6(_) => s.ndp,
    });
    match &owned[&ip] {
        Interfaces::All => serving.map(|s| s.name.clone()).collect(),
        Interfaces::Named(names) => serving
            .filter(|s| names.contains(&s.name))
            .map(|s| s.name.clone())
            .collect(),
    }
}

fn own_internal_ip(stores: &Stores, me: &str) -> Option<IpAddr> {
    let node = stores
        .nodes
        .get(&kube::runtime::reflector::ObjectRef::new(me))?;
    node_addresses(&node).into_iter().next()
}

/// Membership peers: every other Node's first InternalIP/ExternalIP at the memberlist port
/// (DESIGN S3: peers are found from Node objects).
fn peer_addresses(stores: &Stores, me: &str, port: u16) -> Vec<SocketAddr> {
    stores
        .nodes
        .state()
        .iter()
        .filter(|n| n.metadata.name.as_deref() != Some(me))
        .filter_map(|n| node_addresses(n).into_iter().next())
        .map(|ip| SocketAddr::new(ip, port))
        .collect()
}
