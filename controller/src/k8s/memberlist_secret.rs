//! The speakers' membership key, created by the controller when it is absent (issue #27 item 1,
//! `docs/membership.md`, "The key"): no manual key step at install.
//!
//! The Secret `--memberlist-secret` (default `ferrolb-memberlist`) in the controller's own
//! namespace holds, under `key`, 32 random bytes from the operating system (`getrandom(2)`, via
//! `ring`'s `SystemRandom`) written as 64 lowercase hex digits and a newline: the key-file format
//! the speakers parse (`ferrolb_l2::membership::key`). The speakers read it through the API and
//! wait, not ready, until it exists.
//!
//! Rules:
//! - **Never replaced.** The controller only ever *creates*: a Secret of that name that exists —
//!   the controller's own from an earlier start, or one the user made (`existingSecret` in the
//!   chart, a rotation by hand) — is left exactly as it is, whatever it holds. Two replicas
//!   starting together race on `create`; the API server lets one win, the other sees
//!   `AlreadyExists`, so there is only ever one key.
//! - **Checked again** every [`CHECK_PERIOD`], so a deleted Secret is recreated (with a new key:
//!   running speakers keep the old one until they restart, see `docs/membership.md`).
//! - **Marked** with [`MANAGED_BY`], so `ferrolb uninstall` deletes the Secret the controller made
//!   and never one a user made.
//!
//! RBAC (`deploy/controller-rbac.yaml`): `create` on Secrets in the controller's namespace (RBAC
//! cannot limit `create` by name) and `get` on that one name. The controller never reads any
//! other Secret, never updates or deletes one. Only the check needs the API: readiness and
//! leadership do not wait for it, and a refused call is logged and retried (1 s, doubling up to
//! 1 min).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::{Api, Client};
use ring::rand::SecureRandom;

/// The default name of the Secret (`--memberlist-secret`; the speakers' default too).
pub const DEFAULT_NAME: &str = "ferrolb-memberlist";

/// The data key holding the key ring (the speakers read this one).
pub const DATA_KEY: &str = "key";

/// Bytes of a key (XChaCha20-Poly1305's key size; `ferrolb_l2::membership::key::KEY_LEN`).
pub const KEY_BYTES: usize = 32;

/// The label marking a Secret the controller created (`app.kubernetes.io/managed-by`, the
/// Kubernetes recommended label for the tool that manages an object).
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "ferrolb-controller");

/// [`MANAGED_BY`] as a label selector.
pub const MANAGED_BY_SELECTOR: &str = "app.kubernetes.io/managed-by=ferrolb-controller";

/// How often a running controller checks that the Secret still exists: one `get` per replica.
pub const CHECK_PERIOD: Duration = Duration::from_secs(300);

/// The longest wait between two attempts after a refused or failed call.
const MAX_RETRY: Duration = Duration::from_secs(60);

/// A new key as the Secret holds it: [`KEY_BYTES`] random bytes from the operating system as 64
/// lowercase hex digits and a newline.
///
/// # Errors
/// The operating system's random source failed (`ring::error::Unspecified`).
pub fn random_key_hex() -> anyhow::Result<String> {
    let mut bytes = [0u8; KEY_BYTES];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| anyhow::anyhow!("the operating system's random source failed"))?;
    let mut hex = String::with_capacity(2 * KEY_BYTES + 1);
    for b in bytes {
        hex.push_str(&format!("{b:02x}"));
    }
    hex.push('\n');
    Ok(hex)
}

/// The Secret `namespace/name` holding `key_hex` under [`DATA_KEY`], labelled as part of ferrolb
/// and [`MANAGED_BY`] the controller. Pure.
pub fn new_secret(namespace: &str, name: &str, key_hex: &str) -> Secret {
    let labels: BTreeMap<String, String> = [
        ("app.kubernetes.io/name", "ferrolb"),
        ("app.kubernetes.io/component", "speaker"),
        ("app.kubernetes.io/part-of", "ferrolb"),
        MANAGED_BY,
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([(
                "ferrolb.io/description".to_owned(),
                "The speakers' membership key, created by ferrolb-controller because it was \
                 absent (docs/membership.md). Never replaced by the controller; rotate by hand."
                    .to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".to_owned()),
        data: Some(BTreeMap::from([(
            DATA_KEY.to_owned(),
            ByteString(key_hex.as_bytes().to_vec()),
        )])),
        ..Secret::default()
    }
}

/// What [`ensure`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ensured {
    /// The Secret existed (or another replica created it first): left as it is.
    Existed,
    /// This call created it.
    Created,
}

/// Creates the Secret `namespace/name` with a new key unless it exists (`get`, then `create`;
/// `AlreadyExists` from a concurrent creator counts as existing). Never changes an existing one.
///
/// # Errors
/// The API refused or failed the `get` or the `create` (e.g. 403 without the RBAC above), or the
/// random source failed.
pub async fn ensure(client: &Client, namespace: &str, name: &str) -> anyhow::Result<Ensured> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    if api.get_opt(name).await?.is_some() {
        return Ok(Ensured::Existed);
    }
    let secret = new_secret(namespace, name, &random_key_hex()?);
    match api.create(&PostParams::default(), &secret).await {
        Ok(_) => Ok(Ensured::Created),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(Ensured::Existed),
        Err(e) => Err(e.into()),
    }
}

/// Runs [`ensure`] now and every [`CHECK_PERIOD`] until the task is dropped; a failure is logged
/// and retried after 1 s, doubling up to 1 min. Logs a creation, and the first check that found
/// the Secret present, at `info`.
pub fn spawn(client: Client, namespace: String, name: String) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut retry = Duration::from_secs(1);
        let mut first = true;
        loop {
            let wait = match ensure(&client, &namespace, &name).await {
                Ok(Ensured::Created) => {
                    tracing::info!(
                        secret = %format!("{namespace}/{name}"),
                        "created the speakers' membership key (it was absent)"
                    );
                    retry = Duration::from_secs(1);
                    CHECK_PERIOD
                }
                Ok(Ensured::Existed) => {
                    if first {
                        tracing::info!(
                            secret = %format!("{namespace}/{name}"),
                            "the speakers' membership key exists; left as it is"
                        );
                    }
                    retry = Duration::from_secs(1);
                    CHECK_PERIOD
                }
                Err(e) => {
                    tracing::warn!(
                        secret = %format!("{namespace}/{name}"),
                        error = %format!("{e:#}"),
                        retry_in = ?retry,
                        "cannot make sure the speakers' membership key exists"
                    );
                    let wait = retry;
                    retry = (retry * 2).min(MAX_RETRY);
                    wait
                }
            };
            if wait == CHECK_PERIOD {
                first = false;
            }
            tokio::time::sleep(wait).await;
        }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use ferrolb_l2::membership::KeyRing;

    /// The key is 64 lowercase hex digits and a newline, which the speakers' parser accepts
    /// (strength checks included), and a new one each time.
    #[test]
    fn a_new_key_is_what_the_speakers_parse() {
        let a = random_key_hex().unwrap();
        assert_eq!(a.len(), 65);
        assert!(a.ends_with('\n'));
        assert!(
            a[..64]
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        );
        assert_eq!(KeyRing::parse(a.as_bytes()).unwrap().keys().len(), 1);
        assert_ne!(a, random_key_hex().unwrap());
    }

    /// The Secret: name, namespace, `key`, Opaque, and the labels `ferrolb uninstall` selects on.
    #[test]
    fn the_secret_carries_the_key_and_the_managed_by_label() {
        let s = new_secret("ns", "name", "k\n");
        assert_eq!(s.metadata.name.as_deref(), Some("name"));
        assert_eq!(s.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(s.type_.as_deref(), Some("Opaque"));
        assert_eq!(s.data.as_ref().unwrap()[DATA_KEY].0, b"k\n");
        let labels = s.metadata.labels.unwrap();
        assert_eq!(labels[MANAGED_BY.0], MANAGED_BY.1);
        assert_eq!(labels["app.kubernetes.io/part-of"], "ferrolb");
        assert_eq!(
            MANAGED_BY_SELECTOR,
            format!("{}={}", MANAGED_BY.0, MANAGED_BY.1)
        );
    }
}
