//! The VM lab itself (issue #30, `ferrolb_tests::vm`): the guest boots Debian's kernel, runs this
//! test binary from the host's filesystem, and loads the drivers the VLAN, bond and IPVS tests
//! need on demand.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use ferrolb_tests::lab::sh;
use ferrolb_tests::vm::run_in_guest;

#[test]
fn the_guest_kernel_builds_vlans_bonds_dummies_and_ipvs() {
    if !run_in_guest(
        "the_guest_kernel_builds_vlans_bonds_dummies_and_ipvs",
        Duration::from_secs(180),
    ) {
        return;
    }
    sh(
        "ip",
        &["link", "add", "v0", "type", "veth", "peer", "name", "v1"],
    )
    .unwrap();
    sh(
        "ip",
        &[
            "link", "add", "link", "v0", "name", "v0.10", "type", "vlan", "id", "10",
        ],
    )
    .unwrap();
    sh(
        "ip",
        &[
            "link",
            "add",
            "bond0",
            "type",
            "bond",
            "mode",
            "active-backup",
        ],
    )
    .unwrap();
    sh("ip", &["link", "add", "d0", "type", "dummy"]).unwrap();
    sh("ipvsadm", &["-Ln"]).unwrap();
    assert!(std::path::Path::new("/proc/net/ip_vs").exists());
    sh("ipset", &["create", "smoke", "hash:ip"]).unwrap();
}
