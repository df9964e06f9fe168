//! The speaker's readiness and metrics for the shared admin endpoints
//! ([`ferrolb_runtime::admin`], S9): `/readyz` is 200 once the watch stores have synced, the claim
//! gate has converged once and membership has joined, and while no supervised task has died
//! (503 otherwise, with the reason while the speaker waits for its membership key);
//! `/metrics` serves the speaker's registry.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use ferrolb_runtime::admin::Probe;
use prometheus_client::registry::Registry;

/// Shared state of the admin endpoints.
pub struct Health {
    /// Set once the speaker is serving.
    pub ready: AtomicBool,
    /// While not ready: what the speaker waits for (the `/readyz` 503 body), e.g. the
    /// membership-key Secret ([`crate::membership::key_source`]); `None`: "not ready".
    pub waiting_for: Mutex<Option<String>>,
    /// The metrics registry.
    pub registry: Registry,
}

impl Probe for Health {
    fn ready(&self) -> Result<(), String> {
        if self.ready.load(Ordering::Relaxed) {
            Ok(())
        } else {
            let waiting = self.waiting_for.lock().ok().and_then(|w| w.clone());
            Err(waiting.unwrap_or_else(|| "not ready".into()))
        }
    }

    fn metrics(&self) -> String {
        let mut body = String::new();
        // Encoding into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut body, &self.registry);
        body
    }
}
