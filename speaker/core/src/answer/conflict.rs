//! What the owner does when another host claims one of its IPs (issue #10 item 5), and how much
//! it may write about it (issue #27 item 4). Pure: no `tokio`, no `kube`, no clock — time is an
//! input. The responder records [`Sighting`]s ([`super::decide::Claim`]s per IP) and the daemon
//! runs [`ConflictPolicy::step`] and [`HeldReports::step`] on them after every plan (every few
//! hundred milliseconds), with one [`EventBudget`] for both.
//!
//! The policy, per owned IP:
//! - **Confirm first.** A conflict is acted on only when the IP is still owned [`CONFIRM`] after
//!   the first conflicting frame of an episode. When the election moves an IP, the new owner's
//!   gratuitous ARP reaches the old owner before it has withdrawn (a few hundred milliseconds at
//!   most): that is a handover, not a conflict, and the old owner must neither defend (it would
//!   turn clients back to itself) nor warn. The responder forgets the sightings of an IP as soon
//!   as it is no longer owned.
//! - **Defend once per [`DEFEND_INTERVAL`].** One announcement (gratuitous ARP in both forms, or
//!   one unsolicited NA with O=1) on the interface of the claim, as RFC 5227 §2.4 (b) allows,
//!   and then nothing more for that IP for [`DEFEND_INTERVAL`] however many conflicting frames
//!   arrive: no ARP war. Unlike §2.4 (b) the owner does not give the address up after a second
//!   conflict within the interval: the controller assigned it and no other node would answer for
//!   it. It keeps using it, as §2.4 (c) allows, and keeps answering requests as before
//!   (one reply per request, never more because of the conflict).
//! - **Log at most once per [`LOG_INTERVAL`]** per IP, with the frames counted since the last line.
//! - **Warn on the Service** (Event `IPConflict`) once per [`EVENT_INTERVAL`] per (IP, foreign
//!   MAC) while the conflict lasts, at most once per [`LOG_INTERVAL`] per IP, and within the
//!   [`EventBudget`] below.
//! - An IP is **in conflict** (gauge `ip_conflicts`) while its last conflicting frame is less
//!   than [`HOLD`] old; a later frame after a longer quiet starts a new episode (confirmed again).
//!
//! **The Event bound** (issue #27 item 4). Every foreign MAC is new to the per-(IP, MAC) rule,
//! so a host that forges a fresh MAC per frame would otherwise get one Event per IP per
//! [`LOG_INTERVAL`] on every IP it names, for as long as it likes (each note names its MAC, so
//! the API server cannot fold them into one series). The [`EventBudget`] caps the reports — of
//! an announced IP in conflict and of a held IP ([`HeldReports`]) together — at
//! [`MAX_REPORTS_PER_IP`] per IP and [`MAX_REPORTS_PER_SPEAKER`] per speaker within any
//! [`EVENT_INTERVAL`] (a sliding window), whatever the number of foreign MACs. One report is one
//! Event on each Service of the IP (several only for a shared IP). A report the budget refuses
//! is tried again [`LOG_INTERVAL`] later and counted (metric `ip_conflict_reports_withheld_total`);
//! IPs not reported for longest go first, so under a flood on many IPs every IP is named in
//! turn. Logs, defence and the gauge are not part of the budget (they write nothing to the
//! API server and are bounded per IP already). Each note counts the distinct MACs of the
//! episode (up to [`MAX_MACS_COUNTED`]), so a bounded number of Events still says "many hosts".

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use ferrolb_crds::conflict_event::note_head;

use crate::wire::MacAddr;

use super::decide::{Claim, ClaimKind};

/// RFC 5227 §1.1 `DEFEND_INTERVAL`: at most one defensive announcement per IP this often.
pub const DEFEND_INTERVAL: Duration = Duration::from_secs(10);
/// At most one log line per IP this often; also the shortest gap between two `IPConflict`
/// reports about one IP, and between two tries of a report the [`EventBudget`] refused.
pub const LOG_INTERVAL: Duration = Duration::from_secs(10);
/// At most one `IPConflict` Event per (IP, foreign MAC) this often, repeated this often while the
/// conflict lasts; also the window of the [`EventBudget`].
pub const EVENT_INTERVAL: Duration = Duration::from_secs(300);
/// Most `IPConflict` reports about one IP within any [`EVENT_INTERVAL`] (announced and held
/// paths together), whatever the number of foreign MACs.
pub const MAX_REPORTS_PER_IP: usize = 3;
/// Most `IPConflict` reports one speaker makes within any [`EVENT_INTERVAL`], over all its IPs.
pub const MAX_REPORTS_PER_SPEAKER: usize = 20;
/// How long an IP must stay owned after the first conflicting frame before the owner reacts
/// (longer than an election handover between speakers).
pub const CONFIRM: Duration = Duration::from_secs(1);
/// An IP is in conflict until this long after its last conflicting frame.
pub const HOLD: Duration = Duration::from_secs(60);
/// Most IPs tracked at once by [`Sightings`] (only owned IPs are recorded).
pub const MAX_TRACKED: usize = 4096;
/// Most distinct foreign MACs remembered per IP and episode, to count them in the note ("32 or
/// more" beyond).
pub const MAX_MACS_COUNTED: usize = 32;

/// What the responder saw of the conflict on one IP in the current episode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sighting {
    /// The MAC of the latest conflicting frame.
    pub mac: MacAddr,
    /// Its kind.
    pub kind: ClaimKind,
    /// The interface it arrived on.
    pub interface: String,
    /// First conflicting frame of the episode.
    pub first_seen: Instant,
    /// Latest conflicting frame.
    pub last_seen: Instant,
    /// Conflicting frames in the episode.
    pub frames: u64,
    /// Distinct foreign MACs of the episode, at most [`MAX_MACS_COUNTED`] of them.
    pub macs: BTreeSet<MacAddr>,
}

impl Sighting {
    /// "1 MAC", "5 MACs", "32 or more MACs": the distinct MACs of the episode, for notes.
    pub fn macs_text(&self) -> String {
        macs_text(self.macs.len())
    }
}

fn macs_text(n: usize) -> String {
    match n {
        1 => "1 MAC".to_owned(),
        n if n >= MAX_MACS_COUNTED => format!("{MAX_MACS_COUNTED} or more MACs"),
        n => format!("{n} MACs"),
    }
}

/// The responder's record of conflicts, per owned IP (bounded by [`MAX_TRACKED`] IPs and
/// [`MAX_MACS_COUNTED`] MACs each).
#[derive(Clone, Debug, Default)]
pub struct Sightings {
    by_ip: BTreeMap<IpAddr, Sighting>,
}

impl Sightings {
    /// Record one conflicting frame seen on `interface` at `now`.
    pub fn record(&mut self, claim: &Claim, interface: &str, now: Instant) {
        if let Some(s) = self.by_ip.get_mut(&claim.ip) {
            if now.saturating_duration_since(s.last_seen) >= HOLD {
                s.first_seen = now;
                s.frames = 0;
                s.macs.clear();
            }
            s.mac = claim.mac;
            s.kind = claim.kind;
            if s.interface != interface {
                interface.clone_into(&mut s.interface);
            }
            s.last_seen = now;
            s.frames = s.frames.saturating_add(1);
            if s.macs.len() < MAX_MACS_COUNTED {
                s.macs.insert(claim.mac);
            }
            return;
        }
        if self.by_ip.len() >= MAX_TRACKED {
            return;
        }
        self.by_ip.insert(
            claim.ip,
            Sighting {
                mac: claim.mac,
                kind: claim.kind,
                interface: interface.to_owned(),
                first_seen: now,
                last_seen: now,
                frames: 1,
                macs: BTreeSet::from([claim.mac]),
            },
        );
    }

    /// Forget every IP `keep` rejects (no longer owned).
    pub fn retain(&mut self, keep: impl Fn(&IpAddr) -> bool) {
        self.by_ip.retain(|ip, _| keep(ip));
    }

    /// The current records.
    pub fn all(&self) -> &BTreeMap<IpAddr, Sighting> {
        &self.by_ip
    }
}

/// The bound on `IPConflict` reports (module docs): at most [`MAX_REPORTS_PER_IP`] per IP and
/// [`MAX_REPORTS_PER_SPEAKER`] in all within any [`EVENT_INTERVAL`]. One per speaker, shared by
/// [`ConflictPolicy`] and [`HeldReports`]. Holds at most [`MAX_REPORTS_PER_SPEAKER`] instants.
#[derive(Clone, Debug, Default)]
pub struct EventBudget {
    /// Every report of the window, oldest first, with its IP.
    spent: VecDeque<(Instant, IpAddr)>,
    /// Reports refused so far.
    withheld: u64,
}

impl EventBudget {
    /// Whether one more report about `ip` may go out at `now`; spends it when so, counts it as
    /// withheld when not. `now` never goes backwards between calls (monotonic clock).
    pub fn admit(&mut self, ip: IpAddr, now: Instant) -> bool {
        while self
            .spent
            .front()
            .is_some_and(|(at, _)| now.saturating_duration_since(*at) >= EVENT_INTERVAL)
        {
            self.spent.pop_front();
        }
        let about_ip = self.spent.iter().filter(|(_, i)| *i == ip).count();
        if self.spent.len() >= MAX_REPORTS_PER_SPEAKER || about_ip >= MAX_REPORTS_PER_IP {
            self.withheld = self.withheld.saturating_add(1);
            return false;
        }
        self.spent.push_back((now, ip));
        true
    }

    /// Reports refused since the start (a counter).
    pub fn withheld(&self) -> u64 {
        self.withheld
    }
}

/// One thing to tell about a conflict (a log line or an Event).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// The owned IP.
    pub ip: IpAddr,
    /// The foreign MAC.
    pub mac: MacAddr,
    /// The interface the claim arrived on.
    pub interface: String,
    /// The kind of the latest conflicting frame.
    pub kind: ClaimKind,
    /// Conflicting frames since the previous report of the same sort (log: since the last
    /// line; Event: in the episode).
    pub frames: u64,
    /// Distinct foreign MACs of the episode (at most [`MAX_MACS_COUNTED`]).
    pub macs: usize,
}

impl Report {
    /// The Event note / log text: names the IP, the foreign MAC, the interface and the policy.
    pub fn note(&self, node: &str) -> String {
        format!(
            "{head} on {iface} of {node} ({frames} conflicting frame(s) from {macs}, latest: {kind}): another host uses this address. {node} keeps answering for it and defends it at most once every {defend} s (RFC 5227 §2.4); remove the address from that host or from the pool",
            head = note_head(self.ip, &self.mac.to_string()),
            iface = self.interface,
            frames = self.frames,
            macs = macs_text(self.macs),
            kind = self.kind.label(),
            defend = DEFEND_INTERVAL.as_secs(),
        )
    }
}

/// What [`ConflictPolicy::step`] asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reaction {
    /// Send one defensive announcement of the IP on the interface.
    pub defend: Vec<(IpAddr, String)>,
    /// Log these (warning).
    pub log: Vec<Report>,
    /// Write a Warning Event `IPConflict` about these on the IP's Services.
    pub events: Vec<Report>,
    /// Owned IPs in conflict now (the gauge).
    pub in_conflict: usize,
}

#[derive(Clone, Debug, Default)]
struct IpState {
    last_defended: Option<Instant>,
    last_logged: Option<Instant>,
    frames_logged: u64,
    /// Last try of a report (sent or refused by the budget).
    last_try: Option<Instant>,
    /// Last report sent.
    last_reported: Option<Instant>,
    event_by_mac: BTreeMap<MacAddr, Instant>,
}

/// The rate limits of the module docs, per IP.
#[derive(Debug, Default)]
pub struct ConflictPolicy {
    by_ip: BTreeMap<IpAddr, IpState>,
}

fn due(last: Option<Instant>, now: Instant, interval: Duration) -> bool {
    last.is_none_or(|at| now.saturating_duration_since(at) >= interval)
}

impl ConflictPolicy {
    /// React to the responder's `sightings` at `now`; `owned` says which IPs this node owns now.
    /// Events are spent from `budget`; IPs reported longest ago (or never) first.
    pub fn step(
        &mut self,
        now: Instant,
        sightings: &BTreeMap<IpAddr, Sighting>,
        owned: impl Fn(IpAddr) -> bool,
        budget: &mut EventBudget,
    ) -> Reaction {
        let mut out = Reaction::default();
        self.by_ip
            .retain(|ip, _| sightings.contains_key(ip) && owned(*ip));
        // (last reported, IP, report): Events wanted this step, before the budget.
        let mut wanted: Vec<(Option<Instant>, IpAddr, Report)> = Vec::new();
        for (ip, s) in sightings {
            if !owned(*ip) {
                continue;
            }
            let current = now.saturating_duration_since(s.last_seen) < HOLD;
            if current {
                out.in_conflict += 1;
            }
            if now.saturating_duration_since(s.first_seen) < CONFIRM {
                continue;
            }
            let st = self.by_ip.entry(*ip).or_default();
            if st.frames_logged > s.frames {
                st.frames_logged = 0; // a new episode
            }
            let report = |frames| Report {
                ip: *ip,
                mac: s.mac,
                interface: s.interface.clone(),
                kind: s.kind,
                frames,
                macs: s.macs.len(),
            };
            let fresh = st.last_defended.is_none_or(|at| s.last_seen > at);
            if current && fresh && due(st.last_defended, now, DEFEND_INTERVAL) {
                st.last_defended = Some(now);
                out.defend.push((*ip, s.interface.clone()));
            }
            if s.frames > st.frames_logged && due(st.last_logged, now, LOG_INTERVAL) {
                out.log.push(report(s.frames - st.frames_logged));
                st.frames_logged = s.frames;
                st.last_logged = Some(now);
            }
            st.event_by_mac
                .retain(|_, at| now.saturating_duration_since(*at) < EVENT_INTERVAL);
            if current
                && due(st.last_try, now, LOG_INTERVAL)
                && !st.event_by_mac.contains_key(&s.mac)
            {
                wanted.push((st.last_reported, *ip, report(s.frames)));
            }
        }
        wanted.sort_by_key(|(last, ip, _)| (*last, *ip));
        for (_, ip, report) in wanted {
            let Some(st) = self.by_ip.get_mut(&ip) else {
                continue;
            };
            st.last_try = Some(now);
            if budget.admit(ip, now) {
                st.last_reported = Some(now);
                st.event_by_mac.insert(report.mac, now);
                out.events.push(report);
            }
        }
        out
    }
}

/// The Event note about an IP held after a probe ([`super::probe`]): names the IP, the foreign
/// MAC, the interface and what this node does.
pub fn held_note(ip: IpAddr, mac: MacAddr, interface: &str, node: &str, retry: Duration) -> String {
    format!(
        "{head} on {interface} of {node}: that host answered {node}'s probe before the first announcement, so {node} does not announce the address and clients keep reaching that host. {node} probes again every {retry} s and announces it once it is free; remove the address from that host or from the pool",
        head = note_head(ip, &mac.to_string()),
        retry = retry.as_secs_f32(),
    )
}

/// A held IP is reported once it has been held this long: a previous owner that withdrew late
/// (an election handover, `super::probe`) holds it for one short round at most and is not
/// reported as a foreign host.
pub const HELD_REPORT_AFTER: Duration = Duration::from_secs(2);

#[derive(Debug, Default)]
struct HeldState {
    /// MACs reported, and when (within [`EVENT_INTERVAL`]).
    said: BTreeMap<MacAddr, Instant>,
    /// Last try of a report (sent or refused by the budget).
    last_try: Option<Instant>,
    /// Last report sent.
    last_reported: Option<Instant>,
}

/// Says each held IP once per [`EVENT_INTERVAL`] per (IP, foreign MAC), once it has been held
/// for [`HELD_REPORT_AFTER`], at most once per [`LOG_INTERVAL`] per IP and within the
/// [`EventBudget`]: what [`HeldReports::step`] returns is logged and written as an `IPConflict`
/// Event. A host that answers each probe round from a new MAC gets no more Events than the
/// budget allows.
#[derive(Debug, Default)]
pub struct HeldReports {
    by_ip: BTreeMap<IpAddr, HeldState>,
}

impl HeldReports {
    /// The held IPs (`(ip, mac, interface, held since)`) to report at `now`; forgets IPs no
    /// longer held. Spends from `budget`; IPs reported longest ago (or never) first.
    pub fn step<'a>(
        &mut self,
        now: Instant,
        held: impl IntoIterator<Item = (IpAddr, MacAddr, &'a str, Instant)>,
        budget: &mut EventBudget,
    ) -> Vec<(IpAddr, MacAddr, &'a str)> {
        let held: Vec<_> = held.into_iter().collect();
        self.by_ip
            .retain(|ip, _| held.iter().any(|(i, _, _, _)| i == ip));
        let mut wanted = Vec::new();
        for (ip, mac, interface, since) in held {
            let st = self.by_ip.entry(ip).or_default();
            st.said
                .retain(|_, at| now.saturating_duration_since(*at) < EVENT_INTERVAL);
            if now.saturating_duration_since(since) < HELD_REPORT_AFTER
                || st.said.contains_key(&mac)
                || !due(st.last_try, now, LOG_INTERVAL)
            {
                continue;
            }
            wanted.push((st.last_reported, ip, mac, interface));
        }
        wanted.sort_by_key(|(last, ip, _, _)| (*last, *ip));
        let mut out = Vec::new();
        for (_, ip, mac, interface) in wanted {
            let st = self.by_ip.entry(ip).or_default();
            st.last_try = Some(now);
            if budget.admit(ip, now) {
                st.last_reported = Some(now);
                st.said.insert(mac, now);
                out.push((ip, mac, interface));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const FOREIGN: MacAddr = MacAddr(2, 0, 0, 0, 0, 0x66);
    const OTHER: MacAddr = MacAddr(2, 0, 0, 0, 0, 0x77);

    fn ip() -> IpAddr {
        "198.51.100.70".parse().unwrap()
    }

    fn claim(mac: MacAddr) -> Claim {
        Claim {
            ip: ip(),
            mac,
            kind: ClaimKind::ArpSender,
            proof: None,
        }
    }

    /// A foreign host sends a conflicting frame every 100 ms for 60 s: one defence per 10 s, one
    /// log line per 10 s, one Event; nothing during the first second (handover grace).
    #[test]
    fn a_flood_of_conflicting_frames_is_rate_limited() {
        let t0 = Instant::now();
        let (mut seen, mut policy) = (Sightings::default(), ConflictPolicy::default());
        let mut budget = EventBudget::default();
        let (mut defences, mut logs, mut events) = (Vec::new(), 0, 0);
        for i in 0..600u32 {
            let now = t0 + Duration::from_millis(100) * i;
            seen.record(&claim(FOREIGN), "eth0", now);
            let r = policy.step(now, seen.all(), |_| true, &mut budget);
            assert_eq!(r.in_conflict, 1);
            if now - t0 < CONFIRM {
                assert_eq!(
                    r,
                    Reaction {
                        in_conflict: 1,
                        ..Default::default()
                    }
                );
            }
            for (ip_, iface) in &r.defend {
                assert_eq!((*ip_, iface.as_str()), (ip(), "eth0"));
                defences.push(now - t0);
            }
            logs += r.log.len();
            events += r.events.len();
        }
        assert_eq!(
            defences,
            (1..=6)
                .map(|s| Duration::from_secs(s * 10 - 9))
                .collect::<Vec<_>>()
        );
        assert_eq!(logs, 6);
        assert_eq!(events, 1);
    }

    /// The new owner's announcements reach the old owner just before it withdraws: no defence,
    /// no log, no Event.
    #[test]
    fn a_handover_is_not_a_conflict() {
        let t0 = Instant::now();
        let (mut seen, mut policy) = (Sightings::default(), ConflictPolicy::default());
        let mut budget = EventBudget::default();
        seen.record(&claim(FOREIGN), "eth0", t0);
        let r = policy.step(
            t0 + Duration::from_millis(300),
            seen.all(),
            |_| true,
            &mut budget,
        );
        assert!(r.defend.is_empty() && r.log.is_empty() && r.events.is_empty());
        // Withdrawn: the responder forgets the IP; the policy with it.
        seen.retain(|_| false);
        let r = policy.step(
            t0 + Duration::from_secs(2),
            seen.all(),
            |_| false,
            &mut budget,
        );
        assert_eq!(r, Reaction::default());
        // Still owned but the sighting says it is not: nothing either.
        seen.record(&claim(FOREIGN), "eth0", t0);
        let r = policy.step(
            t0 + Duration::from_secs(2),
            seen.all(),
            |_| false,
            &mut budget,
        );
        assert_eq!(r, Reaction::default());
    }

    /// One frame: one defence after the confirmation, one log line, one Event; nothing again.
    /// A second MAC gets its own Event, not before [`LOG_INTERVAL`]; an episode ends after
    /// [`HOLD`].
    #[test]
    fn events_per_mac_and_episodes() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let (mut seen, mut policy) = (Sightings::default(), ConflictPolicy::default());
        let mut budget = EventBudget::default();
        seen.record(&claim(FOREIGN), "eth0", t0);
        let r = policy.step(at(1000), seen.all(), |_| true, &mut budget);
        assert_eq!(r.defend.len(), 1);
        assert_eq!(r.log.len(), 1);
        assert_eq!(r.events.len(), 1);
        assert!(
            r.events[0]
                .note("node-1")
                .contains("02:00:00:00:00:66 on eth0 of node-1")
        );
        let r = policy.step(at(15_000), seen.all(), |_| true, &mut budget);
        assert!(r.defend.is_empty() && r.log.is_empty() && r.events.is_empty());

        seen.record(&claim(OTHER), "eth1", at(15_100));
        let r = policy.step(at(15_200), seen.all(), |_| true, &mut budget);
        assert_eq!(r.defend, vec![(ip(), "eth1".to_owned())]);
        assert_eq!(r.events.len(), 1);
        assert_eq!(r.events[0].mac, OTHER);
        assert_eq!(r.log[0].frames, 1);
        // FOREIGN again within 5 minutes: no second Event for it.
        seen.record(&claim(FOREIGN), "eth0", at(30_000));
        let r = policy.step(at(30_000), seen.all(), |_| true, &mut budget);
        assert!(r.events.is_empty());
        assert_eq!(r.defend.len(), 1);

        // Quiet for longer than HOLD: out of conflict; a new frame is a new episode.
        let later = at(30_000) + HOLD;
        assert_eq!(
            policy
                .step(later, seen.all(), |_| true, &mut budget)
                .in_conflict,
            0
        );
        seen.record(&claim(FOREIGN), "eth0", later);
        let r = policy.step(later, seen.all(), |_| true, &mut budget);
        assert_eq!((r.in_conflict, r.defend.len()), (1, 0), "confirm again");
        let r = policy.step(later + CONFIRM, seen.all(), |_| true, &mut budget);
        assert_eq!(r.defend.len(), 1);
        assert_eq!(r.log[0].frames, 1);
    }

    #[test]
    fn tracking_is_bounded() {
        let t0 = Instant::now();
        let mut seen = Sightings::default();
        for i in 0..(MAX_TRACKED as u32 + 10) {
            let c = Claim {
                ip: IpAddr::V4(i.into()),
                mac: FOREIGN,
                kind: ClaimKind::ArpProbe,
                proof: None,
            };
            seen.record(&c, "eth0", t0);
        }
        assert_eq!(seen.all().len(), MAX_TRACKED);
    }

    #[test]
    fn held_ips_are_reported_once_per_event_interval() {
        let t0 = Instant::now();
        let mut r = HeldReports::default();
        let mut budget = EventBudget::default();
        let held = [(ip(), FOREIGN, "eth0", t0)];
        assert!(
            r.step(t0, held, &mut budget).is_empty(),
            "not before HELD_REPORT_AFTER"
        );
        let t1 = t0 + HELD_REPORT_AFTER;
        assert_eq!(r.step(t1, held, &mut budget), vec![(ip(), FOREIGN, "eth0")]);
        assert!(
            r.step(t1 + Duration::from_secs(10), held, &mut budget)
                .is_empty()
        );
        assert_eq!(r.step(t1 + EVENT_INTERVAL, held, &mut budget).len(), 1);
        // Released and held again: said again once held long enough.
        assert!(r.step(t1 + EVENT_INTERVAL, [], &mut budget).is_empty());
        let again = [(ip(), FOREIGN, "eth0", t1 + EVENT_INTERVAL)];
        assert!(r.step(t1 + EVENT_INTERVAL, again, &mut budget).is_empty());
        assert_eq!(
            r.step(t1 + EVENT_INTERVAL + HELD_REPORT_AFTER, again, &mut budget)
                .len(),
            1
        );
        let note = held_note(ip(), FOREIGN, "eth0", "node-1", Duration::from_secs(5));
        assert_eq!(
            ferrolb_crds::conflict_event::parse_note(&note),
            Some((ip(), "02:00:00:00:00:66".to_owned()))
        );
        assert!(note.contains("does not announce"), "{note}");
    }

    /// A locally administered unicast MAC numbered `n`: what a host forging a fresh MAC per
    /// frame sends.
    fn forged(n: u32) -> MacAddr {
        let [a, b, c, d] = n.to_be_bytes();
        MacAddr(0x02, 0x5e, a, b, c, d)
    }

    fn claim_of(ip: IpAddr, mac: MacAddr) -> Claim {
        Claim {
            ip,
            mac,
            kind: ClaimKind::ArpSender,
            proof: None,
        }
    }

    /// The most reports within any window of [`EVENT_INTERVAL`] starting at a report.
    fn most_in_a_window(times: &[Instant]) -> usize {
        times
            .iter()
            .map(|t| {
                times
                    .iter()
                    .filter(|u| **u >= *t && u.saturating_duration_since(*t) < EVENT_INTERVAL)
                    .count()
            })
            .max()
            .unwrap_or(0)
    }

    /// Issue #27 item 4: a host claims one owned IP every 100 ms for 30 minutes, each frame from
    /// a MAC never seen before. Without the budget every frame's MAC is new to the per-(IP, MAC)
    /// rule and an Event went out every 10 s (30 per 5 minutes); now at most
    /// [`MAX_REPORTS_PER_IP`] in any 5 minutes, the notes count the MACs, and the refusals are
    /// counted.
    #[test]
    fn a_fresh_mac_per_frame_gets_at_most_the_per_ip_bound() {
        let t0 = Instant::now();
        let (mut seen, mut policy) = (Sightings::default(), ConflictPolicy::default());
        let mut budget = EventBudget::default();
        let mut reports = Vec::new();
        let mut notes = Vec::new();
        for i in 0..18_000u32 {
            let now = t0 + Duration::from_millis(100) * i;
            seen.record(&claim_of(ip(), forged(i)), "eth0", now);
            let r = policy.step(now, seen.all(), |_| true, &mut budget);
            for e in &r.events {
                reports.push(now);
                notes.push(e.note("node-1"));
            }
            // Defence and logs keep their own per-IP limits, unchanged.
            assert!(r.defend.len() <= 1 && r.log.len() <= 1);
        }
        assert!(!reports.is_empty());
        assert!(
            most_in_a_window(&reports) <= MAX_REPORTS_PER_IP,
            "{} reports: {:?}",
            reports.len(),
            reports.iter().map(|t| *t - t0).collect::<Vec<_>>()
        );
        // 30 minutes are 6 windows.
        assert!(reports.len() <= 6 * MAX_REPORTS_PER_IP, "{}", reports.len());
        assert!(budget.withheld() > 0);
        assert!(
            notes.last().unwrap().contains("from 32 or more MACs"),
            "{}",
            notes.last().unwrap()
        );
    }

    /// Issue #27 item 4: the same flood on 100 owned IPs at once. At most
    /// [`MAX_REPORTS_PER_SPEAKER`] reports in any 5 minutes over all IPs, at most
    /// [`MAX_REPORTS_PER_IP`] per IP, and every IP is named in turn (the IPs reported longest
    /// ago, or never, go first): all 100 within five windows.
    #[test]
    fn a_flood_on_many_ips_is_bounded_per_speaker_and_names_every_ip_in_turn() {
        let t0 = Instant::now();
        let ips: Vec<IpAddr> = (0..100u32)
            .map(|i| IpAddr::V4(std::net::Ipv4Addr::from(0xc633_6400 + i)))
            .collect();
        let (mut seen, mut policy) = (Sightings::default(), ConflictPolicy::default());
        let mut budget = EventBudget::default();
        let mut all = Vec::new();
        let mut by_ip: BTreeMap<IpAddr, Vec<Instant>> = BTreeMap::new();
        let mut mac = 0u32;
        for s in 0..(40 * 60u32) {
            let now = t0 + Duration::from_secs(u64::from(s));
            for ip in &ips {
                mac += 1;
                seen.record(&claim_of(*ip, forged(mac)), "eth0", now);
            }
            for e in policy.step(now, seen.all(), |_| true, &mut budget).events {
                all.push(now);
                by_ip.entry(e.ip).or_default().push(now);
            }
            if s == 5 * 5 * 60 {
                assert_eq!(by_ip.len(), ips.len(), "every IP named within 5 windows");
            }
        }
        assert!(most_in_a_window(&all) <= MAX_REPORTS_PER_SPEAKER);
        for times in by_ip.values() {
            assert!(most_in_a_window(times) <= MAX_REPORTS_PER_IP);
        }
        // The speaker's budget is used, not left idle: 8 windows' worth.
        assert!(all.len() >= 7 * MAX_REPORTS_PER_SPEAKER, "{}", all.len());
    }

    /// Issue #27 item 4, the held path: a host answers every probe round (every 5 s) from a new
    /// MAC for 30 minutes. Without the per-IP bound every new MAC was an Event; now at most
    /// [`MAX_REPORTS_PER_IP`] per 5 minutes. Held and announced reports spend one budget.
    #[test]
    fn a_held_ip_answered_from_fresh_macs_gets_at_most_the_per_ip_bound() {
        let t0 = Instant::now();
        let mut r = HeldReports::default();
        let mut budget = EventBudget::default();
        let mut times = Vec::new();
        for round in 0..360u32 {
            let now = t0 + Duration::from_secs(5) * round;
            // The same IP, held since the first round, by the MAC of this round.
            let held = [(ip(), forged(round), "eth0", t0)];
            times.extend(r.step(now, held, &mut budget).iter().map(|_| now));
        }
        assert!(!times.is_empty());
        assert!(most_in_a_window(&times) <= MAX_REPORTS_PER_IP, "{times:?}");

        // One budget: a speaker that spent it on announced IPs says nothing about a held one
        // until the window moves on.
        let mut budget = EventBudget::default();
        let t1 = t0 + Duration::from_secs(3600);
        for i in 0..MAX_REPORTS_PER_SPEAKER as u32 {
            assert!(budget.admit(IpAddr::V4(std::net::Ipv4Addr::from(i)), t1));
        }
        let mut r = HeldReports::default();
        let held = [(ip(), FOREIGN, "eth0", t0)];
        assert!(r.step(t1, held, &mut budget).is_empty());
        assert_eq!(budget.withheld(), 1);
        assert!(
            r.step(t1 + LOG_INTERVAL, held, &mut budget).is_empty(),
            "still spent"
        );
        assert_eq!(
            r.step(t1 + EVENT_INTERVAL, held, &mut budget),
            vec![(ip(), FOREIGN, "eth0")]
        );
    }

    #[test]
    fn the_budget_is_a_sliding_window_per_ip_and_per_speaker() {
        let t0 = Instant::now();
        let mut b = EventBudget::default();
        let a = ip();
        for _ in 0..MAX_REPORTS_PER_IP {
            assert!(b.admit(a, t0));
        }
        assert!(!b.admit(a, t0 + EVENT_INTERVAL - Duration::from_millis(1)));
        assert!(b.admit(a, t0 + EVENT_INTERVAL));
        assert_eq!(b.withheld(), 1);
        // Other IPs fill the speaker's share.
        let mut b = EventBudget::default();
        for i in 0..MAX_REPORTS_PER_SPEAKER as u32 {
            assert!(b.admit(IpAddr::V4(std::net::Ipv4Addr::from(i)), t0));
        }
        assert!(!b.admit(a, t0 + Duration::from_secs(1)));
        assert!(b.admit(a, t0 + EVENT_INTERVAL));
    }
}
