//! The `ferrolb.io/v1beta1` API: `IPAddressPool` and `L2Advertisement`, cluster-scoped.
//!
//! Field meanings are DESIGN §3. Per-object validation lives in the generated schema and its CEL
//! rules (`x-kubernetes-validations`), so the API server refuses bad objects at admission with a
//! message naming the bad entry; ferrolb ships no admission webhook. Every list and string is
//! bounded so the rules fit the API server's CEL cost budget.

// clippy reads the repeated `type_ = …` inside separate `printcolumn(…)` groups as duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube_core::{Message, Rule};

use crate::addresses::{FORBIDDEN_BLOCKS, Family, ForbiddenBlock, forbidden_message_tail};
use kube_derive::{CustomResource, KubeSchema};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

/// API group of every ferrolb kind.
pub const GROUP: &str = "ferrolb.io";
/// API version served (and stored).
pub const VERSION: &str = "v1beta1";

/// Spec of an `IPAddressPool`: the addresses, and which Services may use them.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[kube(
    crates(kube_core = "::kube_core", kube = "::kube_derive"),
    group = "ferrolb.io",
    version = "v1beta1",
    kind = "IPAddressPool",
    doc = "A set of addresses ferrolb may hand out to Services of type LoadBalancer (ferrolb.io/v1beta1).",
    plural = "ipaddresspools",
    singular = "ipaddresspool",
    shortname = "flpool",
    category = "ferrolb",
    status = "IPAddressPoolStatus",
    printcolumn(name = "Addresses", type_ = "string", json_path = ".spec.addresses"),
    printcolumn(name = "AutoAssign", type_ = "boolean", json_path = ".spec.autoAssign"),
    printcolumn(
        name = "Assigned IPv4",
        type_ = "integer",
        json_path = ".status.assignedIPv4"
    ),
    printcolumn(
        name = "Available IPv4",
        type_ = "integer",
        json_path = ".status.availableIPv4"
    ),
    printcolumn(
        name = "Assigned IPv6",
        type_ = "integer",
        json_path = ".status.assignedIPv6"
    ),
    printcolumn(
        name = "Available IPv6",
        type_ = "integer",
        json_path = ".status.availableIPv6"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new(
    "has(self.autoAddresses) ? (!has(self.addresses) || size(self.addresses) == 0) : (has(self.addresses) && size(self.addresses) > 0)"
).message(Message::Expression(
    "has(self.autoAddresses) ? 'spec sets both addresses and autoAddresses: set exactly one' : 'spec sets neither addresses (a non-empty list) nor autoAddresses: set exactly one'".into()
)))]
#[serde(rename_all = "camelCase")]
pub struct IPAddressPoolSpec {
    /// Up to 64 entries, each a CIDR (`198.51.100.0/24`, `2001:db8::/120`, `198.51.100.7/32`) or
    /// an inclusive range `198.51.100.10-198.51.100.20`. Families may be mixed in one pool.
    /// Exactly one of `addresses` (non-empty) and `autoAddresses` is set (a CEL rule).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub addresses: Vec<AddressEntryText>,
    /// Opt-in laptop mode (issue #28): no numbers; the addresses are the top of the node network's
    /// IPv4 subnet as the speakers report it, never a Node's address nor a gateway, minus any
    /// address another host answered when probed (`ferrolb_crds::auto_pool`, docs/design.md
    /// "Automatic pools"). Not for a rack: the top of a subnet is often a DHCP range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_addresses: Option<AutoAddresses>,
    /// When false, only Services that name this pool or request one of its addresses get
    /// addresses from it. Default true.
    #[serde(default = "default_true")]
    pub auto_assign: bool,
    /// Never hand out IPv4 addresses ending in `.0` or `.255`. Default false.
    #[serde(default, rename = "avoidBuggyIPs")]
    pub avoid_buggy_ips: bool,
    /// Let Services of different namespaces share an address of this pool when they carry the
    /// same sharing key (`ferrolb.io/allow-shared-ip`). Default false: only Services of one
    /// namespace share an address (MetalLB lets the key alone share across namespaces). Set it
    /// only when the namespaces this pool serves trust each other: whoever can read a Service can
    /// copy its key, and a Service that joins an address can take it off the wire for all its
    /// sharers (`externalTrafficPolicy: Local` without ready endpoints on any node).
    #[serde(default)]
    pub allow_sharing_across_namespaces: bool,
    /// Restricts which Services this pool serves, and in which order pools are tried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_allocation: Option<ServiceAllocation>,
}

fn default_true() -> bool {
    true
}

/// `spec.autoAddresses`: how many addresses at the top of the node network an automatic pool
/// examines (IPv4 only for now).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, KubeSchema)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[x_kube(validation = Rule::new("self.size >= 1 && self.size <= 256").message(Message::Message(
    "autoAddresses.size must be 1-256".into()
)))]
#[serde(rename_all = "camelCase")]
pub struct AutoAddresses {
    /// 1–256: how many addresses the pool holds: the highest host addresses of the node
    /// network, leaving out Node addresses, gateways, and addresses another host answered (those
    /// are listed in the status and the next lower ones taken).
    #[schemars(schema_with = "auto_size_schema")]
    pub size: u16,
}

/// Largest `spec.autoAddresses.size` (the CEL rule of [`AutoAddresses`] says the same).
pub const AUTO_SIZE_MAX: u16 = 256;

/// The schema of [`AutoAddresses::size`]: an `int32`; its bounds are a CEL rule on
/// [`AutoAddresses`] (the generator writes numeric bounds as floats, `256.0`, which kustomize
/// rewrites, failing the manifest round trip; see `member_count_schema`).
fn auto_size_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "integer",
        "format": "int32",
    })
}

impl IPAddressPool {
    /// The address entries the pool serves: `spec.addresses`, or for an automatic pool
    /// (`spec.autoAddresses`) the controller's resolution in `status.autoAddresses.addresses`
    /// (none before the controller wrote one).
    pub fn address_entries(&self) -> Vec<&str> {
        if self.spec.auto_addresses.is_some() {
            self.auto_status_entries(|a| &a.addresses)
        } else {
            self.spec.addresses.iter().map(|a| a.0.as_str()).collect()
        }
    }

    /// The addresses the speakers probe for an automatic pool: `status.autoAddresses.candidates`,
    /// or its `addresses` when `candidates` is empty (a status written by a controller that did
    /// not write candidates). Empty for a pool with `spec.addresses` or before any resolution.
    pub fn probe_entries(&self) -> Vec<&str> {
        if self.spec.auto_addresses.is_none() {
            return Vec::new();
        }
        let candidates = self.auto_status_entries(|a| &a.candidates);
        match candidates.is_empty() {
            true => self.auto_status_entries(|a| &a.addresses),
            false => candidates,
        }
    }

    /// One list of `status.autoAddresses`, empty before the controller wrote one.
    fn auto_status_entries(
        &self,
        list: impl Fn(&AutoAddressesStatus) -> &Vec<String>,
    ) -> Vec<&str> {
        self.status
            .as_ref()
            .and_then(|s| s.auto_addresses.as_ref())
            .map(|a| list(a).iter().map(String::as_str).collect())
            .unwrap_or_default()
    }
}

impl IPAddressPoolSpec {
    /// `serviceAllocation`, with an empty `serviceAllocation: {}` treated as absent (DESIGN §3).
    pub fn effective_service_allocation(&self) -> Option<&ServiceAllocation> {
        self.service_allocation.as_ref().filter(|a| !a.is_empty())
    }
}

/// Which Services a pool serves, and its priority among pools.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[serde(rename_all = "camelCase")]
pub struct ServiceAllocation {
    /// Lower numbers are tried first; pools without a priority come after all numbered ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// Namespaces whose Services may use the pool (any of them). Empty = all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 63)))]
    pub namespaces: Vec<String>,
    /// Selectors on the Service's Namespace labels (any of them). Empty = all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub namespace_selectors: Vec<LabelSelector>,
    /// Selectors on the Service's labels (any of them). Empty = all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub service_selectors: Vec<LabelSelector>,
}

impl ServiceAllocation {
    /// Whether nothing is set (`serviceAllocation: {}`), which behaves as if absent.
    pub fn is_empty(&self) -> bool {
        *self == ServiceAllocation::default()
    }
}

/// Observed state of a pool, written by the controller.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct IPAddressPoolStatus {
    /// `Ready`, `Overlapping`, `NodeAddressConflict`, `Invalid`; messages name the other object or
    /// the bad entry.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// IPv4 addresses handed out (saturating at 9223372036854775807).
    #[serde(rename = "assignedIPv4", default)]
    pub assigned_ipv4: i64,
    /// IPv4 addresses still free.
    #[serde(rename = "availableIPv4", default)]
    pub available_ipv4: i64,
    /// IPv6 addresses handed out.
    #[serde(rename = "assignedIPv6", default)]
    pub assigned_ipv6: i64,
    /// IPv6 addresses still free (a /64 reads 9223372036854775807, never negative).
    #[serde(rename = "availableIPv6", default)]
    pub available_ipv6: i64,
    /// For a pool with `spec.autoAddresses`: what the controller resolved it to. The speakers
    /// read `addresses` from here (`Layout::of_pools`), so they announce exactly what the
    /// controller hands out.
    #[serde(
        rename = "autoAddresses",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub auto_addresses: Option<AutoAddressesStatus>,
}

/// `status.autoAddresses` of an automatic pool (docs/design.md, "Automatic pools").
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoAddressesStatus {
    /// The node network chosen (`192.168.49.0/24`): the IPv4 prefix reported by the most
    /// speakers, the lowest on a tie. Absent while no speaker has reported one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 18))]
    pub prefix: Option<String>,
    /// The candidates the speakers probe (RFC 5227 §2.1.1 ARP probes): the pool's window — the
    /// `size` highest host addresses of the network that no speaker found in use — and up to 4
    /// more below it (`ferrolb_crds::auto_pool::LOOKAHEAD`), as ranges or single addresses
    /// (`192.168.49.250/32`), ascending; at most 260 entries (`size` ≤ 256 plus 4). Absent in a
    /// status written before this field existed: the speakers then probe `addresses`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 260), inner(length(max = 31)))]
    pub candidates: Vec<String>,
    /// The pool's addresses, what is handed out and announced, as ranges
    /// (`192.168.49.240-192.168.49.254`) or single addresses, ascending: the candidates some
    /// speaker probed with no answer, plus addresses of an earlier resolution that a Service
    /// holds (never taken back).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(max = 31)))]
    pub addresses: Vec<String>,
    /// Candidates left out because another host answered an ARP probe for them, at most 8
    /// (`192.168.49.254 (answered by 02:42:c0:a8:31:fe, probed from node minikube)`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8), inner(length(max = 400)))]
    pub skipped: Vec<String>,
    /// How many candidates were left out in all.
    #[serde(default)]
    pub skipped_count: i64,
}

/// Spec of an `L2Advertisement`: which pools are announced in layer-2 mode, from which nodes and on
/// which interfaces.
#[derive(
    CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema,
)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[kube(
    crates(kube_core = "::kube_core", kube = "::kube_derive"),
    group = "ferrolb.io",
    version = "v1beta1",
    kind = "L2Advertisement",
    doc = "Which pools ferrolb announces with ARP/NDP, from which nodes and on which interfaces (ferrolb.io/v1beta1).",
    plural = "l2advertisements",
    singular = "l2advertisement",
    shortname = "fll2",
    category = "ferrolb",
    printcolumn(name = "Pools", type_ = "string", json_path = ".spec.ipAddressPools"),
    printcolumn(name = "Interfaces", type_ = "string", json_path = ".spec.interfaces"),
    printcolumn(
        name = "Node-Selectors",
        type_ = "string",
        json_path = ".spec.nodeSelectors"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct L2AdvertisementSpec {
    /// Pool names this advertisement covers. With `ipAddressPoolSelectors` empty too: all pools.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 253)))]
    pub ip_address_pools: Vec<String>,
    /// Selectors on pool labels (any of them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub ip_address_pool_selectors: Vec<LabelSelector>,
    /// Only nodes matching one of these may announce. Empty = all nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub node_selectors: Vec<LabelSelector>,
    /// Only answer and announce on these interfaces. Empty = every eligible interface (S8).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 32),
        inner(length(min = 1, max = 15), regex(pattern = r"^[^/\s:]+$"))
    )]
    pub interfaces: Vec<String>,
}

impl L2AdvertisementSpec {
    /// Whether the advertisement covers a pool with this name and these labels.
    pub fn covers_pool(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        if self.ip_address_pools.is_empty() && self.ip_address_pool_selectors.is_empty() {
            return true;
        }
        self.ip_address_pools.iter().any(|p| p == name)
            || self
                .ip_address_pool_selectors
                .iter()
                .any(|s| s.matches(labels))
    }
}

/// A label selector (`matchLabels` AND `matchExpressions`). Empty matches every object.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    /// Labels that must be present with exactly these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Requirements that must all hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// One requirement of a [`LabelSelector`].
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[x_kube(validation = Rule::new(
    "self.operator in ['In', 'NotIn'] ? (has(self.values) && size(self.values) > 0) : (!has(self.values) || size(self.values) == 0)"
).message(Message::Expression(
    "'matchExpressions entry for key \"' + self.key + '\": operator ' + self.operator + (self.operator in ['In', 'NotIn'] ? ' needs at least one value' : ' takes no values')".into()
)))]
pub struct LabelSelectorRequirement {
    /// The label key.
    #[schemars(length(min = 1, max = 317))]
    pub key: String,
    /// How the key's value is tested.
    pub operator: SelectorOperator,
    /// Values for `In`/`NotIn`; must be empty for `Exists`/`DoesNotExist`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(max = 63)))]
    pub values: Vec<String>,
}

/// Operators of a [`LabelSelectorRequirement`], as in the Kubernetes API.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum SelectorOperator {
    /// The label is present and its value is one of `values`.
    In,
    /// The label is absent, or its value is none of `values`.
    NotIn,
    /// The label is present (any value).
    Exists,
    /// The label is absent.
    DoesNotExist,
}

/// One `spec.addresses` entry as written by the user. Parsed by
/// [`crate::addresses::AddressEntry::parse`] and checked against the forbidden blocks by
/// [`crate::addresses::PoolAddresses::parse`]; validated at admission by the CEL rules of
/// [`address_entry_rules`], which accept exactly what `PoolAddresses::parse` accepts.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
#[serde(transparent)]
pub struct AddressEntryText(pub String);

impl From<&str> for AddressEntryText {
    fn from(s: &str) -> Self {
        AddressEntryText(s.to_owned())
    }
}

impl AsRef<str> for AddressEntryText {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// Longest accepted entry: two full IPv6 addresses, a dash and some spaces.
pub const ADDRESS_ENTRY_MAX_LEN: usize = 96;

/// The CEL rules for one `addresses` entry (a string, `self`). Each rule guards on the previous
/// ones so an entry gets exactly one message, and each message quotes the entry:
///
/// 1. not empty or whitespace;
/// 2. a CIDR (`isCIDR`), or `a-b` where both ends are IPs (`isIP`, spaces allowed around `-`);
/// 3. both ends of a range in one family;
/// 4. start ≤ end. CEL has no IP ordering, so the rule looks for the first bit `p` where the ends
///    differ (`start/p` contains `end`, `start/(p+1)` does not) and refuses the range when that bit
///    is 1 in `start` (the network address of `start/p` is then outside `start/(p+1)`). The search
///    is split in two rules, bits 0–63 and bits 64–127, because one rule over 128 bits exceeds the
///    API server's CEL cost budget at 64 entries;
/// 5. one rule per block of [`FORBIDDEN_BLOCKS`] (loopback, link-local, multicast, ...), refusing
///    an entry that shares any address with it, with a message naming the block
///    ([`forbidden_block_rule`]). These are exact, also for a range that spans a block with both
///    ends outside it, so the API server refuses what [`crate::addresses::PoolAddresses::parse`]
///    refuses.
///
/// The API server prices CEL by worst case, so the spelling matters: the ends are taken with
/// `substring`/`indexOf` (a `split` is priced as a list of up to `maxLength` strings), prefix
/// lengths come from string-keyed map literals (`string(int)` is priced as an unbounded string),
/// and there is no `cel.bind` in CRD validation, so the ends are spelled out in each use.
pub fn address_entry_rules() -> Vec<Rule> {
    let quote = "'addresses entry \"' + self + '\"";
    let a = "self.substring(0, self.indexOf('-')).trim()";
    let b = "self.substring(self.indexOf('-') + 1).trim()";
    let ends = format!("self.indexOf('-') == self.lastIndexOf('-') && isIP({a}) && isIP({b})");
    let range_ok = format!("self.indexOf('-') >= 0 && {ends}");
    let next_prefix = |bits: std::ops::Range<u32>| {
        let pairs: Vec<String> = bits.map(|p| format!("'{p}':'{}'", p + 1)).collect();
        format!("{{{}}}", pairs.join(","))
    };
    let (v4, high, low) = (next_prefix(0..32), next_prefix(0..64), next_prefix(64..128));
    // True when the first differing bit is at prefix length `p` and is set in the start address.
    let reversed_at = |next: &str| {
        format!(
            "cidr({a} + '/' + p).containsIP({b}) && !cidr({a} + '/' + {next}[p]).containsIP({b}) \
             && !cidr({a} + '/' + {next}[p]).containsIP(cidr({a} + '/' + p).masked().ip())"
        )
    };
    let not_range_of_one_family = format!("!({range_ok}) || ip({a}).family() != ip({b}).family()");
    let reversed_msg =
        || Message::Expression(format!("{quote} is a range whose start is above its end'"));
    vec![
        Rule::new("self.trim() != ''").message(Message::Expression(format!(
            "{quote} is empty: write a CIDR like 198.51.100.0/24 or a range like 198.51.100.10-198.51.100.20'"
        ))),
        Rule::new(format!("self.trim() == '' || (self.indexOf('-') >= 0 ? ({ends}) : isCIDR(self))")).message(
            Message::Expression(format!(
                "{quote} is neither a CIDR (like 198.51.100.0/24) nor a range (like 198.51.100.10-198.51.100.20)'"
            )),
        ),
        Rule::new(format!("!({range_ok}) || ip({a}).family() == ip({b}).family()"))
            .message(Message::Expression(format!("{quote} mixes IPv4 and IPv6 in one range'"))),
        Rule::new(format!(
            "{not_range_of_one_family} || !(ip({a}).family() == 4 ? {v4} : {high}).exists(p, {})",
            reversed_at(&high)
        ))
        .message(reversed_msg()),
        Rule::new(format!(
            "{not_range_of_one_family} || ip({a}).family() == 4 || !{low}.exists(p, {})",
            reversed_at(&low)
        ))
        .message(reversed_msg()),
    ]
    .into_iter()
    .chain(FORBIDDEN_BLOCKS.iter().map(forbidden_block_rule))
    .collect()
}

/// The CEL rule refusing an `addresses` entry that shares an address with `block`; its message is
/// [`crate::addresses::forbidden_message`] (the controller's words for the same entry).
///
/// CEL has no IP ordering, only membership (`cidr(c).containsIP(x)`, `containsCIDR`), so:
/// - a CIDR entry `E` overlaps the block `B` iff one contains the other: `E.containsCIDR(B)` or
///   `B.containsIP(E.ip())`;
/// - a range `a-b` (a ≤ b, rule 4) overlaps `B = [s, e]` iff `a ≤ e` and `b ≥ s`, and "x ≤ e",
///   "x ≥ s" are unions of CIDRs ([`cidr_cover`]): written as membership in the cover of
///   `[0, e]` or as non-membership in the cover of `[e+1, max]`, whichever is shorter.
///
/// The API server's `cidr`, `ip` and `isIP` refuse IPv4-mapped addresses (no literal inside
/// `::ffff:0:0/96` can be written), but no entry has an end there either (rule 2), so the
/// bounds may move across that block to where a literal can be written; and a CIDR entry
/// contains `::ffff:0:0/96` iff it contains its parent `::fffe:0:0/95` (the block itself is not
/// writable). Cost: a few `containsIP` calls on literals per block, far below the budget.
pub fn forbidden_block_rule(block: &ForbiddenBlock) -> Rule {
    let quote = "'addresses entry \"' + self + '\"";
    let a = "self.substring(0, self.indexOf('-')).trim()";
    let b = "self.substring(self.indexOf('-') + 1).trim()";
    let family = block.family();
    let range = block.range();
    let (s, e) = (range.first_offset(), range.last_offset());
    let fam = match family {
        Family::V4 => 4,
        Family::V6 => 6,
    };
    let cidr_overlaps = if writable(family, s) {
        format!(
            "cidr(self).containsCIDR('{c}') || cidr('{c}').containsIP(cidr(self).ip())",
            c = block.cidr
        )
    } else {
        let parent = u32::from(block.prefix()).saturating_sub(1);
        let size = 1u128 << (family.bits() - parent);
        format!(
            "cidr(self).containsCIDR('{}/{parent}')",
            family.addr(s & !(size - 1))
        )
    };
    let at_most_e = bound(family, a, e, true);
    let at_least_s = bound(family, b, s, false);
    let bounds: String = [at_most_e, at_least_s]
        .iter()
        .filter(|t| *t != "true")
        .map(|t| format!(" && ({t})"))
        .collect();
    let rule = format!(
        "!(self.indexOf('-') < 0 ? (isCIDR(self) && ({cidr_overlaps})) : \
         (self.indexOf('-') == self.lastIndexOf('-') && isIP({a}) && isIP({b}) \
         && ip({a}).family() == {fam} && ip({b}).family() == {fam}{bounds}))"
    );
    Rule::new(rule).message(Message::Expression(format!(
        "{quote}{}'",
        forbidden_message_tail(block)
    )))
}

/// Whether the CEL library accepts `offset` as an address literal (it refuses IPv4-mapped IPv6).
fn writable(family: Family, offset: u128) -> bool {
    match family.addr(offset) {
        std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().is_none(),
        std::net::IpAddr::V4(_) => true,
    }
}

/// CEL for `x ≤ bound` (`upper`) or `x ≥ bound`, where `x` (a CEL string expression) is an address
/// of `family`: membership in the CIDRs of [`bound_test`], negated when it says so.
fn bound(family: Family, x: &str, bound: u128, upper: bool) -> String {
    let (cidrs, negate) = bound_test(family, bound, upper);
    let member = cidrs
        .iter()
        .map(|(net, p)| format!("cidr('{}/{p}').containsIP({x})", family.addr(*net)))
        .collect::<Vec<_>>()
        .join(" || ");
    match (negate, cidrs.is_empty()) {
        (false, true) => "false".into(),
        (false, false) => member,
        (true, true) => "true".into(),
        (true, false) => format!("!({member})"),
    }
}

/// `x ≤ bound` (`upper`) or `x ≥ bound` for an address `x` of `family` that is not IPv4-mapped,
/// as `x` in one of the CIDRs, or not in any when the flag is set: the shortest of the cover of
/// the addresses that pass and the cover of those that fail ([`cidr_cover`]), over the bounds
/// equivalent for such an `x` (moved across `::ffff:0:0/96`), leaving out covers with a CIDR the
/// CEL library cannot write (IPv4-mapped).
pub fn bound_test(family: Family, bound: u128, upper: bool) -> (Vec<(u128, u32)>, bool) {
    let max = family.max_offset();
    let mapped = (0xffff_0000_0000u128, 0xffff_ffff_ffffu128);
    let mut bounds = vec![bound];
    if family == Family::V6 {
        if upper && (mapped.0 - 1..=mapped.1).contains(&bound) {
            bounds.extend([mapped.0 - 1, mapped.1]);
        }
        if !upper && (mapped.0..=mapped.1 + 1).contains(&bound) {
            bounds.extend([mapped.0, mapped.1 + 1]);
        }
    }
    let mut best: Option<(Vec<(u128, u32)>, bool)> = None;
    for bound in bounds {
        let (pass, fail) = if upper {
            (
                Some((0, bound)),
                bound.checked_add(1).filter(|n| *n <= max).map(|n| (n, max)),
            )
        } else {
            (Some((bound, max)), bound.checked_sub(1).map(|n| (0, n)))
        };
        for (range, negate) in [(pass, false), (fail, true)] {
            let cidrs = range.map_or_else(Vec::new, |(lo, hi)| cidr_cover(family, lo, hi));
            if cidrs.iter().any(|(net, _)| !writable(family, *net)) {
                continue;
            }
            if best.as_ref().is_none_or(|(b, _)| cidrs.len() < b.len()) {
                best = Some((cidrs, negate));
            }
        }
    }
    // The direct cover of the first bound is writable unless it holds ::ffff:0:0/96 or part of
    // it, and then the moved bounds give one; `(vec![], false)` (never) is unreachable.
    best.unwrap_or((Vec::new(), false))
}

/// The fewest CIDRs covering exactly `[lo, hi]` (offsets of `family`, `lo ≤ hi`), ascending, as
/// `(network offset, prefix length)`.
pub fn cidr_cover(family: Family, mut lo: u128, hi: u128) -> Vec<(u128, u32)> {
    let bits = family.bits();
    let mut out = Vec::new();
    while lo <= hi {
        // The largest block aligned at `lo` that ends at or before `hi`.
        let span = hi - lo;
        let size_minus_one = |host: u32| {
            if host >= 128 {
                u128::MAX
            } else {
                (1u128 << host) - 1
            }
        };
        let mut host = lo.trailing_zeros().min(bits);
        while host > 0 && size_minus_one(host) > span {
            host -= 1;
        }
        out.push((lo, bits - host));
        let last = lo + size_minus_one(host);
        match last.checked_add(1) {
            Some(next) if last < hi => lo = next,
            _ => break,
        }
    }
    out
}

impl JsonSchema for AddressEntryText {
    fn schema_name() -> Cow<'static, str> {
        "AddressEntryText".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let mut schema = json_schema!({
            "type": "string",
            "maxLength": ADDRESS_ENTRY_MAX_LEN,
            "description": "A CIDR (198.51.100.0/24, 2001:db8::/120) or an inclusive range 198.51.100.10-198.51.100.20."
        });
        for rule in address_entry_rules() {
            // Serialising a Rule into a schema cannot fail: it is plain strings.
            #[allow(clippy::expect_used)]
            kube_core::validate(&mut schema, rule).expect("CEL rule serialises");
        }
        schema
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn covered(cidrs: &[(u128, u32)], family: Family, x: u128) -> bool {
        cidrs.iter().any(|(net, p)| {
            let host = family.bits() - p;
            let last = if host >= 128 {
                u128::MAX
            } else {
                net + ((1u128 << host) - 1)
            };
            (*net..=last).contains(&x)
        })
    }

    #[test]
    fn cidr_cover_is_exact_and_aligned() {
        let f = Family::V4;
        for (lo, hi) in [
            (0, 0),
            (0, 255),
            (1, 254),
            (3, 17),
            (100, 4_000),
            (0, u32::MAX as u128),
        ] {
            let c = cidr_cover(f, lo, hi);
            for x in lo.saturating_sub(3)..=(hi + 3).min(5_000) {
                assert_eq!(
                    covered(&c, f, x),
                    (lo..=hi).contains(&x),
                    "[{lo},{hi}] at {x}"
                );
            }
            for (net, p) in &c {
                let host = 32 - p;
                assert_eq!(net % (1u128 << host), 0, "aligned");
            }
        }
        assert_eq!(cidr_cover(f, 0, u32::MAX as u128), vec![(0, 0)]);
        assert_eq!(cidr_cover(Family::V6, 0, u128::MAX), vec![(0, 0)]);
    }

    #[test]
    fn bound_tests_agree_with_ordering_near_every_block() {
        for b in &FORBIDDEN_BLOCKS {
            let f = b.family();
            let r = b.range();
            for (bound, upper) in [(r.last_offset(), true), (r.first_offset(), false)] {
                let (cidrs, negate) = bound_test(f, bound, upper);
                assert!(cidrs.len() <= 16, "{}: {} CIDRs", b.cidr, cidrs.len());
                let edges = FORBIDDEN_BLOCKS
                    .iter()
                    .filter(|o| o.family() == f)
                    .flat_map(|o| [o.range().first_offset(), o.range().last_offset()]);
                for edge in edges.chain([0, f.max_offset()]) {
                    for x in edge.saturating_sub(2)..=edge.saturating_add(2).min(f.max_offset()) {
                        if !writable(f, x) {
                            continue;
                        }
                        let want = if upper { x <= bound } else { x >= bound };
                        assert_eq!(
                            covered(&cidrs, f, x) != negate,
                            want,
                            "{} {} {bound} at {}",
                            b.cidr,
                            if upper { "<=" } else { ">=" },
                            f.addr(x)
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn forbidden_rules_quote_the_entry_and_name_the_block() {
        let rules = address_entry_rules();
        assert_eq!(rules.len(), 5 + FORBIDDEN_BLOCKS.len());
        let text = serde_json::to_string(&rules).unwrap();
        for b in &FORBIDDEN_BLOCKS {
            assert!(text.contains(&forbidden_message_tail(b)), "{}", b.cidr);
        }
        assert!(
            !text.contains("::ffff:0:0/96'") && !text.contains("('::ffff:"),
            "cidr() and ip() refuse IPv4-mapped literals"
        );
    }
}
