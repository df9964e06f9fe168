//! The admin HTTP endpoints of both binaries, served with axum:
//! - `/livez`: 200 while the process runs;
//! - `/readyz`: 200 when the binary's readiness check says so, else 503 with its reason;
//! - `/metrics`: the OpenMetrics text of the binary's `prometheus-client` registry, with the
//!   OpenMetrics content type (Prometheus scrapes it natively).
//!
//! The speaker serves them on the host network, so any host of the LAN may connect (issue #27
//! item 8). [`serve`] bounds what a client can hold ([`Limits`], `docs/security.md`): the
//! request head must arrive within [`Limits::header_read_timeout`] (also between requests on a
//! kept-alive connection), a handler has [`Limits::handler_timeout`], a connection lives at most
//! [`Limits::connection_lifetime`] whatever it does (a client that never reads its response),
//! at most [`Limits::max_connections_per_peer`] connections per client address are served (more
//! are closed at once) and at most [`Limits::max_connections`] in all (more wait in the kernel's
//! accept queue, first come first served, until one ends). Where it listens is the binaries'
//! `--admin-address` (`FERROLB_ADMIN_ADDRESS`).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

/// The router (exposed for tests), without the handler timeout [`serve`] adds.
pub fn router(probe: Arc<dyn Probe>) -> Router {
    Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(probe)
}

/// What one client of the admin endpoints can hold (see the module docs). The defaults are
/// what both binaries use; a Prometheus scrape and a kubelet probe need well under a second of
/// each and one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Time for a request's head (request line and headers) to arrive, counted from the
    /// connection's start or the end of the previous response: hyper's
    /// `http1::Builder::header_read_timeout`. Also closes idle kept-alive connections.
    pub header_read_timeout: Duration,
    /// Time a handler may take; then the response is 503 (tower-http's `TimeoutLayer`).
    pub handler_timeout: Duration,
    /// Longest life of one connection, whatever it is doing; then it is closed.
    pub connection_lifetime: Duration,
    /// Connections served at once, all clients together; further ones wait to be accepted.
    pub max_connections: usize,
    /// Connections served at once from one client IP address; a further one is closed at once.
    pub max_connections_per_peer: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(5),
            handler_timeout: Duration::from_secs(5),
            connection_lifetime: Duration::from_secs(30),
            max_connections: 64,
            max_connections_per_peer: 8,
        }
    }
}

/// Serves the endpoints on `addr` with the default [`Limits`] until the task is dropped.
///
/// # Errors
/// The address cannot be bound, or accepting connections fails.
pub async fn serve(addr: SocketAddr, probe: Arc<dyn Probe>) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "admin endpoints (/livez, /readyz, /metrics) listening");
    serve_on(listener, probe, Limits::default()).await
}

/// Connections open per client address; a slot is given back when its guard drops.
#[derive(Default)]
struct PerPeer(Mutex<HashMap<IpAddr, usize>>);

/// One connection's slot in [`PerPeer`].
struct PeerSlot {
    peers: Arc<PerPeer>,
    ip: IpAddr,
}

impl PerPeer {
    /// A slot for `ip`, or `None` when it holds `max` already.
    fn take(self: &Arc<Self>, ip: IpAddr, max: usize) -> Option<PeerSlot> {
        let mut open = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = open.entry(ip).or_default();
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(PeerSlot {
            peers: self.clone(),
            ip,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut open = self
            .peers
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = open.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// Serves the endpoints on `listener` within `limits` (see the module docs) until the task is
/// dropped; [`serve`] with the defaults is what the binaries run.
///
/// # Errors
/// Accepting a connection fails with an error that is not about that one connection.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    probe: Arc<dyn Probe>,
    limits: Limits,
) -> std::io::Result<()> {
    let app = router(probe).layer(tower_http::timeout::TimeoutLayer::with_status_code(
        StatusCode::SERVICE_UNAVAILABLE,
        limits.handler_timeout,
    ));
    let service = hyper_util::service::TowerToHyperService::new(app);
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    let peers = Arc::new(PerPeer::default());
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    loop {
        // Wait for a free slot before accepting: the rest wait in the accept queue.
        let slot = slots
            .clone()
            .acquire_owned()
            .await
            .map_err(std::io::Error::other)?;
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            // One connection's trouble (reset before accept, out of file descriptors for a
            // moment): back off briefly instead of spinning or failing the server.
            Err(e) => {
                tracing::debug!(error = %e, "admin endpoints: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(peer_slot) = peers.take(peer.ip(), limits.max_connections_per_peer) else {
            tracing::debug!(%peer, "admin endpoints: too many connections from this address");
            continue;
        };
        let conn = http.serve_connection(hyper_util::rt::TokioIo::new(stream), service.clone());
        let lifetime = limits.connection_lifetime;
        tokio::spawn(async move {
            let _held = (slot, peer_slot);
            match tokio::time::timeout(lifetime, conn).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::trace!(%peer, error = %e, "admin connection ended"),
                Err(_) => tracing::debug!(%peer, "admin connection closed: lifetime over"),
            }
        });
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    //! Issue #27 item 8: each limit against a real socket on loopback.

    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpSocket, TcpStream};
    use tokio::time::timeout;

    struct Fixed(String);

    impl Probe for Fixed {
        fn ready(&self) -> Result<(), String> {
            Ok(())
        }
        fn metrics(&self) -> String {
            self.0.clone()
        }
    }

    const SLACK: Duration = Duration::from_secs(3);

    /// A server with `limits` on an ephemeral loopback port, serving `metrics` bytes of metrics.
    async fn start(limits: Limits, metrics: usize) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let probe: Arc<dyn Probe> = Arc::new(Fixed("x".repeat(metrics)));
        tokio::spawn(serve_on(listener, probe, limits));
        addr
    }

    /// A connection to `to` from the loopback address `from` (all of 127/8 is local).
    async fn connect_from(from: [u8; 4], to: SocketAddr) -> TcpStream {
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind((IpAddr::from(from), 0).into()).unwrap();
        socket.connect(to).await.unwrap()
    }

    /// Whether the server closed `stream` within `within` (EOF or reset), reading what comes.
    async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
        let mut buf = vec![0u8; 64 * 1024];
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
                Err(_) => return false,
                Ok(Ok(0) | Err(_)) => return true,
                Ok(Ok(_)) => {}
            }
        }
    }

    /// `GET /livez` on `stream`: whether a 200 came within `within`.
    async fn livez(stream: &mut TcpStream, within: Duration) -> bool {
        stream
            .write_all(b"GET /livez HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 256];
        match timeout(within, stream.read(&mut buf)).await {
            Ok(Ok(n)) => buf[..n].starts_with(b"HTTP/1.1 200"),
            _ => false,
        }
    }

    fn limits() -> Limits {
        Limits {
            header_read_timeout: Duration::from_secs(60),
            handler_timeout: Duration::from_secs(60),
            connection_lifetime: Duration::from_secs(60),
            max_connections: 64,
            max_connections_per_peer: 64,
        }
    }

    #[tokio::test]
    async fn a_client_that_sends_no_complete_request_head_is_closed() {
        let addr = start(
            Limits {
                header_read_timeout: Duration::from_millis(300),
                ..limits()
            },
            10,
        )
        .await;
        // Silent from the start.
        let mut silent = TcpStream::connect(addr).await.unwrap();
        // Slowloris: half a head, then nothing.
        let mut slow = TcpStream::connect(addr).await.unwrap();
        slow.write_all(b"GET /livez HTTP/1.1\r\nx-a: ")
            .await
            .unwrap();
        // Idle after a complete request on a kept-alive connection.
        let mut idle = TcpStream::connect(addr).await.unwrap();
        assert!(livez(&mut idle, SLACK).await);
        for (what, stream) in [
            ("silent", &mut silent),
            ("slow", &mut slow),
            ("idle", &mut idle),
        ] {
            assert!(
                closed_within(stream, SLACK).await,
                "{what} connection still open"
            );
        }
    }

    #[tokio::test]
    async fn connections_from_one_address_are_capped() {
        let addr = start(
            Limits {
                max_connections_per_peer: 3,
                ..limits()
            },
            10,
        )
        .await;
        let mut held = Vec::new();
        for _ in 0..3 {
            let mut s = connect_from([127, 0, 0, 2], addr).await;
            assert!(livez(&mut s, SLACK).await);
            held.push(s);
        }
        // The fourth from that address is closed at once; another address is served.
        let mut fourth = connect_from([127, 0, 0, 2], addr).await;
        assert!(closed_within(&mut fourth, SLACK).await);
        let mut other = connect_from([127, 0, 0, 3], addr).await;
        assert!(livez(&mut other, SLACK).await);
        // A connection that ends gives its slot back.
        drop(held.pop());
        let mut s = connect_from([127, 0, 0, 2], addr).await;
        let mut served = livez(&mut s, SLACK).await;
        for _ in 0..20 {
            if served {
                break;
            }
            // The server may not have seen the close yet.
            tokio::time::sleep(Duration::from_millis(50)).await;
            s = connect_from([127, 0, 0, 2], addr).await;
            served = livez(&mut s, SLACK).await;
        }
        assert!(served);
    }

    #[tokio::test]
    async fn connections_in_all_are_capped_and_the_next_one_waits_its_turn() {
        let addr = start(
            Limits {
                max_connections: 2,
                ..limits()
            },
            10,
        )
        .await;
        let mut a = connect_from([127, 0, 0, 4], addr).await;
        let mut b = connect_from([127, 0, 0, 5], addr).await;
        assert!(livez(&mut a, SLACK).await && livez(&mut b, SLACK).await);
        // A third client is not served while both are held (it waits, it is not refused) ...
        let mut c = connect_from([127, 0, 0, 6], addr).await;
        assert!(!livez(&mut c, Duration::from_millis(500)).await);
        // ... and is, as soon as one ends.
        drop(a);
        let mut buf = [0u8; 256];
        let n = timeout(SLACK, c.read(&mut buf)).await.unwrap().unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    }

    #[tokio::test]
    async fn a_client_that_never_reads_its_response_is_closed_after_the_lifetime() {
        // 16 MiB of metrics: more than the loopback socket buffers hold.
        let body = 16 << 20;
        let addr = start(
            Limits {
                connection_lifetime: Duration::from_millis(500),
                ..limits()
            },
            body,
        )
        .await;
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        // Reading now gets what was buffered, then the end: not the whole body.
        let mut got = 0usize;
        let mut buf = vec![0u8; 1 << 20];
        let ended = timeout(SLACK, async {
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got += n,
                }
            }
        })
        .await;
        assert!(
            ended.is_ok() && got < body,
            "read {got} bytes, ended: {ended:?}"
        );
    }

    #[test]
    fn the_defaults_are_documented_values() {
        // docs/security.md and docs/metrics.md quote these.
        let d = Limits::default();
        assert_eq!(d.header_read_timeout, Duration::from_secs(5));
        assert_eq!(d.handler_timeout, Duration::from_secs(5));
        assert_eq!(d.connection_lifetime, Duration::from_secs(30));
        assert_eq!((d.max_connections, d.max_connections_per_peer), (64, 8));
    }
}
