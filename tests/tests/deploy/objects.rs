//! Manifest objects as JSON: identity, lookup, environment, and small file helpers.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use super::NS;

/// Identity of one manifest object: (kind, namespace or "", name).
pub type ObjKey = (String, String, String);

pub fn key_of(obj: &Value) -> ObjKey {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    (
        s(&obj["kind"]),
        s(&obj["metadata"]["namespace"]),
        s(&obj["metadata"]["name"]),
    )
}

pub fn key(kind: &str, ns: &str, name: &str) -> ObjKey {
    (kind.to_owned(), ns.to_owned(), name.to_owned())
}

pub fn parse_docs(yaml: &str) -> Vec<Value> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).expect("rendered YAML parses");
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

pub fn find<'a>(objs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objs.iter().filter(|o| o["kind"] == kind).collect()
}

pub fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

pub fn env_value<'a>(container: &'a Value, name: &str) -> Option<&'a Value> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
}

/// The environment a container gets from its manifest; downward-API fields get sample values.
pub fn container_env(container: &Value) -> Vec<(String, String)> {
    let Some(env) = container["env"].as_array() else {
        return Vec::new();
    };
    env.iter()
        .map(|e| {
            let name = e["name"].as_str().unwrap().to_owned();
            let value = match (
                e["value"].as_str(),
                e["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
            ) {
                (Some(v), _) => v.to_owned(),
                (None, Some("spec.nodeName")) => "node-1".to_owned(),
                (None, Some("metadata.name")) => "pod-1".to_owned(),
                (None, Some("metadata.namespace")) => NS.to_owned(),
                (None, other) => panic!("env {name}: unexpected source {other:?}"),
            };
            (name, value)
        })
        .collect()
}

/// 64 hex digits from the kernel's random source, like `openssl rand -hex 32` (helm_chart.rs:
/// a key as the controller makes it).
#[allow(dead_code)]
pub fn random_key_hex() -> String {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut bytes)
        .unwrap();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `to` relative to the directory `from` (both absolute), for a kustomize resource path
/// (kustomize refuses absolute ones).
pub fn relative_path(from: &Path, to: &Path) -> PathBuf {
    let depth = from
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .count();
    let mut rel = PathBuf::new();
    for _ in 0..depth {
        rel.push("..");
    }
    rel.join(to.strip_prefix("/").unwrap())
}
