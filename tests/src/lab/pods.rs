//! Backend "pods" for the lab: one network namespace per pod, joined to its node's namespace by a
//! veth pair, with an address from the pod range [`POD_CIDR`] that every node routes — the role a
//! CNI plugin plays in a real cluster. Each pod runs a tiny HTTP server on [`POD_PORT`] that
//! answers `GET /hostname` with the pod's name, like agnhost's `netexec /hostname`, and
//! `GET /source` with its name and the source address it saw (`web-1 192.0.2.100`), which tells
//! whether kube-proxy kept the client's address (`externalTrafficPolicy: Local`) or masqueraded
//! it (`Cluster`), issue #13.
//!
//! In a dual-stack lab every pod also gets an IPv6 address: pod `k` owns `2001:db8:1b:k::/64`
//! ([`POD_CIDR_V6`]), the node side is `::1`, the pod `::2`; the server listens on `[::]`, which
//! takes both families (IPv4 peers are reported in their plain IPv4 form).
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

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use anyhow::{Context, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::{Lab, in_netns, sh, teardown, within_netns};

/// The pod range: every pod address is inside it (kube-proxy's `--cluster-cidr`).
pub const POD_CIDR: &str = "198.51.100.224/28";
/// The IPv6 pod range of a dual-stack lab (the second `--cluster-cidr`).
pub const POD_CIDR_V6: &str = "2001:db8:1b::/48";
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
    /// Its IPv6 address in a dual-stack lab.
    pub ip6: Option<Ipv6Addr>,
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

/// The IPv6 `/64` of pod `k`: `(network, node-side address, pod address)`.
fn pod_subnet_v6(k: usize) -> (Ipv6Addr, Ipv6Addr, Ipv6Addr) {
    let k = u16::try_from(k).unwrap_or(u16::MAX);
    let at = |host| Ipv6Addr::new(0x2001, 0xdb8, 0x1b, k, 0, 0, 0, host);
    (at(0), at(1), at(2))
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
        let dual_stack = self.nodes.iter().all(|n| n.ip6.is_some());
        for node in &self.nodes {
            let ns = node.netns.clone();
            within_netns(&ns, move || {
                std::fs::write("/proc/sys/net/ipv4/ip_forward", "1")
                    .context("enabling forwarding")?;
                if dual_stack {
                    std::fs::write("/proc/sys/net/ipv6/conf/all/forwarding", "1")
                        .context("enabling IPv6 forwarding")?;
                }
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
            let ip6 = match node.ip6.filter(|_| dual_stack) {
                Some(node_ip6) => {
                    let (net6, gateway6, ip6) = pod_subnet_v6(k);
                    let nodad = |ns: &str, addr: Ipv6Addr, dev: &str| {
                        in_netns(
                            ns,
                            "ip",
                            &["addr", "add", &format!("{addr}/64"), "dev", dev, "nodad"],
                        )
                    };
                    nodad(&node.netns, gateway6, &host_if)?;
                    nodad(&netns, ip6, "eth0")?;
                    in_netns(
                        &netns,
                        "ip",
                        &[
                            "-6",
                            "route",
                            "add",
                            "default",
                            "via",
                            &gateway6.to_string(),
                        ],
                    )?;
                    for other in self.nodes.iter().filter(|n| n.name != node.name) {
                        in_netns(
                            &other.netns,
                            "ip",
                            &[
                                "-6",
                                "route",
                                "add",
                                &format!("{net6}/64"),
                                "via",
                                &node_ip6.to_string(),
                            ],
                        )?;
                    }
                    Some(ip6)
                }
                None => None,
            };
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
                ip6,
            });
        }
        Ok(out)
    }
}

/// Binds `[::]:`[`POD_PORT`] inside `netns` (both families: the namespace keeps Linux's
/// default `bindv6only=0`) and serves `GET /hostname` and `GET /source` until the returned task
/// is aborted.
fn serve_hostname(netns: &str, name: &str) -> anyhow::Result<JoinHandle<()>> {
    let listener = within_netns(netns, || {
        let l = std::net::TcpListener::bind(SocketAddr::from((Ipv6Addr::UNSPECIFIED, POD_PORT)))?;
        l.set_nonblocking(true)?;
        Ok(l)
    })?;
    let listener = TcpListener::from_std(listener)?;
    let name = name.to_owned();
    Ok(tokio::spawn(async move {
        while let Ok((conn, peer)) = listener.accept().await {
            let name = name.clone();
            tokio::spawn(async move {
                let _ = answer(conn, &name, peer.ip().to_canonical()).await;
            });
        }
    }))
}

/// The longest request head the pod server reads.
const MAX_HEAD: usize = 8192;

/// Reads one HTTP/1.x request head and answers it: `GET /hostname` → 200 with `name`,
/// `GET /source` → 200 with `"<name> <peer>"` (see [`parse_source`]), anything else → 404.
/// Always `Connection: close`. Also the request handling of the real-node lab's backend image
/// (`ferrolb-test-backend`).
///
/// # Errors
/// Reading the request or writing the answer failed.
pub async fn answer(mut conn: TcpStream, name: &str, peer: IpAddr) -> std::io::Result<()> {
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
        (Some("GET"), Some("/source")) => ("200 OK", format!("{name} {peer}")),
        _ => ("404 Not Found", "not found\n".to_owned()),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(response.as_bytes()).await?;
    conn.shutdown().await
}

/// Splits a `GET /source` body into the pod's name and the source address it saw.
///
/// # Errors
/// The body is not `"<name> <address>"`.
pub fn parse_source(body: &str) -> anyhow::Result<(String, IpAddr)> {
    let (name, addr) = body
        .trim()
        .split_once(' ')
        .with_context(|| format!("not a /source answer: {body:?}"))?;
    let addr = addr
        .parse()
        .with_context(|| format!("bad address in /source answer {body:?}"))?;
    Ok((name.to_owned(), addr))
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

    #[test]
    fn v6_pod_subnets_are_distinct_and_inside_the_v6_pod_range() {
        assert_eq!(POD_CIDR_V6, "2001:db8:1b::/48");
        for k in 0..MAX_PODS {
            let (net, gw, ip) = pod_subnet_v6(k);
            for a in [net, gw, ip] {
                assert_eq!(a.segments()[..4], [0x2001, 0xdb8, 0x1b, k as u16]);
            }
            assert_eq!((gw.segments()[7], ip.segments()[7]), (1, 2));
        }
    }

    #[test]
    fn source_answers_parse() {
        assert_eq!(
            parse_source("web-1 192.0.2.100\n").unwrap(),
            ("web-1".to_owned(), "192.0.2.100".parse().unwrap())
        );
        assert_eq!(
            parse_source("web-2 2001:db8:1a::64").unwrap().1,
            "2001:db8:1a::64".parse::<IpAddr>().unwrap()
        );
        assert!(parse_source("web-1").is_err());
        assert!(parse_source("web-1 nonsense").is_err());
    }
}
