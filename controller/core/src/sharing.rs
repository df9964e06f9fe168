//! R2: when two Services may hold the same IP.

use super::request::{Backend, ServiceRequest};

/// Where two Services would share an address: the pool it is handed out from and whether that
/// pool lets Services of different namespaces share (`spec.allowSharingAcrossNamespaces`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharingScope<'a> {
    /// The pool (named in the message when it refuses).
    pub pool: &'a str,
    /// `spec.allowSharingAcrossNamespaces` of that pool.
    pub across_namespaces: bool,
}

/// Why two Services may not share an IP of `scope`'s pool, for Event messages; `None` means they
/// may.
///
/// They may share only if both carry the same sharing key (`ferrolb.io/allow-shared-ip`), they
/// are in the same namespace or the pool allows sharing across namespaces (issue #27 item 6: the
/// key is readable by anyone who can read the Service, so across namespaces it proves nothing;
/// MetalLB needs the key alone), their `(protocol, port)` sets are disjoint, and their backends
/// are compatible: both `externalTrafficPolicy: Cluster`, or both `Local` with identical
/// selectors (MetalLB's rule, matched).
pub fn incompatibility(
    a: &ServiceRequest,
    b: &ServiceRequest,
    scope: SharingScope<'_>,
) -> Option<String> {
    match (&a.sharing_key, &b.sharing_key) {
        (Some(x), Some(y)) if x == y => {}
        _ => {
            return Some(format!(
                "{} and {} do not carry the same sharing key",
                a.key, b.key
            ));
        }
    }
    if a.key.namespace != b.key.namespace && !scope.across_namespaces {
        return Some(cross_namespace_refusal(a, b, scope.pool));
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

/// The reason two Services with one sharing key in different namespaces do not share an address
/// of `pool`.
pub fn cross_namespace_refusal(a: &ServiceRequest, b: &ServiceRequest, pool: &str) -> String {
    format!(
        "{} and {} carry the same sharing key but are in different namespaces, and pool {pool} does not allow sharing across namespaces (spec.allowSharingAcrossNamespaces: true would)",
        a.key, b.key
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::ServiceKey;

    const SAME_NS: SharingScope<'static> = SharingScope {
        pool: "p",
        across_namespaces: false,
    };

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
                &svc("b", Some("k1"), &[("TCP", 8080)], Backend::Cluster),
                SAME_NS
            ),
            None
        );
        assert_eq!(
            incompatibility(
                &a,
                &svc("b", Some("k1"), &[("UDP", 80)], Backend::Cluster),
                SAME_NS
            ),
            None
        );
        assert!(
            incompatibility(
                &a,
                &svc("b", Some("k1"), &[("TCP", 80)], Backend::Cluster),
                SAME_NS
            )
            .is_some()
        );
        assert!(
            incompatibility(
                &a,
                &svc("b", Some("k2"), &[("TCP", 81)], Backend::Cluster),
                SAME_NS
            )
            .is_some()
        );
        assert!(
            incompatibility(
                &a,
                &svc("b", None, &[("TCP", 81)], Backend::Cluster),
                SAME_NS
            )
            .is_some()
        );
        assert!(
            incompatibility(
                &a,
                &svc("b", Some("k1"), &[("TCP", 81)], local("x")),
                SAME_NS
            )
            .is_some()
        );
        let la = svc("a", Some("k1"), &[("TCP", 80)], local("x"));
        assert_eq!(
            incompatibility(
                &la,
                &svc("b", Some("k1"), &[("TCP", 81)], local("x")),
                SAME_NS
            ),
            None
        );
        assert!(
            incompatibility(
                &la,
                &svc("b", Some("k1"), &[("TCP", 81)], local("y")),
                SAME_NS
            )
            .is_some()
        );
        let none = svc("a", None, &[("TCP", 80)], Backend::Cluster);
        assert!(
            incompatibility(
                &none,
                &svc("b", None, &[("TCP", 81)], Backend::Cluster),
                SAME_NS
            )
            .is_some()
        );
    }

    /// Issue #27 item 6: one sharing key in two namespaces shares only where the pool says so;
    /// the other rules still apply there.
    #[test]
    fn across_namespaces_only_with_the_pools_opt_in() {
        let local = |v: &str| Backend::Local([("app".to_string(), v.to_string())].into());
        let victim = svc("web", Some("k1"), &[("TCP", 80)], local("web"));
        let mut twin = svc("twin", Some("k1"), &[("TCP", 8080)], local("web"));
        twin.key = ServiceKey::new("tenant", "twin");
        let why = incompatibility(&victim, &twin, SAME_NS).unwrap();
        assert_eq!(
            why,
            "ns/web and tenant/twin carry the same sharing key but are in different namespaces, and pool p does not allow sharing across namespaces (spec.allowSharingAcrossNamespaces: true would)"
        );
        assert_eq!(
            incompatibility(&twin, &victim, SAME_NS),
            Some(why.replace("ns/web and tenant/twin", "tenant/twin and ns/web"))
        );
        let open = SharingScope {
            pool: "p",
            across_namespaces: true,
        };
        assert_eq!(incompatibility(&victim, &twin, open), None);
        // Opting in does not lift the other rules.
        let mut clash = svc("clash", Some("k1"), &[("TCP", 80)], local("web"));
        clash.key = ServiceKey::new("tenant", "clash");
        assert!(
            incompatibility(&victim, &clash, open)
                .unwrap()
                .contains("both use TCP/80")
        );
        // The key is still checked first: without it, no namespace talk.
        let mut keyless = svc("other", None, &[("TCP", 81)], local("web"));
        keyless.key = ServiceKey::new("tenant", "other");
        assert!(
            incompatibility(&victim, &keyless, SAME_NS)
                .unwrap()
                .contains("do not carry the same sharing key")
        );
        // Same namespace: the switch does not matter.
        let sibling = svc("api", Some("k1"), &[("TCP", 443)], local("web"));
        assert_eq!(incompatibility(&victim, &sibling, SAME_NS), None);
    }
}
