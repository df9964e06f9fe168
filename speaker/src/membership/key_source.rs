//! Where the speaker's membership key ring comes from (issue #27 item 1, `docs/membership.md`,
//! "The key"):
//!
//! - **the Secret** (the default): `ferrolb-memberlist` in the speaker's namespace, which the
//!   controller creates when it is absent (32 random bytes from the OS, as 64 hex digits). The
//!   speaker reads it through the API (its Role may `get` exactly that name) and, while it is
//!   absent, unreadable or malformed, **waits**: the process stays up, `/livez` answers 200 and
//!   `/readyz` 503 with the reason, and it polls again (0.5 s, doubling to at most
//!   [`MAX_POLL`]). No `ContainerCreating` (nothing is mounted), no crash loop;
//! - **a file** (`--memberlist-key-file`), for users who mount their own key: at start, any
//!   error stops the speaker, as before.
//!
//! Either way the contents have the key-file format of [`KeyRing::parse`] (lines of 64 hex
//! digits, the first one seals). After start, [`follow`] keeps reading the same source — the
//! Secret through a watch of that one name, the file every [`FILE_POLL`] — and publishes each
//! changed valid ring, which the speaker applies with `Membership::set_keys` without a restart
//! (issue #27 item 2; the rotation recipe in `docs/membership.md`). Contents that do not parse,
//! an unreadable file or a deleted Secret keep the keys in use and are reported
//! ([`KeyUpdates::refused`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{WatchEvent, WatchParams};
use kube::{Api, Client};
use tokio::sync::watch;

use super::{Key, KeyRing};

/// How often [`follow`] reads a key file again. Kubelet updates a mounted Secret by swapping a
/// symlink of the volume's directory, which a watch of the file itself does not see; a read of
/// at most four lines every two seconds costs nothing, and a rotation step waits for every
/// speaker anyway.
pub const FILE_POLL: Duration = Duration::from_secs(2);

/// A key's public name for logs and `/metrics`: its fingerprint ([`Key::fingerprint`], the one
/// the hellos carry) as 16 lowercase hex digits. Pure.
pub fn fingerprint_hex(key: &Key) -> String {
    key.fingerprint()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What [`follow`] reports besides the rings it publishes.
#[derive(Debug, Default)]
pub struct KeyUpdates {
    /// Changes of the source that were not applied: contents that do not parse, a file that
    /// cannot be read, a deleted Secret (each distinct reason once, until a valid ring comes).
    pub refused: AtomicU64,
}

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

/// Publishes what the source holds now on `ring`: a valid ring that differs from the one in use
/// replaces it (the receiver applies it); anything else keeps the ring in use and is logged and
/// counted in `updates.refused` when its reason differs from the last one (`refused` remembers
/// it; a valid ring clears it). Returns whether a new ring was published.
fn publish(
    ring: &watch::Sender<KeyRing>,
    refused: &mut Option<String>,
    updates: &KeyUpdates,
    source: &KeySource,
    read: Result<KeyRing, String>,
) -> bool {
    match read {
        Ok(new) => {
            *refused = None;
            ring.send_if_modified(|current| {
                if *current == new {
                    return false;
                }
                tracing::info!(
                    %source,
                    from = %fingerprint_hex(current.primary()),
                    to = %fingerprint_hex(new.primary()),
                    keys = new.keys().len(),
                    "membership key ring changed; applying it without a restart"
                );
                *current = new;
                true
            })
        }
        Err(why) => {
            if refused.as_ref() != Some(&why) {
                tracing::warn!(%source, reason = %why, "membership key change not applied; the keys in use stay");
                updates.refused.fetch_add(1, Ordering::Relaxed);
                *refused = Some(why);
            }
            false
        }
    }
}

/// Follows `source` for as long as the speaker runs (returns only when every receiver of `ring`
/// is gone): each change of its contents to a valid key ring other than the one `ring` holds
/// (the one [`load`] read) is sent on `ring`; a change that is not valid keeps it and counts in
/// `updates.refused`.
///
/// - [`KeySource::File`]: read every [`FILE_POLL`].
/// - [`KeySource::Secret`]: a `get` of the one name, then a watch of it from that
///   `resourceVersion` (field selector `metadata.name`: the speaker's Role allows exactly `get`
///   and `watch` of that name); when the watch ends or fails (the API server closes watches
///   after minutes; a `410 Gone`), `get` and watch again after [`MAX_POLL`]. A deleted Secret
///   keeps the keys in use until it exists again; if the controller then creates a *new* key,
///   each speaker takes it as it sees it — a short split, which is why the documented rotation
///   never deletes it (`docs/membership.md`).
pub async fn follow(
    client: Client,
    source: KeySource,
    ring: watch::Sender<KeyRing>,
    updates: Arc<KeyUpdates>,
) {
    match &source {
        KeySource::File(path) => follow_file(path, FILE_POLL, &ring, &updates).await,
        KeySource::Secret { namespace, name } => {
            let api: Api<Secret> = Api::namespaced(client, namespace);
            let mut refused = None;
            loop {
                let watched = watch_secret(&api, name, &ring, &mut refused, &updates, &source);
                if let Err(why) = watched.await {
                    tracing::debug!(%source, reason = %why, "membership key watch ended; reading again");
                }
                if ring.is_closed() {
                    return;
                }
                tokio::time::sleep(MAX_POLL).await;
            }
        }
    }
}

/// [`follow`] for a key file: reads `path` every `poll` until every receiver of `ring` is gone.
async fn follow_file(
    path: &std::path::Path,
    poll: Duration,
    ring: &watch::Sender<KeyRing>,
    updates: &KeyUpdates,
) {
    let source = KeySource::File(path.to_path_buf());
    let mut refused = None;
    loop {
        tokio::time::sleep(poll).await;
        if ring.is_closed() {
            return;
        }
        let read = KeyRing::from_file(path).map_err(|e| e.to_string());
        publish(ring, &mut refused, updates, &source, read);
    }
}

/// One `get` and one watch of the Secret `name` (see [`follow`]); returns when the watch ends.
async fn watch_secret(
    api: &Api<Secret>,
    name: &str,
    ring: &watch::Sender<KeyRing>,
    refused: &mut Option<String>,
    updates: &KeyUpdates,
    source: &KeySource,
) -> Result<(), String> {
    let read = |secret: &Secret| ring_from_secret(secret).map_err(|e| format!("{source} {e}"));
    let deleted = || {
        Err(format!(
            "{source} was deleted; the keys in use stay until it exists again"
        ))
    };
    let version = match api.get_opt(name).await.map_err(|e| e.to_string())? {
        Some(secret) => {
            publish(ring, refused, updates, source, read(&secret));
            secret.metadata.resource_version.unwrap_or_default()
        }
        None => {
            publish(ring, refused, updates, source, deleted());
            return Ok(());
        }
    };
    let params = WatchParams::default().fields(&format!("metadata.name={name}"));
    let mut events = api
        .watch(&params, &version)
        .await
        .map_err(|e| e.to_string())?
        .boxed();
    while let Some(event) = events.next().await {
        if ring.is_closed() {
            return Ok(());
        }
        match event.map_err(|e| e.to_string())? {
            WatchEvent::Added(secret) | WatchEvent::Modified(secret) => {
                publish(ring, refused, updates, source, read(&secret));
            }
            WatchEvent::Deleted(_) => {
                publish(ring, refused, updates, source, deleted());
            }
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(e) => return Err(e.to_string()),
        }
    }
    Ok(())
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

    /// Issue #27 item 2: a changed key file reaches the running speaker — each valid change is
    /// published once, in order (the three rotation steps); contents that do not parse keep the
    /// ring in use and count once per reason; rewriting the same ring publishes nothing.
    #[tokio::test]
    async fn a_changed_key_file_is_published_and_a_bad_one_is_not() {
        const POLL: Duration = Duration::from_millis(20);
        let other = "ffeeddccbbaa99887766554433221100fedcba98765432100123456789abcdef";
        let dir = std::env::temp_dir().join(format!("ferrolb-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("key");
        // Written like kubelet does: a new file renamed over the old one.
        let write = |text: &str| {
            let tmp = dir.join("key.tmp");
            std::fs::write(&tmp, text).unwrap();
            std::fs::rename(&tmp, &path).unwrap();
        };
        write(&format!("{HEX}\n"));
        let start = KeyRing::from_file(&path).unwrap();
        let (tx, mut rx) = watch::channel(start.clone());
        let updates = Arc::new(KeyUpdates::default());
        let task = {
            let (path, updates) = (path.clone(), updates.clone());
            tokio::spawn(async move { follow_file(&path, POLL, &tx, &updates).await })
        };
        let next = |rx: &mut watch::Receiver<KeyRing>| {
            let mut rx = rx.clone();
            async move {
                tokio::time::timeout(Duration::from_secs(10), rx.changed())
                    .await
                    .expect("no change published")
                    .unwrap();
                rx.borrow_and_update().clone()
            }
        };
        let steps = [
            format!("{HEX}\n{other}\n"),
            format!("{other}\n{HEX}\n"),
            format!("{other}\n"),
        ];
        for step in &steps {
            write(step);
            let ring = next(&mut rx).await;
            rx.mark_unchanged();
            assert_eq!(ring, KeyRing::parse(step.as_bytes()).unwrap());
        }
        // A bad change: refused once, the ring in use stays.
        write("not a key\n");
        tokio::time::sleep(POLL * 10).await;
        assert!(!rx.has_changed().unwrap());
        assert_eq!(updates.refused.load(Ordering::Relaxed), 1);
        assert_eq!(*rx.borrow(), KeyRing::parse(steps[2].as_bytes()).unwrap());
        // Back to the same ring: nothing to apply.
        write(&steps[2]);
        tokio::time::sleep(POLL * 10).await;
        assert!(!rx.has_changed().unwrap());
        // Back to the start: applied.
        write(&format!("{HEX}\n"));
        assert_eq!(next(&mut rx).await, start);
        drop(rx);
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("the follower ends with its receivers")
            .unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The fingerprint in logs and `/metrics` is the hellos' one in hex, never the key.
    #[test]
    fn the_fingerprint_is_16_hex_digits_and_not_the_key() {
        let ring = KeyRing::parse(HEX.as_bytes()).unwrap();
        let fp = fingerprint_hex(ring.primary());
        assert_eq!(fp.len(), 16);
        assert!(fp.chars().all(|c| c.is_ascii_hexdigit()));
        assert!(!HEX.contains(&fp));
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
