//! The HTTP endpoints: `/livez` (the process runs), `/readyz` (every watch has synced once;
//! never depends on leadership, R13) and `/metrics`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

use crate::metrics::Metrics;

/// Shared state of the endpoints.
#[derive(Debug, Clone)]
pub struct Health {
    /// Set once every watch has delivered its initial list.
    pub ready: Arc<AtomicBool>,
    /// The metrics to serve.
    pub metrics: Arc<Metrics>,
}

/// The router (exposed for tests).
pub fn router(health: Health) -> Router {
    Router::new()
        .route("/livez", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(|State(h): State<Health>| async move {
                if h.ready.load(Ordering::Relaxed) {
                    (StatusCode::OK, "ready")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "watches not synced yet")
                }
            }),
        )
        .route(
            "/metrics",
            get(|State(h): State<Health>| async move {
                (
                    [("content-type", "text/plain; version=0.0.4; charset=utf-8")],
                    h.metrics.encode(),
                )
            }),
        )
        .with_state(health)
}

/// Serves until the task is dropped.
///
/// # Errors
/// Binding the address fails.
pub async fn serve(addr: SocketAddr, health: Health) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "HTTP endpoints listening");
    axum::serve(listener, router(health)).await
}
