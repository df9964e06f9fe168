//! The controller's readiness and metrics for the shared admin endpoints
//! ([`ferrolb_runtime::admin`]): `/readyz` is 200 once every watch has synced once — never
//! dependent on leadership (R13) — and `/metrics` serves [`Metrics`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ferrolb_runtime::admin::Probe;

use crate::metrics::Metrics;

/// Shared state of the endpoints.
#[derive(Debug, Clone)]
pub struct Health {
    /// Set once every watch has delivered its initial list.
    pub ready: Arc<AtomicBool>,
    /// The metrics to serve.
    pub metrics: Arc<Metrics>,
}

impl Probe for Health {
    fn ready(&self) -> Result<(), String> {
        if self.ready.load(Ordering::Relaxed) {
            Ok(())
        } else {
            Err("watches not synced yet".into())
        }
    }

    fn metrics(&self) -> String {
        self.metrics.encode()
    }
}
