//! Event publishing, the same way in both binaries: notes truncated to the API's byte limit (not
//! characters), and `kube-runtime`'s [`Recorder`] with a bounded cache.
//!
//! The [`Recorder`] keeps every Event it published for six minutes, to turn a repeat into an
//! `EventSeries` update. After a burst (50,000 Services allocated at once) that is one full Event
//! object per Service — tens of MiB. [`Publisher`] starts a fresh recorder (an empty cache) after
//! [`CACHE_EVENTS`] publications, so memory stays bounded and repeats within a burst of that size
//! are still aggregated. Both binaries emit Events on transitions only, so a repeat that misses
//! the cache costs one extra Event object, never a stream of them.

use std::sync::Mutex;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, Recorder, Reporter};

/// Longest `note` the API server accepts on an `events.k8s.io/v1` Event, in bytes (Kubernetes
/// API reference, `Event.note`: "must be at most 1kB").
pub const NOTE_MAX_BYTES: usize = 1024;

/// Publications served by one recorder (one cache) before a fresh one replaces it.
pub const CACHE_EVENTS: usize = 1000;

/// `note` cut to at most [`NOTE_MAX_BYTES`] bytes on a character boundary, ending in `…` when
/// cut.
pub fn truncate_note(note: &str) -> String {
    if note.len() <= NOTE_MAX_BYTES {
        return note.to_owned();
    }
    let ellipsis = '…';
    let mut end = NOTE_MAX_BYTES - ellipsis.len_utf8();
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = note[..end].to_owned();
    out.push(ellipsis);
    out
}

/// Publishes Events through a [`Recorder`] whose cache is bounded (see the module docs).
/// Cheap to share behind a reference; publications may run concurrently.
pub struct Publisher {
    client: Client,
    reporter: Reporter,
    current: Mutex<(Recorder, usize)>,
}

impl Publisher {
    /// A publisher writing as `reporter`.
    pub fn new(client: Client, reporter: Reporter) -> Publisher {
        let recorder = Recorder::new(client.clone(), reporter.clone());
        Publisher {
            client,
            reporter,
            current: Mutex::new((recorder, 0)),
        }
    }

    fn recorder(&self) -> Recorder {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if current.1 >= CACHE_EVENTS {
            *current = (Recorder::new(self.client.clone(), self.reporter.clone()), 0);
        }
        current.1 += 1;
        current.0.clone()
    }

    /// Publishes `event` about `reference`, its note cut to [`NOTE_MAX_BYTES`].
    ///
    /// # Errors
    /// The API server refused the Event or could not be reached.
    pub async fn publish(&self, event: &Event, reference: &ObjectReference) -> kube::Result<()> {
        let event = Event {
            type_: event.type_,
            reason: event.reason.clone(),
            note: event.note.as_deref().map(truncate_note),
            action: event.action.clone(),
            secondary: event.secondary.clone(),
        };
        self.recorder().publish(&event, reference).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_cut_in_bytes_on_a_character_boundary() {
        assert_eq!(truncate_note("short"), "short");
        let exact = "a".repeat(NOTE_MAX_BYTES);
        assert_eq!(truncate_note(&exact), exact);
        // 600 two-byte characters: 1,200 bytes, fewer than 1,024 characters.
        let wide = "é".repeat(600);
        let cut = truncate_note(&wide);
        assert!(cut.len() <= NOTE_MAX_BYTES, "{}", cut.len());
        assert!(cut.ends_with('…'));
        assert!(cut.len() > NOTE_MAX_BYTES - 4);
        let odd = format!("a{}", "€".repeat(400));
        let cut = truncate_note(&odd);
        assert!(cut.len() <= NOTE_MAX_BYTES && cut.ends_with('…'));
    }
}
