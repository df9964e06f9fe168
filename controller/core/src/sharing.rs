//! R2: when two Services may hold the same IP.

use super::request::{Backend, ServiceRequest};

/// Why two Services may not share an IP, for Event messages; `None` means they may.
///
/// They may share only if both carry the same sharing key (`ferrolb.io/allow-shared-ip`), their
/// `(protocol, port)` sets are disjoint, and their backends are compatible: both
/// `externalTrafficPolicy: Cluster`, or both `Local` with identical selectors (MetalLB's rule,
/// matched).
pub fn incompatibility(a: &ServiceRequest, b: &ServiceRequest) -> Option<String> {
    match (&a.sharing_key, &b.sharing_key) {
        (Some(x), Some(y)) if x == y => {}
        _ => {
            return Some(format!(
                "{} and {} do not carry the same sharing key",
                a.key, b.key
            ));
        }
    }
    if let Some((proto, port)) = a.ports.first_common(&b.ports) {
        return Some(format!("{} and {} both use {proto}/{port}", a.key, b.key));
    }
    match (&a.backend, &b.backend) {
        (Backend::Cluster, Backend::Cluster) => None,
        (Backend::Local(x), Backend::Local(y)) if x == y => None,
        (Backend::Local(_), Backend::Local(_)) => Some(format!(
            "{} and {} use externalTrafficPolicy Local with different selectors",
            a.key, b.key
        )),
        _ => Some(format!(
            "{} and {} use different externalTrafficPolicy",
            a.key, b.key
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::ServiceKey;

    fn svc(
        name: &str,
        key: Option<&str>,
        ports: &[(&str, u16)],
        backend: Backend,
    ) -> ServiceRequest {
        ServiceRequest {
            key: ServiceKey::new("ns", name),
            sharing_key: key.map(str::to_owned),
            ports: ports.iter().map(|(p, n)| (p.to_string(), *n)).collect(),
            backend,
            ..Default::default()
        }
    }

    #[test]
    fn rules() {
        let local = |v: &str| Backend::Local([("app".to_string(), v.to_string())].into());
        let a = svc("a", Some("k1"), &[("TCP", 80)], Backend::Cluster);
        assert_eq!(
            incompatibility(
                &a,
                &svc("b", Some("k1"), &[("TCP", 8080)], Backend::Cluster)
            ),
            None
        );
        assert_eq!(
            incompatibility(&a, &svc("b", Some("k1"), &[("UDP", 80)], Backend::Cluster)),
            None
        );
        assert!(
            incompatibility(&a, &svc("b", Some("k1"), &[("TCP", 80)], Backend::Cluster)).is_some()
        );
        assert!(
            incompatibility(&a, &svc("b", Some("k2"), &[("TCP", 81)], Backend::Cluster)).is_some()
        );
        assert!(incompatibility(&a, &svc("b", None, &[("TCP", 81)], Backend::Cluster)).is_some());
        assert!(incompatibility(&a, &svc("b", Some("k1"), &[("TCP", 81)], local("x"))).is_some());
        let la = svc("a", Some("k1"), &[("TCP", 80)], local("x"));
        assert_eq!(
            incompatibility(&la, &svc("b", Some("k1"), &[("TCP", 81)], local("x"))),
            None
        );
        assert!(incompatibility(&la, &svc("b", Some("k1"), &[("TCP", 81)], local("y"))).is_some());
        let none = svc("a", None, &[("TCP", 80)], Backend::Cluster);
        assert!(
            incompatibility(&none, &svc("b", None, &[("TCP", 81)], Backend::Cluster)).is_some()
        );
    }
}
