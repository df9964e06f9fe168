//! From the [`View`] and the membership to a decision per IP: who owns it, what this node answers
//! for and on which interfaces, and who reports an IP nobody may announce. Pure: no `kube`, no
//! `tokio`. Level-triggered: the whole plan is recomputed from the current inputs every time.
//!
//! Every speaker computes the same plan from the same inputs (S2), so:
//! - the owner of an IP is the eligible node with the highest rendezvous weight
//!   ([`crate::election::owner`]);
//! - the owner reports "announcing … from …" Events for its IPs;
//! - for an IP with no eligible node, the alive speaker with the highest rendezvous weight for that
//!   IP (eligible or not) is the *reporter* and alone emits the Warning Event, so a cluster of ten
//!   speakers does not emit ten copies.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use crate::carrier::{Carriers, exclude_without_carrier};
use crate::election::owner;
use crate::eligibility::{Interfaces, eligible_nodes, prefer_uncordoned};
use crate::view::View;

/// The decision for one IP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpPlan {
    /// The announcing node, if any.
    pub owner: Option<String>,
    /// `namespace/name` of the Services on the IP.
    pub services: Vec<String>,
    /// Why nobody announces (the Warning Event text), when `owner` is `None`.
    pub no_owner_reason: Option<String>,
    /// Non-fatal notes for a Warning Event (e.g. endpoints without `nodeName`).
    pub warnings: Vec<String>,
    /// The speaker that reports problems of this IP (see the module docs).
    pub reporter: Option<String>,
    /// The exclusion label is set aside because every Node carries it
    /// ([`crate::eligibility::Eligibility::label_set_aside`]): the reporter says so once.
    pub label_set_aside: bool,
}

/// The decisions for every IP, and what this node answers for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// IPs this node owns, with the interfaces it may announce them on (feed to
    /// `ferrolb_speaker::l2::Responder::set_owned`).
    pub owned: BTreeMap<IpAddr, Interfaces>,
    /// Every announced-or-wanted IP.
    pub ips: BTreeMap<IpAddr, IpPlan>,
}

impl Plan {
    /// How many IPs nobody may announce (no eligible node) have `me` as their reporter: summed
    /// over the speakers, each such IP counts once (`ferrolb_speaker_no_eligible_node_ips`).
    pub fn unowned_reported_by(&self, me: &str) -> usize {
        self.ips
            .values()
            .filter(|p| p.owner.is_none() && p.reporter.as_deref() == Some(me))
            .count()
    }
}

/// Computes the plan for node `me`. `alive` is the SWIM membership (names of alive speakers);
/// `my_carrier` is whether any announce interface of this node has carrier. Without the
/// members' carrier reports: [`plan_with_carrier`].
pub fn plan(view: &View, alive: &BTreeSet<String>, me: &str, my_carrier: Option<bool>) -> Plan {
    plan_with_carrier(view, alive, me, my_carrier, &Carriers::new())
}

/// [`plan`] with the members' carrier reports, this node's included (issue #32 G5.5): a node
/// whose report says it has no carrier towards the clients of an IP is not eligible for it
/// ([`crate::carrier`]). Then, per IP, a cordoned node is eligible only when no uncordoned node
/// is ([`prefer_uncordoned`], issue #29 O3).
pub fn plan_with_carrier(
    view: &View,
    alive: &BTreeSet<String>,
    me: &str,
    my_carrier: Option<bool>,
    carriers: &Carriers,
) -> Plan {
    let mut cluster = view.cluster.clone();
    cluster.alive = alive.clone();
    if let Some(facts) = cluster.nodes.get_mut(me) {
        facts.carrier = my_carrier;
    }
    let mut out = Plan::default();
    for (ip, services) in &view.ips {
        let mut eligibility = eligible_nodes(&cluster, services);
        if let Some(first) = services.first() {
            exclude_without_carrier(&mut eligibility, &cluster, carriers, &first.pool, *ip);
        }
        // Last: a cordoned node only when no uncordoned one is left (issue #29 O3).
        prefer_uncordoned(&mut eligibility, &cluster);
        let chosen = owner(*ip, eligibility.nodes.iter().map(String::as_str)).map(str::to_owned);
        let reporter = owner(*ip, alive.iter().map(String::as_str)).map(str::to_owned);
        if chosen.as_deref() == Some(me)
            && let Some(first) = services.first()
        {
            out.owned
                .insert(*ip, cluster.announce_interfaces(&first.pool, me));
        }
        out.ips.insert(
            *ip,
            IpPlan {
                owner: chosen,
                services: services.iter().map(|s| s.name.clone()).collect(),
                no_owner_reason: eligibility.reason.map(|r| r.to_string()),
                warnings: eligibility.warnings,
                reporter,
                label_set_aside: eligibility.label_set_aside,
            },
        );
    }
    out
}

/// For tests of views with one IP.
#[cfg(test)]
impl Plan {
    /// The owner this plan names for its first IP (`None`: no IP, or nobody eligible).
    pub(crate) fn first_owner(&self) -> Option<String> {
        self.ips.values().next().and_then(|p| p.owner.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eligibility::{NodeFacts, PoolRef, ServiceFacts};
    use ferrolb_crds::L2AdvertisementSpec;

    fn view(nodes: &[&str], labels: &[(&str, &str, &str)]) -> View {
        let mut v = View::default();
        for n in nodes {
            v.cluster.nodes.insert(n.to_string(), NodeFacts::default());
        }
        for (n, k, val) in labels {
            if let Some(f) = v.cluster.nodes.get_mut(*n) {
                f.labels.insert(k.to_string(), val.to_string());
            }
        }
        v.cluster
            .advertisements
            .insert("all".into(), L2AdvertisementSpec::default());
        v.ips.insert(
            "198.51.100.53".parse().unwrap(),
            vec![ServiceFacts {
                name: "default/svc-a".into(),
                pool: PoolRef {
                    name: "pool".into(),
                    ..Default::default()
                },
                ..Default::default()
            }],
        );
        v
    }

    fn alive(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn every_node_agrees_on_one_owner() {
        let v = view(&["node-1", "node-2", "node-3"], &[]);
        let members = alive(&["node-1", "node-2", "node-3"]);
        let plans: Vec<Plan> = ["node-1", "node-2", "node-3"]
            .iter()
            .map(|me| plan(&v, &members, me, Some(true)))
            .collect();
        let owners: BTreeSet<_> = plans
            .iter()
            .map(|p| p.ips.values().next().unwrap().owner.clone())
            .collect();
        assert_eq!(owners.len(), 1, "all speakers compute the same owner");
        let owning: Vec<_> = plans.iter().filter(|p| !p.owned.is_empty()).collect();
        assert_eq!(owning.len(), 1, "exactly one node answers");
    }

    /// Issue #32 G5.5: with the owner's report saying its client-facing link (the one with the
    /// IP on link) lost carrier while its other link has it, every node elects the same other
    /// owner; without the reports (the rule before) the owner keeps the IP.
    #[test]
    fn every_node_drops_an_owner_without_carrier_towards_the_ips_clients() {
        use crate::carrier::{Link, LinkReport};
        let nodes = ["node-1", "node-2", "node-3"];
        let v = view(&nodes, &[]);
        let members = alive(&nodes);
        let before = plan(&v, &members, "node-1", Some(true));
        let first = before.ips.values().next().unwrap().owner.clone().unwrap();
        let link = |name: &str, carrier, net: &str| Link {
            name: name.into(),
            carrier,
            default_v4: true,
            default_v6: false,
            named_v4: true,
            named_v6: false,
            prefixes: vec![(net.parse().unwrap(), 24)],
        };
        let report = |client| LinkReport {
            links: vec![
                link("eth0", client, "198.51.100.0"),
                link("eth1", true, "10.1.0.0"),
            ],
            withdrawn: false,
        };
        let carriers: Carriers = nodes
            .iter()
            .map(|n| (n.to_string(), report(*n != first)))
            .collect();
        let plans: Vec<Plan> = nodes
            .iter()
            .map(|me| plan_with_carrier(&v, &members, me, Some(true), &carriers))
            .collect();
        let owners: BTreeSet<_> = plans
            .iter()
            .map(|p| p.ips.values().next().unwrap().owner.clone())
            .collect();
        assert_eq!(owners.len(), 1, "{owners:?}");
        let owner = owners.into_iter().next().unwrap().unwrap();
        assert_ne!(owner, first);
        assert_eq!(plans.iter().filter(|p| !p.owned.is_empty()).count(), 1);
        // Every node without carrier there: nobody, and the reason says why.
        let none: Carriers = nodes
            .iter()
            .map(|n| (n.to_string(), report(false)))
            .collect();
        let p = plan_with_carrier(&v, &members, "node-1", Some(true), &none);
        let ip = p.ips.values().next().unwrap();
        assert_eq!(ip.owner, None);
        assert!(
            ip.no_owner_reason
                .as_deref()
                .unwrap()
                .contains("no carrier"),
            "{ip:?}"
        );
    }

    /// Issue #29 O3: every node elects the same uncordoned node while the owner is cordoned,
    /// the rendezvous owner again once it is uncordoned, and the cordoned owner itself when
    /// every node is cordoned or `--ignore-cordon` is set.
    #[test]
    fn o3_a_cordoned_owner_hands_its_ip_over_and_gets_it_back_on_uncordon() {
        let nodes = ["node-1", "node-2", "node-3"];
        let members = alive(&nodes);
        let owners = |v: &View| -> BTreeSet<Option<String>> {
            nodes
                .iter()
                .map(|me| plan(v, &members, me, Some(true)).first_owner())
                .collect()
        };
        let answering = |v: &View| -> Vec<&str> {
            nodes
                .iter()
                .copied()
                .filter(|me| !plan(v, &members, me, Some(true)).owned.is_empty())
                .collect()
        };
        let mut v = view(&nodes, &[]);
        let first = owners(&v).into_iter().next().unwrap().unwrap();
        v.cluster.nodes.get_mut(&first).unwrap().unschedulable = true;
        let during = owners(&v);
        assert_eq!(during.len(), 1, "{during:?}");
        let successor = during.into_iter().next().unwrap().unwrap();
        assert_ne!(successor, first);
        assert_eq!(answering(&v), [successor.as_str()]);
        // Uncordon: the rendezvous owner again.
        v.cluster.nodes.get_mut(&first).unwrap().unschedulable = false;
        assert_eq!(owners(&v), [Some(first.clone())].into());
        // Every node cordoned: nothing moves.
        for n in nodes {
            v.cluster.nodes.get_mut(n).unwrap().unschedulable = true;
        }
        assert_eq!(owners(&v), [Some(first.clone())].into());
        assert_eq!(answering(&v), [first.as_str()]);
        // The setting off: the cordoned owner keeps it.
        v.cluster.nodes.get_mut(&successor).unwrap().unschedulable = false;
        assert_eq!(owners(&v), [Some(successor.clone())].into());
        v.cluster.ignore_cordon = true;
        assert_eq!(owners(&v), [Some(first)].into());
    }

    /// Issue #29 O3 after G5.5: the cordon preference comes after the carrier rule, so a
    /// cordoned node with carrier answers when the only uncordoned node has none towards the
    /// IP's clients (applied before, it would leave the IP unanswered).
    #[test]
    fn o3_a_cordoned_node_with_carrier_beats_nobody() {
        use crate::carrier::{Link, LinkReport};
        let nodes = ["node-1", "node-2"];
        let mut v = view(&nodes, &[]);
        v.cluster.nodes.get_mut("node-1").unwrap().unschedulable = true;
        let report = |carrier| LinkReport {
            links: vec![Link {
                name: "eth0".into(),
                carrier,
                default_v4: true,
                default_v6: false,
                named_v4: true,
                named_v6: false,
                prefixes: vec![("198.51.100.0".parse().unwrap(), 24)],
            }],
            withdrawn: false,
        };
        let carriers: Carriers = [
            ("node-1".to_string(), report(true)),
            ("node-2".to_string(), report(false)),
        ]
        .into();
        for me in nodes {
            let p = plan_with_carrier(&v, &alive(&nodes), me, Some(true), &carriers);
            assert_eq!(
                p.ips.values().next().unwrap().owner.as_deref(),
                Some("node-1"),
                "{me}"
            );
        }
    }

    /// Issue #32, the minority-gate row: a withdrawn report excludes its node from every IP
    /// whatever its carrier, the others elect the same owner among themselves, and with every
    /// node withdrawn the reason names it.
    #[test]
    fn a_withdrawn_node_is_planned_nothing_and_the_reason_says_so() {
        use crate::carrier::{Link, LinkReport};
        let nodes = ["node-1", "node-2", "node-3"];
        let v = view(&nodes, &[]);
        let report = |withdrawn| LinkReport {
            links: vec![Link {
                name: "eth0".into(),
                carrier: true,
                default_v4: true,
                default_v6: false,
                named_v4: true,
                named_v6: false,
                prefixes: vec![("198.51.100.0".parse().unwrap(), 24)],
            }],
            withdrawn,
        };
        let first = plan(&v, &alive(&nodes), "node-1", Some(true))
            .first_owner()
            .unwrap();
        let carriers: Carriers = nodes
            .iter()
            .map(|n| (n.to_string(), report(*n == first)))
            .collect();
        let owners: BTreeSet<Option<String>> = nodes
            .iter()
            .map(|me| {
                plan_with_carrier(&v, &alive(&nodes), me, Some(true), &carriers)
                    .ips
                    .values()
                    .next()
                    .unwrap()
                    .owner
                    .clone()
            })
            .collect();
        assert_eq!(owners.len(), 1, "{owners:?}");
        assert!(!owners.contains(&Some(first.clone())) && !owners.contains(&None));
        let everyone: Carriers = nodes
            .iter()
            .map(|n| (n.to_string(), report(true)))
            .collect();
        let p = plan_with_carrier(&v, &alive(&nodes), "node-1", Some(true), &everyone);
        let ip = p.ips.values().next().unwrap();
        assert_eq!(ip.owner, None);
        assert!(
            ip.no_owner_reason.as_deref().unwrap().contains("withdrawn"),
            "{:?}",
            ip.no_owner_reason
        );
    }

    #[test]
    fn own_carrier_loss_gives_up_ownership() {
        let v = view(&["node-1"], &[]);
        let p = plan(&v, &alive(&["node-1"]), "node-1", Some(false));
        assert!(p.owned.is_empty());
        assert!(p.ips.values().next().unwrap().no_owner_reason.is_some());
    }

    #[test]
    fn all_excluded_has_reason_and_one_reporter() {
        let label = crate::eligibility::EXCLUDE_LB_LABEL;
        let mut v = view(
            &["node-1", "node-2"],
            &[("node-1", label, ""), ("node-2", label, "true")],
        );
        v.cluster.exclude_lb_label = crate::eligibility::ExcludeLbLabel::Honour;
        let members = alive(&["node-1", "node-2"]);
        let p1 = plan(&v, &members, "node-1", Some(true));
        let p2 = plan(&v, &members, "node-2", Some(true));
        let ip1 = p1.ips.values().next().unwrap();
        assert_eq!(ip1.owner, None);
        assert!(
            ip1.no_owner_reason
                .as_deref()
                .unwrap()
                .contains("excluded by label"),
            "{ip1:?}"
        );
        assert_eq!(ip1.reporter, p2.ips.values().next().unwrap().reporter);
        assert!(ip1.reporter.is_some());
    }

    /// Issue #28 item 1: under `auto`, every Node labelled (a single-node laptop cluster) leaves
    /// the IP owned, and the plan marks it for the reporter's Warning.
    #[test]
    fn all_labelled_under_auto_is_owned_and_marked() {
        let label = crate::eligibility::EXCLUDE_LB_LABEL;
        let v = view(&["node-1"], &[("node-1", label, "")]);
        let p = plan(&v, &alive(&["node-1"]), "node-1", Some(true));
        let ip = p.ips.values().next().unwrap();
        assert_eq!(ip.owner.as_deref(), Some("node-1"));
        assert!(ip.label_set_aside && ip.no_owner_reason.is_none(), "{ip:?}");
        assert_eq!(p.owned.len(), 1);
    }

    #[test]
    fn an_ip_without_eligible_node_is_counted_by_its_reporter_only() {
        let label = crate::eligibility::EXCLUDE_LB_LABEL;
        let members = alive(&["node-1", "node-2"]);
        let mut excluded = view(
            &["node-1", "node-2"],
            &[("node-1", label, ""), ("node-2", label, "")],
        );
        excluded.cluster.exclude_lb_label = crate::eligibility::ExcludeLbLabel::Honour;
        let counts: Vec<usize> = ["node-1", "node-2"]
            .iter()
            .map(|me| plan(&excluded, &members, me, Some(true)).unowned_reported_by(me))
            .collect();
        assert_eq!(counts.iter().sum::<usize>(), 1, "{counts:?}");
        let served = view(&["node-1", "node-2"], &[]);
        for me in ["node-1", "node-2"] {
            assert_eq!(
                plan(&served, &members, me, Some(true)).unowned_reported_by(me),
                0
            );
        }
    }
}
