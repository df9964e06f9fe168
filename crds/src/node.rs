//! Which addresses are Node addresses (R10): the `InternalIP` and `ExternalIP` entries of
//! `status.addresses`, parsed with [`crate::addresses::parse_ip`] like every address ferrolb reads.
//! The controller never hands them out and the speaker never announces them
//! ([`crate::ownership`]). Pure: no `kube`, no `tokio`.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Node;

use crate::addresses::parse_ip;

/// The address types that count as Node addresses.
pub const NODE_ADDRESS_TYPES: [&str; 2] = ["InternalIP", "ExternalIP"];

/// `InternalIP` and `ExternalIP` addresses of a Node, in status order; entries that are not IP
/// addresses are skipped.
pub fn addresses(node: &Node) -> Vec<IpAddr> {
    node.status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .map(|addrs| {
            addrs
                .iter()
                .filter(|a| NODE_ADDRESS_TYPES.contains(&a.type_.as_str()))
                .filter_map(|a| parse_ip(&a.address))
                .collect()
        })
        .unwrap_or_default()
}

/// Every Node address with the name of its Node (the last Node listed wins when two claim one
/// address), as [`crate::ownership::Layout::build`] takes them.
pub fn address_map<'a>(nodes: impl IntoIterator<Item = &'a Node>) -> BTreeMap<IpAddr, String> {
    let mut out = BTreeMap::new();
    for node in nodes {
        let name = node.metadata.name.clone().unwrap_or_default();
        for ip in addresses(node) {
            out.insert(ip, name.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeAddress, NodeStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn node(name: &str, addrs: &[(&str, &str)]) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            status: Some(NodeStatus {
                addresses: Some(
                    addrs
                        .iter()
                        .map(|(t, a)| NodeAddress {
                            type_: (*t).into(),
                            address: (*a).into(),
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn internal_and_external_ips_only_strictly_parsed() {
        let n = node(
            "node-1",
            &[
                ("InternalIP", "192.0.2.11"),
                ("Hostname", "192.0.2.12"),
                ("ExternalIP", "2001:db8::1"),
                ("InternalIP", "::ffff:192.0.2.13"),
                ("InternalIP", "fe80::1%eth0"),
                ("InternalIP", "node-1.example"),
            ],
        );
        let want: Vec<IpAddr> = vec![
            "192.0.2.11".parse().unwrap(),
            "2001:db8::1".parse().unwrap(),
        ];
        assert_eq!(addresses(&n), want);
        let map = address_map([&n, &node("node-2", &[("InternalIP", "192.0.2.11")])]);
        assert_eq!(map.len(), 2);
        assert_eq!(map[&want[0]], "node-2");
    }
}
