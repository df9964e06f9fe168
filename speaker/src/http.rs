//! The speaker's readiness and metrics for the shared admin endpoints
//! ([`ferrolb_runtime::admin`], S9): `/readyz` is 200 once the watch stores have synced, the claim
//! gate has converged once and membership has joined, and while no supervised task has died
//! (503 otherwise); `/metrics` serves the speaker's registry.

use std::sync::atomic::{AtomicBool, Ordering};

use ferrolb_runtime::admin::Probe;
use prometheus_client::registry::Registry;

/// Shared state of the admin endpoints.
pub struct Health {
    /// Set once the speaker is serving.
    pub ready: AtomicBool,
    /// The metrics registry.
    pub registry: Registry,
}

impl Probe for Health {
    fn ready(&self) -> Result<(), String> {
        if self.ready.load(Ordering::Relaxed) {
            Ok(())
        } else {
            Err("not ready".into())
        }
    }

    fn metrics(&self) -> String {
        let mut body = String::new();
        // Encoding into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut body, &self.registry);
        body
    }
}
