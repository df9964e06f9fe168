//! Where the speaker's membership key ring comes from (issue #27 item 1, `docs/membership.md`,
//! "The key"):
//!
//! - **the Secret** (the default): `ferrolb-memberlist` in the speaker's namespace, which the
//!   controller creates when it is absent (32 random bytes from the OS, as 64 hex digits). The
//!   speaker reads it through the API (its Role may `get` exactly that name) and, while it is
//!   absent, unreadable or malformed, **waits**: the process stays up, `/livez` answers 200 and
//!   `/readyz` 503 with the reason, and it polls again (0.5 s, doubling to at most
//!   [`MAX_POLL`]). No `ContainerCreating` (nothing is mounted), no crash loop;
//! - **a file** (`--memberlist-key-file`), for users who mount their own key: read once, and any
//!   error stops the speaker, as before.
//!
//! Either way the contents have the key-file format of [`KeyRing::parse`] (lines of 64 hex
//! digits, the first one seals). The key ring is read once, at start: a changed Secret reaches a
//! running speaker only through a restart (see the rotation recipe in `docs/membership.md`).

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};

use super::KeyRing;

/// The data key of the Secret holding the key ring (the file format of [`KeyRing::parse`]).
pub const SECRET_DATA_KEY: &str = "key";

/// The default name of the Secret (`--memberlist-secret`), the one the controller creates.
pub const DEFAULT_SECRET: &str = "ferrolb-memberlist";

/// The first wait between two reads of an absent Secret; it doubles up to [`MAX_POLL`].
pub const FIRST_POLL: Duration = Duration::from_millis(500);

/// The longest wait between two reads of an absent Secret: how late, at most, a speaker notices
/// that the controller created it.
pub const MAX_POLL: Duration = Duration::from_secs(2);

/// Where the key ring comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeySource {
    /// A file the user mounts (`--memberlist-key-file`): read once; an error stops the speaker.
    File(PathBuf),
    /// A Secret read through the API (`--memberlist-secret` in `--namespace`), waited for.
    Secret {
        /// The Secret's namespace (the speaker's own).
        namespace: String,
        /// The Secret's name.
        name: String,
    },
}

impl std::fmt::Display for KeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeySource::File(path) => write!(f, "key file {}", path.display()),
            KeySource::Secret { namespace, name } => write!(f, "Secret {namespace}/{name}"),
        }
    }
}

/// The key ring held by `secret` under [`SECRET_DATA_KEY`]. Pure.
///
/// # Errors
/// A message for `/readyz` and the log, naming what is wrong (no such data key, or the parse
/// error of [`KeyRing::parse`]); never key material.
pub fn ring_from_secret(secret: &Secret) -> Result<KeyRing, String> {
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(SECRET_DATA_KEY))
        .map(|b| b.0.as_slice())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|d| d.get(SECRET_DATA_KEY))
                .map(String::as_bytes)
        })
        .ok_or_else(|| format!("has no data key `{SECRET_DATA_KEY}`"))?;
    KeyRing::parse(bytes).map_err(|e| e.to_string())
}

/// Reads the key ring from `source`. For a Secret, waits until it exists and holds a valid key
/// ring, calling `waiting` with the reason whenever it changes (`Some`, for `/readyz`) and with
/// `None` once the ring is read; each new reason is logged once. Cancel by dropping the future
/// (the speaker's SIGTERM ends the process meanwhile).
///
/// # Errors
/// Only for [`KeySource::File`]: the file cannot be read or does not parse (the message names the
/// file and the problem). A Secret is waited for, never an error.
pub async fn load(
    client: &Client,
    source: &KeySource,
    waiting: &(dyn Fn(Option<String>) + Sync),
) -> anyhow::Result<KeyRing> {
    let (namespace, name) = match source {
        KeySource::File(path) => {
            return KeyRing::from_file(path)
                .map_err(|e| anyhow::anyhow!("membership key {}: {e}", path.display()));
        }
        KeySource::Secret { namespace, name } => (namespace, name),
    };
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut delay = FIRST_POLL;
    let mut last: Option<String> = None;
    loop {
        let why = match api.get_opt(name).await {
            Ok(Some(secret)) => match ring_from_secret(&secret) {
                Ok(ring) => {
                    waiting(None);
                    tracing::info!(
                        %source,
                        keys = ring.keys().len(),
                        "membership key ring read"
                    );
                    return Ok(ring);
                }
                Err(e) => format!("membership key: Secret {namespace}/{name} {e}"),
            },
            Ok(None) => format!(
                "waiting for the membership key: Secret {namespace}/{name} does not exist yet \
                 (the controller creates it)"
            ),
            Err(e) => format!("membership key: cannot read Secret {namespace}/{name}: {e}"),
        };
        if last.as_ref() != Some(&why) {
            if last.is_none() && why.starts_with("waiting") {
                tracing::info!("{why}");
            } else {
                tracing::warn!("{why}");
            }
            waiting(Some(why.clone()));
            last = Some(why);
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(MAX_POLL);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use k8s_openapi::ByteString;

    fn secret(data: &[(&str, &[u8])]) -> Secret {
        Secret {
            data: Some(
                data.iter()
                    .map(|(k, v)| ((*k).to_owned(), ByteString(v.to_vec())))
                    .collect(),
            ),
            ..Secret::default()
        }
    }

    const HEX: &str = "00112233445566778899aabbccddeeff0123456789abcdeffedcba9876543210";

    /// The Secret holds the key-file format under `key`: what the controller writes (one line of
    /// 64 hex digits and a newline) and a rotation's two lines both parse; the first line seals.
    #[test]
    fn the_secret_s_key_is_the_key_file_format() {
        let one = ring_from_secret(&secret(&[("key", format!("{HEX}\n").as_bytes())])).unwrap();
        assert_eq!(one.keys().len(), 1);
        let other = "ffeeddccbbaa99887766554433221100fedcba98765432100123456789abcdef";
        let two =
            ring_from_secret(&secret(&[("key", format!("{other}\n{HEX}\n").as_bytes())])).unwrap();
        assert_eq!(two.keys().len(), 2);
        assert_eq!(two.keys()[1], one.keys()[0]);
    }

    /// A Secret without `key`, or with a bad key, is refused with a message that names the
    /// problem and never the key.
    #[test]
    fn a_bad_secret_is_refused_without_showing_the_key() {
        let e = ring_from_secret(&secret(&[("other", HEX.as_bytes())])).unwrap_err();
        assert!(e.contains("no data key `key`"), "{e}");
        assert!(ring_from_secret(&Secret::default()).is_err());
        let short = &HEX[..60];
        let e = ring_from_secret(&secret(&[("key", short.as_bytes())])).unwrap_err();
        assert!(!e.contains(short), "{e}");
    }
}
