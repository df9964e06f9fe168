//! What a Service asks of the allocator, already translated from the Kubernetes object by the
//! glue (`ferrolb_controller::service`): families, requested IPs, named pool, sharing key, ports, backends and
//! the status it carries now.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use ferrolb_crds::addresses::Family;

/// `namespace/name` of a Service. Ordered by namespace, then name. The parts are shared
/// (`Arc<str>`): the allocator and the planner keep one key per Service in several maps, and a
/// clone costs two reference counts, not two allocations.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ServiceKey {
    /// `metadata.namespace`.
    pub namespace: Arc<str>,
    /// `metadata.name`.
    pub name: Arc<str>,
}

impl ServiceKey {
    /// Builds a key from its two parts.
    pub fn new(namespace: impl Into<Arc<str>>, name: impl Into<Arc<str>>) -> ServiceKey {
        ServiceKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// `spec.ipFamilyPolicy` (Kubernetes API reference, Service). Absent means `SingleStack`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FamilyPolicy {
    /// One IP, of the family `ipFamilies[0]`.
    #[default]
    SingleStack,
    /// Both families when one pool can serve both, else the primary family (R5).
    PreferDualStack,
    /// One IP per family from one pool, or nothing (R5).
    RequireDualStack,
}

/// How traffic reaches the backends, which decides whether two Services may share an IP (R2).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Backend {
    /// `externalTrafficPolicy: Cluster` (the default).
    #[default]
    Cluster,
    /// `externalTrafficPolicy: Local` with this `spec.selector`: the announcing node must host an
    /// endpoint, so sharers must select the same Pods.
    Local(BTreeMap<String, String>),
}

/// One `(protocol, port)` of `spec.ports`, e.g. `("TCP", 80)`.
pub type PortKey = (String, u16);

/// The `(protocol, port)` set of a Service: sorted, no duplicates. A sorted `Vec`, not a
/// `BTreeSet`: a Service has a handful of ports, and a one-element `BTreeSet` allocates a whole
/// B-tree node (~0.4 KiB) per Service.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Ports(Vec<PortKey>);

impl Ports {
    /// The ports, in order.
    pub fn iter(&self) -> std::slice::Iter<'_, PortKey> {
        self.0.iter()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The first port both sets contain, if any (R2: sharers need disjoint ports).
    pub fn first_common<'a>(&'a self, other: &Ports) -> Option<&'a PortKey> {
        self.0.iter().find(|p| other.0.binary_search(p).is_ok())
    }
}

impl FromIterator<PortKey> for Ports {
    fn from_iter<I: IntoIterator<Item = PortKey>>(iter: I) -> Ports {
        let mut v: Vec<PortKey> = iter.into_iter().collect();
        v.sort();
        v.dedup();
        v.shrink_to_fit();
        Ports(v)
    }
}

impl<const N: usize> From<[PortKey; N]> for Ports {
    fn from(ports: [PortKey; N]) -> Ports {
        ports.into_iter().collect()
    }
}

/// Everything the allocator needs to know about one Service it handles.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServiceRequest {
    /// Which Service.
    pub key: ServiceKey,
    /// `metadata.creationTimestamp` in seconds since the Unix epoch: older Services are served
    /// first (ties broken by key).
    pub created: i64,
    /// `metadata.labels`, for `serviceSelectors`.
    pub labels: BTreeMap<String, String>,
    /// `spec.ipFamilies`, primary first. Empty is read as `[IPv4]`.
    pub families: Vec<Family>,
    /// `spec.ipFamilyPolicy`.
    pub policy: FamilyPolicy,
    /// Requested addresses (`ferrolb.io/loadBalancerIPs` or `spec.loadBalancerIP`), at most one
    /// per family, each of a family in `families` (the glue refuses anything else).
    pub requested: Vec<IpAddr>,
    /// Pool named by `ferrolb.io/address-pool`.
    pub pool: Option<String>,
    /// Sharing key of `ferrolb.io/allow-shared-ip`.
    pub sharing_key: Option<String>,
    /// `(protocol, port)` of `spec.ports`.
    pub ports: Ports,
    /// `externalTrafficPolicy` and selector.
    pub backend: Backend,
    /// Set when the Service's ferrolb annotations cannot be honoured (unparseable, wrong family,
    /// two IPs of one family): a Service without addresses stays pending with this message; one
    /// with addresses keeps them.
    pub invalid: Option<String>,
    /// `status.loadBalancer.ingress` as found on the object.
    pub observed: ObservedStatus,
}

impl ServiceRequest {
    /// The families this Service wants, primary first: one for `SingleStack`, both otherwise.
    pub fn wanted_families(&self) -> Vec<Family> {
        let primary = self.families.first().copied().unwrap_or(Family::V4);
        match self.policy {
            FamilyPolicy::SingleStack => vec![primary],
            FamilyPolicy::PreferDualStack | FamilyPolicy::RequireDualStack => {
                let other = if primary == Family::V4 {
                    Family::V6
                } else {
                    Family::V4
                };
                vec![primary, other]
            }
        }
    }

    /// The requested address of `family`, if any.
    pub fn requested_of(&self, family: Family) -> Option<IpAddr> {
        self.requested
            .iter()
            .copied()
            .find(|ip| Family::of(*ip) == family)
    }
}

/// `status.loadBalancer.ingress` as read from the object: the IPs in order, and what could not be
/// used (hostname-only entries, unparseable IPs), each described for an Event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ObservedStatus {
    /// Parsed `ip` fields, in entry order.
    pub ips: Vec<IpAddr>,
    /// Entries that are not a usable IP, e.g. `hostname-only entry "lb.example.com"`.
    pub unusable: Vec<String>,
}

impl ObservedStatus {
    /// A status holding exactly these IPs.
    pub fn of(ips: &[IpAddr]) -> ObservedStatus {
        ObservedStatus {
            ips: ips.to_vec(),
            unusable: Vec::new(),
        }
    }

    /// Whether the status holds no entry at all.
    pub fn is_empty(&self) -> bool {
        self.ips.is_empty() && self.unusable.is_empty()
    }
}
