//! `ferrolb migrate`: MetalLB's layer-2 configuration as `ferrolb.io/v1beta1` objects, and a dry
//! report of what ferrolb will do with each LoadBalancer Service. Pure: no `kube`, no `tokio`, no
//! file or network I/O (`tests/purity.rs` checks) — the binary and [`crate::cluster`] read the
//! input, this module only turns [`Document`]s into a [`Conversion`].
//!
//! Inputs understood ([`convert`]):
//! - MetalLB's CRDs `metallb.io/v1beta1` `IPAddressPool` and `L2Advertisement` (MetalLB ≥ 0.13),
//!   every field — see [`crd`] for the mapping;
//! - MetalLB's legacy configuration (≤ 0.12, and the minikube addon): a `ConfigMap` whose
//!   `data.config` holds it, or that text alone — see [`legacy`]; the addon's unconfigured
//!   ConfigMap (an address entry `- -`) gets a proposed pool keeping every Service's current IP
//!   — see [`addon`];
//! - any number of YAML (or JSON) documents per input, and `List` objects (`kubectl get -o yaml`).
//!
//! Nothing is dropped silently. What ferrolb cannot express — BGP (`BGPPeer`, `BGPAdvertisement`,
//! `BFDProfile`, `Community`, `peers`, `bgp-communities`, `protocol: bgp` pools), fields ferrolb's
//! kinds lack, entries ferrolb's API server refuses, unknown fields — becomes one [`Finding`] per
//! object and field. Left out without a finding, by design: `metadata.namespace` (ferrolb's kinds
//! are cluster-scoped), what the API server writes (`uid`, `resourceVersion`, `generation`,
//! `creationTimestamp`, `managedFields`, `selfLink`, deletion marks, `status`) and the
//! `kubectl.kubernetes.io/last-applied-configuration` annotation (it describes the MetalLB object).

pub mod addon;
pub mod crd;
mod fields;
pub mod legacy;
pub mod services;

use std::collections::BTreeMap;
use std::fmt;

use ferrolb_crds::{IPAddressPool, L2Advertisement};
use k8s_openapi::api::core::v1::Service;
use serde_json::Value;

/// One YAML document of the input, with where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Document {
    /// The file name as given on the command line, `-` for stdin, or `cluster`.
    pub source: String,
    /// Position of the document in its source, from 1.
    pub index: usize,
    /// The document (YAML parsed into JSON's data model).
    pub value: Value,
}

/// Why an input could not be read as YAML.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputError {
    /// The source, as in [`Document::source`].
    pub source: String,
    /// The parser's message (with line and column).
    pub message: String,
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: not YAML: {}", self.source, self.message)
    }
}

impl std::error::Error for InputError {}

/// Splits `text` into its YAML documents (`---`-separated; JSON is YAML too). Empty documents are
/// skipped. Booleans read as YAML 1.1 reads them (`yes`, `on` are true), as MetalLB and kubectl
/// (Go's YAML libraries) read them.
///
/// # Errors
/// [`InputError`] naming `source` when the text is not YAML (syntax, duplicate keys).
pub fn parse_documents(source: &str, text: &str) -> Result<Vec<Document>, InputError> {
    let values: Vec<Value> = serde_saphyr::from_multiple(text).map_err(|e| InputError {
        source: source.to_owned(),
        message: e.to_string(),
    })?;
    Ok(values
        .into_iter()
        .enumerate()
        .filter(|(_, v)| !v.is_null())
        .map(|(i, value)| Document {
            source: source.to_owned(),
            index: i + 1,
            value,
        })
        .collect())
}

/// How much a [`Finding`] matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Part of the MetalLB configuration is not in the output.
    Omitted,
    /// Carried over, but differently (a renamed pool).
    Changed,
    /// The dry report expects a Service to change or stay pending, or something else needs a
    /// person's decision.
    Warning,
    /// For the record; nothing of MetalLB's configuration is lost.
    Info,
}

impl Level {
    /// Whether findings of this level make `ferrolb migrate` exit with status 2.
    pub fn needs_attention(self) -> bool {
        self != Level::Info
    }

    fn word(self) -> &'static str {
        match self {
            Level::Omitted => "omitted",
            Level::Changed => "changed",
            Level::Warning => "warning",
            Level::Info => "info",
        }
    }
}

/// One line of `ferrolb migrate`'s report on stderr:
/// `<source>: <level>: <subject>: [<field>: ]<message>`, e.g.
/// `bgppeer_simple.yaml: omitted: BGPPeer.metallb.io metallb-system/peer: ferrolb has no BGP mode; not converted`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// How much it matters.
    pub level: Level,
    /// Where the object came from ([`Document::source`]).
    pub source: String,
    /// The object: `Kind.group namespace/name` (`IPAddressPool.metallb.io metallb-system/example`,
    /// `ConfigMap metallb-system/config`, `Service default/web`), or `document N`.
    pub subject: String,
    /// The field, as a path in the object (`spec.serviceSelectors`,
    /// `data.config: address-pools[1].protocol`); `None` for the object as a whole.
    pub field: Option<String>,
    /// What happens, and why.
    pub message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}: {}: ",
            self.source,
            self.level.word(),
            self.subject
        )?;
        if let Some(field) = &self.field {
            write!(f, "{field}: ")?;
        }
        f.write_str(&self.message)
    }
}

/// A ferrolb object and what it was converted from.
#[derive(Clone, Debug, PartialEq)]
pub struct Converted<T> {
    /// The object as it will be applied.
    pub object: T,
    /// The source of the MetalLB object it comes from ([`Document::source`]).
    pub source: String,
    /// The MetalLB object it comes from, as a [`Finding::subject`], followed by the field for a
    /// legacy pool (`ConfigMap metallb-system/config data.config: address-pools[0]`).
    pub origin: String,
}

impl<T> Converted<T> {
    /// `<source>: <origin>`, the comment above the object in the output.
    pub fn provenance(&self) -> String {
        format!("{}: {}", self.source, self.origin)
    }
}

/// Everything [`convert`] made of the input.
#[derive(Clone, Debug, Default)]
pub struct Conversion {
    /// ferrolb pools, in input order, names unique.
    pub pools: Vec<Converted<IPAddressPool>>,
    /// ferrolb advertisements, in input order, names unique.
    pub advertisements: Vec<Converted<L2Advertisement>>,
    /// Services found in the input (for [`services::report`]), with their source. A Service
    /// without a namespace is taken to be in `default`.
    pub services: Vec<(String, Service)>,
    /// What was left out or changed, in input order.
    pub findings: Vec<Finding>,
}

impl Conversion {
    /// Whether anything needs a person's attention (exit status 2).
    pub fn needs_attention(&self) -> bool {
        self.findings.iter().any(|f| f.level.needs_attention())
    }
}

/// Converts the documents, in order: objects of MetalLB's layer-2 configuration become ferrolb
/// objects, Services are kept for the report, everything else becomes a [`Finding`]. Two MetalLB
/// objects that would give one ferrolb name (ferrolb's kinds are cluster-scoped; MetalLB's are
/// namespaced) keep the first; the second is reported.
pub fn convert(docs: &[Document]) -> Conversion {
    let mut c = Converter::default();
    for doc in docs {
        c.value(&doc.source, &format!("document {}", doc.index), &doc.value);
    }
    c.propose_unconfigured();
    let mut out = c.out;
    let unadvertised: Vec<Finding> = out
        .pools
        .iter()
        .filter(|p| {
            let name = p.object.metadata.name.as_deref().unwrap_or_default();
            let labels = p.object.metadata.labels.clone().unwrap_or_default();
            !out.advertisements
                .iter()
                .any(|a| a.object.spec.covers_pool(name, &labels))
        })
        .map(|p| Finding {
            level: Level::Warning,
            source: p.source.clone(),
            subject: p.origin.clone(),
            field: None,
            message: "no converted L2Advertisement covers this pool: ferrolb hands out its addresses but announces none of them (as MetalLB did without an L2Advertisement; with BGP, ferrolb cannot)".into(),
        })
        .collect();
    out.findings.extend(unadvertised);
    if out.pools.is_empty() {
        // Empty input (e.g. `kubectl get … | ferrolb migrate` after kubectl failed) must not
        // look like a successful migration.
        let mut sources: Vec<&str> = docs.iter().map(|d| d.source.as_str()).collect();
        sources.dedup();
        out.findings.push(Finding {
            level: Level::Warning,
            source: if sources.is_empty() {
                "input".into()
            } else {
                sources.join(", ")
            },
            subject: "the input".into(),
            field: None,
            message: "no MetalLB address pool to convert (no IPAddressPool.metallb.io, no address-pools entry of a legacy ConfigMap): ferrolb would hand out no address — is this MetalLB's configuration?".into(),
        });
    }
    out
}

/// The state of one [`convert`] call.
#[derive(Default)]
struct Converter {
    out: Conversion,
    /// Pool name → where it came from.
    pool_names: BTreeMap<String, String>,
    /// Advertisement name → where it came from.
    adv_names: BTreeMap<String, String>,
    /// The minikube addon's unconfigured pools, with their source and subject: given addresses
    /// once every Service is read ([`Converter::propose_unconfigured`]).
    unconfigured: Vec<(legacy::LegacyPool, String, String)>,
}

/// The kinds of MetalLB's BGP mode: reported, never converted.
pub const BGP_KINDS: [&str; 4] = ["BGPPeer", "BGPAdvertisement", "BFDProfile", "Community"];
/// The kinds in which MetalLB records state, not configuration: nothing to convert.
pub const STATE_KINDS: [&str; 3] = ["ServiceL2Status", "ServiceBGPStatus", "ConfigurationState"];

impl Converter {
    /// One document or `List` item. `unnamed` names it when it has no name.
    fn value(&mut self, source: &str, unnamed: &str, value: &Value) {
        let Some(obj) = value.as_object() else {
            self.finding(
                Level::Omitted,
                source,
                unnamed,
                None,
                "not a mapping: neither a Kubernetes object nor MetalLB's legacy configuration",
            );
            return;
        };
        let api_version = obj.get("apiVersion").and_then(Value::as_str);
        let kind = obj.get("kind").and_then(Value::as_str);
        let (Some(api_version), Some(kind)) = (api_version, kind) else {
            if legacy::looks_like_config(obj) {
                let subject = format!("MetalLB configuration ({unnamed})");
                self.legacy(source, &subject, "", value);
            } else {
                self.finding(
                    Level::Omitted,
                    source,
                    unnamed,
                    None,
                    "no apiVersion and kind, and no key of MetalLB's legacy configuration: not converted",
                );
            }
            return;
        };
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        if let (true, Some(items)) = (kind.ends_with("List"), obj.get("items")) {
            let Some(items) = items.as_array() else {
                self.finding(
                    Level::Omitted,
                    source,
                    unnamed,
                    Some("items"),
                    "not a list: not converted",
                );
                return;
            };
            for (i, item) in items.iter().enumerate() {
                self.value(source, &format!("{unnamed} items[{i}]"), item);
            }
            return;
        }
        let subject = subject(kind, group, obj.get("metadata"));
        match (group, kind) {
            ("metallb.io", "IPAddressPool") => {
                if let Some(pool) = crd::pool(obj, &mut self.sink(source, &subject)) {
                    self.push_pool(pool, source, &subject, subject.clone());
                }
            }
            ("metallb.io", "L2Advertisement") => {
                if let Some(adv) = crd::l2_advertisement(obj, &mut self.sink(source, &subject)) {
                    self.push_advertisement(adv, source, &subject, subject.clone());
                }
            }
            ("metallb.io", k) if BGP_KINDS.contains(&k) => self.finding(
                Level::Omitted,
                source,
                &subject,
                None,
                "ferrolb has no BGP mode; not converted",
            ),
            ("metallb.io", k) if STATE_KINDS.contains(&k) => self.finding(
                Level::Info,
                source,
                &subject,
                None,
                "state MetalLB records, not configuration; nothing to convert",
            ),
            ("metallb.io", "AddressPool") => self.finding(
                Level::Omitted,
                source,
                &subject,
                None,
                "AddressPool was removed in MetalLB v0.14 and is not converted; write it as an IPAddressPool and an L2Advertisement",
            ),
            ("metallb.io", _) => self.finding(
                Level::Omitted,
                source,
                &subject,
                None,
                "ferrolb has no equivalent of this kind; not converted",
            ),
            ("", "ConfigMap") => self.config_map(source, &subject, obj),
            ("", "Service") => self.service(source, &subject, value),
            _ => self.finding(
                Level::Info,
                source,
                &subject,
                None,
                "not MetalLB configuration; left out",
            ),
        }
    }

    /// A ConfigMap: MetalLB's legacy configuration when `data.config` holds it.
    fn config_map(&mut self, source: &str, subject: &str, obj: &serde_json::Map<String, Value>) {
        let data = obj.get("data").and_then(Value::as_object);
        let text = data.and_then(|d| d.get("config")).and_then(Value::as_str);
        let parsed = text.map(serde_saphyr::from_str::<Value>);
        let config = match parsed {
            Some(Ok(v)) if v.as_object().is_some_and(legacy::looks_like_config) => v,
            Some(Err(e)) => {
                return self.finding(
                    Level::Omitted,
                    source,
                    subject,
                    Some("data.config"),
                    &format!("not YAML ({e}); not converted"),
                );
            }
            _ => {
                return self.finding(
                    Level::Info,
                    source,
                    subject,
                    None,
                    "no MetalLB configuration in data.config; not MetalLB configuration, left out",
                );
            }
        };
        for key in data.into_iter().flat_map(|d| d.keys()) {
            if key != "config" {
                self.finding(
                    Level::Info,
                    source,
                    subject,
                    Some(&format!("data.{key}")),
                    "MetalLB reads only data.config; left out",
                );
            }
        }
        self.legacy(source, subject, "data.config: ", &config);
    }

    /// Legacy configuration text (parsed), found in `subject` under `prefix`.
    fn legacy(&mut self, source: &str, subject: &str, prefix: &str, config: &Value) {
        let converted = legacy::convert(config, prefix, &mut self.sink(source, subject));
        for p in converted {
            if p.unconfigured {
                self.unconfigured
                    .push((p, source.to_owned(), subject.to_owned()));
                continue;
            }
            self.push_legacy(p, source, subject);
        }
    }

    /// Adds a legacy pool and, when its name is free, its advertisement.
    fn push_legacy(&mut self, p: legacy::LegacyPool, source: &str, subject: &str) {
        let origin = format!("{subject} {}", p.field);
        if self.push_pool(p.pool, source, subject, origin.clone()) {
            let origin = format!("{origin} (protocol: layer2)");
            self.push_advertisement(p.advertisement, source, subject, origin);
        }
    }

    /// The minikube addon's unconfigured pools ([`addon`]): each gets the addresses that keep
    /// every LoadBalancer Service's current IP, with a warning saying so, or is left out with a
    /// warning when no Service has an IP to keep.
    fn propose_unconfigured(&mut self) {
        for (mut p, source, subject) in std::mem::take(&mut self.unconfigured) {
            let others: Vec<ferrolb_crds::addresses::PoolAddresses> = self
                .out
                .pools
                .iter()
                .filter_map(|c| {
                    ferrolb_crds::addresses::PoolAddresses::parse(&c.object.spec.addresses, false)
                        .ok()
                })
                .collect();
            let proposal = addon::proposal(&self.out.services, &others);
            let field = format!("{}.addresses", p.field);
            let what = "the minikube addon's unconfigured ConfigMap: its only address entry is `- -`, the addon's template with no range filled in (what `minikube addons enable metallb` writes before `minikube addons configure metallb`, and again on every `minikube start`), so MetalLB has no address to hand out";
            let refused = if proposal.refused.is_empty() {
                String::new()
            } else {
                format!(
                    "; left out, as no pool may hold them: {}",
                    proposal.refused.join(", ")
                )
            };
            if proposal.entries.is_empty() {
                let msg = format!(
                    "{what}; no LoadBalancer Service has an IP to keep, so no pool is proposed: write one with a free range of the node network (`minikube ip`; docs/install.md){refused}"
                );
                self.finding(Level::Warning, &source, &subject, Some(&field), &msg);
                continue;
            }
            let msg = format!(
                "{what}; proposed instead: the current IPs of every LoadBalancer Service without a loadBalancerClass, so each keeps its IP — {} ({}); add a free range of the node network (`minikube ip`) for new Services{refused}",
                proposal.entries.join(", "),
                proposal.services.join(", ")
            );
            self.finding(Level::Warning, &source, &subject, Some(&field), &msg);
            p.pool.spec.addresses = proposal.entries.iter().map(|e| e.as_str().into()).collect();
            self.push_legacy(p, &source, &subject);
        }
    }

    fn service(&mut self, source: &str, subject: &str, value: &Value) {
        match serde_json::from_value::<Service>(value.clone()) {
            Ok(mut svc) => {
                svc.metadata
                    .namespace
                    .get_or_insert_with(|| "default".to_owned());
                self.out.services.push((source.to_owned(), svc));
            }
            Err(e) => self.finding(
                Level::Info,
                source,
                subject,
                None,
                &format!("not a valid Service ({e}); left out of the report"),
            ),
        }
    }

    /// Adds a pool unless its name is taken; says whether it was added.
    fn push_pool(
        &mut self,
        pool: IPAddressPool,
        source: &str,
        subject: &str,
        origin: String,
    ) -> bool {
        let name = pool.metadata.name.clone().unwrap_or_default();
        if let Some(first) = self.pool_names.get(&name) {
            let msg = format!(
                "an IPAddressPool named {name:?} is already converted from {first}; ferrolb's pools are cluster-scoped and their names are object names, so two MetalLB pools in different namespaces, or whose names become the same object name, cannot both be kept; not converted (rename one)"
            );
            self.finding(Level::Omitted, source, subject, None, &msg);
            return false;
        }
        let converted = Converted {
            object: pool,
            source: source.to_owned(),
            origin,
        };
        self.pool_names.insert(name, converted.provenance());
        self.out.pools.push(converted);
        true
    }

    fn push_advertisement(
        &mut self,
        adv: L2Advertisement,
        source: &str,
        subject: &str,
        origin: String,
    ) {
        let name = adv.metadata.name.clone().unwrap_or_default();
        if let Some(first) = self.adv_names.get(&name) {
            let msg = format!(
                "an L2Advertisement named {name:?} is already converted from {first}; ferrolb's advertisements are cluster-scoped and their names are object names, so two MetalLB advertisements in different namespaces, or whose names become the same object name, cannot both be kept; not converted (rename one)"
            );
            self.finding(Level::Omitted, source, subject, None, &msg);
            return;
        }
        let converted = Converted {
            object: adv,
            source: source.to_owned(),
            origin,
        };
        self.adv_names.insert(name, converted.provenance());
        self.out.advertisements.push(converted);
    }

    fn sink<'a>(&'a mut self, source: &'a str, subject: &'a str) -> fields::Sink<'a> {
        fields::Sink {
            findings: &mut self.out.findings,
            source,
            subject,
        }
    }

    fn finding(
        &mut self,
        level: Level,
        source: &str,
        subject: &str,
        field: Option<&str>,
        message: &str,
    ) {
        self.out.findings.push(Finding {
            level,
            source: source.to_owned(),
            subject: subject.to_owned(),
            field: field.map(str::to_owned),
            message: message.to_owned(),
        });
    }
}

/// `Kind.group namespace/name` (`Kind namespace/name` for the core group; no `namespace/` for
/// cluster-scoped objects; `(no name)` when there is none).
fn subject(kind: &str, group: &str, metadata: Option<&Value>) -> String {
    let get = |k: &str| {
        metadata
            .and_then(|m| m.get(k))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let kind = if group.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind}.{group}")
    };
    let name = get("name").unwrap_or("(no name)");
    match get("namespace") {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

/// The output: one YAML document per object, pools first, each under a comment naming what it was
/// converted from. Empty when nothing was converted.
///
/// # Errors
/// Only if YAML serialisation fails, which it does not for these types.
pub fn render(conversion: &Conversion) -> Result<String, serde_saphyr::ser::Error> {
    let mut out = String::new();
    for p in &conversion.pools {
        out.push_str(&format!("---\n# from {}\n", p.provenance()));
        out.push_str(&serde_saphyr::to_string(&p.object)?);
    }
    for a in &conversion.advertisements {
        out.push_str(&format!("---\n# from {}\n", a.provenance()));
        out.push_str(&serde_saphyr::to_string(&a.object)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn run(text: &str) -> Conversion {
        convert(&parse_documents("in.yaml", text).unwrap())
    }

    fn lines(c: &Conversion) -> Vec<String> {
        c.findings.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn documents_lists_and_empty_documents() {
        let c = run(
            "---\n---\napiVersion: v1\nkind: List\nitems:\n- apiVersion: metallb.io/v1beta1\n  kind: IPAddressPool\n  metadata: {name: a, namespace: metallb-system}\n  spec: {addresses: [198.51.100.0/24]}\n- apiVersion: metallb.io/v1beta1\n  kind: L2Advertisement\n  metadata: {name: a, namespace: metallb-system}\n",
        );
        assert_eq!(c.pools.len(), 1);
        assert_eq!(c.advertisements.len(), 1);
        assert!(c.findings.is_empty(), "{:?}", lines(&c));
        assert!(!c.needs_attention());
    }

    #[test]
    fn not_yaml_is_an_error_naming_the_source() {
        let e = parse_documents("bad.yaml", "a: [1, 2\n").unwrap_err();
        assert!(e.to_string().starts_with("bad.yaml: not YAML: "), "{e}");
    }

    #[test]
    fn bgp_kinds_are_reported_one_line_each() {
        let c = run(
            "apiVersion: metallb.io/v1beta2\nkind: BGPPeer\nmetadata: {name: p, namespace: metallb-system}\nspec: {myASN: 1}\n---\napiVersion: metallb.io/v1beta1\nkind: Community\nmetadata: {name: c, namespace: metallb-system}\n",
        );
        assert_eq!(
            lines(&c),
            [
                "in.yaml: omitted: BGPPeer.metallb.io metallb-system/p: ferrolb has no BGP mode; not converted",
                "in.yaml: omitted: Community.metallb.io metallb-system/c: ferrolb has no BGP mode; not converted",
                "in.yaml: warning: the input: no MetalLB address pool to convert (no IPAddressPool.metallb.io, no address-pools entry of a legacy ConfigMap): ferrolb would hand out no address — is this MetalLB's configuration?",
            ]
        );
        assert!(c.needs_attention());
    }

    #[test]
    fn other_objects_are_noted_not_converted() {
        let c = run(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n---\n- 1\n---\nfoo: bar\n",
        );
        assert_eq!(
            lines(&c),
            [
                "in.yaml: info: Deployment.apps d: not MetalLB configuration; left out",
                "in.yaml: omitted: document 2: not a mapping: neither a Kubernetes object nor MetalLB's legacy configuration",
                "in.yaml: omitted: document 3: no apiVersion and kind, and no key of MetalLB's legacy configuration: not converted",
                "in.yaml: warning: the input: no MetalLB address pool to convert (no IPAddressPool.metallb.io, no address-pools entry of a legacy ConfigMap): ferrolb would hand out no address — is this MetalLB's configuration?",
            ]
        );
    }

    #[test]
    fn empty_input_needs_attention() {
        let c = run("");
        assert_eq!(
            lines(&c),
            [
                "input: warning: the input: no MetalLB address pool to convert (no IPAddressPool.metallb.io, no address-pools entry of a legacy ConfigMap): ferrolb would hand out no address — is this MetalLB's configuration?"
            ]
        );
        assert!(c.needs_attention());
    }

    #[test]
    fn one_name_across_namespaces() {
        let c = run(
            "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: a, namespace: n1}\nspec: {addresses: [198.51.100.0/24]}\n---\napiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: a, namespace: n2}\nspec: {addresses: [203.0.113.0/24]}\n---\napiVersion: metallb.io/v1beta1\nkind: L2Advertisement\nmetadata: {name: all, namespace: n1}\n",
        );
        assert_eq!(c.pools.len(), 1);
        assert_eq!(
            lines(&c),
            [
                "in.yaml: omitted: IPAddressPool.metallb.io n2/a: an IPAddressPool named \"a\" is already converted from in.yaml: IPAddressPool.metallb.io n1/a; ferrolb's pools are cluster-scoped and their names are object names, so two MetalLB pools in different namespaces, or whose names become the same object name, cannot both be kept; not converted (rename one)"
            ]
        );
    }

    /// A legacy pool whose name becomes an object name already taken (`My_Pool` → `my-pool`)
    /// keeps the first and says so, naming both sources (the message does not blame namespaces
    /// only).
    #[test]
    fn a_renamed_legacy_pool_never_displaces_a_pool_of_that_name() {
        let c = run(
            "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: my-pool, namespace: metallb-system}\nspec: {addresses: [198.51.100.0/24]}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: config, namespace: metallb-system}\ndata:\n  config: |\n    address-pools:\n    - {name: My_Pool, protocol: layer2, addresses: [203.0.113.0/24]}\n",
        );
        assert_eq!(c.pools.len(), 1);
        let pool = &c.pools[0].object;
        assert_eq!(
            serde_json::to_value(&pool.spec.addresses).unwrap(),
            serde_json::json!(["198.51.100.0/24"]),
            "the first my-pool stays"
        );
        let omitted: Vec<String> = lines(&c)
            .into_iter()
            .filter(|l| l.contains("omitted"))
            .collect();
        assert_eq!(omitted.len(), 1, "{:?}", lines(&c));
        assert!(
            omitted[0].contains("named \"my-pool\" is already converted from in.yaml: IPAddressPool.metallb.io metallb-system/my-pool")
                && omitted[0].contains("become the same object name"),
            "{}",
            omitted[0]
        );
    }

    #[test]
    fn a_pool_no_advertisement_covers_is_a_warning() {
        let c = run(
            "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: a, namespace: m, labels: {l: one}}\nspec: {addresses: [198.51.100.0/24]}\n---\napiVersion: metallb.io/v1beta1\nkind: L2Advertisement\nmetadata: {name: other, namespace: m}\nspec: {ipAddressPoolSelectors: [{matchLabels: {l: two}}]}\n",
        );
        assert_eq!(
            lines(&c),
            [
                "in.yaml: warning: IPAddressPool.metallb.io m/a: no converted L2Advertisement covers this pool: ferrolb hands out its addresses but announces none of them (as MetalLB did without an L2Advertisement; with BGP, ferrolb cannot)"
            ]
        );
        assert!(c.needs_attention());
    }

    #[test]
    fn services_are_kept_for_the_report_in_default_when_unnamespaced() {
        let c = run(
            "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {type: LoadBalancer}\n",
        );
        assert_eq!(c.services.len(), 1);
        assert_eq!(
            c.services[0].1.metadata.namespace.as_deref(),
            Some("default")
        );
        // Only the finding that there is no pool at all.
        assert_eq!(
            lines(&c),
            [
                "in.yaml: warning: the input: no MetalLB address pool to convert (no IPAddressPool.metallb.io, no address-pools entry of a legacy ConfigMap): ferrolb would hand out no address — is this MetalLB's configuration?"
            ]
        );
    }

    #[test]
    fn a_config_map_without_metallb_configuration_is_left_out() {
        let c = run(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: ns}\ndata: {config: 'a: 1'}\n",
        );
        assert!(c.pools.is_empty());
        assert_eq!(
            lines(&c),
            [
                "in.yaml: info: ConfigMap ns/x: no MetalLB configuration in data.config; not MetalLB configuration, left out",
                "in.yaml: warning: the input: no MetalLB address pool to convert (no IPAddressPool.metallb.io, no address-pools entry of a legacy ConfigMap): ferrolb would hand out no address — is this MetalLB's configuration?"
            ]
        );
    }

    #[test]
    fn render_puts_pools_first_under_their_origin() {
        let c = run(
            "apiVersion: metallb.io/v1beta1\nkind: L2Advertisement\nmetadata: {name: l2, namespace: m}\n---\napiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: p, namespace: m}\nspec: {addresses: [198.51.100.0/24]}\n",
        );
        let out = render(&c).unwrap();
        let pool = out.find("kind: IPAddressPool").unwrap();
        let adv = out.find("kind: L2Advertisement").unwrap();
        assert!(pool < adv, "{out}");
        assert!(out.starts_with("---\n# from in.yaml: IPAddressPool.metallb.io m/p\napiVersion: ferrolb.io/v1beta1\n"), "{out}");
        assert!(!out.contains("status"), "{out}");
    }
}
