//! The Service annotations ferrolb reads, with the MetalLB spellings accepted as aliases
//! (DESIGN §3): `ferrolb.io/…` wins; `metallb.io/…` comes next, then `metallb.universe.tf/…`; a
//! value that is empty or only whitespace counts as absent. A disagreement between spellings yields
//! a warning (the controller turns it into a Warning Event) naming both. The one implementation of
//! these spellings and this precedence: the controller reads every annotation through [`lookup`];
//! the speaker reads only the pool ([`address_pool`]), which together with ownership
//! ([`crate::ownership::Layout::pool_for`]) decides the L2Advertisements of an announced address.
//! Pure: no `kube`, no `tokio`.

use std::collections::BTreeMap;

/// Requested addresses: a comma list, at most one per family.
pub const LOAD_BALANCER_IPS: [&str; 3] = [
    "ferrolb.io/loadBalancerIPs",
    "metallb.io/loadBalancerIPs",
    "metallb.universe.tf/loadBalancerIPs",
];

/// The pool to allocate from.
pub const ADDRESS_POOL: [&str; 3] = [
    "ferrolb.io/address-pool",
    "metallb.io/address-pool",
    "metallb.universe.tf/address-pool",
];

/// The sharing key (R2).
pub const ALLOW_SHARED_IP: [&str; 3] = [
    "ferrolb.io/allow-shared-ip",
    "metallb.io/allow-shared-ip",
    "metallb.universe.tf/allow-shared-ip",
];

/// The value of the first spelling present (in priority order; empty values count as absent),
/// and a warning for each other spelling present with a different value.
pub fn lookup(
    annotations: &BTreeMap<String, String>,
    spellings: &[&str],
) -> (Option<String>, Vec<String>) {
    let present: Vec<(&str, &str)> = spellings
        .iter()
        .filter_map(|k| {
            annotations
                .get(*k)
                .map(|v| (*k, v.trim()))
                .filter(|(_, v)| !v.is_empty())
        })
        .collect();
    let Some((winner, value)) = present.first().copied() else {
        return (None, Vec::new());
    };
    let warnings = present[1..]
        .iter()
        .filter(|(_, v)| *v != value)
        .map(|(k, v)| {
            format!("annotation {k}={v:?} disagrees with {winner}={value:?}; using {winner}")
        })
        .collect();
    (Some(value.to_owned()), warnings)
}

/// The pool a Service names ([`ADDRESS_POOL`], by [`lookup`]'s precedence), if any.
pub fn address_pool(annotations: Option<&BTreeMap<String, String>>) -> Option<String> {
    annotations.and_then(|a| lookup(a, &ADDRESS_POOL).0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn ours_win_and_disagreement_is_named() {
        let a = ann(&[
            ("metallb.universe.tf/address-pool", "old"),
            ("ferrolb.io/address-pool", "new"),
        ]);
        let (v, w) = lookup(&a, &ADDRESS_POOL);
        assert_eq!(v.as_deref(), Some("new"));
        assert_eq!(w.len(), 1);
        assert!(
            w[0].contains("metallb.universe.tf/address-pool=\"old\"")
                && w[0].contains("using ferrolb.io/address-pool")
        );
    }

    #[test]
    fn aliases_alone_are_accepted_and_agreement_is_silent() {
        let a = ann(&[
            ("metallb.io/allow-shared-ip", "k1"),
            ("metallb.universe.tf/allow-shared-ip", "k1"),
        ]);
        assert_eq!(lookup(&a, &ALLOW_SHARED_IP), (Some("k1".into()), vec![]));
        assert_eq!(
            lookup(&ann(&[("ferrolb.io/address-pool", " ")]), &ADDRESS_POOL),
            (None, vec![])
        );
    }
}
