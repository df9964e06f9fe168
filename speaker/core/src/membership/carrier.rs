//! The carrier report on the wire (issue #32 G5.5): every speaker tells every member, sealed,
//! which of its interfaces have carrier ([`crate::carrier::LinkReport`]), so that all of them
//! apply the same eligibility rule ([`crate::carrier`]). Pure; [`super::MembershipCore`] seals,
//! sends and opens.
//!
//! - A [`CarrierMsg`] (kind byte [`KIND_CARRIER`]) goes to each active member identity: when
//!   this speaker's report changes (to every member at once, then again [`CARRIER_REPEATS`]
//!   times [`CARRIER_REPEAT`] apart), when a member identity is seen for the first time (a join,
//!   a restart, a renewal), when this speaker's own identity changes (a rejoin), and to every
//!   member every [`CARRIER_REFRESH`].
//! - **Repeats.** There is no acknowledgement. A lost *changed* report used to wait for the next
//!   refresh round, up to 1 s: a withdrawn speaker's report lost once under 2 % loss left its IPs
//!   unanswered 1.00–1.10 s, past T_fo (simulator case
//!   `a_withdrawn_report_lost_once_is_repeated_within_the_failover_bound`). So a change, ours or
//!   one relayed, is sent again [`CARRIER_REPEATS`] times [`CARRIER_REPEAT`] apart: a change is
//!   lost only if all four sends are (p⁴, 1.6·10⁻⁷ at 2 % loss), and the repair comes within
//!   the probe period. Cost: 3 × (N − 1) datagrams per change of a speaker's own report, and
//!   3 × (N − 2) per relaying member for a changed restricting report; a steady cluster repeats
//!   nothing.
//! - It is authenticated and replay-checked like SWIM and the hello (sealed; timestamp window
//!   and nonce cache), addressed to the receiver's identity (a capture replayed to another
//!   member is `misdirected`), and ordered by the sender's counter [`CarrierMsg::seq`] within one
//!   identity and by generation across identities: an older report never overrides a newer one,
//!   so a recorded report cannot bring back a link state. Nothing unauthenticated reaches it
//!   (DESIGN S15, G4).
//! - Only the reports of the identities the membership lists now count
//!   ([`CarrierBook::reports`]): a restarted or renewed peer counts as reporting nothing until
//!   its new identity's first report, which it sends at once. A report not refreshed within
//!   [`CARRIER_MEMORY`] is forgotten. No report means "eligible as before G5.5"
//!   ([`crate::carrier`] says why that is safe).
//! - **Relayed** ([`RelayMsg`], kind byte [`KIND_CARRIER_RELAY`]). The direct path from a
//!   sender to one member can be cut one way while SWIM keeps the sender listed there through
//!   indirect probes; that member then never gets the report and plans the sender as eligible
//!   while the others do not — nobody answered the sender's IPs for the cut's length (simulator
//!   case `a_carrier_report_lost_behind_a_one_way_cut_leaves_no_ip_unanswered`). So every
//!   speaker also passes on the reports it heard *directly* that matter: those that say a link
//!   lacks carrier or that the speaker has withdrawn ([`LinkReport::restricts`]), and any report for [`CARRIER_MEMORY`] after one that did or after its
//!   content changed (so an "up again" overrides a stale "down" a member holds, even one this
//!   speaker missed). Each goes to every other member once when it arrives changed and once
//!   per [`CARRIER_REFRESH`] round; a healthy cluster relays nothing, a cold start or a
//!   restart included (a first report overrides nothing: relaying it cost N³ sealed datagrams
//!   a round for 10 s, 117,600 at 50 nodes).
//!   The relayed report is the origin's, ordered by its identity and counter like a direct one;
//!   only reports heard from their origin are relayed, and a relay carries its age (since the
//!   relayer's copy was last known fresh from the origin), so a report passed back and forth
//!   never outlives its origin's last send by more than [`CARRIER_MEMORY`] and the transit times.
//! - **Roll-out.** A speaker of the previous protocol sends no report and drops ours (and the
//!   relays) as `malformed` (counted): it is judged without carrier reports, as it judges the
//!   others. A speaker before [`LinkReport::withdrawn`] reads our reports without it (the
//!   field is last) and sends reports we decode with it `false` (`decode_msg`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::identity::{MAX_NODE_NAME_LEN, SpeakerId};
use super::machine::DropReason;
use crate::carrier::{Carriers, LinkReport, MAX_PREFIXES};

/// First plaintext byte of a sealed [`CarrierMsg`] (0 SWIM, 1 lease, 2 hello, 4 relay).
pub const KIND_CARRIER: u8 = 3;

/// First plaintext byte of a sealed [`RelayMsg`].
pub const KIND_CARRIER_RELAY: u8 = 4;

/// How often every member gets this speaker's report again, changed or not.
pub const CARRIER_REFRESH: Duration = Duration::from_secs(1);

/// How far apart a changed report is sent again ([module docs](self)): the `fast` probe period.
pub const CARRIER_REPEAT: Duration = Duration::from_millis(100);

/// How many times a changed report is sent again after its first send.
pub const CARRIER_REPEATS: u32 = 3;

/// How long a peer's report counts after it arrived without a newer one: ten refreshes.
pub const CARRIER_MEMORY: Duration = Duration::from_secs(10);

/// Most links a report carries, and most names remembered.
pub const MAX_LINKS: usize = 32;

/// Most peer names whose report is remembered.
pub const MAX_REPORTS: usize = 4096;

/// One speaker's carrier report to one member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CarrierMsg {
    /// The sender's current identity.
    pub src: SpeakerId,
    /// The addressee's identity as the sender knows it.
    pub dst: SpeakerId,
    /// The sender's report counter: one more for every *change* of its report, from 0 when its
    /// process starts (refreshes repeat the number).
    pub seq: u64,
    /// The report.
    pub report: LinkReport,
}

/// A peer's report passed on by a member that heard it directly ([module docs](self)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelayMsg {
    /// The relaying speaker's current identity (the datagram's sender).
    pub via: SpeakerId,
    /// How long before sending the relayer knew the report fresh from its origin
    /// (milliseconds): the receiver forgets it [`CARRIER_MEMORY`] after that, not after the
    /// relay, so no report outlives its origin's last send by passing back and forth.
    pub age_ms: u32,
    /// The report as its origin sent it, addressed (`dst`) to the receiver of the relay.
    pub msg: CarrierMsg,
}

/// `msg` encoded in at most `limit` bytes: links are dropped from the end of the report until
/// it fits (a link left out counts as unreported: [`crate::carrier`]). `None` when even an
/// empty report does not fit (names of 253 bytes and a tiny configured packet size).
pub fn encode(mut msg: CarrierMsg, limit: usize) -> Option<Vec<u8>> {
    loop {
        let body = postcard::to_allocvec(&msg).ok()?;
        if body.len() <= limit {
            return Some(body);
        }
        msg.report.links.pop()?;
    }
}

/// [`encode`] for a relay.
pub fn encode_relay(mut relay: RelayMsg, limit: usize) -> Option<Vec<u8>> {
    loop {
        let body = postcard::to_allocvec(&relay).ok()?;
        if body.len() <= limit {
            return Some(body);
        }
        relay.msg.report.links.pop()?;
    }
}

/// [`LinkReport`] as speakers before [`LinkReport::withdrawn`] encode it.
#[derive(Deserialize)]
struct LegacyReport {
    links: Vec<crate::carrier::Link>,
}

/// [`CarrierMsg`] as speakers before [`LinkReport::withdrawn`] encode it.
#[derive(Deserialize)]
struct LegacyMsg {
    src: SpeakerId,
    dst: SpeakerId,
    seq: u64,
    report: LegacyReport,
}

impl From<LegacyMsg> for CarrierMsg {
    fn from(m: LegacyMsg) -> Self {
        CarrierMsg {
            src: m.src,
            dst: m.dst,
            seq: m.seq,
            report: LinkReport {
                links: m.report.links,
                withdrawn: false,
            },
        }
    }
}

/// [`RelayMsg`] as speakers before [`LinkReport::withdrawn`] encode it.
#[derive(Deserialize)]
struct LegacyRelay {
    via: SpeakerId,
    age_ms: u32,
    msg: LegacyMsg,
}

/// Decodes a [`CarrierMsg`] body, of this layout or of the one before
/// [`LinkReport::withdrawn`] (then `withdrawn` is `false`: judged as before). The field is last
/// in the body, so speakers before it read ours too (postcard ignores trailing bytes).
///
/// # Errors
/// [`DropReason::Rejected`] when neither layout decodes.
fn decode_msg(body: &[u8]) -> Result<CarrierMsg, DropReason> {
    postcard::from_bytes::<CarrierMsg>(body)
        .or_else(|_| postcard::from_bytes::<LegacyMsg>(body).map(CarrierMsg::from))
        .map_err(|_| DropReason::Rejected)
}

/// [`decode_msg`] for a [`RelayMsg`].
///
/// # Errors
/// [`DropReason::Rejected`] when neither layout decodes.
fn decode_relay(body: &[u8]) -> Result<RelayMsg, DropReason> {
    postcard::from_bytes::<RelayMsg>(body)
        .or_else(|_| {
            postcard::from_bytes::<LegacyRelay>(body).map(|r| RelayMsg {
                via: r.via,
                age_ms: r.age_ms,
                msg: r.msg.into(),
            })
        })
        .map_err(|_| DropReason::Rejected)
}

/// A peer's newest report as held.
#[derive(Debug, Clone)]
struct Held {
    /// The latest instant it is known to have come from its origin: its arrival, or for a
    /// relay the relayer's own (the relay's age).
    heard: Instant,
    src: SpeakerId,
    seq: u64,
    report: LinkReport,
    /// Heard from its origin itself at least once (only those are relayed).
    direct: bool,
    /// The last instant a report held from this origin (by name, any identity) said a link
    /// lacks carrier, or was replaced by one with other content (a first report is no
    /// replacement): until [`CARRIER_MEMORY`] after it, an "up" report is relayed too.
    down_at: Option<Instant>,
}

impl Held {
    /// Whether the report held can exclude its node: a link lacks carrier, or the speaker has
    /// withdrawn ([`LinkReport::restricts`]). Such reports are relayed.
    fn restricts(&self) -> bool {
        self.report.restricts()
    }
}

/// The changes still to be sent again ([`CARRIER_REPEAT`]).
#[derive(Debug, Default)]
struct Repeats {
    /// Our own report changed.
    own: bool,
    /// Origins whose report changed on arrival from them (only those are relayed).
    origins: HashSet<String>,
    /// Sends still owed; 0 when nothing is.
    left: u32,
    /// When the next is due (`None` before the first send of a change of our own report).
    next: Option<Instant>,
}

/// The reports held and sent by one speaker.
#[derive(Debug, Default)]
pub struct CarrierBook {
    /// Our report and its number, once the executor gave one.
    own: Option<(u64, LinkReport)>,
    next_seq: u64,
    /// Our identity the last messages were sent from (a change resends to everyone).
    sent_as: Option<SpeakerId>,
    /// Member identities that have our current report this round.
    sent: HashSet<SpeakerId>,
    next_round: Option<Instant>,
    /// Per peer name: its newest report.
    peers: BTreeMap<String, Held>,
    /// Per origin name: the member identities its report went to this round.
    relayed: HashMap<String, HashSet<SpeakerId>>,
    repeats: Repeats,
}

impl CarrierBook {
    /// Sets our report; `true` when it changed (every member gets it at the next
    /// [`Self::outgoing`]).
    pub fn set_own(&mut self, report: LinkReport) -> bool {
        if self.own.as_ref().is_some_and(|(_, r)| *r == report) {
            return false;
        }
        let mut report = report;
        report.links.truncate(MAX_LINKS);
        for link in &mut report.links {
            link.prefixes.truncate(MAX_PREFIXES);
        }
        self.own = Some((self.next_seq, report));
        self.next_seq = self.next_seq.wrapping_add(1);
        self.sent.clear();
        self.repeats.own = true;
        self.repeats.left = CARRIER_REPEATS;
        true
    }

    /// The messages owed now, from `me` to the `members` (their current identities): each
    /// member that has not had our current report this round gets it. Nothing before the
    /// executor gave a report.
    pub fn outgoing(
        &mut self,
        me: &SpeakerId,
        members: impl IntoIterator<Item = SpeakerId>,
        now: Instant,
    ) -> Vec<CarrierMsg> {
        let Some((seq, report)) = &self.own else {
            return Vec::new();
        };
        if self.sent_as.as_ref() != Some(me) {
            self.sent_as = Some(me.clone());
            self.sent.clear();
        }
        if self.next_round.is_none() {
            self.next_round = now.checked_add(CARRIER_REFRESH);
        }
        if self.repeats.left > 0 && self.repeats.next.is_none() {
            self.repeats.next = now.checked_add(CARRIER_REPEAT);
        }
        let mut out = Vec::new();
        for dst in members {
            if self.sent.insert(dst.clone()) {
                out.push(CarrierMsg {
                    src: me.clone(),
                    dst,
                    seq: *seq,
                    report: report.clone(),
                });
            }
        }
        out
    }

    /// When the next refresh round or repeat of a change is due.
    pub fn next_round(&self) -> Option<Instant> {
        [self.next_round, self.repeats.next]
            .into_iter()
            .flatten()
            .min()
    }

    /// Whether a repeat of the changes not yet sent [`CARRIER_REPEATS`] times is due at `now`;
    /// if so, the members are owed them again (ours and the relays of the changed origins).
    pub fn repeat_due(&mut self, now: Instant) -> bool {
        if self.repeats.next.is_none_or(|at| at > now) {
            return false;
        }
        if self.repeats.own {
            self.sent.clear();
        }
        for origin in &self.repeats.origins {
            self.relayed.remove(origin);
        }
        self.repeats.left = self.repeats.left.saturating_sub(1);
        if self.repeats.left == 0 {
            self.repeats = Repeats::default();
        } else {
            self.repeats.next = now.checked_add(CARRIER_REPEAT);
        }
        true
    }

    /// Whether a refresh round is due at `now`; if so, starts it (every member is owed the
    /// report again) and forgets reports older than [`CARRIER_MEMORY`].
    pub fn round_due(&mut self, now: Instant) -> bool {
        if self.next_round.is_none_or(|at| at > now) {
            return false;
        }
        self.next_round = now.checked_add(CARRIER_REFRESH);
        self.sent.clear();
        self.relayed.clear();
        self.peers
            .retain(|_, h| now.saturating_duration_since(h.heard) < CARRIER_MEMORY);
        true
    }

    /// The relays owed now from `me` to the `members` ([module docs](self)): each report heard
    /// directly that lacks carrier somewhere or says its speaker withdrew, or replaced one that did (or one of other
    /// content) less than [`CARRIER_MEMORY`] ago, to each member but its origin that has not had
    /// it this round (or since it changed).
    pub fn relays(
        &mut self,
        me: &SpeakerId,
        members: impl IntoIterator<Item = SpeakerId>,
        now: Instant,
    ) -> Vec<RelayMsg> {
        let members: Vec<SpeakerId> = members.into_iter().collect();
        let mut out = Vec::new();
        for (origin, h) in &self.peers {
            let matters = h.restricts()
                || h.down_at
                    .is_some_and(|at| now.saturating_duration_since(at) < CARRIER_MEMORY);
            if !h.direct || !matters {
                continue;
            }
            let relayed = self.relayed.entry(origin.clone()).or_default();
            for dst in &members {
                if dst.name == *origin || dst.name == me.name || relayed.contains(dst) {
                    continue;
                }
                if relayed.insert(dst.clone()) {
                    let age = now.saturating_duration_since(h.heard).as_millis();
                    out.push(RelayMsg {
                        via: me.clone(),
                        age_ms: u32::try_from(age).unwrap_or(u32::MAX),
                        msg: CarrierMsg {
                            src: h.src.clone(),
                            dst: dst.clone(),
                            seq: h.seq,
                            report: h.report.clone(),
                        },
                    });
                }
            }
        }
        out
    }

    /// An authenticated, fresh (replay-checked) report from a peer, addressed to `me`: kept
    /// unless older than the one held (same identity: by number; another identity: the newer
    /// generation, or the one the membership lists now, `listed`). `Ok(true)` when the report
    /// held for that peer changed (the caller relays it at once).
    ///
    /// # Errors
    /// [`DropReason::Rejected`] for an undecodable or invalid message, or a new name beyond
    /// [`MAX_REPORTS`]; [`DropReason::Misdirected`] when it is addressed to someone else.
    pub fn receive(
        &mut self,
        body: &[u8],
        me: &SpeakerId,
        listed: impl Fn(&SpeakerId) -> bool,
        now: Instant,
    ) -> Result<bool, DropReason> {
        let msg = decode_msg(body)?;
        self.take(msg, me, listed, now, None)
    }

    /// An authenticated, fresh relay ([`RelayMsg`]) addressed to `me`: the origin's report,
    /// kept as [`Self::receive`] keeps a direct one, as heard [`RelayMsg::age_ms`] ago (when
    /// the relayer last knew it fresh from its origin), and never relayed on.
    ///
    /// # Errors
    /// As [`Self::receive`]; also [`DropReason::Rejected`] for a relay of the relayer's own
    /// report (it sends that directly).
    pub fn receive_relay(
        &mut self,
        body: &[u8],
        me: &SpeakerId,
        listed: impl Fn(&SpeakerId) -> bool,
        now: Instant,
    ) -> Result<bool, DropReason> {
        let relay = decode_relay(body)?;
        if relay.via.name == relay.msg.src.name {
            return Err(DropReason::Rejected);
        }
        let age = Duration::from_millis(u64::from(relay.age_ms));
        self.take(relay.msg, me, listed, now, Some(age))
    }

    /// Keeps `msg` if newer; `relayed_age`: `None` for a report from its origin, the
    /// relayer's age of it otherwise.
    fn take(
        &mut self,
        msg: CarrierMsg,
        me: &SpeakerId,
        listed: impl Fn(&SpeakerId) -> bool,
        now: Instant,
        relayed_age: Option<Duration>,
    ) -> Result<bool, DropReason> {
        if msg.dst != *me {
            return Err(DropReason::Misdirected);
        }
        if msg.src.name.is_empty()
            || msg.src.name.len() > MAX_NODE_NAME_LEN
            || msg.src.name == me.name
            || msg.report.links.len() > MAX_LINKS
            || msg
                .report
                .links
                .iter()
                .any(|l| l.prefixes.len() > MAX_PREFIXES)
        {
            return Err(DropReason::Rejected);
        }
        let direct = relayed_age.is_none();
        let heard = now
            .checked_sub(relayed_age.unwrap_or_default())
            .unwrap_or(now);
        if !self.peers.contains_key(&msg.src.name) && self.peers.len() >= MAX_REPORTS {
            return Err(DropReason::Rejected);
        }
        if let Some(h) = self.peers.get_mut(&msg.src.name) {
            // A relay carries more bytes, so a large report may have lost links from its end on
            // the way ([`encode_relay`]): the same report with more links replaces it.
            let fuller = msg.report.links.len() > h.report.links.len();
            if h.src == msg.src && msg.seq == h.seq && !fuller {
                // The same report again: fresher, and relayable once heard from its origin.
                h.heard = h.heard.max(heard);
                h.direct |= direct;
                return Ok(false);
            }
            let newer = if h.src == msg.src {
                msg.seq > h.seq || (msg.seq == h.seq && fuller)
            } else {
                listed(&msg.src) || msg.src.generation > h.src.generation
            };
            if !newer {
                return Ok(false);
            }
        }
        let held = self.peers.get(&msg.src.name);
        let changed = held.is_none_or(|h| h.report != msg.report);
        // The held report's "down", if any, ends now (it is replaced); so does any other
        // content (a member that missed the "down" may have got it from elsewhere and needs
        // this to override it, e.g. an "up" whose IPv6 prefixes are back after DAD).
        let down_at = match held {
            Some(h) if h.restricts() || changed => Some(now),
            Some(h) => h.down_at,
            None => None,
        };
        if changed {
            self.relayed.remove(&msg.src.name);
            if direct {
                self.repeats.origins.insert(msg.src.name.clone());
                self.repeats.left = CARRIER_REPEATS;
                let at = now.checked_add(CARRIER_REPEAT);
                self.repeats.next = [self.repeats.next, at].into_iter().flatten().min();
            }
        }
        let mut held = Held {
            heard,
            src: msg.src,
            seq: msg.seq,
            report: msg.report,
            direct,
            down_at,
        };
        if held.restricts() {
            held.down_at = Some(now);
        }
        self.peers.insert(held.src.name.clone(), held);
        Ok(changed)
    }

    /// The reports of the `listed` identities (the members the membership lists now, not
    /// refused), by node name.
    pub fn reports(&self, listed: impl Fn(&SpeakerId) -> bool) -> Carriers {
        self.peers
            .iter()
            .filter(|(_, h)| listed(&h.src))
            .map(|(name, h)| (name.clone(), h.report.clone()))
            .collect()
    }
}

#[cfg(test)]
pub(super) mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::carrier::Link;

    fn id(n: &str, generation: u64) -> SpeakerId {
        SpeakerId::with_generation(n, "192.0.2.1:7947".parse().unwrap(), generation).unwrap()
    }

    fn report(up: bool) -> LinkReport {
        one_link("eth0", up)
    }

    /// A report of one IPv4 link `name` in the default set, on 198.51.100.0/24.
    pub(in crate::membership) fn one_link(name: &str, up: bool) -> LinkReport {
        LinkReport {
            links: vec![Link {
                name: name.into(),
                carrier: up,
                default_v4: true,
                default_v6: false,
                named_v4: true,
                named_v6: false,
                prefixes: vec![("198.51.100.0".parse().unwrap(), 24)],
            }],
            withdrawn: false,
        }
    }

    fn body(src: &SpeakerId, dst: &SpeakerId, seq: u64, up: bool) -> Vec<u8> {
        postcard::to_allocvec(&CarrierMsg {
            src: src.clone(),
            dst: dst.clone(),
            seq,
            report: report(up),
        })
        .unwrap()
    }

    #[test]
    fn a_report_too_large_for_a_datagram_loses_links_from_its_end() {
        let mut r = report(true);
        for i in 0..MAX_LINKS - 1 {
            let mut l = r.links[0].clone();
            l.name = format!("eth{}", i + 1);
            l.prefixes = vec![("2001:db8::".parse().unwrap(), 64); MAX_PREFIXES];
            r.links.push(l);
        }
        let msg = CarrierMsg {
            src: id("a", 1),
            dst: id("b", 1),
            seq: 0,
            report: r,
        };
        let body = encode(msg.clone(), 1349).unwrap();
        assert!(body.len() <= 1349);
        let back: CarrierMsg = postcard::from_bytes(&body).unwrap();
        assert!(back.report.links.len() < MAX_LINKS);
        assert_eq!(
            back.report.links[..],
            msg.report.links[..back.report.links.len()]
        );
        assert_eq!(encode(msg, 10), None);
    }

    #[test]
    fn sent_on_change_to_new_identities_and_every_round() {
        let t0 = Instant::now();
        let (me, a, b) = (id("me", 1), id("a", 1), id("b", 1));
        let mut book = CarrierBook::default();
        assert!(
            book.outgoing(&me, [a.clone()], t0).is_empty(),
            "no report yet"
        );
        assert!(book.set_own(report(true)));
        assert_eq!(book.outgoing(&me, [a.clone(), b.clone()], t0).len(), 2);
        assert!(book.outgoing(&me, [a.clone(), b.clone()], t0).is_empty());
        assert!(!book.set_own(report(true)), "unchanged");
        let b2 = id("b", 2);
        let again = book.outgoing(&me, [a.clone(), b2.clone()], t0);
        assert_eq!(again.iter().map(|m| &m.dst).collect::<Vec<_>>(), [&b2]);
        assert!(book.set_own(report(false)));
        let changed = book.outgoing(&me, [a.clone(), b2.clone()], t0);
        assert_eq!(changed.len(), 2);
        assert!(
            changed
                .iter()
                .all(|m| m.seq == 1 && !m.report.links[0].carrier)
        );
        // Our own identity changes (a rejoin): everyone again.
        assert_eq!(book.outgoing(&id("me", 2), [a.clone()], t0).len(), 1);
        assert!(!book.round_due(t0));
        assert!(book.round_due(t0 + CARRIER_REFRESH));
        assert_eq!(book.outgoing(&id("me", 2), [a, b2], t0).len(), 2);
    }

    #[test]
    fn a_change_is_sent_again_three_times_a_repeat_apart_and_a_refresh_never() {
        let t0 = Instant::now();
        let (me, a, b, c) = (id("me", 1), id("a", 1), id("b", 1), id("c", 1));
        let members = || [a.clone(), b.clone(), c.clone()];
        let mut book = CarrierBook::default();
        assert!(book.set_own(report(true)));
        assert_eq!(book.outgoing(&me, members(), t0).len(), 3);
        // b's report changes to "down" on arrival from b: relayed to a and c.
        let listed = |_: &SpeakerId| true;
        assert_eq!(
            book.receive(&body(&b, &me, 0, false), &me, listed, t0),
            Ok(true)
        );
        assert_eq!(book.relays(&me, members(), t0).len(), 2);
        assert_eq!(book.next_round(), Some(t0 + CARRIER_REPEAT));
        for i in 1..=CARRIER_REPEATS {
            let at = t0 + CARRIER_REPEAT * i;
            assert!(!book.repeat_due(at - Duration::from_millis(1)), "early");
            assert!(book.repeat_due(at), "repeat {i}");
            assert_eq!(book.outgoing(&me, members(), at).len(), 3, "repeat {i}");
            assert_eq!(book.relays(&me, members(), at).len(), 2, "repeat {i}");
        }
        let after = t0 + CARRIER_REPEAT * (CARRIER_REPEATS + 1);
        assert!(!book.repeat_due(after), "three repeats, then the round");
        assert_eq!(book.next_round(), Some(t0 + CARRIER_REFRESH));
        assert!(book.outgoing(&me, members(), after).is_empty());
        assert!(book.relays(&me, members(), after).is_empty());
        // The refresh round sends everything once and repeats nothing: the same report again
        // (a refresh from b) is no change.
        assert!(book.round_due(t0 + CARRIER_REFRESH));
        assert_eq!(
            book.receive(&body(&b, &me, 0, false), &me, listed, t0 + CARRIER_REFRESH),
            Ok(false)
        );
        assert_eq!(book.outgoing(&me, members(), t0 + CARRIER_REFRESH).len(), 3);
        assert_eq!(book.relays(&me, members(), t0 + CARRIER_REFRESH).len(), 2);
        assert_eq!(book.next_round(), Some(t0 + CARRIER_REFRESH * 2));
        // A change heard only through a relay is not relayed, so not repeated either.
        let relayed = relay_body(&a, &c, &me, 0, false, 0);
        assert_eq!(
            book.receive_relay(&relayed, &me, listed, t0 + CARRIER_REFRESH),
            Ok(true)
        );
        assert_eq!(book.next_round(), Some(t0 + CARRIER_REFRESH * 2));
    }

    #[test]
    fn an_older_report_never_overrides_a_newer_one_and_only_listed_identities_count() {
        let t0 = Instant::now();
        let (me, a1, a2) = (id("me", 1), id("a", 1), id("a", 2));
        let mut book = CarrierBook::default();
        let nobody = |_: &SpeakerId| false;
        book.receive(&body(&a1, &me, 5, false), &me, nobody, t0)
            .unwrap();
        book.receive(&body(&a1, &me, 4, true), &me, nobody, t0)
            .unwrap();
        let listed = |s: &SpeakerId| *s == a1;
        assert_eq!(
            book.reports(listed)["a"],
            report(false),
            "seq 4 < 5 ignored"
        );
        // A newer generation wins; the older one does not come back.
        book.receive(&body(&a2, &me, 0, true), &me, nobody, t0)
            .unwrap();
        book.receive(&body(&a1, &me, 9, false), &me, nobody, t0)
            .unwrap();
        let listed2 = |s: &SpeakerId| *s == a2;
        assert_eq!(book.reports(listed2)["a"], report(true));
        assert!(
            book.reports(listed).is_empty(),
            "an identity not listed counts for nothing"
        );
        // Addressed to someone else, or from ourselves, or garbage.
        assert_eq!(
            book.receive(&body(&a2, &id("x", 1), 1, true), &me, nobody, t0),
            Err(DropReason::Misdirected)
        );
        assert_eq!(
            book.receive(&body(&id("me", 3), &me, 1, true), &me, nobody, t0),
            Err(DropReason::Rejected)
        );
        assert_eq!(
            book.receive(b"\xff\xff", &me, nobody, t0),
            Err(DropReason::Rejected)
        );
        // Forgotten after the memory without a refresh.
        assert!(book.set_own(report(true)));
        let _ = book.outgoing(&me, [], t0);
        assert!(book.round_due(t0 + CARRIER_MEMORY));
        assert!(book.reports(listed2).is_empty());
    }

    fn relay_body(
        via: &SpeakerId,
        origin: &SpeakerId,
        dst: &SpeakerId,
        seq: u64,
        up: bool,
        age_ms: u32,
    ) -> Vec<u8> {
        postcard::to_allocvec(&RelayMsg {
            via: via.clone(),
            age_ms,
            msg: CarrierMsg {
                src: origin.clone(),
                dst: dst.clone(),
                seq,
                report: report(up),
            },
        })
        .unwrap()
    }

    /// The layout before [`LinkReport::withdrawn`] still decodes (with it `false`), for a
    /// direct report and a relay; ours decodes in the legacy layout (the field is last, postcard
    /// ignores trailing bytes), so both sides of a roll-out read each other.
    #[test]
    fn reports_of_the_layout_before_withdrawn_still_decode_both_ways() {
        #[derive(Serialize, Deserialize)]
        struct OldReport {
            links: Vec<Link>,
        }
        #[derive(Serialize, Deserialize)]
        struct OldMsg {
            src: SpeakerId,
            dst: SpeakerId,
            seq: u64,
            report: OldReport,
        }
        #[derive(Serialize, Deserialize)]
        struct OldRelay {
            via: SpeakerId,
            age_ms: u32,
            msg: OldMsg,
        }
        let (me, a, b) = (id("me", 1), id("a", 1), id("b", 1));
        let old = |src: &SpeakerId| OldMsg {
            src: src.clone(),
            dst: me.clone(),
            seq: 3,
            report: OldReport {
                links: report(false).links,
            },
        };
        let direct = decode_msg(&postcard::to_allocvec(&old(&a)).unwrap()).unwrap();
        assert_eq!((direct.seq, direct.report.clone()), (3, report(false)));
        let relay = decode_relay(
            &postcard::to_allocvec(&OldRelay {
                via: b.clone(),
                age_ms: 7,
                msg: old(&a),
            })
            .unwrap(),
        )
        .unwrap();
        assert_eq!((relay.age_ms, relay.msg), (7, direct));
        let mut ours = report(true);
        ours.withdrawn = true;
        let new = CarrierMsg {
            src: a.clone(),
            dst: me.clone(),
            seq: 4,
            report: ours.clone(),
        };
        let body = postcard::to_allocvec(&new).unwrap();
        assert_eq!(decode_msg(&body).unwrap(), new);
        let read_by_old: OldMsg = postcard::from_bytes(&body).unwrap();
        assert_eq!(read_by_old.report.links, ours.links);
        assert_eq!(decode_msg(b"\x01"), Err(DropReason::Rejected));
    }

    /// A withdrawn speaker's report (every link up) is relayed like a "down" one: a member cut
    /// from it otherwise plans its IPs on it while the others do not (issue #32, the
    /// minority-gate row).
    #[test]
    fn a_withdrawn_report_is_relayed_like_a_lost_carrier() {
        let t0 = Instant::now();
        let (me, a, b) = (id("me", 1), id("a", 1), id("b", 1));
        let anyone = |_: &SpeakerId| true;
        let mut book = CarrierBook::default();
        assert!(book.set_own(report(true)));
        let _ = book.outgoing(&me, [a.clone(), b.clone()], t0);
        book.receive(&body(&a, &me, 1, true), &me, anyone, t0)
            .unwrap();
        assert!(
            book.relays(&me, [a.clone(), b.clone()], t0).is_empty(),
            "a first report, all up: nothing to relay"
        );
        let mut withdrawn = report(true);
        withdrawn.withdrawn = true;
        let msg = CarrierMsg {
            src: a.clone(),
            dst: me.clone(),
            seq: 2,
            report: withdrawn.clone(),
        };
        assert_eq!(
            book.receive(&postcard::to_allocvec(&msg).unwrap(), &me, anyone, t0),
            Ok(true)
        );
        let relays = book.relays(&me, [a.clone(), b.clone()], t0);
        assert_eq!(relays.len(), 1);
        assert_eq!(
            (&relays[0].msg.dst, &relays[0].msg.report),
            (&b, &withdrawn)
        );
    }

    /// A report heard from its origin that says a link lacks carrier is passed on to every
    /// other member once per round and at once when it changes; an "up" report only for
    /// [`CARRIER_MEMORY`] after its change; a report known only from a relay never.
    #[test]
    fn reports_that_matter_are_relayed_to_the_other_members() {
        let t0 = Instant::now();
        let (me, a, b, c) = (id("me", 1), id("a", 1), id("b", 1), id("c", 1));
        let all = || [a.clone(), b.clone(), c.clone()];
        let anyone = |_: &SpeakerId| true;
        let mut book = CarrierBook::default();
        assert!(book.set_own(report(true)));
        let _ = book.outgoing(&me, all(), t0);
        assert!(book.relays(&me, all(), t0).is_empty(), "nothing heard yet");
        assert_eq!(
            book.receive(&body(&a, &me, 1, false), &me, anyone, t0),
            Ok(true)
        );
        let relays = book.relays(&me, all(), t0);
        let to: Vec<&str> = relays.iter().map(|r| r.msg.dst.name.as_str()).collect();
        assert_eq!(to, ["b", "c"], "to every member but the origin");
        assert!(
            relays
                .iter()
                .all(|r| r.via == me && r.msg.src == a && r.age_ms == 0)
        );
        assert!(book.relays(&me, all(), t0).is_empty(), "once per round");
        // The same report again changes nothing; the next round relays it again.
        assert_eq!(
            book.receive(&body(&a, &me, 1, false), &me, anyone, t0),
            Ok(false)
        );
        let t1 = t0 + CARRIER_REFRESH;
        assert!(book.round_due(t1));
        assert_eq!(
            book.relays(&me, all(), t1 + Duration::from_millis(300))[0].age_ms,
            1_300,
            "heard from the origin at t0"
        );
        // Up again: relayed at once, and in each round for CARRIER_MEMORY after the change.
        assert_eq!(
            book.receive(&body(&a, &me, 2, true), &me, anyone, t1),
            Ok(true)
        );
        assert_eq!(book.relays(&me, all(), t1).len(), 2);
        let mut t = t1;
        while t < t1 + CARRIER_MEMORY - CARRIER_REFRESH {
            t += CARRIER_REFRESH;
            assert_eq!(
                book.receive(&body(&a, &me, 2, true), &me, anyone, t),
                Ok(false)
            );
            assert!(book.round_due(t));
            assert_eq!(book.relays(&me, all(), t).len(), 2, "{:?}", t - t1);
        }
        t += CARRIER_REFRESH;
        assert_eq!(
            book.receive(&body(&a, &me, 2, true), &me, anyone, t),
            Ok(false)
        );
        assert!(book.round_due(t));
        assert!(
            book.relays(&me, all(), t).is_empty(),
            "up and settled: nothing"
        );
        // A report known only from a relay is never passed on.
        assert_eq!(
            book.receive_relay(&relay_body(&c, &b, &me, 0, false, 0), &me, anyone, t),
            Ok(true)
        );
        assert_eq!(book.reports(anyone)["b"], report(false));
        assert!(book.relays(&me, all(), t).is_empty());
    }

    /// A book that has sent its own "up" report to `members` at `t0` (its rounds started).
    fn started(
        me: &SpeakerId,
        members: impl IntoIterator<Item = SpeakerId>,
        t0: Instant,
    ) -> CarrierBook {
        let mut book = CarrierBook::default();
        assert!(book.set_own(report(true)));
        let _ = book.outgoing(me, members, t0);
        book
    }

    /// A first report with carrier everywhere overrides no "down", so it is not relayed: a cold
    /// start or a restart relays nothing (it used to relay every first report to every member
    /// each round for [`CARRIER_MEMORY`]: N³ datagrams a round). A restarted origin whose
    /// previous identity's report lacked carrier has its first "up" relayed, by name.
    #[test]
    fn a_first_report_with_carrier_is_not_relayed_but_an_up_after_a_down_is() {
        let t0 = Instant::now();
        let (me, a, b) = (id("me", 1), id("a", 1), id("b", 1));
        let all = || [a.clone(), b.clone()];
        let anyone = |_: &SpeakerId| true;
        let mut book = started(&me, all(), t0);
        assert_eq!(
            book.receive(&body(&a, &me, 1, true), &me, anyone, t0),
            Ok(true)
        );
        assert!(book.relays(&me, all(), t0).is_empty(), "a cold start");
        assert_eq!(
            book.receive(&body(&a, &me, 2, false), &me, anyone, t0),
            Ok(true)
        );
        assert_eq!(book.relays(&me, all(), t0).len(), 1, "down: to b");
        let a2 = id("a", 2);
        let t1 = t0 + Duration::from_millis(500);
        assert_eq!(
            book.receive(&body(&a2, &me, 0, true), &me, anyone, t1),
            Ok(true)
        );
        let relays = book.relays(&me, [a2.clone(), b.clone()], t1);
        assert_eq!(
            relays.len(),
            1,
            "the restarted origin's up overrides its down"
        );
        assert_eq!(relays[0].msg.src, a2);
        let late = t1 + CARRIER_MEMORY;
        let _ = book.receive(&body(&a2, &me, 0, true), &me, anyone, late);
        assert!(book.round_due(late));
        assert!(book.relays(&me, [a2, b], late).is_empty(), "settled");
    }

    /// A relayer that missed an origin's "down" (a member may hold it from elsewhere) still
    /// relays an "up" whose content differs from the one it held (IPv6 prefixes back after
    /// DAD, say); and a relayed copy that lost links on the way is replaced by the same report
    /// in full.
    #[test]
    fn a_changed_up_is_relayed_and_a_truncated_relay_gives_way_to_the_full_report() {
        let t0 = Instant::now();
        let (me, a, b) = (id("me", 1), id("a", 1), id("b", 1));
        let all = || [a.clone(), b.clone()];
        let anyone = |_: &SpeakerId| true;
        let mut book = started(&me, all(), t0);
        let first = |seq, r: LinkReport| {
            postcard::to_allocvec(&CarrierMsg {
                src: a.clone(),
                dst: me.clone(),
                seq,
                report: r,
            })
            .unwrap()
        };
        assert_eq!(
            book.receive(&first(1, report(true)), &me, anyone, t0),
            Ok(true)
        );
        assert!(book.relays(&me, all(), t0).is_empty(), "a first report");
        let mut two = report(true);
        two.links.push(one_link("eth1", true).links.remove(0));
        assert_eq!(
            book.receive(&first(2, two.clone()), &me, anyone, t0),
            Ok(true)
        );
        assert_eq!(book.relays(&me, all(), t0).len(), 1, "changed: to b");
        // A relay from b of a's seq 3 that kept only its first link, then a's own seq 3.
        let mut three = two.clone();
        three.links[1].carrier = false;
        let mut cut = three.clone();
        cut.links.truncate(1);
        let relayed = postcard::to_allocvec(&RelayMsg {
            via: b.clone(),
            age_ms: 0,
            msg: CarrierMsg {
                src: a.clone(),
                dst: me.clone(),
                seq: 3,
                report: cut,
            },
        })
        .unwrap();
        assert_eq!(book.receive_relay(&relayed, &me, anyone, t0), Ok(true));
        assert_eq!(
            book.receive(&first(3, three.clone()), &me, anyone, t0),
            Ok(true)
        );
        assert_eq!(book.reports(anyone)["a"], three, "the full report");
        assert_eq!(book.receive(&first(3, three), &me, anyone, t0), Ok(false));
    }

    /// A relayed report is the origin's: ordered by its counter, never older than what is
    /// held, forgotten [`CARRIER_MEMORY`] after the relayer last heard it from the origin (not
    /// after the relay), and a relay of the relayer's own report is refused.
    #[test]
    fn a_relayed_report_is_ordered_and_aged_as_its_origins() {
        let t0 = Instant::now();
        let (me, a, b) = (id("me", 1), id("a", 1), id("b", 1));
        let anyone = |_: &SpeakerId| true;
        let mut book = CarrierBook::default();
        assert!(book.set_own(report(true)));
        let _ = book.outgoing(&me, [], t0);
        assert_eq!(
            book.receive(&body(&a, &me, 5, false), &me, anyone, t0),
            Ok(true)
        );
        assert_eq!(
            book.receive_relay(&relay_body(&b, &a, &me, 4, true, 0), &me, anyone, t0),
            Ok(false),
            "older than the one held"
        );
        assert_eq!(book.reports(anyone)["a"], report(false));
        assert_eq!(
            book.receive_relay(&relay_body(&a, &a, &me, 6, true, 0), &me, anyone, t0),
            Err(DropReason::Rejected),
            "its own report is sent directly"
        );
        assert_eq!(
            book.receive_relay(
                &relay_body(&b, &a, &id("x", 1), 6, true, 0),
                &me,
                anyone,
                t0
            ),
            Err(DropReason::Misdirected)
        );
        // A newer one relayed 9 s after the relayer heard it: forgotten 1 s later.
        let t1 = t0 + Duration::from_millis(100);
        assert_eq!(
            book.receive_relay(&relay_body(&b, &a, &me, 6, true, 9_000), &me, anyone, t1),
            Ok(true)
        );
        assert_eq!(book.reports(anyone)["a"], report(true));
        assert!(book.round_due(t0 + CARRIER_REFRESH + Duration::from_millis(50)));
        assert!(book.reports(anyone).contains_key("a"));
        assert!(book.round_due(t1 + Duration::from_millis(1_000) + CARRIER_REFRESH));
        assert!(!book.reports(anyone).contains_key("a"), "aged out");
    }

    /// Through two real [`super::super::MembershipCore`]s: a report is sealed to every member
    /// when it changes, opened, and listed by the receiver; a replay of the datagram that said
    /// "down" after the "up" is dropped as a replay and changes nothing; a keyless datagram
    /// never reaches the book.
    #[test]
    fn reports_travel_sealed_and_replays_change_nothing() {
        use super::super::{Clock, Counters, KeyRing, MembershipConfig, MembershipCore};
        use std::net::SocketAddr;
        use std::sync::Arc;
        let ring = KeyRing::parse(
            (0..32u8)
                .map(|i| format!("{:02x}", i.wrapping_mul(53).wrapping_add(9)))
                .collect::<String>()
                .as_bytes(),
        )
        .unwrap();
        let t0 = Instant::now();
        let clock = |ms: u64| Clock {
            mono: t0 + Duration::from_millis(ms),
            wall_ms: 1_800_000_000_000 + ms,
        };
        let addr = |i: u8| SocketAddr::from(([192, 0, 2, i], 7947));
        let node = |i: u8| {
            let id = SpeakerId::with_generation(&format!("node-{i}"), addr(i), 1).unwrap();
            let config = MembershipConfig::default();
            MembershipCore::with_seed(
                id,
                config,
                &ring,
                Arc::new(Counters::default()),
                u64::from(i),
            )
            .unwrap()
        };
        let (mut a, mut b) = (node(1), node(2));
        let mut captured: Vec<Vec<u8>> = Vec::new();
        let mut run = |a: &mut MembershipCore, b: &mut MembershipCore, ms: u64, keep: bool| {
            for _ in 0..50 {
                let (from_a, from_b) = (a.take_outgoing(), b.take_outgoing());
                if from_a.is_empty() && from_b.is_empty() {
                    break;
                }
                for out in from_a {
                    if keep {
                        captured.push(out.datagram.clone());
                    }
                    let _ = b.handle_datagram(&out.datagram, addr(1), clock(ms));
                }
                for out in from_b {
                    let _ = a.handle_datagram(&out.datagram, addr(2), clock(ms));
                }
            }
        };
        a.set_peers([addr(2)], clock(0));
        b.set_peers([addr(1)], clock(0));
        run(&mut a, &mut b, 0, false);
        assert_eq!(b.alive().len(), 2);
        assert!(b.carrier_reports().is_empty(), "nothing reported yet");
        a.set_carrier_report(report(false), clock(10));
        run(&mut a, &mut b, 10, true);
        assert_eq!(b.carrier_reports()["node-1"], report(false));
        a.set_carrier_report(report(true), clock(20));
        run(&mut a, &mut b, 20, false);
        assert_eq!(b.carrier_reports()["node-1"], report(true));
        let replayed_before = b.counters().snapshot().dropped_replayed;
        for datagram in &captured {
            let _ = b.handle_datagram(datagram, addr(1), clock(30));
        }
        assert!(b.counters().snapshot().dropped_replayed > replayed_before);
        assert_eq!(
            b.carrier_reports()["node-1"],
            report(true),
            "the replay changed nothing"
        );
        // A refresh round repeats the report to every member.
        a.handle_timers(clock(20 + 1_000));
        assert!(!a.take_outgoing().is_empty());
    }
}
