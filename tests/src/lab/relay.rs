//! The API-server relay into a lab namespace: a TCP listener created inside the namespace (a socket
//! keeps the namespace it was created in), whose connections are forwarded to the API server's
//! loopback port in the test process's namespace. See the lab's module docs for why.

use std::net::{Ipv4Addr, SocketAddr};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::within_netns;

/// Listens on `127.0.0.1:listen_port` inside `netns` and forwards every connection to
/// `127.0.0.1:target_port` here. Runs until the returned task is aborted.
///
/// # Errors
/// The namespace cannot be entered or the port bound.
pub fn start(netns: &str, listen_port: u16, target_port: u16) -> anyhow::Result<JoinHandle<()>> {
    start_at(
        netns,
        SocketAddr::from((Ipv4Addr::LOCALHOST, listen_port)),
        target_port,
    )
}

/// Like [`start`], listening on `listen` (an address of the namespace) instead of loopback.
///
/// # Errors
/// As [`start`].
pub fn start_at(
    netns: &str,
    listen: SocketAddr,
    target_port: u16,
) -> anyhow::Result<JoinHandle<()>> {
    let listener = within_netns(netns, move || {
        let l = std::net::TcpListener::bind(listen)?;
        l.set_nonblocking(true)?;
        Ok(l)
    })?;
    let listener = TcpListener::from_std(listener)?;
    Ok(tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut outbound) =
                    TcpStream::connect((Ipv4Addr::LOCALHOST, target_port)).await
                {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    }))
}
