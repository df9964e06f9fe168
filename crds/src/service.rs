//! What ferrolb reads of a core/v1 Service, shared by the controller and the speaker so both agree
//! on which Services are ours and which IPs they hold. Pure: no `kube`, no `tokio`.
//!
//! Class rule (DESIGN §3): a Service is handled when it is `type: LoadBalancer` and either its
//! `spec.loadBalancerClass` equals our class (`--lb-class`, default [`DEFAULT_LB_CLASS`]), or it has
//! no class and `--default-class` is on. Any other class is never read, written or announced —
//! the Kubernetes API reference says a Service with a class is left to the implementation of that
//! class, which MetalLB also honours.
//!
//! Annotations are read through [`crate::annotations`], pool ownership of a status IP through
//! [`crate::ownership`].

use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;

use crate::addresses::parse_ip;

/// ferrolb's default `spec.loadBalancerClass`.
pub const DEFAULT_LB_CLASS: &str = "ferrolb.io/l2";

/// Which Services this process handles (`--lb-class`, `--default-class`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassFilter {
    /// The class we implement.
    pub lb_class: String,
    /// Whether Services without a class are ours too.
    pub default_class: bool,
}

impl Default for ClassFilter {
    fn default() -> Self {
        ClassFilter {
            lb_class: DEFAULT_LB_CLASS.to_owned(),
            default_class: true,
        }
    }
}

/// What a Service is to a process with a given [`ClassFilter`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServiceClass {
    /// Not `type: LoadBalancer` (or no spec).
    NotLoadBalancer,
    /// `type: LoadBalancer` of another class, or class-less with `--default-class=false`: never
    /// read, written or announced.
    OtherClass,
    /// `type: LoadBalancer` of our class.
    Ours,
}

impl ClassFilter {
    /// The class rule of the module docs: the one implementation the controller and the speaker
    /// both call.
    pub fn classify(&self, svc: &Service) -> ServiceClass {
        let Some(spec) = &svc.spec else {
            return ServiceClass::NotLoadBalancer;
        };
        if spec.type_.as_deref() != Some("LoadBalancer") {
            return ServiceClass::NotLoadBalancer;
        }
        let ours = match spec.load_balancer_class.as_deref() {
            Some(class) => class == self.lb_class,
            None => self.default_class,
        };
        if ours {
            ServiceClass::Ours
        } else {
            ServiceClass::OtherClass
        }
    }

    /// Whether `svc` is a LoadBalancer Service of our class (see the module docs).
    pub fn handles(&self, svc: &Service) -> bool {
        self.classify(svc) == ServiceClass::Ours
    }
}

/// `status.loadBalancer.ingress` read the one way both processes read it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ingress {
    /// The entries' `ip`s that are IP addresses ([`parse_ip`]: no zone, no IPv4-mapped IPv6, no
    /// leading zeros), in order.
    pub ips: Vec<IpAddr>,
    /// Entries that are not usable, each described (`"\"x\": not an IP address"`,
    /// `"hostname-only entry \"lb.example.com\""`), in order.
    pub unusable: Vec<String>,
}

/// Parses `status.loadBalancer.ingress`: an entry with an `ip` counts by its IP, parsed with
/// [`parse_ip`] — the strict parser the API server's validation and the controller's requested
/// addresses use, so an IPv4-mapped or zoned spelling written by someone else is never announced
/// nor adopted; entries without a usable IP are described in [`Ingress::unusable`].
pub fn ingress(svc: &Service) -> Ingress {
    let mut out = Ingress::default();
    let entries = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref());
    for entry in entries.into_iter().flatten() {
        match (&entry.ip, &entry.hostname) {
            (Some(ip), _) => match parse_ip(ip) {
                Some(ip) => out.ips.push(ip),
                None => out.unusable.push(format!("{ip:?}: not an IP address")),
            },
            (None, Some(h)) => out.unusable.push(format!("hostname-only entry {h:?}")),
            (None, None) => out
                .unusable
                .push("an entry with neither ip nor hostname".into()),
        }
    }
    out
}

/// The IPs in `status.loadBalancer.ingress[].ip`, in order, skipping entries that are not IPs
/// (hostname-only entries, garbage written by someone else): [`ingress`]`(svc).ips`.
pub fn ingress_ips(svc: &Service) -> Vec<IpAddr> {
    ingress(svc).ips
}

/// `namespace/name` of an object, for Events and logs.
pub fn key(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        LoadBalancerIngress, LoadBalancerStatus, ServiceSpec, ServiceStatus,
    };

    fn svc(type_: &str, class: Option<&str>) -> Service {
        Service {
            spec: Some(ServiceSpec {
                type_: Some(type_.into()),
                load_balancer_class: class.map(Into::into),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn class_rule() {
        let ours = ClassFilter::default();
        assert!(ours.handles(&svc("LoadBalancer", None)));
        assert!(ours.handles(&svc("LoadBalancer", Some(DEFAULT_LB_CLASS))));
        assert!(!ours.handles(&svc("LoadBalancer", Some("metallb.io/metallb"))));
        assert!(!ours.handles(&svc("ClusterIP", None)));
        assert_eq!(
            ours.classify(&svc("ClusterIP", None)),
            ServiceClass::NotLoadBalancer
        );
        assert_eq!(
            ours.classify(&svc("LoadBalancer", Some("x"))),
            ServiceClass::OtherClass
        );
        assert_eq!(
            ours.classify(&Service::default()),
            ServiceClass::NotLoadBalancer
        );
        let explicit_only = ClassFilter {
            default_class: false,
            ..ClassFilter::default()
        };
        assert!(!explicit_only.handles(&svc("LoadBalancer", None)));
        assert!(explicit_only.handles(&svc("LoadBalancer", Some(DEFAULT_LB_CLASS))));
    }

    #[test]
    fn ingress_ips_skip_non_ips() {
        let mut s = svc("LoadBalancer", None);
        s.status = Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(vec![
                    LoadBalancerIngress {
                        ip: Some("198.51.100.10".into()),
                        ..Default::default()
                    },
                    LoadBalancerIngress {
                        hostname: Some("lb.example.com".into()),
                        ..Default::default()
                    },
                    LoadBalancerIngress {
                        ip: Some("not-an-ip".into()),
                        ..Default::default()
                    },
                    LoadBalancerIngress {
                        ip: Some("::ffff:198.51.100.11".into()),
                        ..Default::default()
                    },
                    LoadBalancerIngress {
                        ip: Some("fe80::1%eth0".into()),
                        ..Default::default()
                    },
                    LoadBalancerIngress {
                        ip: Some("2001:db8::1".into()),
                        ..Default::default()
                    },
                ]),
            }),
            ..Default::default()
        });
        assert_eq!(
            ingress_ips(&s),
            vec![
                "198.51.100.10".parse::<IpAddr>().unwrap(),
                "2001:db8::1".parse::<IpAddr>().unwrap()
            ]
        );
        let unusable = ingress(&s).unusable;
        assert_eq!(unusable.len(), 4, "{unusable:?}");
        assert!(unusable[0].contains("lb.example.com"));
        assert!(
            unusable[2].contains("::ffff:198.51.100.11"),
            "IPv4-mapped is refused"
        );
        assert!(unusable[3].contains("fe80::1%eth0"), "zoned is refused");
    }
}
