//! The speaker's main loop: stores + membership + responder → claim gate → plan → answers and
//! Events.
//!
//! On every wake-up (a watch event, a membership change, or a 100 ms tick) the loop asks the
//! claim gate ([`crate::claim`]) whether this speaker may claim at all (converged, in the
//! majority, not just resumed from a stall); if so it recomputes the whole
//! [`crate::plan::Plan`] (at least every 250 ms, for interface state) and hands the owned set to
//! the responder, renewing the responder's lease; if not, it withdraws everything. Membership
//! changes, and peers that restarted, make every IP this node still owns be re-announced (S4,
//! issue #8 F1). A node whose announce interfaces all lost carrier leaves the membership, so the
//! others take its IPs at once; it rejoins (new generation) when carrier returns. On SIGTERM it
//! leaves explicitly (S3). Events never block the loop ([`crate::event_sink`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use kube::Client;
use kube::runtime::events::Reporter;
use tokio::sync::Notify;

use crate::announcement_writer::{AnnouncementWriter, WriteCounters};
use crate::announcements::AnnouncementPlanner;
use crate::claim::{ClaimGate, ClaimSettings, Standing, VOTER_MEMORY, Voters};
use crate::eligibility::Interfaces;
use crate::event_sink::{EventCounters, EventSink, EventSinkConfig};
use crate::events::EventPlanner;
use crate::http::Health;
use crate::l2::{L2Config, Responder};
use crate::membership::{
    KeyRing, Membership, MembershipConfig, MembershipEvent, MembershipSettings,
};
use crate::metrics::SpeakerMetrics;
use crate::plan::plan;
use crate::view::{View, ViewSettings, node_addresses};
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
    /// The claim gate (convergence, majority, stalls).
    pub claim: ClaimSettings,
    /// The Event queue.
    pub events: EventSinkConfig,
    /// The namespace of the L2Announcement reports (the speakers' own).
    pub namespace: String,
}

/// How often the loop ticks when nothing else wakes it: renews the responder lease and feeds the
/// claim gate's stall detector (which needs ticks well inside its threshold).
const TICK: Duration = Duration::from_millis(100);
/// Longest time between two full re-plans without any event (interface carrier is polled).
const REPLAN_EVERY: Duration = Duration::from_millis(250);
/// Shortest time between two passes over the L2Announcement reports (each pass reads every
/// stored report).
const ANNOUNCEMENTS_EVERY: Duration = Duration::from_millis(500);

/// The long-lived tasks the speaker cannot work without; if one ends, the process ends
/// (crash-only, issue #8 F6): Kubernetes restarts it and the others take its IPs meanwhile.
struct Supervised {
    tasks: Vec<(&'static str, tokio::task::JoinHandle<()>)>,
}

impl Supervised {
    /// The name of the first task that has ended, if any.
    fn dead(&self) -> Option<&'static str> {
        self.tasks
            .iter()
            .find(|(_, handle)| handle.is_finished())
            .map(|(name, _)| *name)
    }
}

/// Runs the speaker until SIGTERM/SIGINT.
///
/// The loop is planner → executor: each wake-up computes, from the watch stores and the
/// membership, the claim gate's standing ([`crate::claim`]) and the plan ([`crate::plan`]); the
/// responder applies the owned set at once, and Events go to the [`EventSink`] queue, which never
/// waits on the API server (issue #8 F2).
///
/// # Errors
/// Start-up failures: the key file, the membership socket, the packet sockets, the HTTP address;
/// later, a supervised task that ended (watches, HTTP server, Event writer, membership).
pub async fn run(client: Client, config: SpeakerConfig) -> anyhow::Result<()> {
    let keys = KeyRing::from_file(&config.key_file)
        .with_context(|| format!("membership key {}", config.key_file.display()))?;
    let changed = Arc::new(Notify::new());
    let (stores, watches) = Stores::start(&client, &changed, &config.namespace);
    let mut supervised = Supervised {
        tasks: watches.into_iter().map(|h| ("watch", h)).collect(),
    };

    let l2_counters = Arc::new(crate::l2::Counters::default());
    let event_counters = Arc::new(EventCounters::default());
    let announcement_counters = Arc::new(WriteCounters::default());
    let metrics = Arc::new(SpeakerMetrics {
        l2: l2_counters.clone(),
        membership: std::sync::Mutex::new(None),
        owned_ips: Default::default(),
        no_eligible_node_ips: Default::default(),
        forbidden_ips: Default::default(),
        kernel_arp_conflicts: Default::default(),
        ip_conflicts: Default::default(),
        held_ips: Default::default(),
        events: event_counters.clone(),
        announcements: announcement_counters.clone(),
        claim: Default::default(),
    });
    let health = Arc::new(Health {
        ready: Default::default(),
        registry: metrics.registry(),
    });
    let listener_health = health.clone();
    let metrics_address = config.metrics_address;
    supervised.tasks.push((
        "http",
        tokio::spawn(async move {
            if let Err(e) = ferrolb_runtime::admin::serve(metrics_address, listener_health).await {
                tracing::error!(error = %e, %metrics_address, "HTTP endpoints failed");
            }
        }),
    ));

    tokio::time::timeout(Duration::from_secs(120), stores.wait_ready())
        .await
        .context("watch stores did not sync within 120 s")??;
    // The L2Announcement reports say which IPs another host holds (probed first, whoever owns
    // them): give their watch a moment, but never block on it (CRD or RBAC may be missing).
    let _ = tokio::time::timeout(
        Duration::from_secs(5),
        stores.announcements.wait_until_ready(),
    )
    .await;
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
    // Announcements carry a proof keyed like the membership; only proven claims make an owner
    // yield (DESIGN S15).
    responder.set_claim_keys(crate::wire::claim_proof::ClaimKeys::from_ring(&keys));
    let recorder = ferrolb_runtime::events::Publisher::new(
        client.clone(),
        Reporter {
            controller: "ferrolb.io/speaker".into(),
            instance: Some(config.node_name.clone()),
        },
    );
    let (sink, sink_task) = EventSink::spawn(
        recorder,
        stores.clone(),
        config.events.clone(),
        event_counters,
    );
    supervised.tasks.push(("event writer", sink_task));
    let (announcement_writer, announcement_task) =
        AnnouncementWriter::spawn(client.clone(), &config.namespace, announcement_counters);
    supervised
        .tasks
        .push(("announcement writer", announcement_task));
    let mut announcement_planner = AnnouncementPlanner::default();
    let announcements_ready = stores.announcements_ready();
    let mut last_announcements: Option<Instant> = None;
    let mut planner = EventPlanner::new(&config.node_name);

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
    let mut member_events = membership.as_ref().map(Membership::events);
    let mut gate = ClaimGate::new(config.claim.clone(), Instant::now());
    let lease = gate.settings().stall_threshold;
    tracing::info!(node = %config.node_name, %advertise, "speaker running; converging before claiming");

    let mut last_alive: BTreeSet<String> = BTreeSet::new();
    let mut seen_rejoins = 0u64;
    let mut last_standing = "";
    let mut ever_converged = false;
    let mut voters = Voters::new(VOTER_MEMORY);
    let mut voters_seeded = false;
    let mut view = stores.view(&config.view);
    let mut last_plan: Option<Instant> = None;
    let mut last_forbidden: BTreeSet<IpAddr> = BTreeSet::new();
    let mut kernel_arp = KernelArpCheck::default();
    let mut conflicts = crate::l2::conflict::ConflictPolicy::default();
    let mut held_reports = crate::l2::conflict::HeldReports::default();
    let mut fresh = crate::fresh::FreshIps::default();
    let mut peer_macs = crate::peer_macs::PeerMacRefresh::default();
    let mut shutdown = std::pin::pin!(ferrolb_runtime::shutdown::signal());
    let outcome: anyhow::Result<()> = loop {
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
        let member_event = async {
            match member_events.as_mut() {
                Some(rx) => rx.recv().await.ok(),
                None => std::future::pending().await,
            }
        };
        let mut woke = true;
        let mut restarted_peer = false;
        tokio::select! {
            _ = &mut shutdown => break Ok(()),
            _ = changed.notified() => view = stores.view(&config.view),
            _ = members_changed => {},
            event = member_event => {
                // F1: a peer that restarted may have claimed (and announced) our IPs while it
                // converged under an older version or a bug; re-assert ours.
                restarted_peer = matches!(
                    &event,
                    Some(MembershipEvent::Restarted(n) | MembershipEvent::Up(n)) if *n != config.node_name
                );
            }
            () = tokio::time::sleep(TICK) => woke = false,
        }
        let now = Instant::now();
        if let Some(task) = supervised.dead().or_else(|| {
            membership
                .as_ref()
                .filter(|m| !m.is_running())
                .map(|_| "membership")
        }) {
            break Err(anyhow::anyhow!("supervised task '{task}' ended"));
        }

        // Declared down by the others (we learned it from their gossip and foca rejoined us
        // with a new generation): some of them may have elected new owners for our IPs.
        // Withdraw now and converge again. Unless a pause of ours explains it, also stay out of
        // the membership for a hold-off that doubles while it keeps happening
        // (`ClaimGate::declared_down`): an alive member that claims nothing would be elected by
        // the others and leave its IPs unanswered. Then rejoin and converge again.
        if let Some(m) = &membership {
            let rejoins = m.counters().self_rejoins;
            if rejoins > seen_rejoins {
                seen_rejoins = rejoins;
                let leave = gate.declared_down(now);
                metrics.claim.declared_down.fetch_add(1, Ordering::Relaxed);
                responder.set_lease(Some(now));
                responder.set_owned(BTreeMap::new());
                if leave {
                    tracing::warn!(
                        hold_off = ?gate.held_until().saturating_duration_since(now),
                        "the others declared this speaker down; withdrawing every IP and leaving the membership for a hold-off"
                    );
                    leave_in_background(&mut membership, &mut members, &mut member_events);
                } else {
                    tracing::warn!(
                        "the others declared this speaker down right after a pause of ours; withdrawing every IP until the membership has converged again"
                    );
                }
            }
        }

        let carrier = responder.carrier(&Interfaces::All);
        let held_off = now < gate.held_until();
        // Carrier gates membership: without any announce interface we must not look alive.
        match (&membership, carrier) {
            (Some(_), false) => {
                tracing::warn!("no announce interface has carrier; leaving the membership");
                leave_in_background(&mut membership, &mut members, &mut member_events);
            }
            (None, true) if !held_off => {
                tracing::info!("rejoining the membership");
                match Membership::start(settings(None)).await {
                    Ok(m) => {
                        if let Ok(mut slot) = metrics.membership.lock() {
                            *slot = Some(m.counters_handle());
                        }
                        members = Some(m.members());
                        member_events = Some(m.events());
                        membership = Some(m);
                        seen_rejoins = 0;
                        gate.restart(now);
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
        if !voters_seeded && !view.cluster.nodes.is_empty() {
            voters_seeded = true;
            let wall_secs = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
            voters.seed(now, wall_secs, &view.cluster);
        }
        voters.observe(now, &alive);
        peer_macs.tick(now, &alive, &stores, &config.node_name, &responder);
        let expected = voters.voters(&view.cluster, &config.node_name);
        let tick = gate.tick(now, &alive, &expected);
        if let Some(gap) = tick.stalled {
            // F4: we were not running for longer than the others need to take our IPs. Stop
            // answering now, and stay out of the membership for the resync: the others may not
            // have declared us down yet, and an alive member that claims nothing would stay
            // elected and leave its IPs unanswered (the lab attack A7). Rejoin and converge
            // after it.
            tracing::warn!(
                ?gap,
                "speaker was stalled; withdrawing and leaving the membership until the resync is over"
            );
            metrics.claim.stalls.fetch_add(1, Ordering::Relaxed);
            responder.set_lease(Some(now));
            responder.set_owned(BTreeMap::new());
            leave_in_background(&mut membership, &mut members, &mut member_events);
        }
        let standing = tick.standing.label();
        if standing != last_standing {
            match &tick.standing {
                Standing::Converging { missing } => {
                    tracing::info!(?missing, "claim gate: converging, claiming nothing")
                }
                Standing::Minority { alive, expected } => tracing::warn!(
                    alive,
                    expected,
                    "claim gate: this speaker sees a minority of the expected speakers; withdrawing every IP"
                ),
                Standing::Majority => tracing::info!("claim gate: open"),
            }
        }
        metrics.claim.set(&tick.standing);
        ever_converged |= !matches!(tick.standing, Standing::Converging { .. });
        health
            .ready
            .store(ever_converged && membership.is_some(), Ordering::Relaxed);

        let replan = woke
            || standing != last_standing
            || last_plan.is_none_or(|at| now.saturating_duration_since(at) >= REPLAN_EVERY);
        last_standing = standing;
        if !tick.standing.may_claim() {
            responder.set_owned(BTreeMap::new());
            metrics.owned_ips.store(0, Ordering::Relaxed);
            metrics.no_eligible_node_ips.store(0, Ordering::Relaxed);
            metrics.held_ips.store(0, Ordering::Relaxed);
            planner.forget();
            announcement_planner.forget();
            // What was assigned meanwhile was announced by the others: not new to us.
            fresh.restart();
            last_alive.clear();
            continue;
        }
        // The gate is open: serve what we own for one more lease period.
        responder.set_lease(now.checked_add(lease));
        if !replan && !restarted_peer {
            continue;
        }
        last_plan = Some(now);
        if !woke {
            view = stores.view(&config.view);
        }
        responder.set_node_addresses(own_addresses(&stores, &config.node_name));
        let plan = plan(&view, &alive, &config.node_name, Some(carrier));
        // Probed before their first announcement (issue #10 item 5): IPs that newly got an
        // owner, and IPs a report says another host holds (whoever held them before).
        fresh.observe(
            now,
            plan.ips
                .iter()
                .filter(|(_, p)| p.owner.is_some())
                .map(|(ip, _)| *ip),
        );
        let stored = if announcements_ready.load(Ordering::Relaxed) {
            stored_announcements(&stores)
        } else {
            BTreeMap::new()
        };
        let mut probe_first = fresh.fresh(now);
        probe_first.extend(
            stored
                .values()
                .filter(|s| s.held_by.is_some())
                .filter_map(|s| s.ip),
        );
        responder.set_fresh(probe_first);
        let previously_owned: BTreeSet<IpAddr> = responder
            .interfaces()
            .iter()
            .flat_map(|s| s.owned.clone())
            .collect();
        responder.set_owned(plan.owned.clone());
        if alive != last_alive || restarted_peer {
            // S4: re-confirm ownership after any membership change.
            if plan.owned.keys().any(|ip| previously_owned.contains(ip)) {
                responder.reannounce();
            }
            if alive != last_alive {
                tracing::info!(members = ?alive, "membership changed");
            }
            last_alive = alive;
        }
        metrics
            .owned_ips
            .store(plan.owned.len() as u64, Ordering::Relaxed);
        metrics.no_eligible_node_ips.store(
            plan.unowned_reported_by(&config.node_name) as u64,
            Ordering::Relaxed,
        );
        note_forbidden(&view, &metrics, &mut last_forbidden);
        kernel_arp.check(now, &view, &config.node_name, &responder, &metrics, &sink);
        react_to_conflicts(
            &mut conflicts,
            &view,
            &config.node_name,
            &plan.owned,
            &responder,
            &metrics,
            &sink,
        );
        report_held(
            &mut held_reports,
            &view,
            &config.node_name,
            &responder,
            &metrics,
            &sink,
            config.l2.probe.retry,
        );
        let statuses = responder.interfaces();
        // `--interfaces` replaces the default set: report what is really used.
        let owned: BTreeMap<IpAddr, Interfaces> = plan
            .owned
            .iter()
            .map(|(ip, which)| (*ip, config.l2.resolve(which)))
            .collect();
        for intent in planner.plan(&plan, |ip| interfaces_for(ip, &owned, &statuses)) {
            sink.send(intent);
        }
        // "Who answers for what" (L2Announcement), off the data path: at most every
        // ANNOUNCEMENTS_EVERY, and only once the reports' watch has listed them (without their
        // CRD or RBAC the speaker goes on serving and writes none).
        if announcements_ready.load(Ordering::Relaxed)
            && last_announcements
                .is_none_or(|at| now.saturating_duration_since(at) >= ANNOUNCEMENTS_EVERY)
        {
            last_announcements = Some(now);
            // Reported once held for HELD_REPORT_AFTER, like the Event: a late-withdrawing
            // previous owner holds an IP for a round at most.
            let held: BTreeMap<IpAddr, String> = responder
                .held()
                .into_iter()
                .filter(|(_, h)| {
                    now.saturating_duration_since(h.since) >= crate::l2::conflict::HELD_REPORT_AFTER
                })
                .map(|(ip, h)| (ip, h.mac.to_string()))
                .collect();
            for op in announcement_planner.plan(
                now,
                &config.node_name,
                &plan,
                &last_alive,
                |ip| interfaces_for(ip, &owned, &statuses),
                &held,
                &stored,
            ) {
                announcement_writer.send(op);
            }
        }
    };

    health.ready.store(false, Ordering::Relaxed);
    match &outcome {
        Ok(()) => tracing::info!("shutting down: withdrawing and leaving the membership"),
        Err(e) => tracing::error!(error = %e, "withdrawing, leaving the membership and exiting"),
    }
    responder.set_owned(BTreeMap::new());
    if let Some(m) = membership.take() {
        m.leave(Duration::from_secs(1)).await;
    }
    outcome
}

/// Exports how many Service-status IPs the view refused as forbidden (loopback, link-local,
/// multicast, ...; issue 10 item 6) and logs a warning once for each newly refused one: they are
/// never announced, whoever wrote them into the status.
fn note_forbidden(view: &View, metrics: &SpeakerMetrics, last: &mut BTreeSet<IpAddr>) {
    metrics
        .forbidden_ips
        .store(view.forbidden.len() as u64, Ordering::Relaxed);
    for (ip, why) in &view.forbidden {
        if !last.contains(ip) {
            tracing::warn!(%ip, "never announced: {why}, which is never a LoadBalancer IP");
        }
    }
    *last = view.forbidden.keys().copied().collect();
}

/// How often [`KernelArpCheck`] scans the interfaces and sysctls.
const KERNEL_ARP_EVERY: Duration = Duration::from_secs(5);

/// The preflight of issue #10 item 4, every [`KERNEL_ARP_EVERY`]: the LoadBalancer IPs this node's
/// kernel answers ARP for beside the speaker ([`crate::l2::preflight`]). Each newly found IP gets
/// a Warning Event `KernelAnswersARP` on its Services and a log line; the gauge
/// `kernel_arp_conflicts` counts them. Checked by every speaker about its own node, whoever owns
/// the IP: the second MAC is this node's whether it owns the IP or not.
#[derive(Default)]
struct KernelArpCheck {
    last_run: Option<Instant>,
    reported: BTreeSet<IpAddr>,
}

impl KernelArpCheck {
    fn check(
        &mut self,
        now: Instant,
        view: &View,
        node: &str,
        responder: &Responder,
        metrics: &SpeakerMetrics,
        sink: &EventSink,
    ) {
        use crate::l2::preflight::{kernel_answers_arp, read_arp_ignore};
        if self
            .last_run
            .is_some_and(|at| now.saturating_duration_since(at) < KERNEL_ARP_EVERY)
        {
            return;
        }
        self.last_run = Some(now);
        let scanned = match crate::l2::interfaces::scan() {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(error = %e, "interface scan for the ARP preflight failed");
                return;
            }
        };
        let announce: BTreeSet<String> = responder
            .interfaces()
            .into_iter()
            .filter(|s| s.arp)
            .map(|s| s.name)
            .collect();
        let lb_ips: BTreeSet<IpAddr> = view.ips.keys().copied().collect();
        let found = kernel_answers_arp(&scanned, &announce, &lb_ips, read_arp_ignore);
        let ips: BTreeSet<IpAddr> = found.iter().map(|k| IpAddr::V4(k.ip)).collect();
        metrics
            .kernel_arp_conflicts
            .store(ips.len() as u64, Ordering::Relaxed);
        for k in &found {
            let ip = IpAddr::V4(k.ip);
            if self.reported.contains(&ip) {
                continue;
            }
            let note = k.note(node);
            tracing::warn!(%ip, "{note}");
            let services = view.services_of(ip);
            sink.send(crate::events::EventIntent {
                services,
                severity: crate::events::Severity::Warning,
                reason: crate::events::REASON_KERNEL_ANSWERS_ARP,
                note,
            });
        }
        self.reported = ips;
    }
}

/// Issue #10 item 5: another host claims an IP this node owns. Runs the conflict policy
/// ([`crate::l2::conflict`]) on what the responder saw: one defensive announcement per IP per
/// `DEFEND_INTERVAL`, a warning log line per IP per 10 s, a Warning Event `IPConflict` on the
/// IP's Services per foreign MAC per 5 minutes, and the gauge `ip_conflicts`.
fn react_to_conflicts(
    policy: &mut crate::l2::conflict::ConflictPolicy,
    view: &View,
    node: &str,
    owned: &BTreeMap<IpAddr, Interfaces>,
    responder: &Responder,
    metrics: &SpeakerMetrics,
    sink: &EventSink,
) {
    let reaction = policy.step(Instant::now(), &responder.conflicts(), |ip| {
        owned.contains_key(&ip)
    });
    metrics
        .ip_conflicts
        .store(reaction.in_conflict as u64, Ordering::Relaxed);
    for (ip, interface) in &reaction.defend {
        responder.defend(*ip, interface);
    }
    for r in &reaction.log {
        tracing::warn!(
            ip = %r.ip,
            mac = %r.mac,
            interface = %r.interface,
            kind = r.kind.label(),
            frames = r.frames,
            "IP conflict: another host claims an IP this node announces; defending at most once per 10 s"
        );
    }
    for r in &reaction.events {
        let services = view.services_of(r.ip);
        sink.send(crate::events::EventIntent {
            services,
            severity: crate::events::Severity::Warning,
            reason: crate::events::REASON_IP_CONFLICT,
            note: r.note(node),
        });
    }
}

/// Issue #10 item 5: owned IPs that another host answered the probe for are not announced
/// ([`crate::l2::probe`]). Exports the gauge `held_ips` and says each one — a warning log line and
/// a Warning Event `IPConflict` on the IP's Services — once per foreign MAC per 5 minutes.
fn report_held(
    reports: &mut crate::l2::conflict::HeldReports,
    view: &View,
    node: &str,
    responder: &Responder,
    metrics: &SpeakerMetrics,
    sink: &EventSink,
    retry: Duration,
) {
    let held = responder.held();
    metrics.held_ips.store(held.len() as u64, Ordering::Relaxed);
    let due = reports.step(
        Instant::now(),
        held.iter()
            .map(|(ip, h)| (*ip, h.mac, h.interface.as_str(), h.since)),
    );
    for (ip, mac, interface) in due {
        tracing::warn!(%ip, %mac, %interface, "IP conflict: another host answered the probe for a newly assigned IP; not announcing it while it does");
        let services = view.services_of(ip);
        sink.send(crate::events::EventIntent {
            services,
            severity: crate::events::Severity::Warning,
            reason: crate::events::REASON_IP_CONFLICT,
            note: crate::l2::conflict::held_note(ip, mac, interface, node, retry),
        });
    }
}

/// Leaves the membership (carrier lost, declared down, stalled) and drops its receivers. The
/// leave runs off the loop: it waits for its datagrams, and the loop must keep ticking (a late
/// tick reads as a stall).
fn leave_in_background<M, E>(
    membership: &mut Option<Membership>,
    members: &mut Option<M>,
    events: &mut Option<E>,
) {
    if let Some(m) = membership.take() {
        tokio::spawn(m.leave(Duration::from_millis(500)));
    }
    *members = None;
    *events = None;
}

/// The stored L2Announcements by name, as [`crate::announcements::Stored`].
fn stored_announcements(stores: &Stores) -> BTreeMap<String, crate::announcements::Stored> {
    stores
        .announcements
        .state()
        .iter()
        .filter_map(|a| {
            let name = a.metadata.name.clone()?;
            Some((
                name,
                crate::announcements::Stored {
                    ip: a.spec.ip.parse().ok(),
                    node: a.spec.node.clone(),
                    interfaces: a.spec.interfaces.clone(),
                    services: a.spec.services.clone(),
                    since: a.spec.since.as_ref().map(|t| t.0.to_string()),
                    held_by: a.spec.held_by.clone(),
                    resource_version: a.metadata.resource_version.clone(),
                },
            ))
        })
        .collect()
}

/// The interface names an owned IP is answered on, for Events; `None` while it is probed or
/// held on one of them (not announced yet).
fn interfaces_for(
    ip: IpAddr,
    owned: &BTreeMap<IpAddr, Interfaces>,
    statuses: &[crate::l2::InterfaceStatus],
) -> Option<Vec<String>> {
    if !owned.contains_key(&ip) {
        return Some(Vec::new());
    }
    if statuses.iter().any(|s| s.probing.contains(&ip)) {
        return None;
    }
    let serving = statuses.iter().filter(|s| match ip {
        IpAddr::V4(_) => s.arp,
        IpAddr::V6(_) => s.ndp,
    });
    Some(match &owned[&ip] {
        Interfaces::All => serving.map(|s| s.name.clone()).collect(),
        Interfaces::Named(names) => serving
            .filter(|s| names.contains(&s.name))
            .map(|s| s.name.clone())
            .collect(),
    })
}

/// This Node's InternalIP/ExternalIP addresses (empty before its Node object is seen).
fn own_addresses(stores: &Stores, me: &str) -> BTreeSet<IpAddr> {
    stores
        .nodes
        .get(&kube::runtime::reflector::ObjectRef::new(me))
        .map(|node| node_addresses(&node).into_iter().collect())
        .unwrap_or_default()
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
