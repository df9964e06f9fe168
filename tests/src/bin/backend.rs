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
//!
//! As `/agnhost` in the lab's stand-in for `registry.k8s.io/e2e-test-images/agnhost` (the README
//! quickstart runs `/agnhost netexec --http-port=8080`), it takes agnhost's arguments:
//! `netexec` and `--http-port=N` (or `--http-port N`) set the port; any other argument is an
//! error naming it, so a quickstart that needs more of agnhost fails loudly in the lab.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use anyhow::Context;
use ferrolb_tests::lab::pods::answer;
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};

/// The port without `$PORT`.
const DEFAULT_PORT: u16 = 8080;

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let port = match agnhost_port(std::env::args().skip(1))? {
        Some(p) => p,
        None => match std::env::var("PORT") {
            Ok(p) => p
                .parse()
                .with_context(|| format!("PORT={p:?} is not a port"))?,
            Err(_) => DEFAULT_PORT,
        },
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

/// The port agnhost's `netexec --http-port=N` arguments ask for, if any (module docs).
///
/// # Errors
/// An argument agnhost's `netexec` stand-in does not take, or a port that does not parse.
fn agnhost_port(args: impl Iterator<Item = String>) -> anyhow::Result<Option<u16>> {
    let mut port = None;
    let mut args = args.peekable();
    while let Some(arg) = args.next() {
        let value = match arg.as_str() {
            "netexec" => continue,
            "--http-port" => args.next().context("--http-port without a value")?,
            other => match other.strip_prefix("--http-port=") {
                Some(v) => v.to_owned(),
                None => anyhow::bail!("{other:?}: only `netexec --http-port=N` is served"),
            },
        };
        port = Some(
            value
                .parse()
                .with_context(|| format!("--http-port {value:?} is not a port"))?,
        );
    }
    Ok(port)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::agnhost_port;

    fn port(args: &[&str]) -> anyhow::Result<Option<u16>> {
        agnhost_port(args.iter().map(|a| (*a).to_owned()))
    }

    #[test]
    fn takes_agnhost_netexec_arguments_and_refuses_the_rest() {
        assert_eq!(port(&[]).unwrap(), None);
        assert_eq!(port(&["netexec", "--http-port=8080"]).unwrap(), Some(8080));
        assert_eq!(
            port(&["netexec", "--http-port", "9376"]).unwrap(),
            Some(9376)
        );
        assert!(port(&["netexec", "--udp-port=8081"]).is_err());
        assert!(port(&["netexec", "--http-port=x"]).is_err());
    }
}
