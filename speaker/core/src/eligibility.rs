//! Which nodes may announce an IP (DESIGN S1), and why nobody may. Pure: no `kube`, no `tokio`.
//!
//! The glue turns Nodes, L2Advertisements, IPAddressPools, Services, EndpointSlices and the SWIM
//! membership into the plain structs below; [`eligible_nodes`] returns the eligible set of one IP
//! and, when it is empty, a [`NoEligibleNode`] whose `Display` is the text of the Warning Event.
//!
//! Node N is eligible for IP X when (S1), in this order of reporting:
//! 1. N's speaker is alive in the membership ([`Cluster::alive`]);
//! 2. the Node object exists ([`Cluster::nodes`]);
//! 3. its `NetworkUnavailable` condition is not `True`;
//! 4. it does not carry [`EXCLUDE_LB_LABEL`] with any value but `"false"` (Kubernetes'
//!    well-known label), while the label is in force ([`Cluster::exclusion_label_in_force`]):
//!    by default ([`ExcludeLbLabel::Auto`], issue #28 item 1) unless **every** Node carries it
//!    — a single-node minikube or kind cluster, whose only node kubeadm labels — and then the
//!    label is set aside and every IP's Services get a Warning Event saying so
//!    ([`Eligibility::label_set_aside`]); `--exclude-lb-label=honour` always honours it
//!    (MetalLB, DESIGN S1 before issue #28), `ignore` never does;
//! 5. it reports carrier on an announce interface ([`NodeFacts::carrier`]: the speaker's own
//!    value from its interface scan); per IP, on the interface facing the IP's clients, from
//!    every member's sealed carrier report, applied after these clauses by
//!    [`crate::carrier::exclude_without_carrier`] (issue #32 G5.5);
//! 6. it matches the `nodeSelectors` of at least one L2Advertisement that covers the pool of the
//!    Service (empty `nodeSelectors` = every node);
//! 7. for a Service with `externalTrafficPolicy: Local`, it hosts a ready endpoint of it — or, when
//!    no node hosts a ready one, a serving (terminating) one, as kube-proxy falls back to serving
//!    terminating endpoints (KEP-1669). So an endpoint moving from node-2 (terminating) to node-3
//!    (ready) moves the announcement to node-3 (case C-16). [`ServiceFacts::endpoints`] holds only
//!    the endpoints of the IP's address family ([`crate::view`] sorts slices by `addressType`).
//!
//! For an IP shared by several Services the eligible set is the intersection over the Services.
//!
//! **Cordon** (issue #29 O3) is a preference, not a clause: [`prefer_uncordoned`] narrows the
//! eligible set of an IP — after every clause above and after the per-IP carrier rule — to its
//! nodes whose Node is not cordoned (`spec.unschedulable`, [`NodeFacts::unschedulable`]) when at
//! least one of them is not cordoned, and leaves it whole when every one of them is. So a
//! cordoned node is eligible for X exactly when no uncordoned node is: a drained node hands its
//! IPs to the others, and a cluster whose every node is cordoned (a single-node laptop cluster
//! being drained) keeps answering. [`Cluster::ignore_cordon`] (`--ignore-cordon`) turns the
//! preference off.
//!
//! **Endpoints without `nodeName`** (ETP Local): kube-proxy cannot place them either, so they make
//! no node eligible. This is never silent: every such endpoint produces an
//! [`Eligibility::warnings`] entry, and when they are the only ready endpoints the reason is
//! [`NoEligibleNode::NoReadyEndpoint`] with `without_node_name > 0`, which says so.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use ferrolb_crds::selector::any_matches;
use ferrolb_crds::v1beta1::L2AdvertisementSpec;

pub use ferrolb_crds::exclude_lb::{EXCLUDE_LB_LABEL, ExcludeLbLabel, carries_exclusion_label};

/// What the speaker knows about one Node object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFacts {
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// The `NetworkUnavailable` condition is `True`.
    pub network_unavailable: bool,
    /// At least one announce interface of the node has carrier. `None` = not reported yet, treated as
    /// carrier (a speaker that cannot see an interface goes down in membership instead).
    pub carrier: Option<bool>,
    /// The `Ready` condition is `False` or `Unknown` (the node controller gave up on the kubelet).
    /// Such a node does not count among the speakers that should exist ([`crate::claim`]); it
    /// does not change eligibility (a live speaker on it still announces).
    pub not_ready: bool,
    /// `spec.unschedulable` is `true`: the Node is cordoned (`kubectl cordon`, `kubectl drain`).
    /// Not a clause: a cordoned node is eligible for an IP only when no uncordoned node is
    /// ([`prefer_uncordoned`], issue #29 O3). It does not change the voters either.
    pub unschedulable: bool,
    /// While `not_ready`: when the `Ready` condition last changed (`lastTransitionTime`, Unix
    /// seconds), if given. Lets a restarted speaker tell a Node that turned NotReady a moment ago
    /// (a partition) from one that has been dead for long ([`crate::claim::Voters::seed`]).
    pub not_ready_since: Option<i64>,
}

/// Cluster-wide inputs shared by every IP.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    /// Existing Node objects by name.
    pub nodes: BTreeMap<String, NodeFacts>,
    /// Node names whose speaker is alive in the SWIM membership.
    pub alive: BTreeSet<String>,
    /// L2Advertisements by name.
    pub advertisements: BTreeMap<String, L2AdvertisementSpec>,
    /// `--exclude-lb-label`: when [`EXCLUDE_LB_LABEL`] is honoured.
    pub exclude_lb_label: ExcludeLbLabel,
    /// `--ignore-cordon`: do not prefer uncordoned nodes ([`prefer_uncordoned`] changes
    /// nothing); a cordoned owner keeps its IPs until its speaker stops.
    pub ignore_cordon: bool,
    /// Nodes a speaker Pod of ours is bound to ([`crate::view::speaker_nodes`], issue #32 G3):
    /// only these vote in the majority rule ([`crate::claim::expected_speakers`]). Empty when
    /// the Pod watch shows none — speakers run outside Pods (development, the netns lab) or the
    /// permission to list Pods is missing — and then every Node votes, as before G3.
    pub speaker_nodes: BTreeSet<String>,
    /// Nodes an operator dropped from the voters at once ([`DROPPED_VOTERS_ANNOTATION`] on the
    /// speaker DaemonSet, issue #32 G3): they neither vote through a speaker Pod nor through
    /// the voter memory ([`crate::claim::Voters`]).
    pub dropped_voters: BTreeSet<String>,
}

/// The annotation on the speaker DaemonSet (`ferrolb-speaker` in the speakers' namespace) whose
/// value, node names separated by commas, drops those Nodes from the voters at once (issue #32
/// G3): for Nodes whose speaker is gone for good and whose vote would otherwise last the voter
/// memory (`kubectl -n ferrolb-system annotate daemonset ferrolb-speaker
/// ferrolb.io/dropped-voters=node-a,node-b --overwrite`; `docs/speaker.md`).
pub const DROPPED_VOTERS_ANNOTATION: &str = "ferrolb.io/dropped-voters";

/// The node names of a [`DROPPED_VOTERS_ANNOTATION`] value: split at commas, blanks trimmed,
/// empty entries skipped.
pub fn dropped_voters(value: &str) -> BTreeSet<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The pool an IP was allocated from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolRef {
    /// `metadata.name` of the IPAddressPool.
    pub name: String,
    /// Its labels (for `ipAddressPoolSelectors`).
    pub labels: BTreeMap<String, String>,
}

/// `spec.externalTrafficPolicy` of a Service.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TrafficPolicy {
    /// `Cluster` (the default): any node can forward.
    #[default]
    Cluster,
    /// `Local`: only nodes with a local endpoint may announce.
    Local,
}

/// One endpoint of an EndpointSlice (`endpoints[]`), reduced to what S1 needs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EndpointFacts {
    /// `nodeName`, if set.
    pub node_name: Option<String>,
    /// `conditions.ready` (nil counts as true, per the EndpointSlice API).
    pub ready: bool,
    /// `conditions.serving` (nil = same as ready).
    pub serving: bool,
}

/// One Service that has the IP in its `status.loadBalancer.ingress`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceFacts {
    /// `namespace/name`, used in reasons.
    pub name: String,
    /// Its external traffic policy.
    pub traffic_policy: TrafficPolicy,
    /// The pool the IP came from for this Service (normally the same for all Services on an IP).
    pub pool: PoolRef,
    /// The endpoints of all its EndpointSlices of the IP's address family (`addressType`).
    pub endpoints: Vec<EndpointFacts>,
}

/// Why a node failed one of the node-level clauses 1–5.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NodeExclusion {
    /// Clause 1: the speaker is not alive in the membership.
    SpeakerNotAlive,
    /// Clause 2: no Node object with this name.
    NodeMissing,
    /// Clause 3: `NetworkUnavailable=True`.
    NetworkUnavailable,
    /// Clause 4: labelled [`EXCLUDE_LB_LABEL`].
    ExcludedByLabel,
    /// Clause 5: no announce interface with carrier.
    NoCarrier,
    /// Clause 6: the speaker has withdrawn from answering (its claim gate closed after it had
    /// served: it hears a minority of the voters), as its own report says
    /// ([`crate::carrier::LinkReport::withdrawn`]).
    Withdrawn,
}

impl fmt::Display for NodeExclusion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NodeExclusion::SpeakerNotAlive => "speaker not alive",
            NodeExclusion::NodeMissing => "Node object missing",
            NodeExclusion::NetworkUnavailable => "NetworkUnavailable",
            NodeExclusion::ExcludedByLabel => {
                "excluded by label node.kubernetes.io/exclude-from-external-load-balancers"
            }
            NodeExclusion::NoCarrier => "no carrier on the announce interface",
            NodeExclusion::Withdrawn => "speaker withdrawn (it hears a minority of the speakers)",
        })
    }
}

/// Why an IP has no eligible node. `Display` gives the Warning Event text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoEligibleNode {
    /// No Service was given for the IP.
    NoService,
    /// No node passes clauses 1–5; each known node with the first clause it failed.
    NodeChecks(BTreeMap<String, NodeExclusion>),
    /// No L2Advertisement covers the pool of a Service (the pool is allocated from, not announced).
    PoolNotAdvertised {
        /// The pool.
        pool: String,
    },
    /// The L2Advertisements covering the pool select none of the nodes that pass clauses 1–5.
    NodeSelectorsMatchNoEligibleNode {
        /// The pool.
        pool: String,
        /// The covering L2Advertisements.
        advertisements: Vec<String>,
    },
    /// Each Service on the shared IP has nodes allowed by its L2Advertisements, but no node is
    /// allowed for all of them.
    DisjointAdvertisements,
    /// ETP Local and no ready or serving endpoint on any node.
    NoReadyEndpoint {
        /// The Service.
        service: String,
        /// Ready endpoints that were ignored because they have no `nodeName`.
        without_node_name: usize,
    },
    /// ETP Local and the endpoints are only on nodes that fail another clause.
    EndpointsOnIneligibleNodes {
        /// The Service.
        service: String,
        /// The nodes with endpoints.
        nodes: Vec<String>,
    },
    /// The Services on the shared IP have (usable) endpoints on disjoint nodes.
    DisjointEndpoints,
}

impl fmt::Display for NoEligibleNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoEligibleNode::NoService => write!(f, "no eligible node: no Service uses this IP"),
            NoEligibleNode::NodeChecks(nodes) => {
                let kinds: BTreeSet<_> = nodes.values().collect();
                match (kinds.len(), kinds.first()) {
                    (0, _) => write!(f, "no eligible node: no speaker and no Node known"),
                    (1, Some(NodeExclusion::ExcludedByLabel)) => {
                        write!(
                            f,
                            "no eligible node: all excluded by label {EXCLUDE_LB_LABEL}"
                        )
                    }
                    (1, Some(kind)) => write!(f, "no eligible node: {kind} on every node"),
                    _ => {
                        let list: Vec<String> =
                            nodes.iter().map(|(n, k)| format!("{n}: {k}")).collect();
                        write!(f, "no eligible node: {}", list.join("; "))
                    }
                }
            }
            NoEligibleNode::PoolNotAdvertised { pool } => {
                write!(f, "no eligible node: no L2Advertisement covers pool {pool}")
            }
            NoEligibleNode::NodeSelectorsMatchNoEligibleNode {
                pool,
                advertisements,
            } => write!(
                f,
                "no eligible node: the nodeSelectors of L2Advertisement(s) {} covering pool {pool} match no eligible node",
                advertisements.join(", ")
            ),
            NoEligibleNode::DisjointAdvertisements => write!(
                f,
                "no eligible node: L2Advertisements restrict the Services on this IP to disjoint nodes"
            ),
            NoEligibleNode::NoReadyEndpoint {
                service,
                without_node_name: 0,
            } => write!(
                f,
                "no eligible node: no ready endpoint on any node for {service} (externalTrafficPolicy Local)"
            ),
            NoEligibleNode::NoReadyEndpoint {
                service,
                without_node_name,
            } => write!(
                f,
                "no eligible node: no ready endpoint on any node for {service} (externalTrafficPolicy Local); \
                 {without_node_name} ready endpoint(s) have no nodeName and cannot be placed"
            ),
            NoEligibleNode::EndpointsOnIneligibleNodes { service, nodes } => write!(
                f,
                "no eligible node: the endpoints of {service} (externalTrafficPolicy Local) are only on ineligible nodes {}",
                nodes.join(", ")
            ),
            NoEligibleNode::DisjointEndpoints => write!(
                f,
                "no eligible node: the Services on this IP (externalTrafficPolicy Local) have endpoints on disjoint nodes"
            ),
        }
    }
}

/// The result for one IP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Eligibility {
    /// Eligible node names (feed these to [`crate::election::owner`]).
    pub nodes: BTreeSet<String>,
    /// `Some` exactly when `nodes` is empty.
    pub reason: Option<NoEligibleNode>,
    /// Non-fatal notes for a Warning Event (endpoints without `nodeName` under ETP Local).
    pub warnings: Vec<String>,
    /// [`EXCLUDE_LB_LABEL`] was set aside: [`ExcludeLbLabel::Auto`], Nodes exist and every one
    /// carries it ([`Cluster::exclusion_label_in_force`] false). The reporter says so in a
    /// Warning Event.
    pub label_set_aside: bool,
}

impl Cluster {
    /// Whether clause 4 applies: [`ExcludeLbLabel::Honour`] always, `Ignore` never, `Auto`
    /// while at least one Node object does not carry [`EXCLUDE_LB_LABEL`]. O(labelled Nodes
    /// before the first unlabelled one, by name).
    pub fn exclusion_label_in_force(&self) -> bool {
        self.exclude_lb_label
            .in_force(self.nodes.values().map(|n| &n.labels))
    }

    /// The first node-level clause (1–5) that `node` fails, or `None` if it passes them all.
    pub fn node_exclusion(&self, node: &str) -> Option<NodeExclusion> {
        self.node_exclusion_with(node, self.exclusion_label_in_force())
    }

    /// [`Cluster::node_exclusion`] with clause 4's [`Cluster::exclusion_label_in_force`]
    /// computed once by the caller.
    fn node_exclusion_with(&self, node: &str, label_in_force: bool) -> Option<NodeExclusion> {
        if !self.alive.contains(node) {
            return Some(NodeExclusion::SpeakerNotAlive);
        }
        let Some(facts) = self.nodes.get(node) else {
            return Some(NodeExclusion::NodeMissing);
        };
        if facts.network_unavailable {
            return Some(NodeExclusion::NetworkUnavailable);
        }
        if label_in_force && carries_exclusion_label(&facts.labels) {
            return Some(NodeExclusion::ExcludedByLabel);
        }
        if facts.carrier == Some(false) {
            return Some(NodeExclusion::NoCarrier);
        }
        None
    }

    /// Whether `node` could announce any IP at all, judged from the API alone: not excluded by
    /// label (while it is in force, [`Cluster::exclusion_label_in_force`]) and selected by at least one L2Advertisement's `nodeSelectors`
    /// (trivially, when there is no L2Advertisement yet). Membership and carrier are not
    /// considered. Used for the claim gate's set of voting speakers.
    pub fn may_announce_anything(&self, node: &str) -> bool {
        let empty = BTreeMap::new();
        let facts = self.nodes.get(node);
        let labels = facts.map_or(&empty, |f| &f.labels);
        let excluded = carries_exclusion_label(labels) && self.exclusion_label_in_force();
        let selected = self.advertisements.is_empty()
            || self
                .advertisements
                .values()
                .any(|a| any_matches(&a.node_selectors, labels));
        !excluded && selected
    }

    /// The L2Advertisements (name, spec) that cover `pool`.
    pub fn covering<'a>(
        &'a self,
        pool: &'a PoolRef,
    ) -> impl Iterator<Item = (&'a String, &'a L2AdvertisementSpec)> {
        self.advertisements
            .iter()
            .filter(|(_, a)| a.covers_pool(&pool.name, &pool.labels))
    }

    /// Whether `node` matches the `nodeSelectors` of at least one L2Advertisement covering `pool`.
    pub fn advertised_on(&self, pool: &PoolRef, node: &str) -> bool {
        let labels = self.nodes.get(node).map(|n| &n.labels);
        let empty = BTreeMap::new();
        self.covering(pool)
            .any(|(_, a)| any_matches(&a.node_selectors, labels.unwrap_or(&empty)))
    }

    /// The interfaces `node` may announce IPs of `pool` on: the union of `spec.interfaces` of the
    /// covering L2Advertisements whose `nodeSelectors` match it; [`Interfaces::All`] when any of them
    /// leaves `interfaces` empty (DESIGN §3) or none matches.
    pub fn announce_interfaces(&self, pool: &PoolRef, node: &str) -> Interfaces {
        let empty = BTreeMap::new();
        let labels = self.nodes.get(node).map_or(&empty, |n| &n.labels);
        let mut named = BTreeSet::new();
        for (_, a) in self
            .covering(pool)
            .filter(|(_, a)| any_matches(&a.node_selectors, labels))
        {
            if a.interfaces.is_empty() {
                return Interfaces::All;
            }
            named.extend(a.interfaces.iter().cloned());
        }
        if named.is_empty() {
            Interfaces::All
        } else {
            Interfaces::Named(named)
        }
    }
}

/// Which interfaces an IP may be announced on (from `L2Advertisement.spec.interfaces`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Interfaces {
    /// Every interface of the default set (DESIGN S8).
    All,
    /// Only these names (they override the default set, exclusions included).
    Named(BTreeSet<String>),
}

/// The nodes with usable endpoints of an ETP Local Service: those with a ready endpoint, else
/// (when none is ready anywhere) those with a serving one; plus the count of ready-or-serving
/// endpoints without `nodeName`.
fn endpoint_nodes(svc: &ServiceFacts) -> (BTreeSet<String>, usize) {
    let placed = |want: fn(&EndpointFacts) -> bool| -> BTreeSet<String> {
        svc.endpoints
            .iter()
            .filter(|e| want(e))
            .filter_map(|e| e.node_name.clone())
            .collect()
    };
    let ready = placed(|e| e.ready);
    let nodes = if ready.is_empty() {
        placed(|e| e.serving)
    } else {
        ready
    };
    let unplaced = svc
        .endpoints
        .iter()
        .filter(|e| (e.ready || e.serving) && e.node_name.is_none())
        .count();
    (nodes, unplaced)
}

/// The eligible nodes for one IP used by `services` (DESIGN S1, see the module docs), with the
/// reason when there are none. Pure and deterministic.
pub fn eligible_nodes(cluster: &Cluster, services: &[ServiceFacts]) -> Eligibility {
    let mut warnings = Vec::new();
    let label_in_force = cluster.exclusion_label_in_force();
    // Computed once per IP from `label_in_force` (not a second pass over the Nodes).
    let label_set_aside = cluster.exclude_lb_label == ExcludeLbLabel::Auto
        && !cluster.nodes.is_empty()
        && !label_in_force;
    let fail = |reason, warnings| Eligibility {
        nodes: BTreeSet::new(),
        reason: Some(reason),
        warnings,
        label_set_aside,
    };
    if services.is_empty() {
        return fail(NoEligibleNode::NoService, warnings);
    }
    // Clauses 1–5 over every node anyone knows about.
    let known: BTreeSet<&String> = cluster.nodes.keys().chain(cluster.alive.iter()).collect();
    let mut excluded = BTreeMap::new();
    let mut base = BTreeSet::new();
    for node in known {
        match cluster.node_exclusion_with(node, label_in_force) {
            Some(why) => {
                excluded.insert(node.clone(), why);
            }
            None => {
                base.insert(node.clone());
            }
        }
    }
    for svc in services
        .iter()
        .filter(|s| s.traffic_policy == TrafficPolicy::Local)
    {
        let (_, unplaced) = endpoint_nodes(svc);
        if unplaced > 0 {
            warnings.push(format!(
                "{unplaced} endpoint(s) of {} have no nodeName and are ignored for externalTrafficPolicy Local",
                svc.name
            ));
        }
    }
    if base.is_empty() {
        return fail(NoEligibleNode::NodeChecks(excluded), warnings);
    }
    // Clause 6, per Service, then intersected.
    let mut allowed_sets = Vec::new();
    for svc in services {
        let covering: Vec<String> = cluster
            .covering(&svc.pool)
            .map(|(n, _)| n.clone())
            .collect();
        if covering.is_empty() {
            return fail(
                NoEligibleNode::PoolNotAdvertised {
                    pool: svc.pool.name.clone(),
                },
                warnings,
            );
        }
        let allowed: BTreeSet<String> = base
            .iter()
            .filter(|n| cluster.advertised_on(&svc.pool, n))
            .cloned()
            .collect();
        if allowed.is_empty() {
            let reason = NoEligibleNode::NodeSelectorsMatchNoEligibleNode {
                pool: svc.pool.name.clone(),
                advertisements: covering,
            };
            return fail(reason, warnings);
        }
        allowed_sets.push(allowed);
    }
    let advertised = crate::election::intersect_all(&allowed_sets);
    if advertised.is_empty() {
        return fail(NoEligibleNode::DisjointAdvertisements, warnings);
    }
    // Clause 7, per ETP Local Service.
    let mut result = advertised;
    let mut endpoint_sets = Vec::new();
    for svc in services
        .iter()
        .filter(|s| s.traffic_policy == TrafficPolicy::Local)
    {
        let (nodes, unplaced) = endpoint_nodes(svc);
        if nodes.is_empty() {
            let reason = NoEligibleNode::NoReadyEndpoint {
                service: svc.name.clone(),
                without_node_name: unplaced,
            };
            return fail(reason, warnings);
        }
        if nodes.is_disjoint(&result) {
            let reason = NoEligibleNode::EndpointsOnIneligibleNodes {
                service: svc.name.clone(),
                nodes: nodes.into_iter().collect(),
            };
            return fail(reason, warnings);
        }
        endpoint_sets.push(nodes);
    }
    if !endpoint_sets.is_empty() {
        result = result
            .intersection(&crate::election::intersect_all(&endpoint_sets))
            .cloned()
            .collect();
        if result.is_empty() {
            return fail(NoEligibleNode::DisjointEndpoints, warnings);
        }
    }
    Eligibility {
        nodes: result,
        reason: None,
        warnings,
        label_set_aside,
    }
}

/// Narrows `eligibility` to its uncordoned nodes (issue #29 O3, see the module docs): when at
/// least one node of `eligibility.nodes` is not cordoned ([`NodeFacts::unschedulable`] false,
/// or no Node object known), the cordoned ones are removed; when all of them are cordoned, or
/// the set is empty, or [`Cluster::ignore_cordon`] is set, nothing changes. So the set never
/// becomes empty here and `reason` is untouched. Returns the cordoned nodes removed (sorted),
/// for logs and tests.
///
/// Applied last, after the clauses and [`crate::carrier::exclude_without_carrier`]: a
/// cordoned node with carrier must still win over nobody when the only uncordoned one lost it.
/// A missing carrier report (which can only leave the set larger) never gives two answerers:
/// a node that elects itself from a larger set is, cordoned or not, the owner of the true set
/// too (`docs/speaker.md`, "Cordon and drain").
pub fn prefer_uncordoned(eligibility: &mut Eligibility, cluster: &Cluster) -> BTreeSet<String> {
    if cluster.ignore_cordon {
        return BTreeSet::new();
    }
    let cordoned = |n: &String| cluster.nodes.get(n).is_some_and(|f| f.unschedulable);
    if eligibility.nodes.iter().all(cordoned) {
        return BTreeSet::new();
    }
    let removed: BTreeSet<String> = eligibility
        .nodes
        .iter()
        .filter(|n| cordoned(n))
        .cloned()
        .collect();
    eligibility.nodes.retain(|n| !removed.contains(n));
    removed
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::election::owner;
    use ferrolb_crds::v1beta1::LabelSelector;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn names(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// node-1..3 alive, with a `zone` label a/b/c, one L2Advertisement covering every pool.
    fn cluster() -> Cluster {
        let mut c = Cluster::default();
        for (i, zone) in ["a", "b", "c"].iter().enumerate() {
            let name = format!("node-{}", i + 1);
            c.nodes.insert(
                name.clone(),
                NodeFacts {
                    labels: labels(&[("zone", zone)]),
                    ..Default::default()
                },
            );
            c.alive.insert(name);
        }
        c.advertisements
            .insert("all".into(), L2AdvertisementSpec::default());
        c
    }

    fn pool() -> PoolRef {
        PoolRef {
            name: "pool-a".into(),
            labels: labels(&[("tier", "web")]),
        }
    }

    fn svc(name: &str) -> ServiceFacts {
        ServiceFacts {
            name: name.into(),
            pool: pool(),
            ..Default::default()
        }
    }

    fn local(name: &str, eps: &[(Option<&str>, bool, bool)]) -> ServiceFacts {
        ServiceFacts {
            traffic_policy: TrafficPolicy::Local,
            endpoints: eps
                .iter()
                .map(|(n, ready, serving)| EndpointFacts {
                    node_name: n.map(String::from),
                    ready: *ready,
                    serving: *serving,
                })
                .collect(),
            ..svc(name)
        }
    }

    fn zone_selector(zone: &str) -> Vec<LabelSelector> {
        vec![LabelSelector {
            match_labels: labels(&[("zone", zone)]),
            ..Default::default()
        }]
    }

    #[test]
    fn all_nodes_eligible_by_default() {
        let e = eligible_nodes(&cluster(), &[svc("ns/a")]);
        assert_eq!(e.nodes, names(&["node-1", "node-2", "node-3"]));
        assert_eq!((e.reason, e.warnings.len()), (None, 0));
    }

    #[test]
    fn clause_1_speaker_not_alive() {
        let mut c = cluster();
        c.alive.remove("node-2");
        assert_eq!(
            eligible_nodes(&c, &[svc("ns/a")]).nodes,
            names(&["node-1", "node-3"])
        );
        c.alive.clear();
        let e = eligible_nodes(&c, &[svc("ns/a")]);
        assert!(e.nodes.is_empty());
        assert_eq!(
            e.reason.unwrap().to_string(),
            "no eligible node: speaker not alive on every node"
        );
    }

    #[test]
    fn clause_2_node_object_missing() {
        let mut c = cluster();
        c.nodes.remove("node-1");
        assert_eq!(c.node_exclusion("node-1"), Some(NodeExclusion::NodeMissing));
        assert_eq!(
            eligible_nodes(&c, &[svc("ns/a")]).nodes,
            names(&["node-2", "node-3"])
        );
    }

    #[test]
    fn clause_3_network_unavailable() {
        let mut c = cluster();
        c.nodes.get_mut("node-3").unwrap().network_unavailable = true;
        assert_eq!(
            c.node_exclusion("node-3"),
            Some(NodeExclusion::NetworkUnavailable)
        );
        assert_eq!(
            eligible_nodes(&c, &[svc("ns/a")]).nodes,
            names(&["node-1", "node-2"])
        );
    }

    #[test]
    fn clause_5_carrier() {
        let mut c = cluster();
        c.nodes.get_mut("node-1").unwrap().carrier = Some(false);
        c.nodes.get_mut("node-2").unwrap().carrier = Some(true);
        assert_eq!(
            eligible_nodes(&c, &[svc("ns/a")]).nodes,
            names(&["node-2", "node-3"])
        );
    }

    /// Issue #29 O3: the cordon clause by clause. The eligible set (after every clause) loses
    /// its cordoned nodes while one uncordoned node is left; all cordoned, or the setting off,
    /// leaves it whole; a missing Node object counts as uncordoned.
    #[test]
    fn o3_cordoned_nodes_are_eligible_only_when_no_uncordoned_node_is() {
        let mut c = cluster();
        c.nodes.get_mut("node-1").unwrap().unschedulable = true;
        let mut e = eligible_nodes(&c, &[svc("ns/a")]);
        assert_eq!(e.nodes.len(), 3, "cordon is not a clause of eligible_nodes");
        assert_eq!(prefer_uncordoned(&mut e, &c), names(&["node-1"]));
        assert_eq!(e.nodes, names(&["node-2", "node-3"]));
        assert_eq!(e.reason, None);

        // Every eligible node cordoned: nothing changes (the single-node laptop cluster).
        for n in ["node-2", "node-3"] {
            c.nodes.get_mut(n).unwrap().unschedulable = true;
        }
        let mut e = eligible_nodes(&c, &[svc("ns/a")]);
        assert_eq!(prefer_uncordoned(&mut e, &c), BTreeSet::new());
        assert_eq!(e.nodes, names(&["node-1", "node-2", "node-3"]));
        let mut one = cluster();
        one.nodes.retain(|n, _| n == "node-1");
        one.alive = names(&["node-1"]);
        one.nodes.get_mut("node-1").unwrap().unschedulable = true;
        let mut e = eligible_nodes(&one, &[svc("ns/a")]);
        prefer_uncordoned(&mut e, &one);
        assert_eq!(e.nodes, names(&["node-1"]));

        // The setting off: a cordoned node keeps its place.
        let mut c = cluster();
        c.nodes.get_mut("node-1").unwrap().unschedulable = true;
        c.ignore_cordon = true;
        let mut e = eligible_nodes(&c, &[svc("ns/a")]);
        assert_eq!(prefer_uncordoned(&mut e, &c), BTreeSet::new());
        assert_eq!(e.nodes.len(), 3);

        // "Otherwise eligible": the uncordoned nodes that fail a clause do not count, so the
        // cordoned node that passes them all keeps the IP (here the others are excluded by
        // label; under ETP Local, the only endpoint is on the cordoned node).
        let mut c = cluster();
        c.nodes.get_mut("node-1").unwrap().unschedulable = true;
        for n in ["node-2", "node-3"] {
            c.nodes
                .get_mut(n)
                .unwrap()
                .labels
                .insert(EXCLUDE_LB_LABEL.into(), String::new());
        }
        let mut e = eligible_nodes(&c, &[svc("ns/a")]);
        prefer_uncordoned(&mut e, &c);
        assert_eq!(e.nodes, names(&["node-1"]));
        let c = {
            let mut c = cluster();
            c.nodes.get_mut("node-1").unwrap().unschedulable = true;
            c
        };
        let local_1 = [local("ns/a", &[(Some("node-1"), true, true)])];
        let mut e = eligible_nodes(&c, &local_1);
        prefer_uncordoned(&mut e, &c);
        assert_eq!(e.nodes, names(&["node-1"]));
        // With a second endpoint on an uncordoned node, that node takes it.
        let local_12 = [local(
            "ns/a",
            &[(Some("node-1"), true, true), (Some("node-2"), true, true)],
        )];
        let mut e = eligible_nodes(&c, &local_12);
        prefer_uncordoned(&mut e, &c);
        assert_eq!(e.nodes, names(&["node-2"]));

        // A live speaker without a Node object is not cordoned (it fails clause 2 anyway).
        let mut e = Eligibility {
            nodes: names(&["node-1", "node-9"]),
            reason: None,
            warnings: Vec::new(),
            label_set_aside: false,
        };
        prefer_uncordoned(&mut e, &c);
        assert_eq!(e.nodes, names(&["node-9"]));
        // Empty stays empty, with its reason.
        let mut e = Eligibility {
            nodes: BTreeSet::new(),
            reason: Some(NoEligibleNode::NoService),
            warnings: Vec::new(),
            label_set_aside: false,
        };
        prefer_uncordoned(&mut e, &c);
        assert_eq!(e.reason, Some(NoEligibleNode::NoService));
    }

    #[test]
    fn mixed_node_failures_are_listed_per_node() {
        let mut c = cluster();
        c.alive.remove("node-1");
        c.nodes.get_mut("node-2").unwrap().network_unavailable = true;
        c.nodes.get_mut("node-3").unwrap().carrier = Some(false);
        let text = eligible_nodes(&c, &[svc("ns/a")])
            .reason
            .unwrap()
            .to_string();
        assert_eq!(
            text,
            "no eligible node: node-1: speaker not alive; node-2: NetworkUnavailable; node-3: no carrier on the announce interface"
        );
    }

    /// Issue #28 item 1: under `auto` (the default) the label is honoured while one Node lacks
    /// it, set aside (and said) when every Node carries it; `honour` keeps it, `ignore` drops it.
    #[test]
    fn auto_sets_the_exclusion_label_aside_only_when_every_node_carries_it() {
        let services = [svc("ns/a")];
        let mut c = cluster();
        c.nodes.retain(|n, _| n == "node-1" || n == "node-2");
        c.alive = names(&["node-1", "node-2"]);
        let label = |c: &mut Cluster, node: &str, value: Option<&str>| {
            let labels = &mut c.nodes.get_mut(node).unwrap().labels;
            match value {
                Some(v) => labels.insert(EXCLUDE_LB_LABEL.into(), v.into()),
                None => labels.remove(EXCLUDE_LB_LABEL),
            };
        };
        assert_eq!(c.exclude_lb_label, ExcludeLbLabel::Auto, "the default");
        // A kind cluster: the control plane carries it, the worker does not: honoured.
        label(&mut c, "node-1", Some(""));
        let e = eligible_nodes(&c, &services);
        assert_eq!((e.nodes, e.label_set_aside), (names(&["node-2"]), false));
        assert!(!c.may_announce_anything("node-1"));
        // "false" does not carry it: node-2 still lacks it, so node-1 stays out.
        label(&mut c, "node-2", Some("false"));
        assert_eq!(eligible_nodes(&c, &services).nodes, names(&["node-2"]));
        // Every Node carries it (a single-node minikube, or all labelled): set aside, said.
        label(&mut c, "node-2", Some("true"));
        let e = eligible_nodes(&c, &services);
        assert_eq!(
            (e.nodes, e.reason, e.label_set_aside),
            (names(&["node-1", "node-2"]), None, true)
        );
        assert!(c.may_announce_anything("node-1") && c.may_announce_anything("node-2"));
        // A Node without a speaker counts too: it lacks the label, so the label is in force.
        c.nodes.insert("node-9".into(), NodeFacts::default());
        let e = eligible_nodes(&c, &services);
        assert!(e.nodes.is_empty() && !e.label_set_aside);
        assert_eq!(
            e.reason.unwrap().to_string(),
            "no eligible node: node-1: excluded by label node.kubernetes.io/exclude-from-external-load-balancers; \
             node-2: excluded by label node.kubernetes.io/exclude-from-external-load-balancers; \
             node-9: speaker not alive"
        );
        c.nodes.remove("node-9");
        // honour: never set aside; ignore: never honoured, and nothing to say.
        c.exclude_lb_label = ExcludeLbLabel::Honour;
        let e = eligible_nodes(&c, &services);
        assert!(e.nodes.is_empty() && !e.label_set_aside);
        c.exclude_lb_label = ExcludeLbLabel::Ignore;
        let e = eligible_nodes(&c, &services);
        assert_eq!(
            (e.nodes, e.label_set_aside),
            (names(&["node-1", "node-2"]), false)
        );
    }

    /// C-14: the exclusion label, its values, and `--exclude-lb-label=ignore` (under `honour`;
    /// a single node carrying it under `auto` is the case above).
    #[test]
    fn c14_exclusion_label_is_never_silent() {
        for (value, excludes) in [
            ("", true),
            ("true", true),
            ("anything", true),
            ("false", false),
        ] {
            let mut c = cluster();
            c.exclude_lb_label = ExcludeLbLabel::Honour;
            c.nodes.retain(|n, _| n == "node-1");
            c.alive = names(&["node-1"]);
            c.nodes
                .get_mut("node-1")
                .unwrap()
                .labels
                .insert(EXCLUDE_LB_LABEL.into(), value.into());
            let services = [local("ns/a", &[(Some("node-1"), true, true)])];
            let e = eligible_nodes(&c, &services);
            if excludes {
                assert!(e.nodes.is_empty(), "value {value:?}");
                assert_eq!(
                    e.reason.unwrap().to_string(),
                    "no eligible node: all excluded by label node.kubernetes.io/exclude-from-external-load-balancers"
                );
                c.exclude_lb_label = ExcludeLbLabel::Ignore;
                assert_eq!(eligible_nodes(&c, &services).nodes, names(&["node-1"]));
            } else {
                assert_eq!(e.nodes, names(&["node-1"]), "value {value:?}");
            }
        }
    }

    #[test]
    fn clause_6_pool_not_advertised_and_selectors() {
        let mut c = cluster();
        c.advertisements.clear();
        c.advertisements.insert(
            "other".into(),
            L2AdvertisementSpec {
                ip_address_pools: vec!["pool-b".into()],
                ..Default::default()
            },
        );
        let e = eligible_nodes(&c, &[svc("ns/a")]);
        assert_eq!(
            e.reason.unwrap().to_string(),
            "no eligible node: no L2Advertisement covers pool pool-a"
        );

        // Covered by pool selector, restricted to zone b.
        c.advertisements.insert(
            "web".into(),
            L2AdvertisementSpec {
                ip_address_pool_selectors: vec![LabelSelector {
                    match_labels: labels(&[("tier", "web")]),
                    ..Default::default()
                }],
                node_selectors: zone_selector("b"),
                ..Default::default()
            },
        );
        assert_eq!(eligible_nodes(&c, &[svc("ns/a")]).nodes, names(&["node-2"]));
        c.alive.remove("node-2");
        let e = eligible_nodes(&c, &[svc("ns/a")]);
        assert_eq!(
            e.reason,
            Some(NoEligibleNode::NodeSelectorsMatchNoEligibleNode {
                pool: "pool-a".into(),
                advertisements: vec!["web".into()]
            })
        );
    }

    /// C-10: one IP, two Services; the intersection, and disjoint L2Advertisements.
    #[test]
    fn c10_shared_ip_intersection_and_disjoint_advertisements() {
        let c = cluster();
        let services = [svc("ns/svc-a"), svc("ns/svc-b")];
        let e = eligible_nodes(&c, &services);
        assert_eq!(e.nodes.len(), 3);
        // Exactly one owner whatever the order of names.
        let ip = "198.51.100.53".parse().unwrap();
        let o = owner(ip, e.nodes.iter().map(String::as_str)).unwrap();
        assert_eq!(Some(o), owner(ip, e.nodes.iter().rev().map(String::as_str)));

        let mut c = cluster();
        c.advertisements.clear();
        c.advertisements.insert(
            "l2-a".into(),
            L2AdvertisementSpec {
                ip_address_pools: vec!["pool-a".into()],
                node_selectors: zone_selector("a"),
                ..Default::default()
            },
        );
        c.advertisements.insert(
            "l2-b".into(),
            L2AdvertisementSpec {
                ip_address_pools: vec!["pool-b".into()],
                node_selectors: zone_selector("b"),
                ..Default::default()
            },
        );
        let mut b = svc("ns/svc-b");
        b.pool.name = "pool-b".into();
        let e = eligible_nodes(&c, &[svc("ns/svc-a"), b]);
        assert!(e.nodes.is_empty());
        assert_eq!(
            e.reason.unwrap().to_string(),
            "no eligible node: L2Advertisements restrict the Services on this IP to disjoint nodes"
        );
    }

    /// C-16: ETP Local follows ready endpoints; terminating ones count only as a fallback.
    #[test]
    fn c16_local_follows_endpoints() {
        let c = cluster();
        let e = eligible_nodes(&c, &[local("ns/a", &[(Some("node-2"), true, true)])]);
        assert_eq!(e.nodes, names(&["node-2"]));
        // (1) node-2 terminating (serving, not ready), node-3 ready → node-3 only.
        let e = eligible_nodes(
            &c,
            &[local(
                "ns/a",
                &[(Some("node-2"), false, true), (Some("node-3"), true, true)],
            )],
        );
        assert_eq!(e.nodes, names(&["node-3"]));
        // Only a terminating-but-serving endpoint: still announced there.
        let e = eligible_nodes(&c, &[local("ns/a", &[(Some("node-2"), false, true)])]);
        assert_eq!(e.nodes, names(&["node-2"]));
        // (2) scaled to zero.
        let e = eligible_nodes(&c, &[local("ns/a", &[])]);
        assert_eq!(
            e.reason.unwrap().to_string(),
            "no eligible node: no ready endpoint on any node for ns/a (externalTrafficPolicy Local)"
        );
        // (3) ready endpoint without nodeName: not placed, and said so.
        let e = eligible_nodes(&c, &[local("ns/a", &[(None, true, true)])]);
        assert_eq!(
            e.reason,
            Some(NoEligibleNode::NoReadyEndpoint {
                service: "ns/a".into(),
                without_node_name: 1
            })
        );
        assert!(
            e.reason
                .unwrap()
                .to_string()
                .contains("1 ready endpoint(s) have no nodeName")
        );
        assert_eq!(e.warnings.len(), 1);
        let e = eligible_nodes(
            &c,
            &[local(
                "ns/a",
                &[(None, true, true), (Some("node-1"), true, true)],
            )],
        );
        assert_eq!(e.nodes, names(&["node-1"]));
        assert_eq!(e.warnings, vec!["1 endpoint(s) of ns/a have no nodeName and are ignored for externalTrafficPolicy Local".to_string()]);
        // ETP Cluster: the same endpoint moves change nothing.
        let mut cl = local(
            "ns/a",
            &[(Some("node-2"), false, true), (Some("node-3"), true, true)],
        );
        cl.traffic_policy = TrafficPolicy::Cluster;
        assert_eq!(eligible_nodes(&c, &[cl]).nodes.len(), 3);
    }

    #[test]
    fn local_endpoints_on_ineligible_nodes_and_disjoint() {
        let mut c = cluster();
        c.nodes.get_mut("node-2").unwrap().network_unavailable = true;
        let e = eligible_nodes(&c, &[local("ns/a", &[(Some("node-2"), true, true)])]);
        assert_eq!(
            e.reason,
            Some(NoEligibleNode::EndpointsOnIneligibleNodes {
                service: "ns/a".into(),
                nodes: vec!["node-2".into()]
            })
        );
        let c = cluster();
        let services = [
            local("ns/a", &[(Some("node-1"), true, true)]),
            local("ns/b", &[(Some("node-3"), true, true)]),
        ];
        assert_eq!(
            eligible_nodes(&c, &services).reason,
            Some(NoEligibleNode::DisjointEndpoints)
        );
        let services = [
            local(
                "ns/a",
                &[(Some("node-1"), true, true), (Some("node-3"), true, true)],
            ),
            local("ns/b", &[(Some("node-3"), true, true)]),
            svc("ns/c"),
        ];
        assert_eq!(eligible_nodes(&c, &services).nodes, names(&["node-3"]));
    }

    #[test]
    fn no_service_and_no_nodes() {
        assert_eq!(
            eligible_nodes(&cluster(), &[]).reason,
            Some(NoEligibleNode::NoService)
        );
        let e = eligible_nodes(&Cluster::default(), &[svc("ns/a")]);
        assert_eq!(
            e.reason.unwrap().to_string(),
            "no eligible node: no speaker and no Node known"
        );
    }

    #[test]
    fn interfaces_from_advertisements() {
        let mut c = cluster();
        assert_eq!(c.announce_interfaces(&pool(), "node-1"), Interfaces::All);
        c.advertisements.clear();
        c.advertisements.insert(
            "e0".into(),
            L2AdvertisementSpec {
                interfaces: vec!["eth0".into()],
                ..Default::default()
            },
        );
        c.advertisements.insert(
            "e3".into(),
            L2AdvertisementSpec {
                interfaces: vec!["eth3".into()],
                node_selectors: zone_selector("a"),
                ..Default::default()
            },
        );
        assert_eq!(
            c.announce_interfaces(&pool(), "node-1"),
            Interfaces::Named(names(&["eth0", "eth3"]))
        );
        assert_eq!(
            c.announce_interfaces(&pool(), "node-2"),
            Interfaces::Named(names(&["eth0"]))
        );
        c.advertisements.insert(
            "any".into(),
            L2AdvertisementSpec {
                node_selectors: zone_selector("b"),
                ..Default::default()
            },
        );
        assert_eq!(c.announce_interfaces(&pool(), "node-2"), Interfaces::All);
    }

    fn arb_cluster() -> impl proptest::strategy::Strategy<Value = Cluster> {
        use proptest::prelude::*;
        // Per node-0..5: (alive, exists, network_unavailable, excluded, carrier, zone a/b).
        proptest::collection::vec(
            (
                any::<bool>(),
                any::<bool>(),
                any::<bool>(),
                any::<bool>(),
                any::<bool>(),
                any::<bool>(),
            ),
            6,
        )
        .prop_flat_map(|flags| (Just(flags), any::<bool>(), 0u8..3))
        .prop_map(|(flags, ignore_exclude_lb, adv)| {
            let mut c = Cluster {
                exclude_lb_label: if ignore_exclude_lb {
                    ExcludeLbLabel::Ignore
                } else {
                    ExcludeLbLabel::Honour
                },
                ..Default::default()
            };
            for (i, (alive, exists, unavailable, excluded, carrier, zone_a)) in
                flags.into_iter().enumerate()
            {
                let name = format!("node-{i}");
                if alive {
                    c.alive.insert(name.clone());
                }
                if exists {
                    let mut l = labels(&[("zone", if zone_a { "a" } else { "b" })]);
                    if excluded {
                        l.insert(EXCLUDE_LB_LABEL.into(), String::new());
                    }
                    c.nodes.insert(
                        name,
                        NodeFacts {
                            labels: l,
                            network_unavailable: unavailable,
                            carrier: Some(carrier),
                            not_ready: false,
                            unschedulable: false,
                            not_ready_since: None,
                        },
                    );
                }
            }
            match adv {
                0 => {}
                1 => {
                    c.advertisements
                        .insert("all".into(), L2AdvertisementSpec::default());
                }
                _ => {
                    c.advertisements.insert(
                        "zone-a".into(),
                        L2AdvertisementSpec {
                            node_selectors: zone_selector("a"),
                            ..Default::default()
                        },
                    );
                }
            }
            c
        })
    }

    fn arb_service() -> impl proptest::strategy::Strategy<Value = ServiceFacts> {
        use proptest::prelude::*;
        (
            any::<bool>(),
            proptest::collection::vec(
                (
                    proptest::option::of(0usize..6),
                    any::<bool>(),
                    any::<bool>(),
                ),
                0..4,
            ),
        )
            .prop_map(|(is_local, eps)| ServiceFacts {
                name: "ns/s".into(),
                traffic_policy: if is_local {
                    TrafficPolicy::Local
                } else {
                    TrafficPolicy::Cluster
                },
                pool: pool(),
                endpoints: eps
                    .into_iter()
                    .map(|(n, ready, serving)| EndpointFacts {
                        node_name: n.map(|i| format!("node-{i}")),
                        ready,
                        serving: serving || ready,
                    })
                    .collect(),
            })
    }

    proptest::proptest! {
        /// Issue #29 O3 over random sets: [`prefer_uncordoned`] never empties a set, keeps
        /// exactly its uncordoned nodes when it has one, and — the safety argument for a
        /// speaker that lacks a carrier report and so plans with a larger set `s` than the true
        /// `t` — a node of `t` that owns the IP under `s` owns it under `t`: never two answerers.
        #[test]
        fn prefer_uncordoned_keeps_one_owner_under_a_larger_set(
            cordoned in proptest::collection::vec(proptest::prelude::any::<bool>(), 6),
            in_s in proptest::collection::vec(proptest::prelude::any::<bool>(), 6),
            in_t in proptest::collection::vec(proptest::prelude::any::<bool>(), 6),
            octet in 0u8..=255,
        ) {
            let mut c = cluster();
            c.nodes.clear();
            for (i, cordon) in cordoned.iter().enumerate() {
                c.nodes.insert(format!("node-{i}"), NodeFacts { unschedulable: *cordon, ..Default::default() });
            }
            let set = |mask: &[bool]| -> BTreeSet<String> {
                mask.iter().enumerate().filter(|(_, b)| **b).map(|(i, _)| format!("node-{i}")).collect()
            };
            let s_nodes = set(&in_s);
            let t_nodes: BTreeSet<String> = set(&in_t).intersection(&s_nodes).cloned().collect();
            let narrowed = |nodes: &BTreeSet<String>| {
                let mut e = Eligibility { nodes: nodes.clone(), reason: None, warnings: Vec::new(), label_set_aside: false };
                prefer_uncordoned(&mut e, &c);
                e.nodes
            };
            let (s, t) = (narrowed(&s_nodes), narrowed(&t_nodes));
            proptest::prop_assert_eq!(s.is_empty(), s_nodes.is_empty());
            proptest::prop_assert!(s.is_subset(&s_nodes));
            let uncordoned: BTreeSet<String> = s_nodes.iter().filter(|n| !c.nodes[*n].unschedulable).cloned().collect();
            if !uncordoned.is_empty() {
                proptest::prop_assert_eq!(&s, &uncordoned);
            }
            let ip: std::net::IpAddr = format!("198.51.100.{octet}").parse().unwrap();
            let owner_s = owner(ip, s.iter().map(String::as_str)).map(str::to_owned);
            if let Some(x) = owner_s.filter(|x| t_nodes.contains(x)) {
                proptest::prop_assert_eq!(owner(ip, t.iter().map(String::as_str)), Some(x.as_str()));
            }
        }
    }

    proptest::proptest! {
        /// Invariants over random clusters: the result passes every clause, a reason is given
        /// exactly when it is empty, and sharing an IP only ever narrows the set.
        #[test]
        fn eligibility_invariants(c in arb_cluster(), a in arb_service(), b in arb_service()) {
            let one = eligible_nodes(&c, std::slice::from_ref(&a));
            proptest::prop_assert_eq!(one.reason.is_some(), one.nodes.is_empty());
            for n in &one.nodes {
                proptest::prop_assert_eq!(c.node_exclusion(n), None);
                proptest::prop_assert!(c.advertised_on(&a.pool, n));
                if a.traffic_policy == TrafficPolicy::Local {
                    proptest::prop_assert!(
                        a.endpoints.iter().any(|e| e.node_name.as_deref() == Some(n.as_str()) && e.serving)
                    );
                }
            }
            let both = eligible_nodes(&c, &[a.clone(), b.clone()]);
            let other = eligible_nodes(&c, std::slice::from_ref(&b));
            proptest::prop_assert!(both.nodes.is_subset(&one.nodes));
            proptest::prop_assert!(both.nodes.is_subset(&other.nodes));
            proptest::prop_assert_eq!(both.reason.is_some(), both.nodes.is_empty());
        }
    }
}
