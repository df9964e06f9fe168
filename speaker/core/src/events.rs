//! Which Kubernetes Events the speaker should emit on Services (S1, S9), deduplicated so a
//! steady state emits nothing. Pure: no `kube`, no `tokio`; the intents are written by
//! `ferrolb_speaker::event_sink`, off the data path (issue #8 F2).
//!
//! - Normal `AnnouncingIP`, "announcing 198.51.100.10 from node-2 on eth0", by the new owner when
//!   it gains an IP;
//! - Warning `NoEligibleNode` with the reason, by the IP's reporter ([`crate::plan`]) when nobody
//!   may announce, once per distinct reason;
//! - Warning `EndpointWarning` for non-fatal problems (endpoints without `nodeName` under
//!   `externalTrafficPolicy: Local`), once per distinct text;
//! - Warning `ExclusionLabelIgnored`, by the IP's reporter, once per IP while every Node carries
//!   `node.kubernetes.io/exclude-from-external-load-balancers` and `--exclude-lb-label=auto`
//!   sets it aside (issue #28 item 1, [`crate::eligibility::ExcludeLbLabel::Auto`]).
//!
//! The daemon calls [`EventPlanner::plan`] only while the claim gate lets it claim
//! ([`crate::claim`]): a converging or minority speaker says nothing, so a cold start of every
//! speaker gives one Event per IP, not one per speaker.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use crate::plan::Plan;

/// `type` of an Event (the Kubernetes API's `Normal` / `Warning`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// `Normal`.
    Normal,
    /// `Warning`.
    Warning,
}

/// Reason of an owner change Event.
pub const REASON_ANNOUNCING: &str = "AnnouncingIP";
/// Reason of a "nobody may announce" Event.
pub const REASON_NO_ELIGIBLE_NODE: &str = "NoEligibleNode";
/// Reason of an endpoint problem Event.
pub const REASON_ENDPOINT_WARNING: &str = "EndpointWarning";
/// Reason of the Warning that the exclusion label is set aside because every Node carries it
/// ([`crate::eligibility::ExcludeLbLabel::Auto`], issue #28 item 1).
pub const REASON_EXCLUSION_LABEL_IGNORED: &str = "ExclusionLabelIgnored";
/// Reason of the Warning that a node's kernel answers ARP for the Service's IP beside the owner
/// (kube-proxy IPVS mode without `strictARP`, or the IP configured on a local interface; issue
/// #10 item 4, `ferrolb_speaker::l2::preflight`).
pub const REASON_KERNEL_ANSWERS_ARP: &str = "KernelAnswersARP";
/// Reason of the Warning that another host claims the Service's IP on the owner's link (ARP or
/// NDP from another MAC, RFC 5227 §2.4, or an answer to the probe before the first announcement;
/// issue #10 item 5, `ferrolb_speaker::l2::conflict`). Its note format is shared with the
/// controller ([`ferrolb_crds::conflict_event`]).
pub const REASON_IP_CONFLICT: &str = ferrolb_crds::conflict_event::REASON_IP_CONFLICT;

/// One Event to write on each of `services`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventIntent {
    /// `namespace/name` of the Services the Event is about.
    pub services: Vec<String>,
    /// Normal or Warning.
    pub severity: Severity,
    /// The Event reason (one of the `REASON_…` constants).
    pub reason: &'static str,
    /// The human-readable note.
    pub note: String,
}

/// Remembers what was last said per IP, so each statement is made once.
#[derive(Debug, Default)]
pub struct EventPlanner {
    me: String,
    announced: BTreeMap<IpAddr, String>,
    no_owner: BTreeMap<IpAddr, String>,
    warned: BTreeMap<IpAddr, Vec<String>>,
    label_set_aside: BTreeSet<IpAddr>,
}

impl EventPlanner {
    /// A planner for node `me`.
    pub fn new(me: &str) -> Self {
        EventPlanner {
            me: me.to_owned(),
            ..Default::default()
        }
    }

    /// Forget what was said, e.g. after the claim gate closed: the next time this node owns an
    /// IP it says so again.
    pub fn forget(&mut self) {
        self.announced.clear();
        self.no_owner.clear();
        self.warned.clear();
        self.label_set_aside.clear();
    }

    /// The Events `plan` calls for that were not made yet. `interfaces_of(ip)` names the
    /// interfaces the IP is answered on here, or `None` while the IP is owned but not announced
    /// yet (being probed, or held because another host has it: the responder says so with an
    /// `IPConflict` Warning instead); "announcing" is said once it is announced.
    pub fn plan(
        &mut self,
        plan: &Plan,
        interfaces_of: impl Fn(IpAddr) -> Option<Vec<String>>,
    ) -> Vec<EventIntent> {
        let mut todo = Vec::new();
        for (ip, p) in &plan.ips {
            if p.owner.as_deref() == Some(self.me.as_str()) {
                let Some(ifaces) = interfaces_of(*ip) else {
                    self.announced.remove(ip);
                    continue;
                };
                let text = format!(
                    "announcing {ip} from {} on {}",
                    self.me,
                    if ifaces.is_empty() {
                        "no interface yet".to_owned()
                    } else {
                        ifaces.join(", ")
                    }
                );
                if self.announced.get(ip) != Some(&text) {
                    self.announced.insert(*ip, text.clone());
                    todo.push(EventIntent {
                        services: p.services.clone(),
                        severity: Severity::Normal,
                        reason: REASON_ANNOUNCING,
                        note: text,
                    });
                }
            } else {
                self.announced.remove(ip);
            }
            let reporting = p.reporter.as_deref() == Some(self.me.as_str());
            match (&p.no_owner_reason, reporting) {
                (Some(reason), true) => {
                    let text = format!("{ip}: {reason}");
                    if self.no_owner.get(ip) != Some(&text) {
                        self.no_owner.insert(*ip, text.clone());
                        todo.push(EventIntent {
                            services: p.services.clone(),
                            severity: Severity::Warning,
                            reason: REASON_NO_ELIGIBLE_NODE,
                            note: text,
                        });
                    }
                }
                _ => {
                    self.no_owner.remove(ip);
                }
            }
            if reporting && !p.warnings.is_empty() && self.warned.get(ip) != Some(&p.warnings) {
                self.warned.insert(*ip, p.warnings.clone());
                todo.push(EventIntent {
                    services: p.services.clone(),
                    severity: Severity::Warning,
                    reason: REASON_ENDPOINT_WARNING,
                    note: p.warnings.join("; "),
                });
            }
            if reporting && p.label_set_aside && self.label_set_aside.insert(*ip) {
                todo.push(EventIntent {
                    services: p.services.clone(),
                    severity: Severity::Warning,
                    reason: REASON_EXCLUSION_LABEL_IGNORED,
                    note: label_set_aside_note(*ip),
                });
            }
        }
        self.announced.retain(|ip, _| plan.ips.contains_key(ip));
        self.no_owner.retain(|ip, _| plan.ips.contains_key(ip));
        self.warned.retain(|ip, _| plan.ips.contains_key(ip));
        self.label_set_aside
            .retain(|ip| plan.ips.get(ip).is_some_and(|p| p.label_set_aside));
        todo
    }
}

/// The note of an `ExclusionLabelIgnored` Event about `ip`.
fn label_set_aside_note(ip: IpAddr) -> String {
    format!(
        "{ip}: every Node carries {label}, so ferrolb does not honour it \
         (--exclude-lb-label=auto, the default: a single-node minikube or kind cluster would \
         otherwise answer for no IP); remove the label from the Nodes that may announce, or set \
         --exclude-lb-label=honour to keep every Node out",
        label = crate::eligibility::EXCLUDE_LB_LABEL
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::IpPlan;

    fn plan_with(owner: Option<&str>, reason: Option<&str>, reporter: &str) -> Plan {
        let mut p = Plan::default();
        p.ips.insert(
            "198.51.100.10".parse().unwrap(),
            IpPlan {
                owner: owner.map(str::to_owned),
                services: vec!["default/svc-a".into()],
                no_owner_reason: reason.map(str::to_owned),
                warnings: vec![],
                reporter: Some(reporter.into()),
                label_set_aside: false,
            },
        );
        p
    }

    #[test]
    fn the_owner_says_it_once() {
        let mut planner = EventPlanner::new("node-1");
        let p = plan_with(Some("node-1"), None, "node-1");
        let first = planner.plan(&p, |_| Some(vec!["eth0".into()]));
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].reason, REASON_ANNOUNCING);
        assert_eq!(
            first[0].note,
            "announcing 198.51.100.10 from node-1 on eth0"
        );
        assert!(planner.plan(&p, |_| Some(vec!["eth0".into()])).is_empty());
        // After the gate closed and reopened, it is said again.
        planner.forget();
        assert_eq!(planner.plan(&p, |_| Some(vec!["eth0".into()])).len(), 1);
    }

    /// While the IP is probed (or held), "announcing" is not said; it is once announced.
    #[test]
    fn an_ip_not_announced_yet_is_not_said_to_be() {
        let mut planner = EventPlanner::new("node-1");
        let p = plan_with(Some("node-1"), None, "node-1");
        assert!(planner.plan(&p, |_| None).is_empty());
        let said = planner.plan(&p, |_| Some(vec!["eth0".into()]));
        assert_eq!(said.len(), 1);
        assert_eq!(said[0].reason, REASON_ANNOUNCING);
    }

    #[test]
    fn only_the_reporter_warns_and_only_once_per_reason() {
        let p = plan_with(
            None,
            Some("no eligible node: all excluded by label"),
            "node-2",
        );
        let mut n1 = EventPlanner::new("node-1");
        let mut n2 = EventPlanner::new("node-2");
        assert!(n1.plan(&p, |_| Some(vec![])).is_empty());
        let w = n2.plan(&p, |_| Some(vec![]));
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].severity, Severity::Warning);
        assert_eq!(w[0].reason, REASON_NO_ELIGIBLE_NODE);
        assert!(n2.plan(&p, |_| Some(vec![])).is_empty());
    }

    #[test]
    fn a_non_owner_says_nothing_about_the_owner() {
        let mut planner = EventPlanner::new("node-2");
        assert!(
            planner
                .plan(&plan_with(Some("node-1"), None, "node-1"), |_| Some(vec![]))
                .is_empty()
        );
    }

    /// Issue #28 item 1: the reporter alone says once per IP that the exclusion label is set
    /// aside; again after it was in force for a while.
    #[test]
    fn the_reporter_says_once_that_the_exclusion_label_is_set_aside() {
        let aside = |on: bool| {
            let mut p = plan_with(Some("node-1"), None, "node-2");
            p.ips.values_mut().for_each(|ip| ip.label_set_aside = on);
            p
        };
        let ignored = |events: &[EventIntent]| {
            events
                .iter()
                .filter(|e| e.reason == REASON_EXCLUSION_LABEL_IGNORED)
                .count()
        };
        let mut owner = EventPlanner::new("node-1");
        assert_eq!(ignored(&owner.plan(&aside(true), |_| Some(vec![]))), 0);
        let mut reporter = EventPlanner::new("node-2");
        let said = reporter.plan(&aside(true), |_| None);
        assert_eq!(ignored(&said), 1, "{said:?}");
        assert_eq!(said[0].severity, Severity::Warning);
        assert_eq!(said[0].services, ["default/svc-a"]);
        assert!(
            said[0].note.starts_with(
                "198.51.100.10: every Node carries node.kubernetes.io/exclude-from-external-load-balancers"
            ),
            "{}",
            said[0].note
        );
        assert_eq!(ignored(&reporter.plan(&aside(true), |_| None)), 0);
        assert_eq!(ignored(&reporter.plan(&aside(false), |_| None)), 0);
        assert_eq!(ignored(&reporter.plan(&aside(true), |_| None)), 1);
    }
}
