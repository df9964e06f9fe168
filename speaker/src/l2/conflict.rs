//! What the owner does when another host claims one of its IPs (issue #10 item 5). Pure: no
//! `tokio`, no `kube`; the responder records [`Sighting`]s ([`super::decide::Claim`]s per IP) and
//! the daemon runs [`ConflictPolicy::step`] on them every few hundred milliseconds.
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
//! - **Warn on the Service** (Event `IPConflict`) at most once per [`EVENT_INTERVAL`] per (IP,
//!   foreign MAC), and at most once per [`LOG_INTERVAL`] per IP whatever the MAC (a host forging
//!   a new MAC per frame cannot flood the API server).
//! - An IP is **in conflict** (gauge `ip_conflicts`) while its last conflicting frame is less
//!   than [`HOLD`] old; a later frame after a longer quiet starts a new episode (confirmed again).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use ferrolb_crds::conflict_event::note_head;

use crate::wire::MacAddr;

use super::decide::{Claim, ClaimKind};

/// RFC 5227 §1.1 `DEFEND_INTERVAL`: at most one defensive announcement per IP this often.
pub const DEFEND_INTERVAL: Duration = Duration::from_secs(10);
/// At most one log line per IP this often.
pub const LOG_INTERVAL: Duration = Duration::from_secs(10);
/// At most one `IPConflict` Event per (IP, foreign MAC) this often.
pub const EVENT_INTERVAL: Duration = Duration::from_secs(300);
/// How long an IP must stay owned after the first conflicting frame before the owner reacts
/// (longer than an election handover between speakers).
pub const CONFIRM: Duration = Duration::from_secs(1);
/// An IP is in conflict until this long after its last conflicting frame.
pub const HOLD: Duration = Duration::from_secs(60);
/// Most IPs tracked at once by [`Sightings`] (only owned IPs are recorded).
pub const MAX_TRACKED: usize = 4096;

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
}

/// The responder's record of conflicts, per owned IP (bounded by [`MAX_TRACKED`]).
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
            }
            s.mac = claim.mac;
            s.kind = claim.kind;
            if s.interface != interface {
                interface.clone_into(&mut s.interface);
            }
            s.last_seen = now;
            s.frames = s.frames.saturating_add(1);
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
}

impl Report {
    /// The Event note / log text: names the IP, the foreign MAC, the interface and the policy.
    pub fn note(&self, node: &str) -> String {
        format!(
            "{head} on {iface} of {node} ({frames} conflicting frame(s), latest: {kind}): another host uses this address. {node} keeps answering for it and defends it at most once every {defend} s (RFC 5227 §2.4); remove the address from that host or from the pool",
            head = note_head(self.ip, &self.mac.to_string()),
            iface = self.interface,
            frames = self.frames,
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
    last_event: Option<Instant>,
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
    pub fn step(
        &mut self,
        now: Instant,
        sightings: &BTreeMap<IpAddr, Sighting>,
        owned: impl Fn(IpAddr) -> bool,
    ) -> Reaction {
        let mut out = Reaction::default();
        self.by_ip
            .retain(|ip, _| sightings.contains_key(ip) && owned(*ip));
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
                && due(st.last_event, now, LOG_INTERVAL)
                && !st.event_by_mac.contains_key(&s.mac)
            {
                st.last_event = Some(now);
                st.event_by_mac.insert(s.mac, now);
                out.events.push(report(s.frames));
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

/// Says each held IP once per [`EVENT_INTERVAL`] per (IP, foreign MAC), once it has been held
/// for [`HELD_REPORT_AFTER`]: what [`HeldReports::step`] returns is logged and written as an
/// `IPConflict` Event.
#[derive(Debug, Default)]
pub struct HeldReports {
    said: BTreeMap<(IpAddr, MacAddr), Instant>,
}

impl HeldReports {
    /// The held IPs (`(ip, mac, interface, held since)`) to report at `now`; forgets IPs no
    /// longer held.
    pub fn step<'a>(
        &mut self,
        now: Instant,
        held: impl IntoIterator<Item = (IpAddr, MacAddr, &'a str, Instant)>,
    ) -> Vec<(IpAddr, MacAddr, &'a str)> {
        let held: Vec<_> = held.into_iter().collect();
        self.said.retain(|(ip, mac), at| {
            held.iter().any(|(i, m, _, _)| i == ip && m == mac)
                && now.saturating_duration_since(*at) < EVENT_INTERVAL
        });
        let mut out = Vec::new();
        for (ip, mac, interface, since) in held {
            if now.saturating_duration_since(since) < HELD_REPORT_AFTER {
                continue;
            }
            if let std::collections::btree_map::Entry::Vacant(v) = self.said.entry((ip, mac)) {
                v.insert(now);
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
        let (mut defences, mut logs, mut events) = (Vec::new(), 0, 0);
        for i in 0..600u32 {
            let now = t0 + Duration::from_millis(100) * i;
            seen.record(&claim(FOREIGN), "eth0", now);
            let r = policy.step(now, seen.all(), |_| true);
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
        seen.record(&claim(FOREIGN), "eth0", t0);
        let r = policy.step(t0 + Duration::from_millis(300), seen.all(), |_| true);
        assert!(r.defend.is_empty() && r.log.is_empty() && r.events.is_empty());
        // Withdrawn: the responder forgets the IP; the policy with it.
        seen.retain(|_| false);
        let r = policy.step(t0 + Duration::from_secs(2), seen.all(), |_| false);
        assert_eq!(r, Reaction::default());
        // Still owned but the sighting says it is not: nothing either.
        seen.record(&claim(FOREIGN), "eth0", t0);
        let r = policy.step(t0 + Duration::from_secs(2), seen.all(), |_| false);
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
        seen.record(&claim(FOREIGN), "eth0", t0);
        let r = policy.step(at(1000), seen.all(), |_| true);
        assert_eq!(r.defend.len(), 1);
        assert_eq!(r.log.len(), 1);
        assert_eq!(r.events.len(), 1);
        assert!(
            r.events[0]
                .note("node-1")
                .contains("02:00:00:00:00:66 on eth0 of node-1")
        );
        let r = policy.step(at(15_000), seen.all(), |_| true);
        assert!(r.defend.is_empty() && r.log.is_empty() && r.events.is_empty());

        seen.record(&claim(OTHER), "eth1", at(15_100));
        let r = policy.step(at(15_200), seen.all(), |_| true);
        assert_eq!(r.defend, vec![(ip(), "eth1".to_owned())]);
        assert_eq!(r.events.len(), 1);
        assert_eq!(r.events[0].mac, OTHER);
        assert_eq!(r.log[0].frames, 1);
        // FOREIGN again within 5 minutes: no second Event for it.
        seen.record(&claim(FOREIGN), "eth0", at(30_000));
        let r = policy.step(at(30_000), seen.all(), |_| true);
        assert!(r.events.is_empty());
        assert_eq!(r.defend.len(), 1);

        // Quiet for longer than HOLD: out of conflict; a new frame is a new episode.
        let later = at(30_000) + HOLD;
        assert_eq!(policy.step(later, seen.all(), |_| true).in_conflict, 0);
        seen.record(&claim(FOREIGN), "eth0", later);
        let r = policy.step(later, seen.all(), |_| true);
        assert_eq!((r.in_conflict, r.defend.len()), (1, 0), "confirm again");
        let r = policy.step(later + CONFIRM, seen.all(), |_| true);
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
        let held = [(ip(), FOREIGN, "eth0", t0)];
        assert!(r.step(t0, held).is_empty(), "not before HELD_REPORT_AFTER");
        let t1 = t0 + HELD_REPORT_AFTER;
        assert_eq!(r.step(t1, held), vec![(ip(), FOREIGN, "eth0")]);
        assert!(r.step(t1 + Duration::from_secs(10), held).is_empty());
        assert_eq!(r.step(t1 + EVENT_INTERVAL, held).len(), 1);
        // Released and held again: said again once held long enough.
        assert!(r.step(t1 + EVENT_INTERVAL, []).is_empty());
        let again = [(ip(), FOREIGN, "eth0", t1 + EVENT_INTERVAL)];
        assert!(r.step(t1 + EVENT_INTERVAL, again).is_empty());
        assert_eq!(
            r.step(t1 + EVENT_INTERVAL + HELD_REPORT_AFTER, again).len(),
            1
        );
        let note = held_note(ip(), FOREIGN, "eth0", "node-1", Duration::from_secs(5));
        assert_eq!(
            ferrolb_crds::conflict_event::parse_note(&note),
            Some((ip(), "02:00:00:00:00:66".to_owned()))
        );
        assert!(note.contains("does not announce"), "{note}");
    }
}
