//! Backend "pods" for the lab: one network namespace per pod, joined to its node's namespace by a
//! veth pair, with an address from the pod range [`POD_CIDR`] that every node routes — the role a
//! CNI plugin plays in a real cluster. Each pod runs a tiny HTTP server on [`POD_PORT`] that
//! answers `GET /hostname` with the pod's name, like agnhost's `netexec /hostname`.
//!
//! Address plan (documentation range only): pod `k` (0-based, at most four) owns the `/30`
//! `198.51.100.(224+4k)/30`; the node side of its veth is `.225+4k`, the pod itself `.226+4k`. The
//! node-side interface is named `vethpod<k>`, so the speaker skips it like any CNI veth (DESIGN
//! S8). Every other node gets a route for that `/30` via the owning node's LAN address, and all
//! node namespaces forward (`net.ipv4.ip_forward=1`).
//!
//! The HTTP server is a socket bound inside the pod namespace (a socket keeps the namespace it was
//! created in) and served by a task of the calling Tokio runtime, so no process runs in the pod
//! namespace. [`Pods`] is an RAII guard: dropping it stops the servers and deletes the pod
//! namespaces (the veths go with them), also after a failure.

use std::net::{Ipv4Addr, SocketAddr};

use anyhow::{Context, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::{Lab, in_netns, sh, teardown, within_netns};

/// The pod range: every pod address is inside it (kube-proxy's `--cluster-cidr`).
pub const POD_CIDR: &str = "198.51.100.224/28";
/// The port every pod's HTTP server listens on (the Service's `targetPort`).
pub const POD_PORT: u16 = 8080;
/// At most this many pods fit in [`POD_CIDR`] (one `/30` each).
pub const MAX_PODS: usize = 4;

/// One backend pod.
#[derive(Debug, Clone)]
pub struct Pod {
    /// Pod name — also what `GET /hostname` answers.
    pub name: String,
    /// The node it runs on (`node-1`, …): the EndpointSlice's `nodeName`.
    pub node: String,
    /// Network namespace name.
    pub netns: String,
    /// The pod's address (on its `eth0`).
    pub ip: Ipv4Addr,
}

/// The running pods of a lab. Dropping it stops their servers and deletes their namespaces.
pub struct Pods {
    /// The pods, in the order they were asked for.
    pub pods: Vec<Pod>,
    netns: Vec<String>,
    servers: Vec<JoinHandle<()>>,
}

impl Drop for Pods {
    fn drop(&mut self) {
        for server in &self.servers {
            server.abort();
        }
        teardown(&self.netns);
    }
}

/// The `/30` of pod `k`: `(network, node-side address, pod address)`.
fn pod_subnet(k: usize) -> (Ipv4Addr, Ipv4Addr, Ipv4Addr) {
    let base = 224 + 4 * k as u8;
    (
        Ipv4Addr::new(198, 51, 100, base),
        Ipv4Addr::new(198, 51, 100, base + 1),
        Ipv4Addr::new(198, 51, 100, base + 2),
    )
}

impl Lab {
    /// Creates one pod per `(pod name, node name)` entry, routes the pod range between all nodes,
    /// turns on forwarding in every node namespace, and starts each pod's HTTP server. Must be
    /// called from inside a Tokio runtime.
    ///
    /// # Errors
    /// More than [`MAX_PODS`] pods, an unknown node, `ip` failed, or a server could not bind.
    pub fn add_pods(&self, pods: &[(&str, &str)]) -> anyhow::Result<Pods> {
        if pods.len() > MAX_PODS {
            bail!(
                "at most {MAX_PODS} pods fit in {POD_CIDR}, asked for {}",
                pods.len()
            );
        }
        let mut out = Pods {
            pods: Vec::new(),
            netns: Vec::new(),
            servers: Vec::new(),
        };
        for node in &self.nodes {
            let ns = node.netns.clone();
            within_netns(&ns, || {
                std::fs::write("/proc/sys/net/ipv4/ip_forward", "1")
                    .context("enabling forwarding")?;
                Ok(())
            })?;
        }
        for (k, (pod_name, node_name)) in pods.iter().enumerate() {
            let node = self
                .nodes
                .iter()
                .find(|n| n.name == *node_name)
                .with_context(|| format!("no lab node {node_name} for pod {pod_name}"))?;
            let (net, gateway, ip) = pod_subnet(k);
            let netns = format!("flb{}-p{k}", self.id);
            let host_if = format!("vethpod{k}");
            let _ = sh("ip", &["netns", "del", &netns]);
            sh("ip", &["netns", "add", &netns])?;
            out.netns.push(netns.clone());
            sh(
                "ip",
                &[
                    "link",
                    "add",
                    "name",
                    &host_if,
                    "netns",
                    &node.netns,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "eth0",
                    "netns",
                    &netns,
                ],
            )?;
            in_netns(
                &node.netns,
                "ip",
                &["addr", "add", &format!("{gateway}/30"), "dev", &host_if],
            )?;
            in_netns(&node.netns, "ip", &["link", "set", &host_if, "up"])?;
            in_netns(
                &netns,
                "ip",
                &["addr", "add", &format!("{ip}/30"), "dev", "eth0"],
            )?;
            in_netns(&netns, "ip", &["link", "set", "eth0", "up"])?;
            in_netns(&netns, "ip", &["link", "set", "lo", "up"])?;
            in_netns(
                &netns,
                "ip",
                &["route", "add", "default", "via", &gateway.to_string()],
            )?;
            for other in self.nodes.iter().filter(|n| n.name != node.name) {
                in_netns(
                    &other.netns,
                    "ip",
                    &[
                        "route",
                        "add",
                        &format!("{net}/30"),
                        "via",
                        &node.ip.to_string(),
                    ],
                )?;
            }
            out.servers.push(serve_hostname(&netns, pod_name)?);
            out.pods.push(Pod {
                name: (*pod_name).to_owned(),
                node: node.name.clone(),
                netns,
                ip,
            });
        }
        Ok(out)
    }
}

/// Binds `0.0.0.0:`[`POD_PORT`] inside `netns` and serves `GET /hostname` → `name` until the
/// returned task is aborted.
fn serve_hostname(netns: &str, name: &str) -> anyhow::Result<JoinHandle<()>> {
    let listener = within_netns(netns, || {
        let l = std::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, POD_PORT)))?;
        l.set_nonblocking(true)?;
        Ok(l)
    })?;
    let listener = TcpListener::from_std(listener)?;
    let name = name.to_owned();
    Ok(tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            let name = name.clone();
            tokio::spawn(async move {
                let _ = answer(conn, &name).await;
            });
        }
    }))
}

/// The longest request head the pod server reads.
const MAX_HEAD: usize = 8192;

/// Reads one HTTP/1.x request head and answers it: `GET /hostname` → 200 with `name`, anything
/// else → 404. Always `Connection: close`.
async fn answer(mut conn: TcpStream, name: &str) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD {
        let n = conn.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(buf.get(..n).unwrap_or_default());
    }
    let text = String::from_utf8_lossy(&head);
    let mut request_line = text.lines().next().unwrap_or_default().split_whitespace();
    let (status, body) = match (request_line.next(), request_line.next()) {
        (Some("GET"), Some("/hostname")) => ("200 OK", name.to_owned()),
        _ => ("404 Not Found", "not found\n".to_owned()),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(response.as_bytes()).await?;
    conn.shutdown().await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn pod_subnets_are_disjoint_slash30s_inside_the_pod_range() {
        for k in 0..MAX_PODS {
            let (net, gw, ip) = pod_subnet(k);
            assert_eq!(net.octets()[3] % 4, 0);
            assert_eq!(u32::from(gw), u32::from(net) + 1);
            assert_eq!(u32::from(ip), u32::from(net) + 2);
            assert!((224..240).contains(&net.octets()[3]));
        }
        assert_eq!(pod_subnet(MAX_PODS - 1).2, Ipv4Addr::new(198, 51, 100, 238));
    }
}
