//! RBAC is least-privilege: `kubectl auth can-i` answers yes and no where it must, and the full
//! `can-i --list` of each ServiceAccount, minus what any authenticated identity may do, is exactly
//! the granted set.

use std::collections::BTreeSet;

use super::kubectl::{Kubectl, Rule, rule};
use super::{CONTROLLER_SA, NOBODY_SA, NS, SPEAKER_SA};

/// Both directions of the RBAC check.
pub fn check(k: &Kubectl) {
    // --- RBAC: yes where it must, no where it must not ---
    let all = ["--all-namespaces"];
    let in_ns = ["-n", NS];
    let in_default = ["-n", "default"];
    for (verb, resource, extra) in [
        ("list", "services", &all[..]),
        ("watch", "services", &all[..]),
        ("watch", "endpointslices.discovery.k8s.io", &all[..]),
        ("list", "nodes", &[][..]),
        ("watch", "ipaddresspools.ferrolb.io", &[][..]),
        ("list", "l2advertisements.ferrolb.io", &[][..]),
        ("create", "events.events.k8s.io", &in_default[..]),
        ("patch", "events.events.k8s.io", &in_default[..]),
        ("get", "secrets/ferrolb-memberlist", &in_ns[..]),
        ("watch", "secrets/ferrolb-memberlist", &in_ns[..]),
        ("patch", "l2announcements.ferrolb.io", &in_ns[..]),
        ("create", "l2announcements.ferrolb.io", &in_ns[..]),
        // Issue #32 G3: the speaker Pods of its namespace say which Nodes vote.
        ("list", "pods", &in_ns[..]),
        ("watch", "pods", &in_ns[..]),
        ("watch", "daemonsets.apps/ferrolb-speaker", &in_ns[..]),
    ] {
        assert!(
            k.can_i(SPEAKER_SA, verb, resource, extra),
            "speaker cannot {verb} {resource} {extra:?}"
        );
    }
    for (verb, resource, extra) in [
        ("update", "services", &["--subresource=status", "-A"][..]),
        ("patch", "services", &["--subresource=status", "-A"][..]),
        ("patch", "services", &all[..]),
        ("delete", "services", &all[..]),
        ("create", "secrets", &in_ns[..]),
        ("list", "secrets", &in_ns[..]),
        ("list", "secrets", &all[..]),
        ("get", "secrets/other", &in_ns[..]),
        ("get", "secrets/ferrolb-memberlist", &in_default[..]),
        ("update", "secrets/ferrolb-memberlist", &in_ns[..]),
        ("patch", "nodes", &[][..]),
        ("create", "ipaddresspools.ferrolb.io", &[][..]),
        (
            "patch",
            "ipaddresspools.ferrolb.io",
            &["--subresource=status"][..],
        ),
        ("create", "leases.coordination.k8s.io", &in_ns[..]),
        ("list", "pods", &all[..]),
        ("get", "pods", &in_ns[..]),
        ("delete", "pods", &in_ns[..]),
        ("watch", "daemonsets.apps/other", &in_ns[..]),
        ("patch", "daemonsets.apps/ferrolb-speaker", &in_ns[..]),
        ("delete", "events", &in_default[..]),
        ("patch", "l2announcements.ferrolb.io", &in_default[..]),
        // Issue #27 item 5: stale reports are the controller's to delete.
        ("delete", "l2announcements.ferrolb.io", &in_ns[..]),
        ("patch", "services", &in_ns[..]),
        // Issue #27 item 12: read through watch caches only, and Events only of events.k8s.io.
        ("get", "services", &all[..]),
        ("get", "nodes", &[][..]),
        ("get", "endpointslices.discovery.k8s.io", &all[..]),
        ("get", "ipaddresspools.ferrolb.io", &[][..]),
        ("create", "events", &in_default[..]),
        ("patch", "events", &in_default[..]),
    ] {
        assert!(
            !k.can_i(SPEAKER_SA, verb, resource, extra),
            "speaker can {verb} {resource} {extra:?}"
        );
    }
    for (verb, resource, extra) in [
        ("patch", "services", &["--subresource=status", "-A"][..]),
        ("update", "services", &["--subresource=status", "-A"][..]),
        ("list", "services", &all[..]),
        ("watch", "namespaces", &[][..]),
        ("list", "nodes", &[][..]),
        ("watch", "ipaddresspools.ferrolb.io", &[][..]),
        (
            "patch",
            "ipaddresspools.ferrolb.io",
            &["--subresource=status"][..],
        ),
        ("create", "events.events.k8s.io", &in_default[..]),
        // SIGTERM during an uninstall: is its own namespace being deleted?
        ("get", "namespaces", &[][..]),
        ("get", "leases.coordination.k8s.io", &in_ns[..]),
        ("create", "leases.coordination.k8s.io", &in_ns[..]),
        ("update", "leases.coordination.k8s.io", &in_ns[..]),
        // The standby watches the Lease to take it at once after a release.
        ("watch", "leases.coordination.k8s.io", &in_ns[..]),
        // The speakers' membership key, created when absent (issue #27).
        ("create", "secrets", &in_ns[..]),
        ("get", "secrets/ferrolb-memberlist", &in_ns[..]),
        // The speakers' stale L2Announcement reports (issue #27 item 5).
        ("list", "l2announcements.ferrolb.io", &in_ns[..]),
        ("watch", "l2announcements.ferrolb.io", &in_ns[..]),
        ("delete", "l2announcements.ferrolb.io", &in_ns[..]),
    ] {
        assert!(
            k.can_i(CONTROLLER_SA, verb, resource, extra),
            "controller cannot {verb} {resource} {extra:?}"
        );
    }
    for (verb, resource, extra) in [
        ("delete", "services", &all[..]),
        ("create", "services", &all[..]),
        ("patch", "services", &all[..]),
        ("list", "secrets", &all[..]),
        ("list", "secrets", &in_ns[..]),
        ("watch", "secrets", &in_ns[..]),
        ("get", "secrets/other", &in_ns[..]),
        ("get", "secrets/ferrolb-memberlist", &in_default[..]),
        ("create", "secrets", &in_default[..]),
        ("update", "secrets/ferrolb-memberlist", &in_ns[..]),
        ("patch", "secrets/ferrolb-memberlist", &in_ns[..]),
        ("delete", "secrets/ferrolb-memberlist", &in_ns[..]),
        ("create", "leases.coordination.k8s.io", &in_default[..]),
        ("delete", "leases.coordination.k8s.io", &in_ns[..]),
        ("patch", "ipaddresspools.ferrolb.io", &[][..]),
        ("delete", "ipaddresspools.ferrolb.io", &[][..]),
        (
            "patch",
            "l2advertisements.ferrolb.io",
            &["--subresource=status"][..],
        ),
        ("list", "endpointslices.discovery.k8s.io", &all[..]),
        ("patch", "nodes", &[][..]),
        ("list", "pods", &all[..]),
        // It deletes reports, never writes them, and only in its namespace.
        ("create", "l2announcements.ferrolb.io", &in_ns[..]),
        ("patch", "l2announcements.ferrolb.io", &in_ns[..]),
        ("delete", "l2announcements.ferrolb.io", &in_default[..]),
        // Issue #27 item 12: read through watch caches only, and Events only of events.k8s.io.
        ("get", "services", &all[..]),
        ("get", "nodes", &[][..]),
        ("get", "l2advertisements.ferrolb.io", &[][..]),
        ("create", "events", &in_default[..]),
        ("patch", "events", &in_default[..]),
    ] {
        assert!(
            !k.can_i(CONTROLLER_SA, verb, resource, extra),
            "controller can {verb} {resource} {extra:?}"
        );
    }

    // --- RBAC: nothing more. Everything each ServiceAccount may do, minus what any
    // authenticated identity may do, is exactly the granted set. ---
    // Watch caches only (list + watch); `get` where a single object is read.
    let watch = ["list", "watch"];
    let emit = ["create", "patch"];
    let speaker_everywhere = [
        rule("services", &[], &watch),
        rule("nodes", &[], &watch),
        rule("endpointslices.discovery.k8s.io", &[], &watch),
        rule("ipaddresspools.ferrolb.io", &[], &watch),
        rule("l2advertisements.ferrolb.io", &[], &watch),
        rule("events.events.k8s.io", &[], &emit),
    ];
    let controller_everywhere = [
        rule("services", &[], &watch),
        rule("namespaces", &[], &["get", "list", "watch"]),
        rule("nodes", &[], &watch),
        rule("ipaddresspools.ferrolb.io", &[], &watch),
        rule("l2advertisements.ferrolb.io", &[], &watch),
        rule("services/status", &[], &["update", "patch"]),
        rule(
            "ipaddresspools.ferrolb.io/status",
            &[],
            &["update", "patch"],
        ),
        // The speakers' IPConflict Events become the pool condition AddressConflict.
        rule(
            "events.events.k8s.io",
            &[],
            &["create", "patch", "list", "watch"],
        ),
    ];
    for ns in [NS, "default"] {
        let baseline = k.rules(NOBODY_SA, ns);
        let granted = |who: &str| -> BTreeSet<Rule> {
            k.rules(who, ns).difference(&baseline).cloned().collect()
        };
        let mut speaker: BTreeSet<Rule> = speaker_everywhere.iter().cloned().collect();
        let mut controller: BTreeSet<Rule> = controller_everywhere.iter().cloned().collect();
        if ns == NS {
            speaker.insert(rule("secrets", &["ferrolb-memberlist"], &["get", "watch"]));
            speaker.insert(rule(
                "l2announcements.ferrolb.io",
                &[],
                &["get", "list", "watch", "create", "patch"],
            ));
            // Issue #32 G3: which Nodes run a speaker, and the dropped-voters annotation.
            speaker.insert(rule("pods", &[], &["list", "watch"]));
            speaker.insert(rule(
                "daemonsets.apps",
                &["ferrolb-speaker"],
                &["list", "watch"],
            ));
            controller.insert(rule(
                "leases.coordination.k8s.io",
                &[],
                &["get", "list", "watch", "create", "update", "patch"],
            ));
            // Issue #27: create the membership key when absent (create cannot be limited by
            // name), get only that one name.
            controller.insert(rule("secrets", &[], &["create"]));
            controller.insert(rule("secrets", &["ferrolb-memberlist"], &["get"]));
            controller.insert(rule(
                "l2announcements.ferrolb.io",
                &[],
                &["list", "watch", "delete"],
            ));
        }
        assert_eq!(granted(SPEAKER_SA), speaker, "speaker rules in {ns}");
        assert_eq!(
            granted(CONTROLLER_SA),
            controller,
            "controller rules in {ns}"
        );
    }
}
