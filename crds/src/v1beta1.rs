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
#[serde(rename_all = "camelCase")]
pub struct IPAddressPoolSpec {
    /// 1–64 entries, each a CIDR (`198.51.100.0/24`, `2001:db8::/120`, `198.51.100.7/32`) or an
    /// inclusive range `198.51.100.10-198.51.100.20`. Families may be mixed in one pool.
    #[schemars(length(min = 1, max = 64))]
    pub addresses: Vec<AddressEntryText>,
    /// When false, only Services that name this pool or request one of its addresses get
    /// addresses from it. Default true.
    #[serde(default = "default_true")]
    pub auto_assign: bool,
    /// Never hand out IPv4 addresses ending in `.0` or `.255`. Default false.
    #[serde(default, rename = "avoidBuggyIPs")]
    pub avoid_buggy_ips: bool,
    /// Restricts which Services this pool serves, and in which order pools are tried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_allocation: Option<ServiceAllocation>,
}

fn default_true() -> bool {
    true
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
/// [`crate::addresses::AddressEntry::parse`]; validated at admission by the CEL rules of
/// [`address_entry_rules`], which accept exactly what the parser accepts.
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
///    API server's CEL cost budget at 64 entries.
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
