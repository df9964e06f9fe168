//! The speakers' `L2Announcement` reports that are stale, for the controller to delete (issue #27
//! item 5). Pure: no `kube`, no `tokio`; [`crate::k8s::control`] deletes what [`stale`] returns.
//!
//! A speaker writes only the object of an IP it announces, naming its own node (the admission
//! policy `deploy/speaker-admission.yaml` holds it to that), and deletes nothing: its Role has no
//! `delete`, so a stolen speaker token cannot erase the reports of other nodes. The controller,
//! which already watches every Service and Node, removes what no speaker can:
//!
//! - the object of an IP that no Service of our class holds in `status.loadBalancer.ingress` any
//!   more (the Service was deleted, changed type or class, or its IP was released or moved);
//! - the object naming a Node that does not exist (the node was removed; its speaker is gone).
//!
//! A node's membership report (named [`member_report_name`] of its `spec.node`, `ip` empty,
//! `membership` set; read by `ferrolb status`) is stale once its Node does not exist.
//!
//! Any other object whose name is not [`announcement_name`] of its `spec.ip` (or whose IP does not
//! parse) is not a speaker's report and is left alone, as is one already being deleted. Each
//! delete carries the object's `resourceVersion` as a precondition: a speaker that rewrote it
//! meanwhile (a new owner) wins, and the next pass decides again.
//!
//! Not covered: an IP that stays assigned while no node may announce it (no eligible node) keeps
//! the last owner's object until the IP is released, the node is removed, or a node takes the IP
//! over; the Warning Event on the Service says that nobody announces it.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;

use ferrolb_crds::announcement::member_report_name;
use ferrolb_crds::service::{ClassFilter, ingress_ips};
use ferrolb_crds::{L2Announcement, announcement_name};
use k8s_openapi::api::core::v1::{Node, Service};

/// Why a report is stale.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Why {
    /// No Service of our class holds the IP.
    Released(IpAddr),
    /// The Node the report names does not exist.
    NodeGone(String),
}

impl std::fmt::Display for Why {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Why::Released(ip) => write!(f, "no Service holds {ip}"),
            Why::NodeGone(node) => write!(f, "node {node} does not exist"),
        }
    }
}

/// One report to delete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stale {
    /// Object name (in the speakers' namespace).
    pub name: String,
    /// `metadata.resourceVersion`, the delete's precondition.
    pub resource_version: Option<String>,
    /// Why.
    pub why: Why,
}

/// The stale reports among `announcements`, given every Service (all classes; `class` decides
/// which are ours) and every Node, in the order of `announcements`.
pub fn stale(
    announcements: &[Arc<L2Announcement>],
    services: &[Arc<Service>],
    nodes: &[Arc<Node>],
    class: &ClassFilter,
) -> Vec<Stale> {
    let held: BTreeSet<IpAddr> = services
        .iter()
        .filter(|s| class.handles(s))
        .flat_map(|s| ingress_ips(s))
        .collect();
    let nodes: BTreeSet<&str> = nodes
        .iter()
        .filter_map(|n| n.metadata.name.as_deref())
        .collect();
    announcements
        .iter()
        .filter(|a| a.metadata.deletion_timestamp.is_none())
        .filter_map(|a| {
            let name = a.metadata.name.clone()?;
            if a.spec.ip.is_empty()
                && a.spec.membership.is_some()
                && name == member_report_name(&a.spec.node)
            {
                return (!nodes.contains(a.spec.node.as_str())).then(|| Stale {
                    name,
                    resource_version: a.metadata.resource_version.clone(),
                    why: Why::NodeGone(a.spec.node.clone()),
                });
            }
            let ip: IpAddr = a.spec.ip.parse().ok()?;
            if announcement_name(ip) != name {
                return None;
            }
            let why = if !held.contains(&ip) {
                Why::Released(ip)
            } else if !nodes.contains(a.spec.node.as_str()) {
                Why::NodeGone(a.spec.node.clone())
            } else {
                return None;
            };
            Some(Stale {
                name,
                resource_version: a.metadata.resource_version.clone(),
                why,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use ferrolb_crds::L2AnnouncementSpec;

    fn report(ip: &str, node: &str) -> Arc<L2Announcement> {
        let mut a = L2Announcement::new(
            &announcement_name(ip.parse().unwrap()),
            L2AnnouncementSpec {
                ip: ip.into(),
                node: node.into(),
                interfaces: vec!["eth0".into()],
                services: vec![],
                since: None,
                held_by: None,
                membership: None,
                networks: Vec::new(),
                in_use: Vec::new(),
                unanswered: Vec::new(),
            },
        );
        a.metadata.resource_version = Some("7".into());
        Arc::new(a)
    }

    fn service(name: &str, class: Option<&str>, ips: &[&str]) -> Arc<Service> {
        let ingress: Vec<serde_json::Value> =
            ips.iter().map(|ip| serde_json::json!({"ip": ip})).collect();
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"type": "LoadBalancer", "loadBalancerClass": class},
                "status": {"loadBalancer": {"ingress": ingress}},
            }))
            .unwrap(),
        )
    }

    fn node(name: &str) -> Arc<Node> {
        Arc::new(serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap())
    }

    fn member_report(node: &str) -> Arc<L2Announcement> {
        let mut a = L2Announcement::new(
            &member_report_name(node),
            L2AnnouncementSpec {
                ip: String::new(),
                node: node.into(),
                interfaces: vec![],
                services: vec![],
                since: None,
                held_by: None,
                membership: Some(ferrolb_crds::announcement::MembershipReport {
                    members: 2,
                    observed: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                    ),
                }),
                networks: Vec::new(),
                in_use: Vec::new(),
                unanswered: Vec::new(),
            },
        );
        a.metadata.resource_version = Some("9".into());
        Arc::new(a)
    }

    #[test]
    fn membership_reports_are_stale_only_once_their_node_is_gone() {
        let class = ClassFilter::default();
        let nodes = [node("node-1")];
        let reports = [member_report("node-1"), member_report("node-2")];
        assert_eq!(
            stale(&reports, &[], &nodes, &class),
            vec![Stale {
                name: "node-node-2".into(),
                resource_version: Some("9".into()),
                why: Why::NodeGone("node-2".into()),
            }]
        );
    }

    #[test]
    fn reports_of_released_ips_and_gone_nodes_are_stale_others_are_kept() {
        let class = ClassFilter::default();
        let services = [
            service("web", None, &["198.51.100.10", "2001:db8::10"]),
            // Another implementation's Service: its IP is not ours to report.
            service("other", Some("example.com/lb"), &["198.51.100.30"]),
        ];
        let nodes = [node("node-1"), node("node-2")];
        let mut junk = (*report("198.51.100.40", "node-1")).clone();
        junk.metadata.name = Some("not-a-report".into());
        let mut going = (*report("198.51.100.50", "node-1")).clone();
        going.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        let reports = [
            report("198.51.100.10", "node-1"),
            report("2001:db8::10", "node-3"),
            report("198.51.100.20", "node-2"),
            report("198.51.100.30", "node-2"),
            Arc::new(junk),
            Arc::new(going),
        ];
        let got = stale(&reports, &services, &nodes, &class);
        assert_eq!(
            got,
            vec![
                Stale {
                    name: announcement_name("2001:db8::10".parse().unwrap()),
                    resource_version: Some("7".into()),
                    why: Why::NodeGone("node-3".into()),
                },
                Stale {
                    name: "ip-198-51-100-20".into(),
                    resource_version: Some("7".into()),
                    why: Why::Released("198.51.100.20".parse().unwrap()),
                },
                Stale {
                    name: "ip-198-51-100-30".into(),
                    resource_version: Some("7".into()),
                    why: Why::Released("198.51.100.30".parse().unwrap()),
                },
            ]
        );
        assert_eq!(got[1].why.to_string(), "no Service holds 198.51.100.20");
        assert_eq!(got[0].why.to_string(), "node node-3 does not exist");
    }
}
