//! `L2Announcement` (`ferrolb.io/v1beta1`, namespaced): who answers for one LoadBalancer IP, so
//! that `kubectl get l2announcements -A` answers "which node announces what, on which
//! interfaces, for which Services" without reading logs (issue #12 part 2).
//!
//! One object per announced IP, in the speakers' namespace, named [`announcement_name`] of the IP.
//! The current owner writes it with server-side apply when (and only when) the node, the
//! interfaces or the Services change; a new owner simply overwrites what a dead one wrote (there
//! is no immutable node field: MetalLB's per-node `ServiceL2Status` objects got stuck exactly
//! there). Objects of IPs nobody announces any more are deleted by one speaker, with a
//! `resourceVersion` precondition so racing writers converge. The object is a report, never an
//! input to the election; only `heldBy` is read back, to keep probing an address another host
//! holds when its owner changes.
//!
//! Each speaker also writes one object for its node, [`member_report_name`] (`node-<node>`, `ip`
//! empty): the member count it sees, for `ferrolb status` (docs/design.md, "Membership reports").

// clippy reads the repeated `type_ = …` inside separate `printcolumn(…)` groups as duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use std::net::IpAddr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube_derive::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// Spec of an `L2Announcement`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[kube(
    crates(kube_core = "::kube_core", kube = "::kube_derive"),
    group = "ferrolb.io",
    version = "v1beta1",
    kind = "L2Announcement",
    namespaced,
    doc = "Which node answers ARP/NDP for one LoadBalancer IP, on which interfaces, for which Services; written by the speaker that owns the IP (ferrolb.io/v1beta1). A report: `ferrolb status` reads it and the controller deletes the reports of Nodes that are gone; no speaker decides anything from it.",
    plural = "l2announcements",
    singular = "l2announcement",
    shortname = "flann",
    category = "ferrolb",
    printcolumn(name = "IP", type_ = "string", json_path = ".spec.ip"),
    printcolumn(name = "Node", type_ = "string", json_path = ".spec.node"),
    printcolumn(name = "Interfaces", type_ = "string", json_path = ".spec.interfaces"),
    printcolumn(name = "Services", type_ = "string", json_path = ".spec.services"),
    printcolumn(name = "Held-By", type_ = "string", json_path = ".spec.heldBy"),
    printcolumn(name = "Age", type_ = "date", json_path = ".spec.since")
)]
#[serde(rename_all = "camelCase")]
pub struct L2AnnouncementSpec {
    /// The LoadBalancer IP.
    #[schemars(length(max = 45))]
    pub ip: String,
    /// The node answering for it.
    #[schemars(length(max = 253))]
    pub node: String,
    /// The interfaces it answers on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(max = 15)))]
    pub interfaces: Vec<String>,
    /// `namespace/name` of the Services using the IP.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(max = 317)))]
    pub services: Vec<String>,
    /// When this node started announcing it (the `Age` column).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Time>,
    /// Set while the node does NOT announce the IP because another host on the LAN answered its
    /// probe: that host's MAC (`interfaces` is then empty). Any speaker that becomes the IP's
    /// owner probes it first while this is set, so a restart or a failover does not steal the
    /// address from that host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 17))]
    pub held_by: Option<String>,
    /// Set only in a node's membership report (the object `node-<node>`, `member_report_name`;
    /// `ip` empty, no interfaces or Services): what that node's speaker sees of the membership,
    /// for `ferrolb status` (docs/design.md, "Membership reports"). Written by the speaker of
    /// `node` when the count changes, at most once per 10 s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub membership: Option<MembershipReport>,
    /// Set only in a node's report (`node-<node>`): the IPv4 networks of the interfaces the
    /// speaker announces on, for automatic pools (`spec.autoAddresses`, docs/design.md
    /// "Automatic pools"). The controller reads them; no speaker decides anything from them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub networks: Vec<NodeNetwork>,
    /// Set only in a node's report: candidates of an automatic pool that another host answered
    /// when this speaker probed them (RFC 5227 ARP probe), so the controller does not hand them
    /// out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub in_use: Vec<AddressInUse>,
    /// Set only in a node's report: candidates of an automatic pool this speaker probed (RFC
    /// 5227 §2.1.1 ARP probe) with no answer, as merged entries ascending
    /// (`192.168.49.252-192.168.49.254`, or `192.168.49.250/32` for a lone address; the shape
    /// of `ferrolb_crds::auto_pool::address_entries`), at most 256. The controller hands out
    /// only such addresses. An address that answers a later probe leaves this list for
    /// `inUse`; one that is no longer a candidate (a Service holds it, the pool is gone) leaves
    /// it too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(max = 31)))]
    pub unanswered: Vec<String>,
}

/// One IPv4 network a node's speaker announces on (in its node's report).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[serde(rename_all = "camelCase")]
pub struct NodeNetwork {
    /// The interface (`eth0`).
    #[schemars(length(max = 15))]
    pub interface: String,
    /// The node's address on it with the prefix length, as `ip addr` shows it
    /// (`192.168.49.2/24`).
    #[schemars(length(max = 18))]
    pub prefix: String,
    /// The default gateway reached through this interface, if any (`192.168.49.1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 15))]
    pub gateway: Option<String>,
}

/// A candidate address another host answered for (in the node report of the prober).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[serde(rename_all = "camelCase")]
pub struct AddressInUse {
    /// The address (`192.168.49.254`).
    #[schemars(length(max = 15))]
    pub ip: String,
    /// The MAC that answered (`02:42:c0:a8:31:fe`).
    #[schemars(length(max = 17))]
    pub mac: String,
}

/// What one speaker sees of the membership (in its node's report, [`member_report_name`]).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[serde(rename_all = "camelCase")]
pub struct MembershipReport {
    /// Alive speakers this speaker counts in its SWIM membership, itself included (the
    /// `ferrolb_speaker_members` gauge); 0 while it is out of the membership (no key, carrier
    /// lost, declared down).
    #[schemars(schema_with = "member_count_schema")]
    pub members: u32,
    /// When the speaker saw this count (whole seconds).
    pub observed: Time,
}

/// The schema of [`MembershipReport::members`]: an `int32` (Kubernetes knows no `uint32`
/// format: `helm install` warns on it), without numeric bounds (the generator writes them as
/// floats, `100000.0`, which kustomize rewrites, failing the manifest round trip).
fn member_count_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "integer",
        "format": "int32",
    })
}

/// The prefix of a node's membership report: `node-<node name>`.
pub const MEMBER_REPORT_PREFIX: &str = "node-";

/// The name of `node`'s membership report: `node-<node name>` (a Node name is a DNS-1123
/// subdomain, so this is one too when it fits in 253 characters); for a longer node name,
/// `node-h` and 16 hex digits of a SipHash-1-3 (keys 0, 0) of the name. Never the name of an IP's
/// report (those start with `ip-`).
pub fn member_report_name(node: &str) -> String {
    let name = format!("{MEMBER_REPORT_PREFIX}{node}");
    if name.len() <= 253 {
        return name;
    }
    use std::hash::Hasher;
    let mut h = siphasher::sip::SipHasher13::new_with_keys(0, 0);
    h.write(node.as_bytes());
    format!("{MEMBER_REPORT_PREFIX}h{:016x}", h.finish())
}

/// The object name for `ip`: `ip-198-51-100-10`, `ip-2001-0db8-0000-0000-0000-0000-0000-0010`
/// (every IPv6 group in full, so the name never starts or ends with `-`). A DNS-1123 subdomain.
pub fn announcement_name(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, d] = v4.octets();
            format!("ip-{a}-{b}-{c}-{d}")
        }
        IpAddr::V6(v6) => {
            let groups: Vec<String> = v6.segments().iter().map(|g| format!("{g:04x}")).collect();
            format!("ip-{}", groups.join("-"))
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn member_report_names_fit_and_never_collide_with_ip_reports() {
        assert_eq!(member_report_name("node-1"), "node-node-1");
        let long = "a".repeat(253);
        let name = member_report_name(&long);
        assert!(name.len() <= 253 && name.starts_with("node-h"), "{name}");
        assert_ne!(name, member_report_name(&"b".repeat(253)));
        assert!(!member_report_name("ip-198-51-100-10").starts_with("ip-"));
    }

    #[test]
    fn names_are_dns_labels_and_distinct() {
        let ips = [
            "198.51.100.10",
            "2001:db8::10",
            "2001:db8::",
            "::1",
            "2001:db8::1:0",
        ];
        let names: std::collections::BTreeSet<String> = ips
            .iter()
            .map(|ip| announcement_name(ip.parse().unwrap()))
            .collect();
        assert_eq!(names.len(), ips.len());
        for n in &names {
            assert!(n.len() <= 63, "{n}");
            assert!(
                n.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !n.ends_with('-'),
                "{n}"
            );
        }
        assert_eq!(
            announcement_name("198.51.100.10".parse().unwrap()),
            "ip-198-51-100-10"
        );
    }
}
