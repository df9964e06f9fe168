//! `ferrolb-test-backend`: the backend pod of the real-node lab, in the image
//! `ferrolb-test-backend:<version>` that `tests/image/build.sh` builds. It is the network-namespace
//! lab's in-process pod server (`tests/src/lab/pods.rs`, whose request handling it shares) as a
//! program of its own:
//!
//! - `GET /hostname` answers the pod's name: `$POD_NAME` (set it from the downward API,
//!   `fieldRef: metadata.name`), else the host name (`uname`), which Kubernetes sets to the pod's
//!   name;
//! - `GET /source` answers `"<name> <source address>"` (`web-1 192.0.2.100`), which tells whether
//!   kube-proxy kept the client's address (`externalTrafficPolicy: Local`) or masqueraded it
//!   (`Cluster`); an IPv4 peer is printed as plain IPv4, not as `::ffff:a.b.c.d`;
//! - anything else is 404. Every answer is `text/plain` with `Connection: close`.
//!
//! It listens on `[::]:$PORT` (default 8080), which takes both address families; on a host
//! without IPv6 it falls back to `0.0.0.0`. SIGTERM or SIGINT ends it with status 0 at once (as
//! its container's PID 1 it would otherwise ignore SIGTERM and wait for the kill after the grace
//! period).

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use anyhow::Context;
use ferrolb_tests::lab::pods::answer;
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};

/// The port without `$PORT`.
const DEFAULT_PORT: u16 = 8080;

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let port = match std::env::var("PORT") {
        Ok(p) => p
            .parse()
            .with_context(|| format!("PORT={p:?} is not a port"))?,
        Err(_) => DEFAULT_PORT,
    };
    let name = match std::env::var("POD_NAME") {
        Ok(n) if !n.is_empty() => n,
        _ => nix::sys::utsname::uname()
            .context("no POD_NAME, and uname failed")?
            .nodename()
            .to_string_lossy()
            .into_owned(),
    };
    let listener = match TcpListener::bind(SocketAddr::from((Ipv6Addr::UNSPECIFIED, port))).await {
        Ok(l) => l,
        Err(v6) => TcpListener::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)))
            .await
            .with_context(|| format!("binding port {port} ([::]: {v6})"))?,
    };
    eprintln!(
        "ferrolb-test-backend: {name} listening on {}",
        listener.local_addr()?
    );
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (conn, peer) = accepted.context("accepting a connection")?;
                let name = name.clone();
                tokio::spawn(async move {
                    let _ = answer(conn, &name, peer.ip().to_canonical()).await;
                });
            }
            _ = term.recv() => return Ok(()),
            _ = int.recv() => return Ok(()),
        }
    }
}
