//! `/livez`, `/readyz` and `/metrics` (S9), served with axum.
//!
//! `/livez` is 200 while the process runs; `/readyz` is 200 once the watch stores have synced and
//! the responder has started (503 before); `/metrics` is Prometheus text format.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;

/// Shared state of the HTTP endpoints.
pub struct Health {
    /// Set once the speaker is serving.
    pub ready: AtomicBool,
    /// The metrics registry.
    pub registry: Registry,
}

async fn livez() -> &'static str {
    "ok"
}

async fn readyz(State(h): State<Arc<Health>>) -> impl IntoResponse {
    if h.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

async fn metrics(State(h): State<Arc<Health>>) -> impl IntoResponse {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &h.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        ),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain")],
            String::new(),
        ),
    }
}

/// Serves the endpoints on `addr` until the task is dropped.
///
/// # Errors
/// The address cannot be bound.
pub async fn serve(addr: SocketAddr, health: Arc<Health>) -> std::io::Result<()> {
    let app = Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(health);
    let listener = tokio::net::TcpListener::bind(addr).await?;
    axum::serve(listener, app).await
}
