//! Membership timings and limits (DESIGN §5 S3), mapped onto foca's [`foca::Config`]. Pure.
//!
//! The defaults aim at "a crashed speaker is declared down in well under a second on a LAN of
//! up to a few tens of nodes". A crash is noticed by the first member that probes the dead one
//! after the crash and gets neither a direct nor an indirect answer. Expected time:
//!
//! ```text
//! wait for the first probe of the dead member   ~ probe_period on average (exponential tail)
//! + the probe period in which it fails           = probe_period
//! + suspicion                                    = suspect_timeout
//! + dissemination of "down"                       ~ one gossip round (we gossip at once)
//! ```
//!
//! With 100 ms / 200 ms that is ≈ 400 ms on average; see `docs/membership.md` for the measured
//! distribution. The reasoning behind each number is on its field.

use std::num::{NonZeroU8, NonZeroUsize};
use std::time::Duration;

use super::envelope::OVERHEAD;

/// Default UDP port of the membership protocol (the port MetalLB's memberlist uses too).
pub const DEFAULT_PORT: u16 = 7947;

/// Largest foca message a member sends or accepts; with the [`OVERHEAD`] of the envelope a
/// datagram is at most 1403 bytes, which fits a 1500-byte Ethernet MTU over IPv4 (28 bytes of
/// headers) and IPv6 (48) without fragmentation (RFC 8085 §3.2).
pub const DEFAULT_MAX_PACKET_SIZE: usize = 1350;

/// Timings and limits of the membership protocol. All durations are wall time.
///
/// The lead maps each field to a CLI flag / environment variable; [`MembershipConfig::validate`]
/// reports inconsistent combinations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MembershipConfig {
    /// How often each member probes one other member (SWIM protocol period). Default 100 ms:
    /// at N members every member is probed about once per period, so this bounds the average wait
    /// before a dead member is probed. Cost: about 4 datagrams per member per period (ping, ack,
    /// and the same for the probe it answers), e.g. 40 datagrams/s per node of ~100–300 bytes.
    pub probe_period: Duration,
    /// How long to wait for a direct ack before asking `indirect_probes` other members to probe
    /// (SWIM indirect probe). Default 40 ms: a LAN round trip is well under 1 ms, so 40 ms only
    /// expires for a dead or badly stalled member, and leaves 60 ms of the period for the
    /// indirect round (four LAN hops).
    pub probe_rtt: Duration,
    /// How many members are asked to probe indirectly. Default 3 (SWIM paper's k): enough to
    /// ride over one lossy path without much fan-out.
    pub indirect_probes: usize,
    /// How long a member stays Suspect before being declared Down, giving it time to refute.
    /// Default 200 ms = two probe periods: a live member learns of the suspicion from the
    /// gossip and refutes it in one or two round trips. Raise this on loaded or lossy networks.
    pub suspect_timeout: Duration,
    /// How often a member gossips pending updates (if any) to `gossip_fanout` random members.
    /// Default 50 ms: membership changes reach every member of a few tens in a few rounds.
    pub gossip_interval: Duration,
    /// How many members receive each periodic gossip. Default 3.
    pub gossip_fanout: usize,
    /// How many times each update is piggybacked before it is dropped. Default 12. The
    /// memberlist LAN rule foca follows (4·log10(N+1)) gives 7 for N = 50, but in simulation
    /// (tests/membership_sim.rs) 8 left some of 50 members learning of a crash only by their own
    /// probe (p99 1.3 s until all knew), while 12 brings the p99 for all members to 0.7 s. The
    /// cost is a few more bytes on datagrams that are sent anyway.
    pub max_transmissions: u8,
    /// How often we re-announce to configured peer addresses that are not alive members (Node
    /// InternalIPs from the API). Default 1 s: a speaker that starts before its peers, or a
    /// healed partition, joins within a second.
    pub peer_announce_interval: Duration,
    /// How often we ask one random member for its member list (foca periodic announce), to
    /// converge on members we have not heard of. Default 10 s.
    pub member_announce_interval: Duration,
    /// How often we announce to one member we consider down, to heal partitions (foca periodic
    /// announce to down members). Default 10 s.
    pub down_announce_interval: Duration,
    /// How long a down identity is remembered (foca `remove_down_after`). Default 5 min. While
    /// remembered, a down identity still wins conflicts against lower generations at its
    /// address; every start normally gets a higher generation, so this only matters when a
    /// node's wall clock stepped backwards across a speaker restart: that speaker then joins
    /// only after this delay. Memory is bounded by the number of addresses either way.
    pub remove_down_after: Duration,
    /// Acceptance window for the sealed timestamp of a datagram, in both directions. Default
    /// 30 s: far above NTP skew between nodes, small enough to bound replays.
    pub replay_window: Duration,
    /// Maximum number of remembered nonces. Default 65 536 (≈ 2.5 MiB); at ~50 datagrams/s
    /// per node this is far above what a 30 s window needs.
    pub replay_cache_capacity: usize,
    /// Largest foca message (excluding the 53-byte envelope), in bytes. Default
    /// [`DEFAULT_MAX_PACKET_SIZE`].
    pub max_packet_size: usize,
    /// Admit datagrams only from the IP of a configured peer (`set_peers`: the Node
    /// InternalIPs) or of a current member; others are dropped before any decryption
    /// (`dropped_unknown_source`). Compared by IP only, IPv4-mapped IPv6 equal to IPv4. While no
    /// peer is configured every source is admitted. Default `true`; turn it off only when
    /// speakers send from addresses that are not their Node's InternalIP (see
    /// `docs/membership.md`, *Hostile traffic on the membership port*).
    pub admit_only_peers: bool,
    /// Sender budget, in authenticated datagrams per second, for current members, shared
    /// equally among them (each member's advertised address has its own token bucket, holding at
    /// most one second of its share, at least 16). Charged only after the tag and the replay
    /// check passed, so only that member (a key holder) can spend it. Default 2000: normal
    /// traffic is ~40–100 datagrams per second per node in total, so a member never comes near
    /// its share. Over budget → `dropped_rate_limited`.
    pub max_opens_per_second: u32,
    /// Sender budget, in authenticated datagrams per second, for every authenticated sender that
    /// is not a current member (joining peers) together. Default 500: joining peers send about
    /// one announce per second each, plus one reply per announce we send. Over budget →
    /// `dropped_rate_limited`.
    pub max_other_opens_per_second: u32,
    /// Most bytes of kernel receive buffer the membership socket asks for (`SO_RCVBUF`). The
    /// speaker holds only `CAP_NET_RAW` (DESIGN §1), so Linux grants at most
    /// `net.core.rmem_max` (208 KiB unless raised) whatever is asked: the socket asks for the
    /// smaller of this and `rmem_max`, read at start. Default [`DEFAULT_RECV_BUFFER_BYTES`];
    /// the flood figures of `docs/membership.md` were taken at 208 KiB. Must be > 0.
    pub socket_receive_buffer: usize,
}

/// Default [`MembershipConfig::socket_receive_buffer`]: 16 MiB, the size asked for before the
/// buffer was sized for `rmem_max`; it matters only where an operator raised
/// `net.core.rmem_max` that far (see `docs/membership.md`, *Receive buffer*).
pub const DEFAULT_RECV_BUFFER_BYTES: usize = 16 * 1024 * 1024;

impl Default for MembershipConfig {
    fn default() -> Self {
        let (probe_period, probe_rtt, suspect_timeout) = TimingProfile::Fast.timings();
        Self {
            probe_period,
            probe_rtt,
            indirect_probes: 3,
            suspect_timeout,
            gossip_interval: Duration::from_millis(50),
            gossip_fanout: 3,
            max_transmissions: 12,
            peer_announce_interval: Duration::from_secs(1),
            member_announce_interval: Duration::from_secs(10),
            down_announce_interval: Duration::from_secs(10),
            remove_down_after: Duration::from_secs(300),
            replay_window: Duration::from_secs(30),
            replay_cache_capacity: 65_536,
            max_packet_size: DEFAULT_MAX_PACKET_SIZE,
            admit_only_peers: true,
            max_opens_per_second: 2000,
            max_other_opens_per_second: 500,
            socket_receive_buffer: DEFAULT_RECV_BUFFER_BYTES,
        }
    }
}

/// A named set of failure-detection timings (`--timing-profile`), measured in the lab
/// (`docs/benchmarks.md`, issue #8 F4). Explicit `--probe-period`, `--probe-rtt` and
/// `--suspect-timeout` override the profile's values one by one.
///
/// - [`TimingProfile::Fast`] (default): 100 ms / 40 ms / 200 ms. A crashed speaker is failed
///   over in well under a second. Tolerates a speaker whose CPU quota is small but above what it
///   uses (throttled in bursts): no false failover in the lab at a 3 % quota. A speaker that is
///   *starved* — its cgroup at its limit all the time, e.g. a busy neighbour in the same
///   cgroup — stalls for more than 300 ms at a time and is failed over, again and again.
/// - [`TimingProfile::Safe`]: 1 s / 500 ms / 5 s, close to memberlist's LAN profile that
///   MetalLB uses (1 s probe interval, 500 ms probe timeout, suspicion of a few seconds).
///   Crash failover takes a few seconds; no false failover in the lab with the speaker sharing a
///   3 % quota with a busy loop for 60 s.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TimingProfile {
    /// Sub-second failover; assumes the speaker gets CPU within ~100 ms when it needs it.
    #[default]
    Fast,
    /// Failover in seconds; survives a CPU-starved node.
    Safe,
}

impl TimingProfile {
    /// `(probe_period, probe_rtt, suspect_timeout)` of the profile.
    pub fn timings(self) -> (Duration, Duration, Duration) {
        match self {
            TimingProfile::Fast => (
                Duration::from_millis(100),
                Duration::from_millis(40),
                Duration::from_millis(200),
            ),
            TimingProfile::Safe => (
                Duration::from_secs(1),
                Duration::from_millis(500),
                Duration::from_secs(5),
            ),
        }
    }
}

/// An inconsistent [`MembershipConfig`]; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid membership setting {field}: {reason}")]
pub struct ConfigError {
    /// The offending field.
    pub field: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

fn err(field: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        field,
        reason: reason.into(),
    }
}

impl MembershipConfig {
    /// Checks the combination of settings.
    ///
    /// # Errors
    /// A [`ConfigError`] for zero durations, counts, sender budgets or receive buffer, `probe_rtt >= probe_period`, or a packet
    /// size outside 512..=65 000 bytes (foca needs room for a header and a few updates; UDP
    /// cannot carry more).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let non_zero = [
            ("probe_period", self.probe_period),
            ("probe_rtt", self.probe_rtt),
            ("suspect_timeout", self.suspect_timeout),
            ("gossip_interval", self.gossip_interval),
            ("peer_announce_interval", self.peer_announce_interval),
            ("member_announce_interval", self.member_announce_interval),
            ("down_announce_interval", self.down_announce_interval),
            ("remove_down_after", self.remove_down_after),
            ("replay_window", self.replay_window),
        ];
        for (field, value) in non_zero {
            if value.is_zero() {
                return Err(err(field, "must be greater than zero"));
            }
        }
        if self.probe_rtt >= self.probe_period {
            return Err(err(
                "probe_rtt",
                format!(
                    "{:?} must be shorter than probe_period {:?} (the indirect probe runs in between)",
                    self.probe_rtt, self.probe_period
                ),
            ));
        }
        if self.indirect_probes == 0 {
            return Err(err("indirect_probes", "must be at least 1"));
        }
        if self.gossip_fanout == 0 {
            return Err(err("gossip_fanout", "must be at least 1"));
        }
        if self.max_transmissions == 0 {
            return Err(err("max_transmissions", "must be at least 1"));
        }
        if self.max_opens_per_second == 0 {
            return Err(err("max_opens_per_second", "must be at least 1"));
        }
        if self.max_other_opens_per_second == 0 {
            return Err(err("max_other_opens_per_second", "must be at least 1"));
        }
        if self.replay_cache_capacity == 0 {
            return Err(err("replay_cache_capacity", "must be at least 1"));
        }
        if self.socket_receive_buffer == 0 {
            return Err(err("socket_receive_buffer", "must be at least 1"));
        }
        if !(512..=65_000 - OVERHEAD).contains(&self.max_packet_size) {
            return Err(err(
                "max_packet_size",
                format!(
                    "{} is outside 512..={} bytes",
                    self.max_packet_size,
                    65_000 - OVERHEAD
                ),
            ));
        }
        Ok(())
    }

    /// The foca configuration for these settings (after [`MembershipConfig::validate`]).
    ///
    /// # Errors
    /// The same as [`MembershipConfig::validate`].
    pub fn to_foca(&self) -> Result<foca::Config, ConfigError> {
        self.validate()?;
        let nz = |field: &'static str, v: usize| {
            NonZeroUsize::new(v).ok_or_else(|| err(field, "must be at least 1"))
        };
        let mut config = foca::Config::simple();
        config.probe_period = self.probe_period;
        config.probe_rtt = self.probe_rtt;
        config.num_indirect_probes = nz("indirect_probes", self.indirect_probes)?;
        config.max_transmissions = NonZeroU8::new(self.max_transmissions)
            .ok_or_else(|| err("max_transmissions", "must be at least 1"))?;
        config.suspect_to_down_after = self.suspect_timeout;
        config.remove_down_after = Some(self.remove_down_after);
        config.max_packet_size = nz("max_packet_size", self.max_packet_size)?;
        config.notify_down_members = true;
        config.periodic_announce = Some(foca::PeriodicParams {
            frequency: self.member_announce_interval,
            num_members: NonZeroUsize::MIN,
        });
        config.periodic_announce_to_down_members = Some(foca::PeriodicParams {
            frequency: self.down_announce_interval,
            num_members: NonZeroUsize::MIN,
        });
        config.periodic_gossip = Some(foca::PeriodicParams {
            frequency: self.gossip_interval,
            num_members: nz("gossip_fanout", self.gossip_fanout)?,
        });
        Ok(config)
    }

    /// The quorum lease `L` ([`super::lease`], issue #32 G2): how long a lease grant counts,
    /// from when its request was sent. Half the quickest declaration of death (one probe period
    /// plus the suspicion timeout): 150 ms with `fast`, 3 s with `safe`. An owner cut off from
    /// the majority stops answering within `L`, before anyone can have declared it down and
    /// claimed its IPs; the other half is the margin for the successor's own step.
    pub fn lease(&self) -> Duration {
        self.probe_period.saturating_add(self.suspect_timeout) / 2
    }

    /// How often lease requests go to every active member: a third of [`Self::lease`] (50 ms
    /// with `fast`), so one lost request or grant never lets the evidence lapse. Costs two
    /// sealed datagrams of about 100 bytes per peer per heartbeat (400 datagrams/s per node at
    /// 10 nodes with `fast`).
    pub fn lease_heartbeat(&self) -> Duration {
        self.lease() / 3
    }

    /// Replay window in milliseconds (saturating).
    pub fn replay_window_ms(&self) -> u64 {
        u64::try_from(self.replay_window.as_millis()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn defaults_are_valid_and_mapped() {
        let c = MembershipConfig::default();
        let f = c.to_foca().unwrap();
        assert_eq!(f.probe_period, Duration::from_millis(100));
        assert_eq!(f.probe_rtt, Duration::from_millis(40));
        assert_eq!(f.suspect_to_down_after, Duration::from_millis(200));
        assert_eq!(f.max_packet_size.get() + OVERHEAD, 1403);
        assert!(f.notify_down_members);
        assert_eq!(f.max_transmissions.get(), 12);
        assert_eq!(
            f.periodic_gossip.unwrap().frequency,
            Duration::from_millis(50)
        );
    }

    #[test]
    fn inconsistent_settings_are_named() {
        let c = MembershipConfig {
            probe_rtt: Duration::from_millis(100),
            ..MembershipConfig::default()
        };
        assert_eq!(c.validate().unwrap_err().field, "probe_rtt");
        let c = MembershipConfig {
            suspect_timeout: Duration::ZERO,
            ..MembershipConfig::default()
        };
        assert_eq!(c.validate().unwrap_err().field, "suspect_timeout");
        let c = MembershipConfig {
            max_packet_size: 100,
            ..MembershipConfig::default()
        };
        let e = c.to_foca().unwrap_err();
        assert_eq!(e.field, "max_packet_size");
        assert!(e.to_string().contains("100"));
        let c = MembershipConfig {
            gossip_fanout: 0,
            ..MembershipConfig::default()
        };
        assert_eq!(c.validate().unwrap_err().field, "gossip_fanout");
        let c = MembershipConfig {
            max_opens_per_second: 0,
            ..MembershipConfig::default()
        };
        assert_eq!(c.validate().unwrap_err().field, "max_opens_per_second");
        let c = MembershipConfig {
            max_other_opens_per_second: 0,
            ..MembershipConfig::default()
        };
        assert_eq!(
            c.validate().unwrap_err().field,
            "max_other_opens_per_second"
        );
    }
}
