//! 802.1Q VLAN sub-interfaces on lab nodes and clients (issue #30, the VM lab: this machine's own
//! kernel has no 802.1Q driver, the VM lab's Debian kernel has). The LAN bridge `br0` is left as it
//! is: without `vlan_filtering` a Linux bridge forwards tagged frames untouched, like a switch whose
//! ports are all trunks, so every VLAN shares the wire and only the hosts' sub-interfaces tell them
//! apart — a host on VLAN 200 receives VLAN 100's broadcasts on its parent interface and its
//! kernel drops them. What a speaker puts on which VLAN is read from the wire with
//! [`super::frames::WireCapture`].

use super::{Lab, in_netns};

/// Name of the sub-interface of `parent` for VLAN `vid` (`eth0.100`).
pub fn vlan_name(parent: &str, vid: u16) -> String {
    format!("{parent}.{vid}")
}

/// Creates `parent.vid` (802.1Q) in namespace `netns`, moves IPv4 address `addr` (with prefix)
/// from `parent` to it, and sets it up. Returns its name. The sub-interface has the parent's MAC.
///
/// # Errors
/// `ip` failed (e.g. no 802.1Q driver: run it in the VM lab).
pub fn move_address_to_vlan(
    netns: &str,
    parent: &str,
    vid: u16,
    addr: &str,
) -> anyhow::Result<String> {
    let name = vlan_name(parent, vid);
    let run = |args: &[&str]| in_netns(netns, "ip", args).map(|_| ());
    run(&[
        "link",
        "add",
        "link",
        parent,
        "name",
        &name,
        "type",
        "vlan",
        "id",
        &vid.to_string(),
    ])?;
    run(&["addr", "del", addr, "dev", parent])?;
    run(&["addr", "add", addr, "dev", &name])?;
    run(&["link", "set", &name, "up"])?;
    Ok(name)
}

impl Lab {
    /// Moves node `node`'s IPv4 address from `parent` (`eth0`, or `bond0` after
    /// [`Lab::bond_node`]) to a new sub-interface `parent.vid`: the node is on VLAN `vid` only,
    /// and its speaker talks to the other nodes there. [`super::LabNode::mac`] stays valid (a
    /// sub-interface has its parent's MAC). IPv4 labs only.
    ///
    /// # Errors
    /// `ip` failed, or the lab is dual-stack.
    pub fn move_node_to_vlan(&self, node: &str, parent: &str, vid: u16) -> anyhow::Result<String> {
        let n = self.node(node);
        anyhow::ensure!(n.ip6.is_none(), "VLAN nodes: IPv4 labs only");
        move_address_to_vlan(&n.netns, parent, vid, &format!("{}/24", n.ip))
    }

    /// Moves client `client`'s address from its `eth0` to a new `eth0.vid`, with the routes to
    /// the pool ranges: a host on VLAN `vid`. Its `eth0` stays up, without an address. Returns the
    /// sub-interface's name. IPv4 labs only.
    ///
    /// # Errors
    /// `ip` failed, or the lab is dual-stack.
    pub fn move_client_to_vlan(&self, client: usize, vid: u16) -> anyhow::Result<String> {
        let c = self
            .clients
            .get(client)
            .ok_or_else(|| anyhow::anyhow!("no client {client}"))?;
        anyhow::ensure!(c.ip6.is_none(), "VLAN clients: IPv4 labs only");
        let name = move_address_to_vlan(&c.netns, "eth0", vid, &format!("{}/24", c.ip))?;
        for pool_range in ["198.51.100.0/24", "203.0.113.0/24"] {
            let _ = in_netns(&c.netns, "ip", &["route", "del", pool_range, "dev", "eth0"]);
            in_netns(&c.netns, "ip", &["route", "add", pool_range, "dev", &name])?;
        }
        Ok(name)
    }
}
