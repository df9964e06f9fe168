//! Node network topologies beyond one plain `eth0` (issue #10): the node's address on a Linux
//! bridge with the NIC enslaved, or a second NIC on the same segment. Built inside the node's
//! namespace only. This machine's kernel has no 802.1Q VLAN, bonding or dummy drivers
//! (`CONFIG_VLAN_8021Q`, `CONFIG_BONDING`, `CONFIG_DUMMY` off), so VLANs and bonds are built in the
//! VM lab only ([`super::vlans`], [`super::bonds`], issue #30); `docs/speaker.md` says how the
//! speaker treats them.

use super::{Lab, in_netns};

impl Lab {
    /// Moves node `node`'s address (IPv4, and IPv6 in a dual-stack lab) from `eth0` to a new
    /// bridge `br-node` with `eth0` as its only port, and gives the bridge MAC `bridge_mac`
    /// (different from `eth0`'s, so a frame sent from the port instead of the bridge is told
    /// apart on the LAN). Updates [`super::LabNode::mac`] to the bridge's MAC. `eth0` keeps its
    /// IPv6 link-local address, as bridge ports do.
    ///
    /// # Errors
    /// `ip` failed.
    pub fn bridge_node(&mut self, node: &str, bridge_mac: &str) -> anyhow::Result<()> {
        let (netns, ip, ip6) = {
            let n = self.node(node);
            (n.netns.clone(), n.ip, n.ip6)
        };
        let run = |args: &[&str]| in_netns(&netns, "ip", args).map(|_| ());
        run(&[
            "link",
            "add",
            "br-node",
            "type",
            "bridge",
            "forward_delay",
            "0",
        ])?;
        run(&["link", "set", "br-node", "address", bridge_mac])?;
        run(&["link", "set", "eth0", "master", "br-node"])?;
        run(&["addr", "del", &format!("{ip}/24"), "dev", "eth0"])?;
        run(&["addr", "add", &format!("{ip}/24"), "dev", "br-node"])?;
        if let Some(ip6) = ip6 {
            run(&["addr", "del", &format!("{ip6}/64"), "dev", "eth0"])?;
            run(&[
                "addr",
                "add",
                &format!("{ip6}/64"),
                "dev",
                "br-node",
                "nodad",
            ])?;
        }
        run(&["link", "set", "br-node", "up"])?;
        self.node_mut(node)?.mac = bridge_mac.to_lowercase();
        Ok(())
    }

    /// Adds a second NIC `ifname` to node `node`, plugged into the LAN bridge like `eth0`, with
    /// address `addr` (with prefix; e.g. `192.0.2.51/24`, the same subnet as `eth0`: two NICs
    /// on one segment). Returns its MAC.
    ///
    /// # Errors
    /// `ip` failed.
    pub fn add_lan_nic(&self, node: &str, ifname: &str, addr: &str) -> anyhow::Result<String> {
        self.add_segment_nic(node, ifname, addr, "br0")
    }

    /// A second segment (issue #32 G5.5): creates bridge `bridge` in the LAN namespace (if it
    /// does not exist yet) and moves client `client`'s port from `br0` to it, so that client
    /// sees only what reaches that segment. Its `eth0` keeps its address.
    ///
    /// # Errors
    /// `ip` failed.
    pub fn move_client_to_segment(&self, client: usize, bridge: &str) -> anyhow::Result<()> {
        let _ = in_netns(&self.lan, "ip", &["link", "add", bridge, "type", "bridge"]);
        in_netns(&self.lan, "ip", &["link", "set", bridge, "up"])?;
        let port = format!("c{}", client + 1);
        in_netns(&self.lan, "ip", &["link", "set", &port, "nomaster"])?;
        in_netns(
            &self.lan,
            "ip",
            &["link", "set", &port, "master", bridge, "up"],
        )?;
        Ok(())
    }

    /// Adds NIC `ifname` to node `node`, plugged into bridge `bridge` of the LAN namespace (see
    /// [`Lab::move_client_to_segment`]) with address `addr` (with prefix). Returns its MAC. Its
    /// port on the bridge is named like [`Lab::add_lan_nic`]'s; [`Lab::set_segment_port`]
    /// takes its carrier away.
    ///
    /// # Errors
    /// `ip` failed.
    pub fn add_segment_nic(
        &self,
        node: &str,
        ifname: &str,
        addr: &str,
        bridge: &str,
    ) -> anyhow::Result<String> {
        let netns = self.node(node).netns.clone();
        let port = format!("{}{ifname}", node.replace("node-", "n"));
        super::sh(
            "ip",
            &[
                "link", "add", "name", &port, "netns", &self.lan, "type", "veth", "peer", "name",
                ifname, "netns", &netns,
            ],
        )?;
        in_netns(
            &self.lan,
            "ip",
            &["link", "set", &port, "master", bridge, "up"],
        )?;
        in_netns(&netns, "ip", &["addr", "add", addr, "dev", ifname])?;
        in_netns(&netns, "ip", &["link", "set", ifname, "up"])?;
        super::mac_of(&netns, ifname)
    }

    /// Sets the LAN end of node `node`'s NIC `ifname` (added by [`Lab::add_segment_nic`] or
    /// [`Lab::add_lan_nic`]) up or down: the node's NIC stays administratively up and loses or
    /// regains carrier, as when a cable is pulled.
    ///
    /// # Errors
    /// `ip` failed.
    pub fn set_segment_port(&self, node: &str, ifname: &str, up: bool) -> anyhow::Result<()> {
        let port = format!("{}{ifname}", node.replace("node-", "n"));
        in_netns(
            &self.lan,
            "ip",
            &["link", "set", &port, if up { "up" } else { "down" }],
        )?;
        Ok(())
    }
}
