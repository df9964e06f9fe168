//! Matching semantics of the label selectors in ferrolb's CRDs ([`LabelSelector`]).
//!
//! Matching follows the Kubernetes API reference for
//! `LabelSelector`: `matchLabels` and `matchExpressions` are ANDed; an empty selector matches
//! everything. Pure: no `kube`, no `tokio`.

use std::collections::BTreeMap;

use crate::v1beta1::{LabelSelector, LabelSelectorRequirement, SelectorOperator};

impl LabelSelector {
    /// Whether an object with `labels` is selected.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| r.matches(labels))
    }
}

impl LabelSelectorRequirement {
    /// Whether `labels` satisfy this requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            SelectorOperator::In => value.is_some_and(|v| self.values.contains(v)),
            SelectorOperator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            SelectorOperator::Exists => value.is_some(),
            SelectorOperator::DoesNotExist => value.is_none(),
        }
    }
}

/// A list of selectors as the CRDs use them (`nodeSelectors`, `serviceSelectors`, …): an empty list
/// matches everything, otherwise any one matching selector is enough (MetalLB's semantics).
pub fn any_matches(selectors: &[LabelSelector], labels: &BTreeMap<String, String>) -> bool {
    selectors.is_empty() || selectors.iter().any(|s| s.matches(labels))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn req(key: &str, operator: SelectorOperator, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator,
            values: values.iter().map(|v| v.to_string()).collect(),
        }
    }

    #[test]
    fn empty_selector_matches_everything() {
        assert!(LabelSelector::default().matches(&labels(&[])));
        assert!(any_matches(&[], &labels(&[("a", "b")])));
    }

    #[test]
    fn operators() {
        let l = labels(&[("zone", "a"), ("gpu", "")]);
        assert!(req("zone", SelectorOperator::In, &["a", "b"]).matches(&l));
        assert!(!req("zone", SelectorOperator::In, &["b"]).matches(&l));
        assert!(!req("rack", SelectorOperator::In, &["b"]).matches(&l));
        assert!(req("zone", SelectorOperator::NotIn, &["b"]).matches(&l));
        assert!(req("rack", SelectorOperator::NotIn, &["b"]).matches(&l));
        assert!(!req("zone", SelectorOperator::NotIn, &["a"]).matches(&l));
        assert!(req("gpu", SelectorOperator::Exists, &[]).matches(&l));
        assert!(!req("gpu", SelectorOperator::DoesNotExist, &[]).matches(&l));
        assert!(req("rack", SelectorOperator::DoesNotExist, &[]).matches(&l));
    }

    #[test]
    fn match_labels_and_expressions_are_anded() {
        let s = LabelSelector {
            match_labels: labels(&[("zone", "a")]),
            match_expressions: vec![req("gpu", SelectorOperator::Exists, &[])],
        };
        assert!(s.matches(&labels(&[("zone", "a"), ("gpu", "1")])));
        assert!(!s.matches(&labels(&[("zone", "a")])));
        assert!(!s.matches(&labels(&[("zone", "b"), ("gpu", "1")])));
    }

    #[test]
    fn list_is_any_of() {
        let a = LabelSelector {
            match_labels: labels(&[("zone", "a")]),
            ..Default::default()
        };
        let b = LabelSelector {
            match_labels: labels(&[("zone", "b")]),
            ..Default::default()
        };
        assert!(any_matches(
            &[a.clone(), b.clone()],
            &labels(&[("zone", "b")])
        ));
        assert!(!any_matches(&[a, b], &labels(&[("zone", "c")])));
    }
}
