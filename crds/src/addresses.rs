//! Address math for `IPAddressPool.spec.addresses`: parse entries, test membership, count per
//! family and walk usable addresses without materialising a pool.
//!
//! Pure: imports neither `kube` nor `tokio`. Addresses are handled as `u128` offsets inside their
//! family so IPv4 and IPv6 share one code path; [`Family`] says how wide the space is.
//!
//! Rules (DESIGN §3):
//! - an entry is a CIDR (`198.51.100.0/24`, `2001:db8::/120`, `198.51.100.7/32`) or an inclusive
//!   range `start-end` (spaces around `-` allowed, start ≤ end, one family);
//! - in IPv4 CIDR entries with prefix length ≤ 30 the network and broadcast addresses are not
//!   usable (a deliberate difference from MetalLB, which hands them out); ranges are literal;
//! - with `avoidBuggyIPs`, IPv4 addresses whose last octet is 0 or 255 are not usable;
//! - an entry that overlaps a block that is never a LoadBalancer IP ([`FORBIDDEN_BLOCKS`]:
//!   loopback, link-local, multicast, unspecified, reserved and broadcast, IPv4-mapped) is refused,
//!   and with it the whole pool (issue 10; MetalLB refuses none of them).
//!
//! [`AddressEntry::parse`] accepts exactly the syntax the CRD's CEL rules accept (Go's `netip`
//! syntax): no zones, no IPv4-mapped IPv6, no leading zeros, no whitespace inside a CIDR;
//! [`PoolAddresses::parse`] adds the forbidden blocks, which the CEL rules refuse too.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnetwork::IpNetwork;

/// An IP family. `V4` addresses occupy offsets `0..=u32::MAX`, `V6` the whole `u128` space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    /// IPv4 (RFC 791).
    V4,
    /// IPv6 (RFC 8200).
    V6,
}

impl Family {
    /// The family of an address.
    pub fn of(ip: IpAddr) -> Family {
        match ip {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }

    /// The Kubernetes spelling used in `spec.ipFamilies`: `"IPv4"` or `"IPv6"`.
    pub fn as_k8s(self) -> &'static str {
        match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        }
    }

    /// Parses the Kubernetes spelling (`"IPv4"`, `"IPv6"`); `None` for anything else.
    pub fn from_k8s(s: &str) -> Option<Family> {
        match s {
            "IPv4" => Some(Family::V4),
            "IPv6" => Some(Family::V6),
            _ => None,
        }
    }

    /// Address width in bits: 32 or 128.
    pub fn bits(self) -> u32 {
        match self {
            Family::V4 => 32,
            Family::V6 => 128,
        }
    }

    /// The largest offset in this family's space.
    pub fn max_offset(self) -> u128 {
        match self {
            Family::V4 => u32::MAX as u128,
            Family::V6 => u128::MAX,
        }
    }

    /// Turns an offset (as returned by [`to_offset`]) back into an address of this family.
    /// Offsets above [`Family::max_offset`] are truncated to the family's width.
    pub fn addr(self, offset: u128) -> IpAddr {
        match self {
            Family::V4 => IpAddr::V4(Ipv4Addr::from(offset as u32)),
            Family::V6 => IpAddr::V6(Ipv6Addr::from(offset)),
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_k8s())
    }
}

/// The numeric value of an address inside its family (`u32` widened for IPv4).
pub fn to_offset(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u32::from(v4) as u128,
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// An inclusive range of addresses of one family, `first ≤ last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IpRange {
    family: Family,
    first: u128,
    last: u128,
}

impl IpRange {
    /// Builds a range from offsets. `None` when `first > last` or `last` is outside the family.
    pub fn from_offsets(family: Family, first: u128, last: u128) -> Option<IpRange> {
        (first <= last && last <= family.max_offset()).then_some(IpRange {
            family,
            first,
            last,
        })
    }

    /// Builds a range from two addresses. `None` when the families differ or `first > last`.
    pub fn new(first: IpAddr, last: IpAddr) -> Option<IpRange> {
        let family = Family::of(first);
        if Family::of(last) != family {
            return None;
        }
        IpRange::from_offsets(family, to_offset(first), to_offset(last))
    }

    /// The range covering a CIDR, network and broadcast included.
    pub fn of_network(net: IpNetwork) -> IpRange {
        let family = Family::of(net.ip());
        let host_bits = family.bits() - u32::from(net.prefix());
        let size_minus_one = if host_bits >= 128 {
            u128::MAX
        } else {
            (1u128 << host_bits) - 1
        };
        let first = to_offset(net.network());
        IpRange {
            family,
            first,
            last: first + size_minus_one,
        }
    }

    /// The family of both ends.
    pub fn family(&self) -> Family {
        self.family
    }
    /// First offset (inclusive).
    pub fn first_offset(&self) -> u128 {
        self.first
    }
    /// Last offset (inclusive).
    pub fn last_offset(&self) -> u128 {
        self.last
    }
    /// First address (inclusive).
    pub fn first(&self) -> IpAddr {
        self.family.addr(self.first)
    }
    /// Last address (inclusive).
    pub fn last(&self) -> IpAddr {
        self.family.addr(self.last)
    }

    /// Whether `ip` lies inside the range (false for the other family).
    pub fn contains(&self, ip: IpAddr) -> bool {
        Family::of(ip) == self.family && (self.first..=self.last).contains(&to_offset(ip))
    }

    /// Number of addresses, saturating at `u128::MAX` (only `::/0` saturates).
    pub fn len(&self) -> u128 {
        (self.last - self.first).saturating_add(1)
    }

    /// Always false: a range holds at least one address. Present for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The overlap of two ranges, if any.
    pub fn intersect(&self, other: &IpRange) -> Option<IpRange> {
        if self.family != other.family {
            return None;
        }
        IpRange::from_offsets(
            self.family,
            self.first.max(other.first),
            self.last.min(other.last),
        )
    }

    /// The first block of [`FORBIDDEN_BLOCKS`] (in table order) that shares an address with the
    /// range, if any. Overlap of inclusive ranges: `first ≤ block.last ∧ block.first ≤ last`.
    pub fn forbidden_overlap(&self) -> Option<&'static ForbiddenBlock> {
        FORBIDDEN_BLOCKS
            .iter()
            .find(|b| self.intersect(&b.range()).is_some())
    }
}

impl fmt::Display for IpRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.first == self.last {
            write!(f, "{}", self.first())
        } else {
            write!(f, "{}-{}", self.first(), self.last())
        }
    }
}

/// An address block whose addresses are never a LoadBalancer IP: answering ARP or NDP for them,
/// or handing them to a Service, would capture a host's own loopback or link-local traffic, the
/// cloud metadata service, multicast groups or broadcasts. See [`FORBIDDEN_BLOCKS`].
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ForbiddenBlock {
    /// The block in CIDR notation, as messages and the CRD's CEL rules spell it.
    pub cidr: &'static str,
    /// What the block is (`loopback`, `link-local`, ...).
    pub what: &'static str,
    /// Where the rule comes from (`RFC 1122 §3.2.1.3`).
    pub source: &'static str,
    family: Family,
    first: u128,
    prefix: u8,
}

impl ForbiddenBlock {
    /// The family of the block.
    pub fn family(&self) -> Family {
        self.family
    }

    /// The block's prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Every address of the block.
    pub fn range(&self) -> IpRange {
        let host_bits = self.family.bits() - u32::from(self.prefix);
        let size_minus_one = if host_bits >= 128 {
            u128::MAX
        } else {
            (1u128 << host_bits) - 1
        };
        IpRange {
            family: self.family,
            first: self.first,
            last: self.first + size_minus_one,
        }
    }
}

impl fmt::Display for ForbiddenBlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}, {})", self.cidr, self.what, self.source)
    }
}

/// The blocks that are never a LoadBalancer IP, IPv4 first, each in ascending order:
///
/// | block | what | source |
/// |---|---|---|
/// | `0.0.0.0/8` | "this network", incl. the unspecified address `0.0.0.0` | RFC 1122 §3.2.1.3 |
/// | `127.0.0.0/8` | loopback | RFC 1122 §3.2.1.3 |
/// | `169.254.0.0/16` | link-local, incl. the cloud metadata address `169.254.169.254` | RFC 3927 |
/// | `224.0.0.0/4` | multicast | RFC 1112 §4 |
/// | `240.0.0.0/4` | reserved, incl. the limited broadcast `255.255.255.255` | RFC 1112 §4, RFC 919 §7 |
/// | `::/128` | unspecified | RFC 4291 §2.5.2 |
/// | `::1/128` | loopback | RFC 4291 §2.5.3 |
/// | `::ffff:0:0/96` | IPv4-mapped | RFC 4291 §2.5.5.2 |
/// | `fe80::/10` | link-local unicast | RFC 4291 §2.5.6 |
/// | `ff00::/8` | multicast | RFC 4291 §2.7 |
///
/// An `addresses` entry that overlaps any of them is refused whole: by the CRD's CEL rules at
/// admission ([`crate::v1beta1::address_entry_rules`]), and by [`PoolAddresses::parse`] for pools
/// the API server stored before the rule existed. MetalLB refuses none of them.
pub const FORBIDDEN_BLOCKS: [ForbiddenBlock; 10] = [
    ForbiddenBlock {
        cidr: "0.0.0.0/8",
        what: "this network and unspecified",
        source: "RFC 1122 §3.2.1.3",
        family: Family::V4,
        first: 0,
        prefix: 8,
    },
    ForbiddenBlock {
        cidr: "127.0.0.0/8",
        what: "loopback",
        source: "RFC 1122 §3.2.1.3",
        family: Family::V4,
        first: 0x7f00_0000,
        prefix: 8,
    },
    ForbiddenBlock {
        cidr: "169.254.0.0/16",
        what: "link-local, incl. the cloud metadata address 169.254.169.254",
        source: "RFC 3927",
        family: Family::V4,
        first: 0xa9fe_0000,
        prefix: 16,
    },
    ForbiddenBlock {
        cidr: "224.0.0.0/4",
        what: "multicast",
        source: "RFC 1112 §4",
        family: Family::V4,
        first: 0xe000_0000,
        prefix: 4,
    },
    ForbiddenBlock {
        cidr: "240.0.0.0/4",
        what: "reserved, incl. the limited broadcast 255.255.255.255",
        source: "RFC 1112 §4, RFC 919 §7",
        family: Family::V4,
        first: 0xf000_0000,
        prefix: 4,
    },
    ForbiddenBlock {
        cidr: "::/128",
        what: "unspecified",
        source: "RFC 4291 §2.5.2",
        family: Family::V6,
        first: 0,
        prefix: 128,
    },
    ForbiddenBlock {
        cidr: "::1/128",
        what: "loopback",
        source: "RFC 4291 §2.5.3",
        family: Family::V6,
        first: 1,
        prefix: 128,
    },
    ForbiddenBlock {
        cidr: "::ffff:0:0/96",
        what: "IPv4-mapped",
        source: "RFC 4291 §2.5.5.2",
        family: Family::V6,
        first: 0xffff_0000_0000,
        prefix: 96,
    },
    ForbiddenBlock {
        cidr: "fe80::/10",
        what: "link-local unicast",
        source: "RFC 4291 §2.5.6",
        family: Family::V6,
        first: 0xfe80 << 112,
        prefix: 10,
    },
    ForbiddenBlock {
        cidr: "ff00::/8",
        what: "multicast",
        source: "RFC 4291 §2.7",
        family: Family::V6,
        first: 0xff << 120,
        prefix: 8,
    },
];

/// The block of [`FORBIDDEN_BLOCKS`] that `ip` lies in, if any: such an address is never handed
/// out nor announced.
pub fn forbidden_block(ip: IpAddr) -> Option<&'static ForbiddenBlock> {
    FORBIDDEN_BLOCKS.iter().find(|b| b.range().contains(ip))
}

/// Why an `addresses` entry was refused. The `Display` form names the entry, in the same words as
/// the CRD's CEL messages, so the controller's conditions read like the API server's refusals.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    /// Empty or whitespace only.
    #[error(
        "addresses entry {0:?} is empty: write a CIDR like 198.51.100.0/24 or a range like 198.51.100.10-198.51.100.20"
    )]
    Empty(String),
    /// Neither a CIDR nor `start-end`.
    #[error(
        "addresses entry {0:?} is neither a CIDR (like 198.51.100.0/24) nor a range (like 198.51.100.10-198.51.100.20)"
    )]
    Syntax(String),
    /// A range whose ends are of different families.
    #[error("addresses entry {0:?} mixes IPv4 and IPv6 in one range")]
    MixedFamilies(String),
    /// A range whose start is above its end.
    #[error("addresses entry {0:?} is a range whose start is above its end")]
    Reversed(String),
}

/// One parsed `addresses` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressEntry {
    /// Every address the entry names, network and broadcast included.
    pub range: IpRange,
    /// `Some(prefix length)` for CIDR entries, `None` for ranges.
    pub prefix: Option<u8>,
}

impl AddressEntry {
    /// Parses one entry: a CIDR or an inclusive range `start-end`.
    ///
    /// A CIDR with host bits set (`198.51.100.7/24`) is taken as its network, as MetalLB does.
    ///
    /// # Errors
    /// [`EntryError`], naming the entry, for anything the CRD's CEL rules would refuse.
    pub fn parse(entry: &str) -> Result<AddressEntry, EntryError> {
        if entry.trim().is_empty() {
            return Err(EntryError::Empty(entry.to_owned()));
        }
        if let Some((start, end)) = entry.split_once('-') {
            let (Some(start), Some(end)) = (parse_ip(start.trim()), parse_ip(end.trim())) else {
                return Err(EntryError::Syntax(entry.to_owned()));
            };
            if Family::of(start) != Family::of(end) {
                return Err(EntryError::MixedFamilies(entry.to_owned()));
            }
            let range =
                IpRange::new(start, end).ok_or_else(|| EntryError::Reversed(entry.to_owned()))?;
            return Ok(AddressEntry {
                range,
                prefix: None,
            });
        }
        let (ip, prefix) = entry
            .split_once('/')
            .ok_or_else(|| EntryError::Syntax(entry.to_owned()))?;
        let ip = parse_ip(ip).ok_or_else(|| EntryError::Syntax(entry.to_owned()))?;
        let prefix = parse_prefix(prefix, Family::of(ip))
            .ok_or_else(|| EntryError::Syntax(entry.to_owned()))?;
        let net = IpNetwork::new(ip, prefix).map_err(|_| EntryError::Syntax(entry.to_owned()))?;
        Ok(AddressEntry {
            range: IpRange::of_network(net),
            prefix: Some(prefix),
        })
    }

    /// The first block of [`FORBIDDEN_BLOCKS`] that shares an address with the entry (network
    /// and broadcast addresses included, as the CEL rules see it), if any: such an entry is
    /// refused whole.
    pub fn forbidden(&self) -> Option<&'static ForbiddenBlock> {
        self.range.forbidden_overlap()
    }

    /// The addresses of this entry that may be handed out, before `avoidBuggyIPs`: the whole range,
    /// except the network and broadcast addresses of IPv4 CIDRs with prefix ≤ 30. Never empty.
    pub fn usable(&self) -> IpRange {
        match (self.range.family, self.prefix) {
            (Family::V4, Some(p)) if p <= 30 => IpRange {
                family: Family::V4,
                first: self.range.first + 1,
                last: self.range.last - 1,
            },
            _ => self.range,
        }
    }
}

/// Parses an address the way Go's `netip.ParseAddr` does for the API server's CEL `isIP`: no
/// zone, no IPv4-mapped IPv6, no leading zeros in IPv4 octets.
pub fn parse_ip(s: &str) -> Option<IpAddr> {
    if s.contains('%') {
        return None;
    }
    let ip: IpAddr = s.parse().ok()?;
    match ip {
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() => None,
        _ => Some(ip),
    }
}

/// A decimal prefix length within the family's width, without sign or leading zeros.
fn parse_prefix(s: &str, family: Family) -> Option<u8> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || (s.len() > 1 && s.starts_with('0'))
    {
        return None;
    }
    let p: u32 = s.parse().ok()?;
    (p <= family.bits()).then_some(p as u8)
}

/// Whether an IPv4 offset ends in `.0` or `.255` (MetalLB's `avoidBuggyIPs`).
pub fn is_buggy_v4(offset: u128) -> bool {
    matches!(offset & 0xff, 0 | 0xff)
}

/// Number of `.0`/`.255` offsets in `0..=n`.
fn buggy_up_to(n: u128) -> u128 {
    // x ≡ 0 (mod 256): n/256 + 1 values; x ≡ 255 (mod 256): (n+1)/256 values.
    n / 256 + 1 + (n + 1) / 256
}

/// The usable addresses of a pool: the union of its entries' usable ranges, merged and sorted per
/// family, with `avoidBuggyIPs` applied lazily (never materialised).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PoolAddresses {
    /// Disjoint, non-adjacent, ascending ranges; IPv4 ones first.
    ranges: Vec<IpRange>,
    avoid_buggy: bool,
}

/// Why a pool's `addresses` list was refused: which entries (index and text), and why. Either
/// way the whole pool serves nothing, as if the API server had refused it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolAddressError {
    /// The first entry that is not an address entry at all (syntax, families, order).
    #[error("spec.addresses[{index}]: {source}")]
    Malformed {
        /// Position of the bad entry in `spec.addresses`.
        index: usize,
        /// What is wrong with it.
        source: EntryError,
    },
    /// Every entry that overlaps a block of [`FORBIDDEN_BLOCKS`] (in order; never empty).
    #[error("{}", join_forbidden(.0))]
    Forbidden(Vec<ForbiddenEntry>),
}

impl PoolAddressError {
    /// The position of the first bad entry in `spec.addresses`.
    pub fn index(&self) -> usize {
        match self {
            PoolAddressError::Malformed { index, .. } => *index,
            PoolAddressError::Forbidden(entries) => entries.first().map_or(0, |e| e.index),
        }
    }
}

/// An `addresses` entry that overlaps a block of [`FORBIDDEN_BLOCKS`]. The `Display` form is
/// the API server's message for it (the CEL rule of [`crate::v1beta1::address_entry_rules`])
/// behind the entry's path: `spec.addresses[2]: addresses entry "127.0.0.1/32" overlaps
/// 127.0.0.0/8 (loopback, RFC 1122 §3.2.1.3), which is never a LoadBalancer IP`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("spec.addresses[{index}]: {}", forbidden_message(entry, block))]
pub struct ForbiddenEntry {
    /// Position of the entry in `spec.addresses`.
    pub index: usize,
    /// The entry as written.
    pub entry: String,
    /// The first block (in table order) it overlaps.
    pub block: &'static ForbiddenBlock,
}

/// The message for an entry overlapping `block`, worded like the CRD's CEL message.
pub fn forbidden_message(entry: &str, block: &ForbiddenBlock) -> String {
    format!("addresses entry {entry:?}{}", forbidden_message_tail(block))
}

/// What [`forbidden_message`] says after the quoted entry; the CEL message ends the same way.
pub fn forbidden_message_tail(block: &ForbiddenBlock) -> String {
    format!(" overlaps {block}, which is never a LoadBalancer IP")
}

fn join_forbidden(entries: &[ForbiddenEntry]) -> String {
    entries
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl PoolAddresses {
    /// Parses every entry and merges them.
    ///
    /// An entry overlapping a block of [`FORBIDDEN_BLOCKS`] makes the whole pool unusable, like a
    /// malformed entry: the API server refuses such a pool at admission, and one stored before
    /// that rule must not serve either (nothing of it is used, not even its other entries, so
    /// the pool's state does not depend on when it was created).
    ///
    /// # Errors
    /// [`PoolAddressError::Malformed`] for the first malformed entry; else
    /// [`PoolAddressError::Forbidden`] naming every entry that overlaps a forbidden block.
    pub fn parse<S: AsRef<str>>(
        entries: &[S],
        avoid_buggy: bool,
    ) -> Result<PoolAddresses, PoolAddressError> {
        let mut ranges = Vec::with_capacity(entries.len());
        let mut forbidden = Vec::new();
        for (index, entry) in entries.iter().enumerate() {
            let parsed = AddressEntry::parse(entry.as_ref())
                .map_err(|source| PoolAddressError::Malformed { index, source })?;
            if let Some(block) = parsed.forbidden() {
                forbidden.push(ForbiddenEntry {
                    index,
                    entry: entry.as_ref().to_owned(),
                    block,
                });
            }
            ranges.push(parsed.usable());
        }
        if !forbidden.is_empty() {
            return Err(PoolAddressError::Forbidden(forbidden));
        }
        Ok(PoolAddresses::from_ranges(ranges, avoid_buggy))
    }

    /// Builds from usable ranges (any order, overlaps allowed).
    pub fn from_ranges(mut ranges: Vec<IpRange>, avoid_buggy: bool) -> PoolAddresses {
        ranges.sort();
        let mut merged: Vec<IpRange> = Vec::with_capacity(ranges.len());
        for r in ranges {
            match merged.last_mut() {
                Some(prev) if prev.family == r.family && r.first <= prev.last.saturating_add(1) => {
                    prev.last = prev.last.max(r.last);
                }
                _ => merged.push(r),
            }
        }
        PoolAddresses {
            ranges: merged,
            avoid_buggy,
        }
    }

    /// The merged ranges, before `avoidBuggyIPs`.
    pub fn ranges(&self) -> &[IpRange] {
        &self.ranges
    }

    /// The merged ranges of one family.
    pub fn ranges_of(&self, family: Family) -> impl Iterator<Item = &IpRange> {
        self.ranges.iter().filter(move |r| r.family == family)
    }

    /// Whether `avoidBuggyIPs` applies.
    pub fn avoid_buggy(&self) -> bool {
        self.avoid_buggy
    }

    /// Whether the pool has any range of `family` (even one left empty by `avoidBuggyIPs`).
    pub fn has_family(&self, family: Family) -> bool {
        self.ranges_of(family).next().is_some()
    }

    /// Whether `ip` may be handed out from this pool.
    pub fn is_usable(&self, ip: IpAddr) -> bool {
        let family = Family::of(ip);
        if self.avoid_buggy && family == Family::V4 && is_buggy_v4(to_offset(ip)) {
            return false;
        }
        self.ranges_of(family).any(|r| r.contains(ip))
    }

    /// Whether `ip` lies inside any entry's usable range, ignoring `avoidBuggyIPs`.
    pub fn covers(&self, ip: IpAddr) -> bool {
        self.ranges_of(Family::of(ip)).any(|r| r.contains(ip))
    }

    /// Usable addresses in `range` (a sub-range of one of ours), `avoidBuggyIPs` applied; `u128`
    /// saturating.
    pub fn usable_in(&self, range: &IpRange) -> u128 {
        let len = range.len();
        if self.avoid_buggy && range.family == Family::V4 {
            let below = if range.first == 0 {
                0
            } else {
                buggy_up_to(range.first - 1)
            };
            len - (buggy_up_to(range.last) - below)
        } else {
            len
        }
    }

    /// Number of usable addresses of `family`, saturating at `u64::MAX`.
    pub fn count(&self, family: Family) -> u64 {
        let total = self
            .ranges_of(family)
            .fold(0u128, |acc, r| acc.saturating_add(self.usable_in(r)));
        u64::try_from(total).unwrap_or(u64::MAX)
    }

    /// The first usable address of `family` at or after `from` (any offset), if any. O(number of
    /// ranges); never walks addresses one by one except to step over at most two buggy ones.
    pub fn next_usable(&self, family: Family, from: u128) -> Option<u128> {
        for r in self.ranges_of(family) {
            if r.last < from {
                continue;
            }
            let mut candidate = r.first.max(from);
            if self.avoid_buggy && family == Family::V4 {
                while candidate <= r.last && is_buggy_v4(candidate) {
                    candidate += 1;
                }
                if candidate > r.last {
                    continue;
                }
            }
            return Some(candidate);
        }
        None
    }

    /// Lazily walks every usable address of `family`, ascending.
    pub fn iter(&self, family: Family) -> impl Iterator<Item = IpAddr> + '_ {
        let mut next = self.next_usable(family, 0);
        std::iter::from_fn(move || {
            let cur = next?;
            next = cur.checked_add(1).and_then(|n| self.next_usable(family, n));
            Some(family.addr(cur))
        })
    }
}

/// Saturating conversion of a count to the `int64` the API carries (`9223372036854775807` for a
/// /64 and anything larger). Kubernetes serialises integers as `int64`, so `u64` would overflow.
pub fn api_count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn cidr_v4_skips_network_and_broadcast_up_to_slash_30() {
        let e = AddressEntry::parse("198.51.100.0/24").unwrap();
        assert_eq!(e.usable().first(), ip("198.51.100.1"));
        assert_eq!(e.usable().last(), ip("198.51.100.254"));
        let e = AddressEntry::parse("198.51.100.0/30").unwrap();
        assert_eq!(e.usable().len(), 2);
        let e = AddressEntry::parse("198.51.100.10/31").unwrap();
        assert_eq!(
            e.usable().len(),
            2,
            "/31 is point-to-point: both addresses usable"
        );
        let e = AddressEntry::parse("198.51.100.0/32").unwrap();
        assert_eq!(e.usable().len(), 1);
    }

    #[test]
    fn ranges_are_literal_and_allow_spaces() {
        let e = AddressEntry::parse("198.51.100.0 - 198.51.100.255").unwrap();
        assert_eq!(e.usable().len(), 256);
        assert_eq!(e.prefix, None);
    }

    #[test]
    fn v6_cidr_keeps_every_address() {
        let e = AddressEntry::parse("2001:db8::/120").unwrap();
        assert_eq!(e.usable().len(), 256);
    }

    #[test]
    fn host_bits_are_masked() {
        let e = AddressEntry::parse("198.51.100.7/24").unwrap();
        assert_eq!(e.range.first(), ip("198.51.100.0"));
    }

    #[test]
    fn refused_entries_name_themselves() {
        for (bad, want) in [
            ("-", "is neither a CIDR"),
            ("", "is empty"),
            ("   ", "is empty"),
            ("198.51.100.30-198.51.100.20", "start is above its end"),
            ("198.51.100.300/32", "is neither a CIDR"),
            ("198.51.100.1-2001:db8::1", "mixes IPv4 and IPv6"),
            ("198.51.100.0/33", "is neither a CIDR"),
            ("2001:db8::/129", "is neither a CIDR"),
            ("fe80::1%eth0/128", "is neither a CIDR"),
            ("::ffff:198.51.100.1/128", "is neither a CIDR"),
            ("198.51.100.010/32", "is neither a CIDR"),
            ("198.51.100.0/024", "is neither a CIDR"),
            ("lb.example.com", "is neither a CIDR"),
            ("198.51.100.1", "is neither a CIDR"),
            (" 198.51.100.0/24", "is neither a CIDR"),
        ] {
            let err = AddressEntry::parse(bad).unwrap_err().to_string();
            assert!(err.contains(want), "{bad:?}: {err}");
            assert!(
                err.contains(&format!("{bad:?}")),
                "{bad:?} not named in: {err}"
            );
        }
    }

    #[test]
    fn pool_error_names_index() {
        let err = PoolAddresses::parse(&["198.51.100.0/24", "nope"], false).unwrap_err();
        assert_eq!(err.index(), 1);
        assert!(err.to_string().starts_with("spec.addresses[1]: "));
    }

    #[test]
    fn counts_are_per_family_and_order_independent() {
        let a = PoolAddresses::parse(&["2001:db8:0:3::/64", "198.51.100.0/24"], false).unwrap();
        let b = PoolAddresses::parse(&["198.51.100.0/24", "2001:db8:0:3::/64"], false).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.count(Family::V4), 254);
        assert_eq!(a.count(Family::V6), u64::MAX);
        assert_eq!(api_count(a.count(Family::V6)), i64::MAX);
    }

    #[test]
    fn avoid_buggy_ips() {
        let p = PoolAddresses::parse(&["198.51.100.0/32"], true).unwrap();
        assert_eq!(p.count(Family::V4), 0);
        assert_eq!(p.iter(Family::V4).next(), None);
        let p = PoolAddresses::parse(&["198.51.100.0-198.51.101.255"], true).unwrap();
        assert_eq!(p.count(Family::V4), 512 - 4);
        assert!(!p.is_usable(ip("198.51.100.255")));
        assert!(!p.is_usable(ip("198.51.101.0")));
        assert!(p.is_usable(ip("198.51.101.1")));
        let v: Vec<_> = p.iter(Family::V4).skip(253).take(2).collect();
        assert_eq!(v, vec![ip("198.51.100.254"), ip("198.51.101.1")]);
    }

    #[test]
    fn overlapping_entries_merge() {
        let p = PoolAddresses::parse(
            &[
                "198.51.100.0/24",
                "198.51.100.0/32",
                "198.51.100.250-198.51.101.3",
            ],
            false,
        )
        .unwrap();
        assert_eq!(p.ranges().len(), 1);
        assert_eq!(p.count(Family::V4), 256 + 4);
    }

    #[test]
    fn forbidden_table_matches_its_cidr_text_and_is_ascending() {
        let mut prev: Option<IpRange> = None;
        for b in &FORBIDDEN_BLOCKS {
            let net: IpNetwork = b.cidr.parse().unwrap();
            assert_eq!(net.network(), net.ip(), "{} has host bits", b.cidr);
            assert_eq!(IpRange::of_network(net), b.range(), "{}", b.cidr);
            assert_eq!(net.prefix(), b.prefix());
            if let Some(p) = prev.filter(|p| p.family() == b.family()) {
                assert!(
                    p.last_offset() < b.range().first_offset(),
                    "{} out of order",
                    b.cidr
                );
            }
            prev = Some(b.range());
        }
    }

    #[test]
    fn forbidden_addresses_are_classified() {
        for (addr, block) in [
            ("0.0.0.0", "0.0.0.0/8"),
            ("0.255.255.255", "0.0.0.0/8"),
            ("127.0.0.1", "127.0.0.0/8"),
            ("169.254.169.254", "169.254.0.0/16"),
            ("224.0.0.1", "224.0.0.0/4"),
            ("239.255.255.255", "224.0.0.0/4"),
            ("240.0.0.0", "240.0.0.0/4"),
            ("255.255.255.255", "240.0.0.0/4"),
            ("::", "::/128"),
            ("::1", "::1/128"),
            ("::ffff:198.51.100.1", "::ffff:0:0/96"),
            ("fe80::1", "fe80::/10"),
            ("febf:ffff::", "fe80::/10"),
            ("ff02::1", "ff00::/8"),
        ] {
            assert_eq!(
                forbidden_block(ip(addr)).map(|b| b.cidr),
                Some(block),
                "{addr}"
            );
        }
        for addr in [
            "1.0.0.0",
            "126.255.255.255",
            "128.0.0.0",
            "169.253.255.255",
            "169.255.0.0",
            "198.51.100.1",
            "223.255.255.255",
            "::2",
            "::fffe:ffff:ffff",
            "::1:0:0:0",
            "fe7f:ffff::",
            "fec0::",
            "feff::1",
            "2001:db8::1",
        ] {
            assert_eq!(forbidden_block(ip(addr)), None, "{addr}");
        }
    }

    #[test]
    fn entries_overlapping_forbidden_blocks_are_refused_whole() {
        for (entry, block) in [
            ("127.0.0.1/32", "127.0.0.0/8"),
            ("0.0.0.0/32", "0.0.0.0/8"),
            ("0.0.0.0/0", "0.0.0.0/8"),
            ("126.0.0.0/7", "127.0.0.0/8"),
            ("126.255.255.250-128.0.0.5", "127.0.0.0/8"),
            ("169.254.169.254/32", "169.254.0.0/16"),
            ("169.253.255.255-169.255.0.0", "169.254.0.0/16"),
            ("169.0.0.0/8", "169.254.0.0/16"),
            ("223.255.255.255-224.0.0.0", "224.0.0.0/4"),
            ("255.255.255.255/32", "240.0.0.0/4"),
            ("::/128", "::/128"),
            ("::/64", "::/128"),
            ("::1/128", "::1/128"),
            ("::1-::5", "::1/128"),
            ("::fffe:ffff:ffff-::1:0:0:0", "::ffff:0:0/96"),
            ("::fffe:0:0/95", "::ffff:0:0/96"),
            ("fe80::/64", "fe80::/10"),
            ("fe7f::-fec0::", "fe80::/10"),
            ("ff02::1/128", "ff00::/8"),
            ("2001:db8::-ffff::", "fe80::/10"),
        ] {
            let e = AddressEntry::parse(entry).unwrap();
            assert_eq!(e.forbidden().map(|b| b.cidr), Some(block), "{entry}");
        }
        for entry in [
            "198.51.100.0/24",
            "203.0.113.0-203.0.113.255",
            "1.0.0.0-126.255.255.255",
            "128.0.0.0-169.253.255.255",
            "169.255.0.0-223.255.255.255",
            "::2-::fffe:ffff:ffff",
            "::1:0:0:0-fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "fec0::/10",
            "2001:db8::/32",
        ] {
            let e = AddressEntry::parse(entry).unwrap();
            assert_eq!(e.forbidden(), None, "{entry}");
        }
    }

    #[test]
    fn pool_with_forbidden_entries_names_each_and_serves_nothing() {
        let err = PoolAddresses::parse(
            &[
                "198.51.100.0/24",
                "127.0.0.1/32",
                "fe80::/64",
                "2001:db8::/120",
            ],
            false,
        )
        .unwrap_err();
        assert_eq!(err.index(), 1);
        assert_eq!(
            err.to_string(),
            "spec.addresses[1]: addresses entry \"127.0.0.1/32\" overlaps 127.0.0.0/8 (loopback, \
             RFC 1122 §3.2.1.3), which is never a LoadBalancer IP; spec.addresses[2]: addresses \
             entry \"fe80::/64\" overlaps fe80::/10 (link-local unicast, RFC 4291 §2.5.6), which \
             is never a LoadBalancer IP"
        );
        // A malformed entry is reported first, as the pool cannot be read at all.
        let err = PoolAddresses::parse(&["127.0.0.1/32", "nope"], false).unwrap_err();
        assert!(
            matches!(err, PoolAddressError::Malformed { index: 1, .. }),
            "{err}"
        );
    }

    #[test]
    fn huge_v6_pools_saturate() {
        // ::/0 holds forbidden blocks; 2000::/3 (all global unicast, RFC 4291 §2.4) does not.
        assert!(PoolAddresses::parse(&["::/0"], false).is_err());
        let p = PoolAddresses::parse(&["2000::/3"], false).unwrap();
        assert_eq!(p.count(Family::V6), u64::MAX);
        assert_eq!(p.iter(Family::V6).next(), Some(ip("2000::")));
        let whole = IpRange::from_offsets(Family::V6, 0, u128::MAX).unwrap();
        assert_eq!(
            PoolAddresses::from_ranges(vec![whole], false).count(Family::V6),
            u64::MAX
        );
    }
}
