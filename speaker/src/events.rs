//! Kubernetes Events the speaker emits on Services (S1, S9), deduplicated so a steady state emits
//! nothing:
//! - Normal `AnnouncingIP`, "announcing 198.51.100.10 from node-2 on eth0", by the new owner when
//!   it gains an IP;
//! - Warning `NoEligibleNode` with the reason, by the IP's reporter ([`crate::plan`]) when nobody
//!   may announce, once per distinct reason;
//! - Warning `EndpointWarning` for non-fatal problems (endpoints without `nodeName` under
//!   `externalTrafficPolicy: Local`), once per distinct text.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder};

use crate::plan::Plan;
use crate::watch::Stores;

/// Warnings are held back this long after start-up, while the membership converges: until every
/// speaker has been seen alive, eligibility is computed from a partial member set and would warn
/// about nodes that are fine.
pub const STARTUP_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// Remembers what was last said per IP, so each statement is made once.
pub struct Announcer {
    recorder: Recorder,
    quiet_until: std::time::Instant,
    me: String,
    announced: BTreeMap<IpAddr, String>,
    no_owner: BTreeMap<IpAddr, String>,
    warned: BTreeMap<IpAddr, Vec<String>>,
}

impl Announcer {
    /// An announcer for node `me`.
    pub fn new(recorder: Recorder, me: &str) -> Self {
        Announcer {
            recorder,
            quiet_until: std::time::Instant::now() + STARTUP_GRACE,
            me: me.to_owned(),
            announced: BTreeMap::new(),
            no_owner: BTreeMap::new(),
            warned: BTreeMap::new(),
        }
    }

    /// Emits the Events `plan` calls for. `interfaces_of(ip)` names the interfaces the IP is
    /// announced on here. Errors from the API are logged, never fatal.
    pub async fn publish(
        &mut self,
        plan: &Plan,
        stores: &Stores,
        interfaces_of: impl Fn(IpAddr) -> Vec<String>,
    ) {
        let mut todo: Vec<(Vec<String>, EventType, &'static str, String)> = Vec::new();
        for (ip, p) in &plan.ips {
            if p.owner.as_deref() == Some(self.me.as_str()) {
                let ifaces = interfaces_of(*ip);
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
                    todo.push((p.services.clone(), EventType::Normal, "AnnouncingIP", text));
                }
            } else {
                self.announced.remove(ip);
            }
            let reporting = p.reporter.as_deref() == Some(self.me.as_str())
                && std::time::Instant::now() >= self.quiet_until;
            match (&p.no_owner_reason, reporting) {
                (Some(reason), true) => {
                    let text = format!("{ip}: {reason}");
                    if self.no_owner.get(ip) != Some(&text) {
                        self.no_owner.insert(*ip, text.clone());
                        todo.push((
                            p.services.clone(),
                            EventType::Warning,
                            "NoEligibleNode",
                            text,
                        ));
                    }
                }
                _ => {
                    self.no_owner.remove(ip);
                }
            }
            if reporting && !p.warnings.is_empty() && self.warned.get(ip) != Some(&p.warnings) {
                self.warned.insert(*ip, p.warnings.clone());
                todo.push((
                    p.services.clone(),
                    EventType::Warning,
                    "EndpointWarning",
                    p.warnings.join("; "),
                ));
            }
        }
        self.announced.retain(|ip, _| plan.ips.contains_key(ip));
        self.no_owner.retain(|ip, _| plan.ips.contains_key(ip));
        self.warned.retain(|ip, _| plan.ips.contains_key(ip));

        for (services, type_, reason, note) in todo {
            tracing::info!(%reason, %note, "event");
            for key in services {
                let Some(svc) = stores.service(&key) else {
                    continue;
                };
                let event = Event {
                    type_,
                    reason: reason.into(),
                    note: Some(note.clone()),
                    action: "Announce".into(),
                    secondary: None,
                };
                let reference = Service::object_ref(&svc, &());
                if let Err(e) = self.recorder.publish(&event, &reference).await {
                    tracing::warn!(service = %key, error = %e, "could not publish Event");
                }
            }
        }
    }
}
