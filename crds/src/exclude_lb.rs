//! The well-known label `node.kubernetes.io/exclude-from-external-load-balancers` and when
//! ferrolb honours it (`--exclude-lb-label`, issue #28 item 1, which replaces DESIGN S1's
//! unconditional clause). Shared by the speaker (eligibility, `ferrolb_l2::eligibility`) and
//! `ferrolb status`, so both call the same Nodes excluded. Pure: no `kube`, no `tokio`.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// The well-known label that removes a node from external load balancers (Kubernetes API
/// reference, "Well-Known Labels"). Any value but `"false"` excludes.
pub const EXCLUDE_LB_LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

/// Whether `labels` carry [`EXCLUDE_LB_LABEL`] with a value that excludes (any but `"false"`).
pub fn carries_exclusion_label(labels: &BTreeMap<String, String>) -> bool {
    labels.get(EXCLUDE_LB_LABEL).is_some_and(|v| v != "false")
}

/// How the speaker treats [`EXCLUDE_LB_LABEL`] (`--exclude-lb-label`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ExcludeLbLabel {
    /// The default: honoured unless every Node object carries it. kubeadm labels control-plane
    /// nodes, so the only node of a minikube or kind cluster has it, and honouring it there
    /// would leave every LoadBalancer IP silent; there the label is set aside and each IP's
    /// Services get a Warning Event (`ExclusionLabelIgnored`). On a cluster with one Node
    /// without it, it is honoured exactly as [`ExcludeLbLabel::Honour`] does.
    #[default]
    Auto,
    /// Always honoured, also when that leaves no node to announce (MetalLB's behaviour).
    Honour,
    /// Never honoured (the speaker's older `--ignore-exclude-lb`, kept as an alias).
    Ignore,
}

impl ExcludeLbLabel {
    /// The flag value: `auto`, `honour` or `ignore`.
    pub fn as_str(self) -> &'static str {
        match self {
            ExcludeLbLabel::Auto => "auto",
            ExcludeLbLabel::Honour => "honour",
            ExcludeLbLabel::Ignore => "ignore",
        }
    }

    /// Whether the label keeps the Nodes that carry it from announcing, given the labels of
    /// every Node object: `Honour` always, `Ignore` never, `Auto` while at least one Node does
    /// not carry it. Stops at the first Node without it.
    pub fn in_force<'a>(
        self,
        nodes: impl IntoIterator<Item = &'a BTreeMap<String, String>>,
    ) -> bool {
        match self {
            ExcludeLbLabel::Honour => true,
            ExcludeLbLabel::Ignore => false,
            ExcludeLbLabel::Auto => nodes.into_iter().any(|l| !carries_exclusion_label(l)),
        }
    }
}

impl fmt::Display for ExcludeLbLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ExcludeLbLabel {
    type Err = String;

    /// Parses a flag value: `auto`, `honour` (or `honor`) or `ignore`; case-sensitive. The
    /// error names the value and the accepted ones.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(ExcludeLbLabel::Auto),
            "honour" | "honor" => Ok(ExcludeLbLabel::Honour),
            "ignore" => Ok(ExcludeLbLabel::Ignore),
            other => Err(format!(
                "invalid exclude-lb-label value {other:?}: expected auto, honour or ignore"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn labels(value: Option<&str>) -> BTreeMap<String, String> {
        value
            .map(|v| BTreeMap::from([(EXCLUDE_LB_LABEL.to_owned(), v.to_owned())]))
            .unwrap_or_default()
    }

    #[test]
    fn values_parse_and_print() {
        for (text, value) in [
            ("auto", ExcludeLbLabel::Auto),
            ("honour", ExcludeLbLabel::Honour),
            ("honor", ExcludeLbLabel::Honour),
            ("ignore", ExcludeLbLabel::Ignore),
        ] {
            assert_eq!(text.parse::<ExcludeLbLabel>(), Ok(value));
            assert_eq!(value.to_string().parse::<ExcludeLbLabel>(), Ok(value));
        }
        assert_eq!(
            "Auto".parse::<ExcludeLbLabel>(),
            Err("invalid exclude-lb-label value \"Auto\": expected auto, honour or ignore".into())
        );
    }

    #[test]
    fn auto_is_in_force_while_one_node_lacks_the_label() {
        let (on, off, no) = (labels(Some("")), labels(Some("false")), labels(None));
        assert!(carries_exclusion_label(&on) && carries_exclusion_label(&labels(Some("true"))));
        assert!(!carries_exclusion_label(&off) && !carries_exclusion_label(&no));
        let auto = ExcludeLbLabel::Auto;
        assert!(auto.in_force([&on, &no]));
        assert!(auto.in_force([&on, &off]), "\"false\" does not carry it");
        assert!(!auto.in_force([&on]), "a single labelled node");
        assert!(!auto.in_force([&on, &on]));
        assert!(ExcludeLbLabel::Honour.in_force([&on]));
        assert!(!ExcludeLbLabel::Ignore.in_force([&on, &no]));
    }
}
