//! Which Service labels the controller keeps: only those whose key a pool's
//! `serviceAllocation.serviceSelectors` reads (issue #27 item 7). Kubernetes caps each label's
//! key (≤ 317 bytes) and value (≤ 63 bytes) but not their number, so a tenant allowed to create
//! Services could otherwise grow the controller's store with thousands of labels per Service.
//! Dropping the other keys never changes a match: a selector only looks up the keys it names
//! (`matchLabels`, and `matchExpressions` with `In`, `NotIn`, `Exists` and `DoesNotExist` alike).
//! Pure; the watch that applies it, and re-reads the Services when the pools start reading a key
//! it dropped, is [`crate::k8s::service_watch`].

use std::collections::BTreeSet;

use ferrolb_crds::IPAddressPool;
use k8s_openapi::api::core::v1::Service;

/// Every label key the `serviceSelectors` of `pools` read (`matchLabels` keys and
/// `matchExpressions` keys), sorted. Pools without `serviceAllocation` read none.
pub fn selector_label_keys<'a>(
    pools: impl IntoIterator<Item = &'a IPAddressPool>,
) -> BTreeSet<String> {
    pools
        .into_iter()
        .filter_map(|p| p.spec.service_allocation.as_ref())
        .flat_map(|a| &a.service_selectors)
        .flat_map(|s| {
            s.match_labels
                .keys()
                .chain(s.match_expressions.iter().map(|r| &r.key))
        })
        .cloned()
        .collect()
}

/// Drops every label of `svc` whose key is not in `keys` (`metadata.labels` becomes `None` when
/// none is left).
pub fn keep_labels(svc: &mut Service, keys: &BTreeSet<String>) {
    let meta = &mut svc.metadata;
    if let Some(labels) = meta.labels.as_mut() {
        labels.retain(|k, _| keys.contains(k));
    }
    meta.labels = meta.labels.take().filter(|l| !l.is_empty());
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use ferrolb_crds::selector::any_matches;
    use ferrolb_crds::v1beta1::{
        IPAddressPoolSpec, LabelSelector, LabelSelectorRequirement, SelectorOperator,
        ServiceAllocation,
    };
    use proptest::prelude::*;

    use super::*;

    fn pool(selectors: Vec<LabelSelector>) -> IPAddressPool {
        IPAddressPool::new(
            "p",
            IPAddressPoolSpec {
                service_allocation: Some(ServiceAllocation {
                    service_selectors: selectors,
                    ..ServiceAllocation::default()
                }),
                ..serde_json::from_value(serde_json::json!({"addresses": ["198.51.100.0/30"]}))
                    .unwrap()
            },
        )
    }

    fn requirement(
        key: &str,
        operator: SelectorOperator,
        values: &[&str],
    ) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator,
            values: values.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn the_keys_are_those_of_match_labels_and_match_expressions_of_every_pool() {
        let a = pool(vec![LabelSelector {
            match_labels: [("tier".to_string(), "web".to_string())].into(),
            match_expressions: vec![requirement("zone", SelectorOperator::NotIn, &["b"])],
        }]);
        let b = pool(vec![LabelSelector {
            match_labels: BTreeMap::new(),
            match_expressions: vec![requirement("gpu", SelectorOperator::DoesNotExist, &[])],
        }]);
        let mut none = pool(Vec::new());
        none.spec.service_allocation = None;
        let keys = selector_label_keys([&a, &b, &none]);
        assert_eq!(
            keys.into_iter().collect::<Vec<_>>(),
            ["gpu", "tier", "zone"]
        );
        assert!(selector_label_keys([&none]).is_empty());
    }

    #[test]
    fn every_other_label_is_dropped() {
        let mut svc = Service::default();
        svc.metadata.labels = Some(
            (0..1000)
                .map(|i| (format!("tenant.example/{i}"), "x".repeat(63)))
                .chain([("tier".to_string(), "web".to_string())])
                .collect(),
        );
        keep_labels(&mut svc, &["tier".to_string(), "zone".to_string()].into());
        assert_eq!(
            svc.metadata.labels,
            Some([("tier".to_string(), "web".to_string())].into())
        );
        keep_labels(&mut svc, &BTreeSet::new());
        assert_eq!(svc.metadata.labels, None);
    }

    fn key() -> impl Strategy<Value = String> {
        prop::sample::select(vec!["a", "b", "c", "d"]).prop_map(String::from)
    }

    fn value() -> impl Strategy<Value = String> {
        prop::sample::select(vec!["", "x", "y"]).prop_map(String::from)
    }

    fn selector() -> impl Strategy<Value = LabelSelector> {
        let op = prop::sample::select(vec![
            SelectorOperator::In,
            SelectorOperator::NotIn,
            SelectorOperator::Exists,
            SelectorOperator::DoesNotExist,
        ]);
        (
            prop::collection::btree_map(key(), value(), 0..2),
            prop::collection::vec(
                (key(), op, prop::collection::vec(value(), 0..3)).prop_map(
                    |(key, operator, values)| LabelSelectorRequirement {
                        key,
                        operator,
                        values,
                    },
                ),
                0..3,
            ),
        )
            .prop_map(|(match_labels, match_expressions)| LabelSelector {
                match_labels,
                match_expressions,
            })
    }

    proptest! {
        /// Keeping only the keys the pools read never changes which pools' selectors match.
        #[test]
        fn keeping_the_selected_keys_never_changes_a_match(
            selectors in prop::collection::vec(prop::collection::vec(selector(), 0..3), 1..4),
            labels in prop::collection::btree_map(key(), value(), 0..4),
        ) {
            let pools: Vec<IPAddressPool> = selectors.into_iter().map(pool).collect();
            let keys = selector_label_keys(&pools);
            let mut svc = Service::default();
            svc.metadata.labels = Some(labels.clone());
            keep_labels(&mut svc, &keys);
            let kept = svc.metadata.labels.unwrap_or_default();
            for p in &pools {
                let s = &p.spec.service_allocation.as_ref().unwrap().service_selectors;
                prop_assert_eq!(any_matches(s, &labels), any_matches(s, &kept));
            }
        }
    }
}
