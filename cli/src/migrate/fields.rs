//! Reading MetalLB's fields out of a YAML value, field by field, with a [`Finding`] for everything
//! that cannot be carried over. Shared by [`super::crd`] and [`super::legacy`].

use std::collections::BTreeMap;

use ferrolb_crds::addresses::{AddressEntry, forbidden_message};
use ferrolb_crds::v1beta1::{AddressEntryText, LabelSelector};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Map, Value};

use super::{Finding, Level};

/// Where the findings about one object go.
pub(crate) struct Sink<'a> {
    pub findings: &'a mut Vec<Finding>,
    pub source: &'a str,
    pub subject: &'a str,
}

impl Sink<'_> {
    /// A finding about `field` of the object (`None`: the object as a whole).
    pub fn push(&mut self, level: Level, field: Option<&str>, message: impl Into<String>) {
        self.findings.push(Finding {
            level,
            source: self.source.to_owned(),
            subject: self.subject.to_owned(),
            field: field.map(str::to_owned),
            message: message.into(),
        });
    }

    /// `field` is not carried over.
    pub fn omitted(&mut self, field: &str, message: impl Into<String>) {
        self.push(Level::Omitted, Some(field), message);
    }
}

/// What the API server writes into every object; never carried over, never reported.
const SERVER_WRITTEN: [&str; 8] = [
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// kubectl's record of the MetalLB object as last applied: wrong for the ferrolb object.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Top-level keys of a Kubernetes object other than `apiVersion`, `kind`, `metadata`, `spec` and
/// `status`: reported.
pub(crate) fn top_level(obj: &Map<String, Value>, sink: &mut Sink<'_>) {
    for key in obj.keys() {
        if !matches!(
            key.as_str(),
            "apiVersion" | "kind" | "metadata" | "spec" | "status"
        ) {
            sink.omitted(key, "not part of this kind; left out");
        }
    }
}

/// The ferrolb object's metadata: `name`, `labels`, and `annotations` without
/// [`LAST_APPLIED`]. `namespace` and what the API server writes are dropped (module docs of
/// [`super`]); anything else (`ownerReferences`, `finalizers`, `generateName`, …) is reported.
/// `None`, reported, when the object has no name.
pub(crate) fn metadata(obj: &Map<String, Value>, sink: &mut Sink<'_>) -> Option<ObjectMeta> {
    let meta = obj.get("metadata").and_then(Value::as_object);
    let name = meta
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty());
    let (Some(meta), Some(name)) = (meta, name) else {
        sink.push(Level::Omitted, None, "no metadata.name; not converted");
        return None;
    };
    let mut out = ObjectMeta {
        name: Some(name.to_owned()),
        ..ObjectMeta::default()
    };
    for (key, value) in meta {
        let field = format!("metadata.{key}");
        match key.as_str() {
            "name" | "namespace" => {}
            k if SERVER_WRITTEN.contains(&k) => {}
            "labels" => {
                let labels = string_map(value, &field, sink);
                out.labels = (!labels.is_empty()).then_some(labels);
            }
            "annotations" => {
                let mut annotations = string_map(value, &field, sink);
                annotations.remove(LAST_APPLIED);
                out.annotations = (!annotations.is_empty()).then_some(annotations);
            }
            _ => sink.omitted(
                &field,
                "the ferrolb object is a new, cluster-scoped object; left out",
            ),
        }
    }
    Some(out)
}

/// A map of strings (labels, annotations, `matchLabels`); other values are reported and left out.
pub(crate) fn string_map(
    value: &Value,
    field: &str,
    sink: &mut Sink<'_>,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    match value {
        Value::Null => {}
        Value::Object(m) => {
            for (k, v) in m {
                match v.as_str() {
                    Some(s) => {
                        out.insert(k.clone(), s.to_owned());
                    }
                    None => sink.omitted(
                        &format!("{field}.{k}"),
                        format!("{} is not a string; left out", describe(v)),
                    ),
                }
            }
        }
        other => sink.omitted(
            field,
            format!("{} is not a mapping; left out", describe(other)),
        ),
    }
    out
}

/// A boolean; `null` reads as `default` silently, anything else not a boolean is reported and
/// reads as `default` (the default of MetalLB and ferrolb alike).
pub(crate) fn boolean(value: &Value, field: &str, default: bool, sink: &mut Sink<'_>) -> bool {
    match value {
        Value::Null => default,
        Value::Bool(b) => *b,
        other => {
            sink.omitted(
                field,
                format!(
                    "{} is not a boolean; left out, so the default ({default}) applies",
                    describe(other)
                ),
            );
            default
        }
    }
}

/// A list of strings; other items are reported and left out.
pub(crate) fn strings(value: &Value, field: &str, sink: &mut Sink<'_>) -> Vec<String> {
    list(value, field, sink)
        .into_iter()
        .filter_map(|(i, v)| match v.as_str() {
            Some(s) => Some(s.to_owned()),
            None => {
                sink.omitted(
                    &format!("{field}[{i}]"),
                    format!("{} is not a string; left out", describe(v)),
                );
                None
            }
        })
        .collect()
}

/// The items of a list with their positions; `null` is an empty list, anything else not a list is
/// reported.
pub(crate) fn list<'v>(
    value: &'v Value,
    field: &str,
    sink: &mut Sink<'_>,
) -> Vec<(usize, &'v Value)> {
    match value {
        Value::Null => Vec::new(),
        Value::Array(items) => items.iter().enumerate().collect(),
        other => {
            sink.omitted(
                field,
                format!("{} is not a list; left out", describe(other)),
            );
            Vec::new()
        }
    }
}

/// `addresses` entries ferrolb's API server accepts. An entry it refuses (syntax, a block that is
/// never a LoadBalancer IP) is reported with the API server's words and left out.
pub(crate) fn address_entries(
    value: &Value,
    field: &str,
    sink: &mut Sink<'_>,
) -> Vec<AddressEntryText> {
    let mut out = Vec::new();
    for (i, item) in list(value, field, sink) {
        let at = format!("{field}[{i}]");
        let Some(text) = item.as_str() else {
            sink.omitted(&at, format!("{} is not a string; left out", describe(item)));
            continue;
        };
        let refused = match AddressEntry::parse(text) {
            Err(e) => Some(e.to_string()),
            Ok(entry) => entry.forbidden().map(|b| forbidden_message(text, b)),
        };
        match refused {
            Some(why) => sink.omitted(
                &at,
                format!("{why}; ferrolb's API server refuses the entry, so it is left out"),
            ),
            None => out.push(AddressEntryText(text.to_owned())),
        }
    }
    out
}

/// A list of Kubernetes label selectors. Unknown keys inside a selector are reported and left
/// out; a selector that still does not read as one (an unknown operator) is reported and left out
/// whole.
pub(crate) fn selectors(value: &Value, field: &str, sink: &mut Sink<'_>) -> Vec<LabelSelector> {
    let mut out = Vec::new();
    for (i, item) in list(value, field, sink) {
        let at = format!("{field}[{i}]");
        let Some(sel) = item.as_object() else {
            sink.omitted(
                &at,
                format!("{} is not a label selector; left out", describe(item)),
            );
            continue;
        };
        let mut clean = Map::new();
        for (k, v) in sel {
            match k.as_str() {
                "matchLabels" => {
                    let labels = string_map(v, &format!("{at}.matchLabels"), sink);
                    clean.insert(k.clone(), serde_json::json!(labels));
                }
                "matchExpressions" => {
                    let exprs = requirements(v, &format!("{at}.matchExpressions"), sink);
                    clean.insert(k.clone(), Value::Array(exprs));
                }
                _ => sink.omitted(&format!("{at}.{k}"), "not a label selector field; left out"),
            }
        }
        match serde_json::from_value::<LabelSelector>(Value::Object(clean)) {
            Ok(s) => out.push(s),
            Err(e) => sink.omitted(&at, format!("not a label selector ({e}); left out")),
        }
    }
    out
}

/// The `matchExpressions` of a selector, without unknown keys (reported).
fn requirements(value: &Value, field: &str, sink: &mut Sink<'_>) -> Vec<Value> {
    let mut out = Vec::new();
    for (i, item) in list(value, field, sink) {
        let at = format!("{field}[{i}]");
        let Some(req) = item.as_object() else {
            sink.omitted(
                &at,
                format!("{} is not a requirement; left out", describe(item)),
            );
            continue;
        };
        let mut clean = Map::new();
        for (k, v) in req {
            if matches!(k.as_str(), "key" | "operator" | "values") {
                clean.insert(k.clone(), v.clone());
            } else {
                sink.omitted(&format!("{at}.{k}"), "not a requirement field; left out");
            }
        }
        out.push(Value::Object(clean));
    }
    out
}

/// A short description of a value for messages: `"yes"`, `3`, `a mapping`.
pub(crate) fn describe(value: &Value) -> String {
    match value {
        Value::Object(_) => "a mapping".into(),
        Value::Array(_) => "a list".into(),
        Value::Null => "null".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn with_sink<T>(f: impl FnOnce(&mut Sink<'_>) -> T) -> (T, Vec<String>) {
        let mut findings = Vec::new();
        let mut sink = Sink {
            findings: &mut findings,
            source: "s",
            subject: "X a",
        };
        let out = f(&mut sink);
        (out, findings.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn metadata_keeps_name_labels_and_annotations_only() {
        let obj = json!({"metadata": {
            "name": "p", "namespace": "metallb-system", "uid": "u", "resourceVersion": "1",
            "labels": {"a": "b"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "note": "x"},
            "finalizers": ["f"]
        }});
        let (meta, lines) = with_sink(|s| metadata(obj.as_object().unwrap(), s));
        let meta = meta.unwrap();
        assert_eq!(meta.name.as_deref(), Some("p"));
        assert_eq!(meta.namespace, None);
        assert_eq!(meta.labels.unwrap().get("a").map(String::as_str), Some("b"));
        let ann = meta.annotations.unwrap();
        assert_eq!(ann.len(), 1, "{ann:?}");
        assert_eq!(
            lines,
            [
                "s: omitted: X a: metadata.finalizers: the ferrolb object is a new, cluster-scoped object; left out"
            ]
        );
        let (none, lines) = with_sink(|s| metadata(json!({}).as_object().unwrap(), s));
        assert!(none.is_none());
        assert_eq!(lines, ["s: omitted: X a: no metadata.name; not converted"]);
    }

    #[test]
    fn address_entries_refused_by_the_api_server_are_reported() {
        let v = json!([
            "198.51.100.0/24",
            "169.254.0.0/16",
            "10.0.0.9-10.0.0.1",
            7,
            " 2001:db8::1 - 2001:db8::9 "
        ]);
        let (entries, lines) = with_sink(|s| address_entries(&v, "spec.addresses", s));
        let texts: Vec<&str> = entries.iter().map(AsRef::as_ref).collect();
        assert_eq!(texts, ["198.51.100.0/24", " 2001:db8::1 - 2001:db8::9 "]);
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines[0].starts_with("s: omitted: X a: spec.addresses[1]: addresses entry \"169.254.0.0/16\" overlaps 169.254.0.0/16"), "{}", lines[0]);
        assert!(lines[1].contains("spec.addresses[2]: addresses entry \"10.0.0.9-10.0.0.1\" is a range whose start is above its end; ferrolb's API server refuses"), "{}", lines[1]);
        assert_eq!(
            lines[2],
            "s: omitted: X a: spec.addresses[3]: 7 is not a string; left out"
        );
    }

    #[test]
    fn booleans_and_selectors() {
        let (b, lines) = with_sink(|s| boolean(&json!("maybe"), "spec.autoAssign", true, s));
        assert!(b);
        assert_eq!(
            lines,
            [
                "s: omitted: X a: spec.autoAssign: \"maybe\" is not a boolean; left out, so the default (true) applies"
            ]
        );
        let v = json!([
            {"matchLabels": {"a": "b"}, "matchExpressions": [{"key": "k", "operator": "In", "values": ["v"], "extra": 1}]},
            {"matchExpressions": [{"key": "k", "operator": "Gt", "values": ["1"]}]},
            "x"
        ]);
        let (sels, lines) = with_sink(|s| selectors(&v, "spec.nodeSelectors", s));
        assert_eq!(sels.len(), 1);
        assert_eq!(sels[0].match_expressions[0].values, ["v"]);
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(
            lines[0].contains(
                "spec.nodeSelectors[0].matchExpressions[0].extra: not a requirement field"
            )
        );
        assert!(
            lines[1].contains("spec.nodeSelectors[1]: not a label selector (unknown variant `Gt`"),
            "{}",
            lines[1]
        );
        assert!(lines[2].contains("spec.nodeSelectors[2]: \"x\" is not a label selector"));
    }
}
