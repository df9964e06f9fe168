//! Bonded lab nodes (issue #30, the VM lab: this machine's own kernel has no bonding driver, the
//! VM lab's Debian kernel has). [`Lab::bond_node`] replaces a node's `eth0` by `bond0` over two
//! slaves, `eth0` and a new `eth1`, each a veth to the LAN namespace; the bond carries the node's
//! address and a MAC of its own, distinct from both slaves' permanent MACs, so a frame sent with
//! a slave's own MAC is told apart on the wire.
//!
//! The switch side ([`SwitchSide`]): two independent bridge ports (what `active-backup` needs,
//! and a switch without link aggregation), or a bond in the LAN namespace over the two switch
//! ends, itself a port of `br0` — the static LAG `balance-xor` expects of its switch, or the LACP
//! partner of an `802.3ad` bond. Slaves are watched with `miimon` every 100 ms, so a pulled cable
//! ([`Lab::set_bond_cable`]) fails the slave over within a few monitor rounds.

use anyhow::Context;

use super::{Lab, in_netns, mac_of};

/// The bonding mode of a node's bond (and of the switch-side bond, if any).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BondMode {
    /// `active-backup`: one slave carries everything, the other waits.
    ActiveBackup,
    /// `balance-xor`: both slaves carry traffic, spread by a hash; needs a static LAG on the
    /// switch.
    BalanceXor,
    /// `802.3ad`: LACP with the switch (fast rate: a LACPDU every second).
    Lacp,
}

impl BondMode {
    /// The mode's `ip link` arguments (mode, monitor, LACP rate).
    fn args(self) -> Vec<&'static str> {
        let mut args = vec!["type", "bond", "mode"];
        args.push(match self {
            BondMode::ActiveBackup => "active-backup",
            BondMode::BalanceXor => "balance-xor",
            BondMode::Lacp => "802.3ad",
        });
        args.extend(["miimon", "100"]);
        if self == BondMode::Lacp {
            args.extend(["lacp_rate", "fast"]);
        }
        args
    }
}

/// What the node's two slaves are plugged into in the LAN namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwitchSide {
    /// Two ports of `br0`.
    Ports,
    /// One bond of the same mode over the two switch ends, as a port of `br0`.
    Bond,
}

/// One slave of a node's bond.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BondSlave {
    /// Its name in the node's namespace (`eth0`, `eth1`).
    pub name: String,
    /// Its own MAC from before it was enslaved (lowercase).
    pub permanent_mac: String,
    /// The other end of its cable in the LAN namespace.
    pub switch_port: String,
}

/// A node's bond as [`Lab::bond_node`] built it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BondedNode {
    /// The node.
    pub node: String,
    /// The bond's name in the node's namespace.
    pub bond: String,
    /// The bond's MAC (lowercase).
    pub mac: String,
    /// Its slaves, `eth0` first.
    pub slaves: Vec<BondSlave>,
    /// The switch-side bond in the LAN namespace ([`SwitchSide::Bond`]).
    pub switch_bond: Option<String>,
}

impl BondedNode {
    /// The slave named `name`.
    ///
    /// # Panics
    /// No such slave (a test bug).
    #[allow(clippy::panic)]
    pub fn slave(&self, name: &str) -> &BondSlave {
        self.slaves
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("{} has no slave {name}", self.bond))
    }

    /// The slave whose switch end is `port`.
    pub fn slave_at_port(&self, port: &str) -> Option<&BondSlave> {
        self.slaves.iter().find(|s| s.switch_port == port)
    }
}

impl Lab {
    /// Replaces node `node`'s `eth0` by `bond0` in `mode` over `eth0` and a new `eth1` (module
    /// docs), with MAC `bond_mac` and the node's IPv4 address; plugs the slaves into `switch`.
    /// Updates [`super::LabNode::mac`] to the bond's MAC. IPv4 labs only.
    ///
    /// # Errors
    /// `ip` failed (e.g. no bonding driver: run it in the VM lab), or the lab is dual-stack.
    pub fn bond_node(
        &mut self,
        node: &str,
        mode: BondMode,
        bond_mac: &str,
        switch: SwitchSide,
    ) -> anyhow::Result<BondedNode> {
        let (netns, ip) = {
            let n = self.node(node);
            anyhow::ensure!(n.ip6.is_none(), "bonded nodes: IPv4 labs only");
            (n.netns.clone(), n.ip)
        };
        let short = node.replace("node-", "n");
        let lan = self.lan.clone();
        let node_ip = |args: &[&str]| in_netns(&netns, "ip", args).map(|_| ());
        let lan_ip = |args: &[&str]| in_netns(&lan, "ip", args).map(|_| ());
        // The second cable (the first is eth0 <-> n<i>, made by Lab::start).
        let second_port = format!("{short}eth1");
        super::sh(
            "ip",
            &[
                "link",
                "add",
                "name",
                &second_port,
                "netns",
                &lan,
                "type",
                "veth",
                "peer",
                "name",
                "eth1",
                "netns",
                &netns,
            ],
        )?;
        let slaves = vec![
            BondSlave {
                name: "eth0".into(),
                permanent_mac: mac_of(&netns, "eth0")?,
                switch_port: short.clone(),
            },
            BondSlave {
                name: "eth1".into(),
                permanent_mac: mac_of(&netns, "eth1")?,
                switch_port: second_port.clone(),
            },
        ];
        let bond_mac = bond_mac.to_lowercase();
        anyhow::ensure!(
            slaves.iter().all(|s| s.permanent_mac != bond_mac),
            "the bond's MAC {bond_mac} is a slave's"
        );

        let mut add = vec!["link", "add", "bond0"];
        add.extend(mode.args());
        node_ip(&add)?;
        node_ip(&["link", "set", "bond0", "address", &bond_mac])?;
        node_ip(&["addr", "flush", "dev", "eth0"])?;
        for slave in &slaves {
            node_ip(&["link", "set", &slave.name, "down"])?;
            node_ip(&["link", "set", &slave.name, "master", "bond0"])?;
        }
        node_ip(&["addr", "add", &format!("{ip}/24"), "dev", "bond0"])?;
        node_ip(&["link", "set", "bond0", "up"])?;
        for slave in &slaves {
            node_ip(&["link", "set", &slave.name, "up"])?;
        }

        let switch_bond = match switch {
            SwitchSide::Ports => {
                lan_ip(&["link", "set", &second_port, "master", "br0", "up"])?;
                None
            }
            SwitchSide::Bond => {
                let name = format!("sw-{short}");
                let mut add = vec!["link", "add", name.as_str()];
                add.extend(mode.args());
                lan_ip(&add)?;
                for slave in &slaves {
                    let _ = lan_ip(&["link", "set", &slave.switch_port, "nomaster"]);
                    lan_ip(&["link", "set", &slave.switch_port, "down"])?;
                    lan_ip(&["link", "set", &slave.switch_port, "master", &name])?;
                }
                lan_ip(&["link", "set", &name, "master", "br0", "up"])?;
                for slave in &slaves {
                    lan_ip(&["link", "set", &slave.switch_port, "up"])?;
                }
                Some(name)
            }
        };
        self.node_mut(node)?.mac.clone_from(&bond_mac);
        Ok(BondedNode {
            node: node.to_owned(),
            bond: "bond0".into(),
            mac: bond_mac,
            slaves,
            switch_bond,
        })
    }

    /// The bond's active slave on node `node` (`active-backup`), `None` while it has none.
    ///
    /// # Errors
    /// The node has no `bond0` in that mode.
    pub fn active_slave(&self, node: &str) -> anyhow::Result<Option<String>> {
        let out = in_netns(
            &self.node(node).netns,
            "cat",
            &["/sys/class/net/bond0/bonding/active_slave"],
        )?;
        let name = out.trim();
        Ok((!name.is_empty()).then(|| name.to_owned()))
    }

    /// The kernel's report of bond `bond` in namespace `netns` (`/proc/net/bonding/<bond>`).
    ///
    /// # Errors
    /// No such bond.
    pub fn bond_report(&self, netns: &str, bond: &str) -> anyhow::Result<String> {
        in_netns(netns, "cat", &[&format!("/proc/net/bonding/{bond}")])
            .with_context(|| format!("the report of {bond} in {netns}"))
    }

    /// Pulls (`up` false) or plugs back in the cable of `slave`: its switch end in the LAN
    /// namespace goes down or up, so the slave loses or regains carrier while staying
    /// administratively up, and the switch forgets the MACs it learnt on that port.
    ///
    /// # Errors
    /// `ip` failed.
    pub fn set_bond_cable(&self, slave: &BondSlave, up: bool) -> anyhow::Result<()> {
        in_netns(
            &self.lan,
            "ip",
            &[
                "link",
                "set",
                &slave.switch_port,
                if up { "up" } else { "down" },
            ],
        )?;
        Ok(())
    }
}
