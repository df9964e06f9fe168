//! The admin HTTP endpoints of both binaries, served with axum:
//! - `/livez`: 200 while the process runs;
//! - `/readyz`: 200 when the binary's readiness check says so, else 503 with its reason;
//! - `/metrics`: the OpenMetrics text of the binary's `prometheus-client` registry, with the
//!   OpenMetrics content type (Prometheus scrapes it natively).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

/// The content type of `/metrics`.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What the endpoints report, supplied by the binary.
pub trait Probe: Send + Sync + 'static {
    /// `Ok(())` when ready, else why not (the 503 body).
    fn ready(&self) -> Result<(), String>;
    /// The metrics in OpenMetrics text format.
    fn metrics(&self) -> String;
}

async fn livez() -> &'static str {
    "ok"
}

async fn readyz(State(p): State<Arc<dyn Probe>>) -> impl IntoResponse {
    match p.ready() {
        Ok(()) => (StatusCode::OK, "ok".to_owned()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
    }
}

async fn metrics(State(p): State<Arc<dyn Probe>>) -> impl IntoResponse {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)],
        p.metrics(),
    )
}

/// The router (exposed for tests).
pub fn router(probe: Arc<dyn Probe>) -> Router {
    Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(probe)
}

/// Serves the endpoints on `addr` until the task is dropped.
///
/// # Errors
/// The address cannot be bound, or the server fails.
pub async fn serve(addr: SocketAddr, probe: Arc<dyn Probe>) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "admin endpoints (/livez, /readyz, /metrics) listening");
    axum::serve(listener, router(probe)).await
}
