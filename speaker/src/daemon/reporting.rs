//! What the daemon reports from each plan, off the answer path: gauges, Events (announcing, no
//! eligible node, IP conflicts, kernel ARP), conflict defence and the `L2Announcement` reports.
//! Driven by the core's [`Output::Planned`](ferrolb_l2::node::Output::Planned) and
//! [`Output::Withdrawn`](ferrolb_l2::node::Output::Withdrawn); the decisions it applies are the
//! pure planners of `ferrolb-l2` ([`EventPlanner`], [`AnnouncementPlanner`]) and
//! [`crate::l2::conflict`].

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::announcement_writer::AnnouncementWriter;
use crate::announcements::AnnouncementPlanner;
use crate::eligibility::Interfaces;
use crate::event_sink::EventSink;
use crate::events::EventPlanner;
use crate::l2::{L2Config, Responder};
use crate::metrics::SpeakerMetrics;
use crate::plan::Plan;
use crate::view::View;
use crate::watch::Stores;

use super::lookups::stored_announcements;

/// Shortest time between two passes over the L2Announcement reports (each pass reads every
/// stored report).
const ANNOUNCEMENTS_EVERY: Duration = Duration::from_millis(500);

/// One probed candidate and the MAC of the host that answered, if any.
pub(super) type ProbeVerdict = (std::net::Ipv4Addr, Option<crate::wire::MacAddr>);

/// Shortest time between two rounds of probes of automatic pools' candidates (each round probes
/// at most [`ferrolb_l2::networks::PROBES_PER_ROUND`] addresses and waits
/// [`crate::l2::candidate_probe::WAIT`]).
const PROBE_ROUND_EVERY: Duration = Duration::from_secs(2);

/// The reporting state of one speaker.
pub(super) struct Reporting {
    pub(super) me: String,
    pub(super) l2: L2Config,
    pub(super) metrics: Arc<SpeakerMetrics>,
    pub(super) sink: EventSink,
    pub(super) announcement_writer: AnnouncementWriter,
    pub(super) announcements_ready: Arc<AtomicBool>,
    pub(super) planner: EventPlanner,
    pub(super) announcement_planner: AnnouncementPlanner,
    /// This node's membership report (`ferrolb status`), written by its own writer.
    pub(super) member_report_writer: AnnouncementWriter,
    pub(super) member_report_planner: crate::announcements::MemberReportPlanner,
    /// This node's networks for automatic pools, as last read (empty while no pool has
    /// `spec.autoAddresses`), and when.
    pub(super) networks: Vec<ferrolb_crds::announcement::NodeNetwork>,
    pub(super) networks_read: Option<Instant>,
    /// Whether an automatic pool existed at that read.
    pub(super) networks_auto: bool,
    /// Automatic pools' candidates: what was probed and found (issue #28).
    pub(super) probes: ferrolb_l2::networks::CandidateProbes,
    /// When the last probe round started.
    pub(super) probe_round: Option<Instant>,
    /// Verdicts of the probe rounds, `(address, MAC that answered)`, sent by their blocking task.
    pub(super) probe_results: (
        std::sync::mpsc::Sender<ProbeVerdict>,
        std::sync::mpsc::Receiver<ProbeVerdict>,
    ),
    pub(super) last_announcements: Option<Instant>,
    pub(super) last_forbidden: BTreeSet<IpAddr>,
    pub(super) kernel_arp: KernelArpCheck,
    pub(super) conflicts: crate::l2::conflict::ConflictPolicy,
    pub(super) held_reports: crate::l2::conflict::HeldReports,
    /// The bound on `IPConflict` Events, shared by both paths (issue #27 item 4).
    pub(super) conflict_budget: crate::l2::conflict::EventBudget,
}

impl Reporting {
    /// The claim gate closed and everything was withdrawn: gauges to zero, planners start over.
    pub(super) fn withdrawn(&mut self) {
        self.metrics.owned_ips.store(0, Ordering::Relaxed);
        self.metrics
            .no_eligible_node_ips
            .store(0, Ordering::Relaxed);
        self.metrics.held_ips.store(0, Ordering::Relaxed);
        self.planner.forget();
        self.announcement_planner.forget();
    }

    /// Writes this node's membership report when the count it sees (`members`, 0 while out of
    /// the membership) or its node networks differ from the stored ones, at most every
    /// [`crate::announcements::MEMBER_REPORT_EVERY`]; only once the reports' watch has listed
    /// them. Called on every step: it finds its own report among the stored ones (a scan of the
    /// reflector's store, as [`super::lookups::held_reported`] does). The networks
    /// ([`ferrolb_l2::networks`]) are reported only while some pool has `spec.autoAddresses`
    /// (issue #28), read from the last interface scan and `/proc/net/route` when such a pool
    /// appears and then at most every [`crate::announcements::MEMBER_REPORT_EVERY`].
    pub(super) fn report_members(
        &mut self,
        now: Instant,
        members: u32,
        stores: &Stores,
        responder: &Responder,
    ) {
        if !self.announcements_ready.load(Ordering::Relaxed) {
            return;
        }
        // A pool scan per step is cheap (pools are few); the interfaces and routes are read when
        // an automatic pool appears or goes, and at most every 10 s otherwise.
        let auto = stores
            .pools
            .state()
            .iter()
            .any(|p| p.spec.auto_addresses.is_some());
        if auto != self.networks_auto
            || self.networks_read.is_none_or(|at| {
                now.saturating_duration_since(at) >= crate::announcements::MEMBER_REPORT_EVERY
            })
        {
            self.networks_read = Some(now);
            self.networks_auto = auto;
            self.networks = if auto {
                let routes = std::fs::read_to_string("/proc/net/route").unwrap_or_default();
                ferrolb_l2::networks::node_networks(
                    &responder.arp_ipv4(),
                    &ferrolb_l2::networks::default_gateways(&routes),
                )
            } else {
                Vec::new()
            };
        }
        self.probe_candidates(now, stores);
        let in_use = self.probes.in_use();
        let unanswered = self.probes.unanswered();
        let name = ferrolb_crds::announcement::member_report_name(&self.me);
        let state = stores.announcements.state();
        let stored = state
            .iter()
            .find(|a| a.metadata.name.as_deref() == Some(name.as_str()))
            .and_then(|a| {
                a.spec.membership.as_ref().map(|m| {
                    (
                        m.members,
                        (
                            a.spec.networks.as_slice(),
                            a.spec.in_use.as_slice(),
                            a.spec.unanswered.as_slice(),
                        ),
                    )
                })
            });
        if let Some(op) = self.member_report_planner.plan(
            now,
            &self.me,
            members,
            (&self.networks, &in_use, &unanswered),
            stored,
        ) {
            self.member_report_writer.send(op);
        }
    }

    /// Probes the automatic pools' candidates (issue #28, [`ferrolb_l2::networks::CandidateProbes`]):
    /// takes the verdicts of the last round, and starts the next one (off the step, in a blocking
    /// task) at most every [`PROBE_ROUND_EVERY`]. The targets are the candidates of every pool
    /// with `spec.autoAddresses` as its status lists them (`IPAddressPool::probe_entries`: its
    /// `candidates`, or its `addresses` in a status without them), plus those found in use,
    /// minus every Service's LoadBalancer IP, inside this node's reported networks (probed on
    /// that network's interface).
    fn probe_candidates(&mut self, now: Instant, stores: &Stores) {
        while let Ok((ip, mac)) = self.probe_results.1.try_recv() {
            self.probes.record(now, ip, mac.map(|m| m.to_string()));
        }
        if self.networks.is_empty() {
            self.probes.due(now, &BTreeSet::new());
            return;
        }
        if self
            .probe_round
            .is_some_and(|at| now.saturating_duration_since(at) < PROBE_ROUND_EVERY)
        {
            return;
        }
        self.probe_round = Some(now);
        let nets: Vec<(ferrolb_crds::auto_pool::Net4, String)> = self
            .networks
            .iter()
            .filter_map(|n| {
                Some((
                    ferrolb_crds::auto_pool::Net4::parse(&n.prefix)?,
                    n.interface.clone(),
                ))
            })
            .collect();
        let held: BTreeSet<IpAddr> = stores
            .services
            .state()
            .iter()
            .flat_map(|s| ferrolb_crds::service::ingress_ips(s))
            .collect();
        let mut targets: BTreeSet<std::net::Ipv4Addr> = self.probes.in_use_ips().collect();
        for pool in stores.pools.state().iter() {
            if pool.spec.auto_addresses.is_none() {
                continue;
            }
            let Ok(addresses) =
                ferrolb_crds::addresses::PoolAddresses::parse(&pool.probe_entries(), false)
            else {
                continue;
            };
            for r in addresses.ranges() {
                // A resolution holds at most a few hundred addresses; a hand-edited status
                // cannot make this walk long.
                for o in (r.first_offset()..=r.last_offset()).take(1024) {
                    if let Ok(v4) = u32::try_from(o) {
                        targets.insert(std::net::Ipv4Addr::from(v4));
                    }
                }
            }
        }
        targets.retain(|ip| {
            !held.contains(&IpAddr::V4(*ip)) && nets.iter().any(|(n, _)| n.contains(*ip))
        });
        let due = self.probes.due(now, &targets);
        if due.is_empty() {
            return;
        }
        let mut by_interface: BTreeMap<String, Vec<std::net::Ipv4Addr>> = BTreeMap::new();
        for ip in due {
            if let Some((_, iface)) = nets.iter().find(|(n, _)| n.contains(ip)) {
                by_interface.entry(iface.clone()).or_default().push(ip);
            }
        }
        let tx = self.probe_results.0.clone();
        tokio::task::spawn_blocking(move || {
            for (iface, ips) in by_interface {
                match crate::l2::candidate_probe::probe(&iface, &ips) {
                    Ok(answers) => {
                        for answer in answers {
                            let _ = tx.send(answer);
                        }
                    }
                    Err(e) => {
                        tracing::debug!(interface = %iface, error = %e, "could not probe automatic pool candidates")
                    }
                }
            }
        });
    }

    /// Reports one plan, made at `now`, after the responder got its owned set.
    pub(super) fn report(
        &mut self,
        now: Instant,
        plan: &Plan,
        view: &View,
        stores: &Stores,
        responder: &Responder,
    ) {
        let me = self.me.as_str();
        self.metrics
            .owned_ips
            .store(plan.owned.len() as u64, Ordering::Relaxed);
        self.metrics
            .no_eligible_node_ips
            .store(plan.unowned_reported_by(me) as u64, Ordering::Relaxed);
        note_forbidden(view, &self.metrics, &mut self.last_forbidden);
        self.kernel_arp
            .check(now, view, me, responder, &self.metrics, &self.sink);
        react_to_conflicts(
            now,
            &mut self.conflicts,
            &mut self.conflict_budget,
            view,
            me,
            &plan.owned,
            responder,
            &self.metrics,
            &self.sink,
        );
        report_held(
            now,
            &mut self.held_reports,
            &mut self.conflict_budget,
            view,
            me,
            responder,
            &self.metrics,
            &self.sink,
            self.l2.probe.retry,
        );
        self.metrics
            .ip_conflict_reports_withheld
            .store(self.conflict_budget.withheld(), Ordering::Relaxed);
        let statuses = responder.interfaces();
        // `--interfaces` replaces the default set: report what is really used.
        let owned: BTreeMap<IpAddr, Interfaces> = plan
            .owned
            .iter()
            .map(|(ip, which)| (*ip, self.l2.resolve(which)))
            .collect();
        for intent in self
            .planner
            .plan(plan, |ip| interfaces_for(ip, &owned, &statuses))
        {
            self.sink.send(intent);
        }
        // "Who answers for what" (L2Announcement), off the data path: at most every
        // ANNOUNCEMENTS_EVERY, and only once the reports' watch has listed them (without their
        // CRD or RBAC the speaker goes on serving and writes none).
        if self.announcements_ready.load(Ordering::Relaxed)
            && self
                .last_announcements
                .is_none_or(|at| now.saturating_duration_since(at) >= ANNOUNCEMENTS_EVERY)
        {
            self.last_announcements = Some(now);
            let stored = stored_announcements(stores);
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
            for op in self.announcement_planner.plan(
                now,
                me,
                plan,
                |ip| interfaces_for(ip, &owned, &statuses),
                &held,
                &stored,
            ) {
                self.announcement_writer.send(op);
            }
        }
    }
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
pub(super) struct KernelArpCheck {
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
/// ([`crate::l2::conflict`]) at `now` on what the responder saw: one defensive announcement per
/// IP per `DEFEND_INTERVAL`, a warning log line per IP per 10 s, a Warning Event `IPConflict` on
/// the IP's Services per foreign MAC per 5 minutes within `budget` (issue #27 item 4: at most 3
/// per IP and 20 per speaker in any 5 minutes), and the gauge `ip_conflicts`.
#[allow(clippy::too_many_arguments)]
fn react_to_conflicts(
    now: Instant,
    policy: &mut crate::l2::conflict::ConflictPolicy,
    budget: &mut crate::l2::conflict::EventBudget,
    view: &View,
    node: &str,
    owned: &BTreeMap<IpAddr, Interfaces>,
    responder: &Responder,
    metrics: &SpeakerMetrics,
    sink: &EventSink,
) {
    let reaction = policy.step(
        now,
        &responder.conflicts(),
        |ip| owned.contains_key(&ip),
        budget,
    );
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
/// a Warning Event `IPConflict` on the IP's Services — once per foreign MAC per 5 minutes, within
/// `budget` (shared with [`react_to_conflicts`]).
#[allow(clippy::too_many_arguments)]
fn report_held(
    now: Instant,
    reports: &mut crate::l2::conflict::HeldReports,
    budget: &mut crate::l2::conflict::EventBudget,
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
        now,
        held.iter()
            .map(|(ip, h)| (*ip, h.mac, h.interface.as_str(), h.since)),
        budget,
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
