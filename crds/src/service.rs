//! What ferrolb reads of a core/v1 Service, shared by the controller and the speaker so both agree
//! on which Services are ours and which IPs they hold. Pure: no `kube`, no `tokio`.
//!
//! Class rule (DESIGN §3): a Service is handled when it is `type: LoadBalancer` and either its
//! `spec.loadBalancerClass` equals our class (`--lb-class`, default [`DEFAULT_LB_CLASS`]), or it has
//! no class and `--default-class` is on. Any other class is never read, written or announced —
//! the Kubernetes API reference says a Service with a class is left to the implementation of that
//! class, which MetalLB also honours.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;

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

impl ClassFilter {
    /// Whether `svc` is a LoadBalancer Service of our class (see the module docs).
    pub fn handles(&self, svc: &Service) -> bool {
        let Some(spec) = &svc.spec else { return false };
        if spec.type_.as_deref() != Some("LoadBalancer") {
            return false;
        }
        match spec.load_balancer_class.as_deref() {
            Some(class) => class == self.lb_class,
            None => self.default_class,
        }
    }
}

/// The IPs in `status.loadBalancer.ingress[].ip`, in order, skipping entries that are not IPs
/// (hostname-only entries, garbage written by someone else).
pub fn ingress_ips(svc: &Service) -> Vec<IpAddr> {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .map(|ingress| {
            ingress
                .iter()
                .filter_map(|i| i.ip.as_deref())
                .filter_map(|ip| ip.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Spellings of the annotation naming the pool a Service wants, in precedence order: ferrolb's own,
/// then MetalLB's current and legacy spellings (accepted so MetalLB users migrate without edits).
pub const ADDRESS_POOL_ANNOTATIONS: [&str; 3] = [
    "ferrolb.io/address-pool",
    "metallb.io/address-pool",
    "metallb.universe.tf/address-pool",
];

/// The pool a Service names through [`ADDRESS_POOL_ANNOTATIONS`] (the first spelling present
/// wins), if any.
pub fn requested_pool(svc: &Service) -> Option<&str> {
    let annotations = svc.metadata.annotations.as_ref()?;
    ADDRESS_POOL_ANNOTATIONS
        .iter()
        .find_map(|k| annotations.get(*k))
        .map(|v| v.trim())
        .filter(|v| !v.is_empty())
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
                ]),
            }),
            ..Default::default()
        });
        assert_eq!(
            ingress_ips(&s),
            vec!["198.51.100.10".parse::<IpAddr>().unwrap()]
        );
    }
}
