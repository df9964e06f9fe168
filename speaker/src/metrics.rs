//! Prometheus metrics of the speaker (S9), served on `/metrics`.
//!
//! The responder and the membership keep plain atomic counters; this collector reads their
//! snapshots at scrape time, so the hot paths never touch the registry. Names
//! (`ferrolb_speaker_…`):
//! - `arp_requests_received_total`, `arp_replies_sent_total`, `ns_received_total`, `na_sent_total`,
//!   `gratuitous_arp_sent_total`, `unsolicited_na_sent_total`, `frames_dropped_total{reason}`,
//!   `send_errors_total`, `socket_errors_total`, `multicast_errors_total`;
//! - conflicts (issue #10 item 5): `ip_conflict_frames_total{kind}`, `conflict_defenses_total`,
//!   `ip_conflicts` (gauge), `ip_conflict_reports_withheld_total` (issue #27 item 4); probing new IPs: `address_probes_sent_total`,
//!   `probe_conflicts_total`, `held_ips` (gauge); `peer_claim_yields_total` (a peer
//!   announced an owned IP with a valid claim proof, `l2::peers`), `unproven_claims_total`;
//! - `claim_standing{standing}` (gauge), `stalls_total`, `events_total{outcome}`,
//!   `announcement_writes_total{outcome}` (L2Announcement reports),
//!   `membership_report_writes_total{outcome}` (this node's membership report);
//! - `owned_ips` (gauge), `no_eligible_node_ips` (gauge), `forbidden_ips` (gauge),
//!   `kernel_arp_conflicts` (gauge), `members` (gauge),
//!   `membership_transitions_total{direction="up"|"down"}`,
//!   `membership_datagrams_dropped_total{reason}`, `membership_suspicions_postponed_total`,
//!   `membership_suspicions_stale_total`,
//!   `membership_receive_buffer_bytes` (gauge, issue #27 item 9),
//!   `membership_refused_peers{reason}` (gauge, issue #32 G5.4);
//! - the key ring (issue #27 item 2): `membership_key_info{primary,keys}` (gauge, 1 for the ring
//!   in use), `membership_key_changes_total{result="applied"|"refused"}`.
//!
//! Every name is listed with its type, labels and meaning in `docs/metrics.md`; the test
//! `tests/tests/monitoring.rs` fails when an exported name is missing there.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::claim::Standing;
use crate::event_sink::EventCounters;
use crate::l2;
use crate::membership;

/// Shared sources of the speaker's metrics.
#[derive(Debug)]
pub struct SpeakerMetrics {
    /// Responder counters.
    pub l2: Arc<l2::Counters>,
    /// Membership counters (replaced when the membership restarts).
    pub membership: std::sync::Mutex<Option<Arc<membership::Counters>>>,
    /// The membership socket's receive buffer as granted, bytes of kernel accounting
    /// ([`membership::ReceiveBuffer::granted`]; 0 before the membership started).
    pub membership_receive_buffer: AtomicU64,
    /// Peers refused for a configuration mismatch, or only reported, by reason `protocol`,
    /// `timings`, `key`, `name` ([`membership::Mismatch`]), in that order.
    pub membership_refused: [AtomicU64; 4],
    /// IPs this node owns now.
    pub owned_ips: AtomicU64,
    /// IPs nobody may announce (no eligible node) whose reporter is this speaker
    /// ([`crate::plan::Plan::unowned_reported_by`]); 0 while the claim gate is closed.
    pub no_eligible_node_ips: AtomicU64,
    /// IPs in Service status that lie in a forbidden block and are never announced (issue 10
    /// item 6; [`ferrolb_crds::addresses::FORBIDDEN_BLOCKS`]).
    pub forbidden_ips: AtomicU64,
    /// LoadBalancer IPs this node's kernel answers ARP for beside the speaker (kube-proxy IPVS
    /// without strictARP, or the IP on a local interface; [`crate::l2::preflight`]).
    pub kernel_arp_conflicts: AtomicU64,
    /// Owned IPs another host claimed within the last [`crate::l2::conflict::HOLD`].
    pub ip_conflicts: AtomicU64,
    /// `IPConflict` reports the Event budget refused
    /// ([`crate::l2::conflict::EventBudget::withheld`]).
    pub ip_conflict_reports_withheld: AtomicU64,
    /// Owned IPs not announced because another host answered the probe ([`crate::l2::probe`]).
    pub held_ips: AtomicU64,
    /// Event writer outcomes.
    pub events: Arc<EventCounters>,
    /// L2Announcement write outcomes.
    pub announcements: Arc<crate::announcement_writer::WriteCounters>,
    /// Writes of this node's membership report (`ferrolb status`).
    pub member_reports: Arc<crate::announcement_writer::WriteCounters>,
    /// The claim gate.
    pub claim: ClaimMetrics,
    /// The membership key ring in use and its changes.
    pub keys: KeyMetrics,
}

/// The key ring for `/metrics` (issue #27 item 2): `membership_key_info{primary,keys}` and
/// `membership_key_changes_total{result}`.
#[derive(Debug, Default)]
pub struct KeyMetrics {
    /// The primary key's fingerprint in hex and the number of keys of the ring in use; `None`
    /// until the ring is read.
    in_use: std::sync::Mutex<Option<(String, usize)>>,
    /// Changed rings applied to the running speaker.
    applied: AtomicU64,
    /// Changes of the source not applied ([`crate::membership::key_source::KeyUpdates`]).
    updates: std::sync::Mutex<Option<Arc<crate::membership::key_source::KeyUpdates>>>,
}

impl KeyMetrics {
    fn set_in_use(&self, ring: &crate::membership::KeyRing) {
        let fingerprint = crate::membership::key_source::fingerprint_hex(ring.primary());
        if let Ok(mut k) = self.in_use.lock() {
            *k = Some((fingerprint, ring.keys().len()));
        }
    }

    /// The ring read at start, and the follower's counts of refused changes.
    pub fn show(
        &self,
        ring: &crate::membership::KeyRing,
        updates: Arc<crate::membership::key_source::KeyUpdates>,
    ) {
        self.set_in_use(ring);
        if let Ok(mut u) = self.updates.lock() {
            *u = Some(updates);
        }
    }

    /// A changed ring, now in use.
    pub fn applied(&self, ring: &crate::membership::KeyRing) {
        self.set_in_use(ring);
        self.applied.fetch_add(1, Ordering::Relaxed);
    }
}

/// The claim gate's state for `/metrics`: `claim_standing{standing}` (1 for the current one)
/// `stalls_total` and `declared_down_total`.
#[derive(Debug, Default)]
pub struct ClaimMetrics {
    /// 0 converging, 1 minority, 2 majority.
    standing: AtomicU64,
    /// Stalls detected (gaps between ticks above the threshold).
    pub stalls: AtomicU64,
    /// Times the others declared this speaker down while it ran (it withdrew and held off).
    pub declared_down: AtomicU64,
}

impl ClaimMetrics {
    /// Records the current standing.
    pub fn set(&self, standing: &Standing) {
        let v = match standing {
            Standing::Converging { .. } => 0,
            Standing::Minority { .. } => 1,
            Standing::Majority => 2,
        };
        self.standing.store(v, Ordering::Relaxed);
    }
}

impl SpeakerMetrics {
    /// A registry with this collector registered.
    pub fn registry(self: &Arc<Self>) -> Registry {
        let mut registry = Registry::with_prefix("ferrolb_speaker");
        ferrolb_runtime::build_info::register(&mut registry);
        registry.register_collector(Box::new(Arc::clone(self)));
        registry
    }
}

fn counter(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> std::fmt::Result {
    let metric = ConstCounter::new(value);
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

fn gauge(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: u64) -> std::fmt::Result {
    let metric = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

fn labelled_counters<'a>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: &'static str,
    values: impl IntoIterator<Item = (&'a str, u64)>,
) -> std::fmt::Result {
    let mut family = encoder.encode_descriptor(
        name,
        help,
        None,
        prometheus_client::metrics::MetricType::Counter,
    )?;
    for (value, count) in values {
        let labels = [(label, value)];
        ConstCounter::new(count).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

impl Collector for SpeakerMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let l2 = self.l2.snapshot();
        counter(
            &mut encoder,
            "arp_requests_received",
            "ARP requests received for any IP",
            l2.arp_requests_received,
        )?;
        counter(
            &mut encoder,
            "arp_replies_sent",
            "ARP replies sent for owned IPs",
            l2.arp_replies_sent,
        )?;
        counter(
            &mut encoder,
            "ns_received",
            "Neighbor Solicitations received",
            l2.ns_received,
        )?;
        counter(
            &mut encoder,
            "na_sent",
            "Solicited Neighbor Advertisements sent",
            l2.na_sent,
        )?;
        counter(
            &mut encoder,
            "gratuitous_arp_sent",
            "Gratuitous ARP frames sent",
            l2.gratuitous_arp_sent,
        )?;
        counter(
            &mut encoder,
            "unsolicited_na_sent",
            "Unsolicited Neighbor Advertisements sent",
            l2.unsolicited_na_sent,
        )?;
        counter(
            &mut encoder,
            "send_errors",
            "Frames that could not be sent",
            l2.send_errors,
        )?;
        counter(
            &mut encoder,
            "socket_errors",
            "Packet socket failures (the interface task retries)",
            l2.socket_errors,
        )?;
        counter(
            &mut encoder,
            "responder_task_panics",
            "Interface responder tasks that panicked and were restarted",
            l2.task_panics,
        )?;
        counter(
            &mut encoder,
            "multicast_errors",
            "Failed solicited-node multicast joins or leaves",
            l2.multicast_errors,
        )?;
        labelled_counters(
            &mut encoder,
            "frames_dropped",
            "Frames dropped or ignored, by reason",
            "reason",
            l2.dropped.iter().map(|(k, v)| (*k, *v)),
        )?;
        gauge(
            &mut encoder,
            "owned_ips",
            "IPs this node answers for",
            self.owned_ips.load(Ordering::Relaxed),
        )?;
        gauge(
            &mut encoder,
            "no_eligible_node_ips",
            "IPs in Service status that no node may announce (NoEligibleNode), counted by the one speaker that reports each: sum over speakers for the cluster",
            self.no_eligible_node_ips.load(Ordering::Relaxed),
        )?;
        gauge(
            &mut encoder,
            "forbidden_ips",
            "IPs in Service status never announced: loopback, link-local, multicast, unspecified, reserved or IPv4-mapped",
            self.forbidden_ips.load(Ordering::Relaxed),
        )?;
        gauge(
            &mut encoder,
            "kernel_arp_conflicts",
            "LoadBalancer IPs this node's kernel answers ARP for beside the speaker (kube-proxy IPVS mode without strictARP, or the IP on a local interface)",
            self.kernel_arp_conflicts.load(Ordering::Relaxed),
        )?;
        labelled_counters(
            &mut encoder,
            "ip_conflict_frames",
            "Frames in which another MAC claimed an IP this node owns, by kind",
            "kind",
            crate::l2::decide::ClaimKind::ALL.iter().map(|k| {
                let label = k.label();
                (label, l2.conflict_frames.get(label).copied().unwrap_or(0))
            }),
        )?;
        counter(
            &mut encoder,
            "conflict_defenses",
            "Defensive announcements sent for an IP another host claimed (at most one per IP per 10 s, RFC 5227 section 2.4)",
            l2.conflict_defenses,
        )?;
        gauge(
            &mut encoder,
            "ip_conflicts",
            "IPs this node owns that another host claimed within the last 60 s",
            self.ip_conflicts.load(Ordering::Relaxed),
        )?;
        counter(
            &mut encoder,
            "ip_conflict_reports_withheld",
            "IPConflict Event reports not written because the bound was reached (at most 3 per IP and 20 per speaker in any 5 minutes); each is tried again 10 s later",
            self.ip_conflict_reports_withheld.load(Ordering::Relaxed),
        )?;
        counter(
            &mut encoder,
            "address_probes_sent",
            "Probes (ARP probes, DAD Neighbor Solicitations) sent for newly assigned IPs before their first announcement",
            l2.address_probes_sent,
        )?;
        counter(
            &mut encoder,
            "probe_conflicts",
            "Probe rounds in which another host kept answering for the IP (the IP is held, not announced)",
            l2.probe_conflicts,
        )?;
        counter(
            &mut encoder,
            "peer_claim_yields",
            "Claims by a peer speaker of an IP this node owned, with a valid claim proof, each of which made this node stop answering it on that interface for 2.5 s",
            l2.peer_claim_yields,
        )?;
        counter(
            &mut encoder,
            "unproven_claims",
            "Frames claiming an owned IP from a peer's MAC, or with a claim proof, whose proof is missing, forged or stale: never a yield, handled as a foreign conflict",
            l2.unproven_claims,
        )?;
        gauge(
            &mut encoder,
            "held_ips",
            "IPs this node owns but does not announce because another host answered its probe",
            self.held_ips.load(Ordering::Relaxed),
        )?;
        let standing = self.claim.standing.load(Ordering::Relaxed);
        {
            let mut family = encoder.encode_descriptor(
                "claim_standing",
                "The claim gate: 1 for the current standing (converging, minority, majority)",
                None,
                prometheus_client::metrics::MetricType::Gauge,
            )?;
            for (i, label) in ["converging", "minority", "majority"].iter().enumerate() {
                ConstGauge::new(i64::from(standing == i as u64))
                    .encode(family.encode_family(&[("standing", *label)])?)?;
            }
        }
        counter(
            &mut encoder,
            "stalls",
            "Stalls detected: the speaker did not run for longer than the stall threshold",
            self.claim.stalls.load(Ordering::Relaxed),
        )?;
        counter(
            &mut encoder,
            "declared_down",
            "Times the other speakers declared this one down while it ran; it withdrew every IP and held off",
            self.claim.declared_down.load(Ordering::Relaxed),
        )?;
        let ev = &self.events;
        labelled_counters(
            &mut encoder,
            "events",
            "Kubernetes Events by outcome (published, failed incl. timed out, dropped on a full queue, coalesced)",
            "outcome",
            [
                ("published", ev.published.load(Ordering::Relaxed)),
                ("failed", ev.failed.load(Ordering::Relaxed)),
                ("dropped", ev.dropped.load(Ordering::Relaxed)),
                ("coalesced", ev.coalesced.load(Ordering::Relaxed)),
            ],
        )?;
        let an = &self.announcements;
        labelled_counters(
            &mut encoder,
            "announcement_writes",
            "L2Announcement writes by outcome (applied, failed incl. timed out or refused, dropped on a full queue)",
            "outcome",
            [
                ("applied", an.applied.load(Ordering::Relaxed)),
                ("failed", an.failed.load(Ordering::Relaxed)),
                ("dropped", an.dropped.load(Ordering::Relaxed)),
            ],
        )?;
        let in_use = self.keys.in_use.lock().ok().and_then(|k| k.clone());
        if let Some((primary, keys)) = in_use {
            let mut family = encoder.encode_descriptor(
                "membership_key_info",
                "The membership key ring in use: 1, labelled with the primary (sealing) key's fingerprint (16 hex digits of HMAC-SHA256 under the key, as in the hellos; never the key) and the number of keys that open",
                None,
                prometheus_client::metrics::MetricType::Gauge,
            )?;
            let keys = keys.to_string();
            let labels = [("primary", primary.as_str()), ("keys", keys.as_str())];
            ConstGauge::new(1i64).encode(family.encode_family(&labels)?)?;
        }
        let refused = self
            .keys
            .updates
            .lock()
            .ok()
            .and_then(|u| u.as_ref().map(|u| u.refused.load(Ordering::Relaxed)))
            .unwrap_or(0);
        labelled_counters(
            &mut encoder,
            "membership_key_changes",
            "Changes of the membership key source while running: applied without a restart, or refused (did not parse, unreadable, Secret deleted: the keys in use stay)",
            "result",
            [
                ("applied", self.keys.applied.load(Ordering::Relaxed)),
                ("refused", refused),
            ],
        )?;
        let mr = &self.member_reports;
        labelled_counters(
            &mut encoder,
            "membership_report_writes",
            "Writes of this node's membership report (the L2Announcement node-<node> that ferrolb status reads) by outcome (applied, failed incl. timed out or refused, dropped)",
            "outcome",
            [
                ("applied", mr.applied.load(Ordering::Relaxed)),
                ("failed", mr.failed.load(Ordering::Relaxed)),
                ("dropped", mr.dropped.load(Ordering::Relaxed)),
            ],
        )?;
        let membership = self.membership.lock().ok().and_then(|m| m.clone());
        if let Some(m) = membership {
            let m = m.snapshot();
            gauge(
                &mut encoder,
                "membership_receive_buffer_bytes",
                "Receive buffer of the membership UDP socket as granted by the kernel (getsockopt SO_RCVBUF: twice the size set, at most twice net.core.rmem_max)",
                self.membership_receive_buffer.load(Ordering::Relaxed),
            )?;
            {
                let mut family = encoder.encode_descriptor(
                    "membership_refused_peers",
                    "Speakers this one refuses because their membership protocol or timings disagree with its own (issue #32 G5.4: not counted alive, no lease either way), or only reports: a key ring lacking its primary key, another speaker under its own node name (issue #29 O6)",
                    None,
                    prometheus_client::metrics::MetricType::Gauge,
                )?;
                for (cell, reason) in self
                    .membership_refused
                    .iter()
                    .zip(["protocol", "timings", "key", "name"])
                {
                    ConstGauge::new(
                        i64::try_from(cell.load(Ordering::Relaxed)).unwrap_or(i64::MAX),
                    )
                    .encode(family.encode_family(&[("reason", reason)])?)?;
                }
            }
            gauge(
                &mut encoder,
                "members",
                "Alive speakers in the SWIM membership, this one included",
                m.members,
            )?;
            labelled_counters(
                &mut encoder,
                "membership_transitions",
                "Members that came up or went down",
                "direction",
                [("up", m.transitions_up), ("down", m.transitions_down)],
            )?;
            counter(
                &mut encoder,
                "membership_suspicions_postponed",
                "Suspicions of other speakers that ran out while this speaker was not running (CPU starvation, a pause): postponed instead of declaring the member down",
                m.suspicions_postponed,
            )?;
            counter(
                &mut encoder,
                "membership_suspicions_stale",
                "Suspicion timers dropped because the suspect had refuted in time (or was gone): no down notice goes to a healthy member",
                m.suspicions_stale,
            )?;
            labelled_counters(
                &mut encoder,
                "membership_datagrams_dropped",
                "Membership datagrams dropped, by reason",
                "reason",
                [
                    ("malformed", m.dropped_malformed),
                    ("unknown_source", m.dropped_unknown_source),
                    ("rate_limited", m.dropped_rate_limited),
                    ("auth", m.dropped_auth),
                    ("stale", m.dropped_stale),
                    ("replayed", m.dropped_replayed),
                    ("misdirected", m.dropped_misdirected),
                    ("wrong_source", m.dropped_wrong_source),
                    ("rejected", m.dropped_rejected),
                ],
            )?;
        }
        Ok(())
    }
}
