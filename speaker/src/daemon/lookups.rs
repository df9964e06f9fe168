//! Reads of the watch stores the daemon's executor needs besides the view: this Node's
//! addresses, the membership peers, the stored `L2Announcement` reports.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

use crate::view::node_addresses;
use crate::watch::Stores;

/// The stored L2Announcements by name, as [`crate::announcements::Stored`].
pub(super) fn stored_announcements(
    stores: &Stores,
) -> BTreeMap<String, crate::announcements::Stored> {
    stores
        .announcements
        .state()
        .iter()
        .filter_map(|a| {
            let name = a.metadata.name.clone()?;
            Some((
                name,
                crate::announcements::Stored {
                    node: a.spec.node.clone(),
                    interfaces: a.spec.interfaces.clone(),
                    services: a.spec.services.clone(),
                    since: a.spec.since.as_ref().map(|t| t.0.to_string()),
                    held_by: a.spec.held_by.clone(),
                },
            ))
        })
        .collect()
}

/// Every interface name an L2Advertisement lists in `spec.interfaces`: reported in this node's
/// carrier report besides the default set (issue #32 G5.5).
pub(super) fn named_interfaces(stores: &Stores) -> BTreeSet<String> {
    stores
        .advertisements
        .state()
        .iter()
        .flat_map(|a| a.spec.interfaces.iter().cloned())
        .collect()
}

/// The IPs a stored report says another host holds (`heldBy` set): probed before they are
/// announced, whoever owns them now. Reads only those two fields of each report.
pub(super) fn held_reported(stores: &Stores) -> BTreeSet<IpAddr> {
    stores
        .announcements
        .state()
        .iter()
        .filter(|a| a.spec.held_by.is_some())
        .filter_map(|a| a.spec.ip.parse().ok())
        .collect()
}

/// This Node's InternalIP/ExternalIP addresses (empty before its Node object is seen).
pub(super) fn own_addresses(stores: &Stores, me: &str) -> BTreeSet<IpAddr> {
    stores
        .nodes
        .get(&kube::runtime::reflector::ObjectRef::new(me))
        .map(|node| node_addresses(&node).into_iter().collect())
        .unwrap_or_default()
}

/// This Node's first InternalIP/ExternalIP: the default membership address.
pub(super) fn own_internal_ip(stores: &Stores, me: &str) -> Option<IpAddr> {
    let node = stores
        .nodes
        .get(&kube::runtime::reflector::ObjectRef::new(me))?;
    node_addresses(&node).into_iter().next()
}

/// Membership peers: every other Node's first InternalIP/ExternalIP at the memberlist port
/// (DESIGN S3: peers are found from Node objects).
pub(super) fn peer_addresses(stores: &Stores, me: &str, port: u16) -> Vec<SocketAddr> {
    stores
        .nodes
        .state()
        .iter()
        .filter(|n| n.metadata.name.as_deref() != Some(me))
        .filter_map(|n| node_addresses(n).into_iter().next())
        .map(|ip| SocketAddr::new(ip, port))
        .collect()
}
