//! Rule tests of the allocator (R1–R11, and cases C-01…C-09 at the allocator level), plus a
//! property test over random sequences of pool, Node and Service changes.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ferrolb_crds::addresses::Family;
use ferrolb_crds::v1beta1::ServiceAllocation;

use super::*;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn svc(name: &str, created: i64) -> ServiceRequest {
    ServiceRequest {
        key: ServiceKey::new("default", name),
        created,
        families: vec![Family::V4],
        ports: [("TCP".to_string(), 80)].into(),
        ..Default::default()
    }
}

fn with_status(mut s: ServiceRequest, ips: &[&str]) -> ServiceRequest {
    s.observed = ObservedStatus::of(&ips.iter().map(|i| ip(i)).collect::<Vec<_>>());
    s
}

fn key(name: &str) -> ServiceKey {
    ServiceKey::new("default", name)
}

fn ips(ipam: &Ipam, name: &str) -> Vec<IpAddr> {
    ipam.desired_ips(&key(name))
}

fn notes_for<'a>(notes: &'a [ServiceNote], name: &str) -> Vec<&'a Note> {
    notes
        .iter()
        .filter(|n| n.key == key(name))
        .map(|n| &n.note)
        .collect()
}

fn pool(name: &str, created: i64, entries: &[&str]) -> PoolConfig {
    PoolConfig::simple(name, created, entries, false)
}

#[test]
fn r1_valid_status_is_kept_whatever_the_delivery_order() {
    for a_first in [true, false] {
        for a_requested in [false, true] {
            let mut ipam = Ipam::new();
            ipam.upsert_pool(pool("p", 0, &["198.51.100.10/32"]));
            let mut a = with_status(svc("svc-a", 20), &["198.51.100.10"]);
            if a_requested {
                a.requested = vec![ip("198.51.100.10")];
            }
            // svc-b is older, so it would win a plain "oldest first" allocation.
            let b = svc("svc-b", 10);
            if a_first {
                ipam.upsert_service(a);
                ipam.upsert_service(b);
            } else {
                ipam.upsert_service(b);
                ipam.upsert_service(a);
            }
            let notes = ipam.reconcile();
            assert_eq!(ips(&ipam, "svc-a"), vec![ip("198.51.100.10")]);
            assert!(notes_for(&notes, "svc-a").is_empty(), "{notes:?}");
            assert_eq!(
                notes_for(&notes, "svc-b"),
                vec![&Note::Failed(Failure::Exhausted {
                    family: Family::V4,
                    pools: vec!["p".into()]
                })]
            );
            assert!(ipam.reconcile().is_empty(), "a second pass changes nothing");
        }
    }
}

#[test]
fn r2_sharing_rules_and_group_survives_recreation() {
    let mut ipam = Ipam::new();
    ipam.upsert_pool(pool("p", 0, &["198.51.100.0/28"]));
    let shared = |name: &str, created, port| {
        let mut s = svc(name, created);
        s.sharing_key = Some("k1".into());
        s.ports = [("TCP".to_string(), port)].into();
        s
    };
    ipam.upsert_service(shared("svc-a", 1, 80));
    ipam.upsert_service(shared("svc-b", 2, 8080));
    ipam.upsert_service(shared("svc-c", 3, 80)); // port clash with svc-a
    let mut d = svc("svc-d", 4);
    d.ports = [("TCP".to_string(), 9000)].into(); // no key
    ipam.upsert_service(d);
    let mut e = shared("svc-e", 5, 9001);
    e.backend = Backend::Local([("app".to_string(), "x".to_string())].into());
    ipam.upsert_service(e);
    ipam.reconcile();
    let a = ips(&ipam, "svc-a");
    assert_eq!(ips(&ipam, "svc-b"), a);
    for other in ["svc-c", "svc-d", "svc-e"] {
        assert_ne!(ips(&ipam, other), a, "{other} must not share");
    }
    // Re-creating svc-b puts it back on the group's IP.
    ipam.remove_service(&key("svc-b"), Gone::Deleted);
    ipam.reconcile();
    assert_eq!(ipam.holders(a[0]), vec![key("svc-a")]);
    ipam.upsert_service(shared("svc-b", 6, 8080));
    ipam.reconcile();
    assert_eq!(ips(&ipam, "svc-b"), a);
    // The IP returns only when the last member goes.
    ipam.remove_service(&key("svc-a"), Gone::Deleted);
    ipam.reconcile();
    assert_eq!(ipam.holders(a[0]), vec![key("svc-b")]);
    ipam.remove_service(&key("svc-b"), Gone::Deleted);
    ipam.reconcile();
    assert!(ipam.holders(a[0]).is_empty());
    // Restart with both statuses: both adopted on the one IP, no notes.
    let mut fresh = Ipam::new();
    fresh.upsert_pool(pool("p", 0, &["198.51.100.0/28"]));
    fresh.upsert_service(with_status(shared("svc-b", 2, 8080), &["198.51.100.1"]));
    fresh.upsert_service(with_status(shared("svc-a", 1, 80), &["198.51.100.1"]));
    assert!(fresh.reconcile().is_empty());
    assert_eq!(fresh.holders(ip("198.51.100.1")).len(), 2);
}

/// Issue #27 item 6: one sharing key in two namespaces shares an address only where the pool
/// sets `allowSharingAcrossNamespaces`. A tenant's endpoint-less `Local` twin of a victim's
/// Service (same key, same selector, another port) requesting the victim's address stays pending
/// with a reason naming the rule; without a request it gets an address of its own and a
/// `NotShared` note; a Service of the victim's namespace still shares. The opt-in lets the twin
/// in; taking it back moves the newer (the twin) out, and a restart never adopts such a share.
#[test]
fn r2_sharing_across_namespaces_needs_the_pools_opt_in() {
    let mut ipam = Ipam::new();
    ipam.upsert_pool(pool("p", 0, &["198.51.100.0/28"]));
    let member = |ns: &str, name: &str, created, port, requested: Option<&str>| {
        let mut s = svc(name, created);
        s.key = ServiceKey::new(ns, name);
        s.sharing_key = Some("k1".into());
        s.ports = [("TCP".to_string(), port)].into();
        s.backend = Backend::Local([("app".to_string(), "web".to_string())].into());
        s.requested = requested.map(ip).into_iter().collect();
        s
    };
    let web = ServiceKey::new("shop", "web");
    let twin = ServiceKey::new("tenant", "twin");
    ipam.upsert_service(member("shop", "web", 1, 80, Some("198.51.100.5")));
    ipam.reconcile();
    assert_eq!(ipam.desired_ips(&web), vec![ip("198.51.100.5")]);

    ipam.upsert_service(member("tenant", "twin", 2, 8080, Some("198.51.100.5")));
    ipam.upsert_service(member("tenant", "auto", 3, 9090, None));
    ipam.upsert_service(member("shop", "api", 4, 443, None));
    let notes = ipam.reconcile();
    let why = "shop/web and tenant/twin carry the same sharing key but are in different namespaces, and pool p does not allow sharing across namespaces (spec.allowSharingAcrossNamespaces: true would)";
    let of = |key: &ServiceKey| -> Vec<&Note> {
        notes
            .iter()
            .filter(|n| n.key == *key)
            .map(|n| &n.note)
            .collect()
    };
    assert_eq!(
        of(&twin),
        vec![&Note::Failed(Failure::RequestedHeld {
            ip: ip("198.51.100.5"),
            holder: web.clone(),
            why: why.into(),
        })]
    );
    assert!(ipam.desired_ips(&twin).is_empty());
    let auto = ServiceKey::new("tenant", "auto");
    let auto_ips = ipam.desired_ips(&auto);
    assert_eq!(auto_ips.len(), 1);
    assert_ne!(auto_ips, vec![ip("198.51.100.5")]);
    assert_eq!(
        of(&auto),
        vec![
            &Note::Allocated {
                ips: auto_ips.clone(),
                pool: "p".into()
            },
            &Note::NotShared {
                ip: ip("198.51.100.5"),
                holder: web.clone(),
                why: why.replace("tenant/twin", "tenant/auto"),
            }
        ]
    );
    let api = ServiceKey::new("shop", "api");
    assert_eq!(ipam.desired_ips(&api), vec![ip("198.51.100.5")]);
    assert!(ipam.reconcile().is_empty(), "a second pass is quiet");

    // The opt-in: the twin joins; the other tenant Service keeps its own address (R7).
    let mut open = pool("p", 0, &["198.51.100.0/28"]);
    open.sharing_across_namespaces = true;
    ipam.upsert_pool(open);
    ipam.reconcile();
    assert_eq!(ipam.desired_ips(&twin), vec![ip("198.51.100.5")]);
    assert_eq!(ipam.desired_ips(&auto), auto_ips);
    assert_eq!(ipam.holders(ip("198.51.100.5")).len(), 3);

    // Taken back: the newer sharer from the other namespace leaves, the older ones stay.
    ipam.upsert_pool(pool("p", 0, &["198.51.100.0/28"]));
    let notes = ipam.reconcile();
    assert!(ipam.desired_ips(&twin).is_empty());
    assert_eq!(ipam.desired_ips(&web), vec![ip("198.51.100.5")]);
    assert_eq!(ipam.desired_ips(&api), vec![ip("198.51.100.5")]);
    let twin_notes: Vec<&Note> = notes
        .iter()
        .filter(|n| n.key == twin)
        .map(|n| &n.note)
        .collect();
    assert!(
        matches!(&twin_notes[..], [Note::Reallocated { why: w, to, .. }, Note::Failed(_)] if to.is_empty() && w.contains("different namespaces")),
        "{twin_notes:?}"
    );

    // A restart with both statuses on the address: the older is adopted, the twin's replaced.
    let mut fresh = Ipam::new();
    fresh.upsert_pool(pool("p", 0, &["198.51.100.0/28"]));
    fresh.upsert_service(with_status(
        member("tenant", "twin", 2, 8080, Some("198.51.100.5")),
        &["198.51.100.5"],
    ));
    fresh.upsert_service(with_status(
        member("shop", "web", 1, 80, Some("198.51.100.5")),
        &["198.51.100.5"],
    ));
    let notes = fresh.reconcile();
    assert_eq!(fresh.desired_ips(&web), vec![ip("198.51.100.5")]);
    assert!(fresh.desired_ips(&twin).is_empty());
    let replaced = notes.iter().find_map(|n| match &n.note {
        Note::StatusReplaced { discarded } if n.key == twin => Some(discarded.join("; ")),
        _ => None,
    });
    assert_eq!(
        replaced.as_deref(),
        Some(format!("198.51.100.5: held by shop/web ({why})").as_str())
    );
}

#[test]
fn r3_requested_ip_waits_for_its_holder_then_is_granted() {
    // C-04 at the allocator level.
    let mut ipam = Ipam::new();
    ipam.upsert_pool(pool("p", 0, &["198.51.100.10/31"]));
    ipam.upsert_service(svc("svc-a", 1));
    ipam.upsert_service(svc("svc-b", 2));
    ipam.reconcile();
    assert_eq!(ips(&ipam, "svc-b"), vec![ip("198.51.100.11")]);
    ipam.upsert_service(svc("svc-c", 3));
    let mut d = svc("svc-d", 4);
    d.requested = vec![ip("198.51.100.11")];
    ipam.upsert_service(d.clone());
    let notes = ipam.reconcile();
    assert_eq!(
        notes_for(&notes, "svc-d"),
        vec![&Note::Failed(Failure::RequestedHeld {
            ip: ip("198.51.100.11"),
            holder: key("svc-b"),
            why: "default/svc-b and default/svc-d do not carry the same sharing key".into(),
        })]
    );
    assert!(
        Failure::RequestedHeld {
            ip: ip("198.51.100.11"),
            holder: key("svc-b"),
            why: "default/svc-b and default/svc-d do not carry the same sharing key".into(),
        }
        .to_string()
        .contains("held by default/svc-b: default/svc-b and default/svc-d do not carry")
    );
    // (1) svc-a becomes ClusterIP: svc-c gets its IP in the same pass.
    let freed = ipam.remove_service(&key("svc-a"), Gone::NotHandled);
    assert_eq!(freed, vec![ip("198.51.100.10")]);
    ipam.reconcile();
    assert_eq!(ips(&ipam, "svc-c"), vec![ip("198.51.100.10")]);
    // (2) back to LoadBalancer with the stale status still on the object: not adopted.
    ipam.upsert_service(with_status(svc("svc-a", 1), &["198.51.100.10"]));
    ipam.reconcile();
    assert!(ips(&ipam, "svc-a").is_empty());
    // (3) svc-b deleted: svc-d (a request) wins over the older pending svc-a.
    ipam.remove_service(&key("svc-b"), Gone::Deleted);
    ipam.reconcile();
    assert_eq!(ips(&ipam, "svc-d"), vec![ip("198.51.100.11")]);
    assert!(ips(&ipam, "svc-a").is_empty());
    // A request outside every pool is named as such.
    let mut e = svc("svc-e", 5);
    e.requested = vec![ip("203.0.113.9")];
    ipam.upsert_service(e);
    let notes = ipam.reconcile();
    assert!(matches!(
        notes_for(&notes, "svc-e")[..],
        [Note::Failed(Failure::RequestedInNoPool { .. })]
    ));
}

#[test]
fn r4_pool_choice_is_deterministic() {
    let prio = |name: &str, p: Option<i32>, entries: &[&str]| {
        let mut c = pool(name, 0, entries);
        c.allocation = Some(ServiceAllocation {
            priority: p,
            ..Default::default()
        });
        c
    };
    // C-06: priority 1 beats 2 whatever the names.
    let mut ipam = Ipam::new();
    ipam.upsert_pool(prio("pool-b", Some(1), &["203.0.113.0/28"]));
    ipam.upsert_pool(prio("pool-a", Some(2), &["198.51.100.0/28"]));
    ipam.upsert_pool(prio("pool-0", None, &["198.51.100.16/28"]));
    ipam.upsert_service(svc("s", 1));
    ipam.reconcile();
    assert_eq!(ipam.assignment(&key("s")).unwrap().pool, "pool-b");
    // `serviceAllocation: {}` is the same as none: plain pools by name, after selecting ones.
    let mut ipam = Ipam::new();
    let mut empty = pool("pool-a", 0, &["198.51.100.0/28"]);
    empty.allocation = ServiceAllocation::default()
        .is_empty()
        .then_some(())
        .and(None);
    ipam.upsert_pool(empty);
    ipam.upsert_pool(pool("pool-b", 0, &["203.0.113.0/28"]));
    ipam.upsert_service(svc("s", 1));
    ipam.reconcile();
    assert_eq!(ipam.assignment(&key("s")).unwrap().pool, "pool-a");
    // autoAssign=false is used only when named.
    let mut ipam = Ipam::new();
    let mut manual = pool("aa-manual", 0, &["203.0.113.0/28"]);
    manual.auto_assign = false;
    ipam.upsert_pool(manual);
    ipam.upsert_pool(pool("zz-auto", 0, &["198.51.100.0/28"]));
    ipam.upsert_service(svc("auto", 1));
    let mut named = svc("named", 2);
    named.pool = Some("aa-manual".into());
    ipam.upsert_service(named);
    let mut missing = svc("missing", 3);
    missing.pool = Some("nope".into());
    ipam.upsert_service(missing);
    let notes = ipam.reconcile();
    assert_eq!(ipam.assignment(&key("auto")).unwrap().pool, "zz-auto");
    assert_eq!(ipam.assignment(&key("named")).unwrap().pool, "aa-manual");
    let [Note::Failed(f)] = notes_for(&notes, "missing")[..] else {
        panic!("{notes:?}")
    };
    assert!(
        f.to_string().starts_with("no pool can serve this Service"),
        "{f}"
    );
}

#[test]
fn r5_families() {
    // C-05.
    let mut ipam = Ipam::new();
    ipam.upsert_pool(pool("p", 0, &["198.51.100.0/28"]));
    let mut a = svc("svc-a", 1);
    a.families = vec![Family::V4, Family::V6];
    a.policy = FamilyPolicy::PreferDualStack;
    let mut b = a.clone();
    b.key = key("svc-b");
    b.policy = FamilyPolicy::RequireDualStack;
    ipam.upsert_service(a);
    ipam.upsert_service(b);
    let notes = ipam.reconcile();
    let a_ips = ips(&ipam, "svc-a");
    assert_eq!(a_ips.len(), 1);
    assert!(a_ips[0].is_ipv4());
    assert!(notes_for(&notes, "svc-a").iter().any(|n| matches!(
        n,
        Note::Partial {
            missing: Family::V6,
            ..
        }
    )));
    assert_eq!(
        notes_for(&notes, "svc-b"),
        vec![&Note::Failed(Failure::FamilyUnavailable(Family::V6))]
    );
    assert!(ipam.reconcile().is_empty(), "partial is reported once");
    // Adding IPv6 to the pool completes svc-a without touching its IPv4 and serves svc-b.
    ipam.upsert_pool(pool("p", 0, &["198.51.100.0/28", "2001:db8:0:1::/120"]));
    ipam.reconcile();
    let now = ips(&ipam, "svc-a");
    assert_eq!(now.len(), 2);
    assert_eq!(now[0], a_ips[0]);
    assert!(now[1].is_ipv6());
    assert_eq!(ips(&ipam, "svc-b").len(), 2);
    // SingleStack IPv4 on a mixed pool: exactly one IPv4.
    ipam.upsert_service(svc("svc-c", 3));
    ipam.reconcile();
    let c = ips(&ipam, "svc-c");
    assert_eq!(c.len(), 1);
    assert!(c[0].is_ipv4());
    // IPv6-primary PreferDualStack lists IPv6 first.
    let mut d = svc("svc-d", 4);
    d.families = vec![Family::V6, Family::V4];
    d.policy = FamilyPolicy::PreferDualStack;
    ipam.upsert_service(d);
    ipam.reconcile();
    let d = ips(&ipam, "svc-d");
    assert!(d[0].is_ipv6() && d[1].is_ipv4());
}

#[test]
fn r6_release_frees_for_pending_at_once_and_never_readopts() {
    let mut ipam = Ipam::new();
    ipam.upsert_pool(pool("p", 0, &["198.51.100.10/32"]));
    ipam.upsert_service(svc("svc-a", 1));
    ipam.upsert_service(svc("svc-b", 2));
    ipam.reconcile();
    ipam.remove_service(&key("svc-a"), Gone::NotHandled);
    ipam.reconcile();
    assert_eq!(ips(&ipam, "svc-b"), vec![ip("198.51.100.10")]);
    ipam.upsert_service(with_status(svc("svc-a", 1), &["198.51.100.10"]));
    let notes = ipam.reconcile();
    assert!(ips(&ipam, "svc-a").is_empty());
    assert!(matches!(
        notes_for(&notes, "svc-a")[..],
        [Note::Failed(Failure::Exhausted { .. })]
    ));
}

#[test]
fn r7_pool_deleted_edited_recreated() {
    // C-03.
    let mut ipam = Ipam::new();
    ipam.upsert_pool(pool("pool-a", 0, &["198.51.100.0/24"]));
    ipam.upsert_pool(pool("pool-b", 1, &["203.0.113.0/24"]));
    ipam.upsert_service(with_status(svc("svc-a", 1), &["198.51.100.1"]));
    ipam.upsert_service(with_status(svc("svc-b", 2), &["203.0.113.1"]));
    ipam.upsert_service(with_status(svc("svc-c", 3), &["203.0.113.2"]));
    assert!(ipam.reconcile().is_empty());
    ipam.remove_pool("pool-b");
    let notes = ipam.reconcile();
    assert_eq!(ips(&ipam, "svc-a"), vec![ip("198.51.100.1")]);
    assert_eq!(ips(&ipam, "svc-b"), vec![ip("198.51.100.2")]);
    assert_eq!(ips(&ipam, "svc-c"), vec![ip("198.51.100.3")]);
    for s in ["svc-b", "svc-c"] {
        let n = notes_for(&notes, s);
        assert!(matches!(n[..], [Note::Reallocated { .. }]), "{n:?}");
        let [Note::Reallocated { why, .. }] = n[..] else {
            unreachable!()
        };
        assert!(why.contains("left every pool"), "{why}");
    }
    ipam.remove_service(&key("svc-b"), Gone::Deleted);
    ipam.reconcile();
    ipam.upsert_service(with_status(svc("svc-b", 4), &["203.0.113.1"]));
    ipam.reconcile();
    assert_eq!(ips(&ipam, "svc-b"), vec![ip("198.51.100.2")]);
    ipam.upsert_pool(pool("pool-b", 5, &["203.0.113.128/25"]));
    assert!(ipam.reconcile().is_empty(), "nothing moves");
    // Shrinking a pool around a held address moves nothing; shrinking it away moves only that one.
    ipam.upsert_pool(pool("pool-a", 0, &["198.51.100.0/30"]));
    let notes = ipam.reconcile();
    assert_eq!(ips(&ipam, "svc-a"), vec![ip("198.51.100.1")]);
    assert_eq!(ips(&ipam, "svc-b"), vec![ip("198.51.100.2")]);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(ips(&ipam, "svc-c")[0].to_string().starts_with("203.0.113."));
}

#[test]
fn r8_foreign_or_malformed_status_is_replaced_once() {
    // C-07 at the allocator level.
    let variants: Vec<ObservedStatus> = vec![
        ObservedStatus::of(&[ip("192.0.2.4"), ip("192.0.2.5")]),
        ObservedStatus::of(&[ip("198.51.100.1"), ip("198.51.100.2"), ip("198.51.100.3")]),
        ObservedStatus {
            ips: vec![],
            unusable: vec!["hostname-only entry \"lb.example.com\"".into()],
        },
        ObservedStatus::of(&[ip("2001:db8::1")]),
    ];
    for observed in variants {
        let mut ipam = Ipam::new();
        ipam.upsert_pool(pool("p", 0, &["198.51.100.0/28"]));
        let mut a = svc("svc-a", 1);
        a.observed = observed.clone();
        ipam.upsert_service(a);
        let notes = ipam.reconcile();
        let n = notes_for(&notes, "svc-a");
        let Note::StatusReplaced { discarded } = n[0] else {
            panic!("{n:?}")
        };
        assert!(!discarded.is_empty());
        assert!(matches!(n[1], Note::Allocated { .. }));
        assert_eq!(ips(&ipam, "svc-a").len(), 1);
        assert!(ipam.reconcile().is_empty(), "no loop for {observed:?}");
    }
}

#[test]
fn r9_overlap_belongs_to_the_older_pool() {
    let mut ipam = Ipam::new();
    ipam.upsert_pool(pool("b-older", 1, &["198.51.100.8-198.51.100.9"]));
    ipam.upsert_pool(pool("a-newer", 2, &["198.51.100.8-198.51.100.11"]));
    for i in 0..5 {
        ipam.upsert_service(svc(&format!("s{i}"), i));
    }
    ipam.reconcile();
    let held: Vec<_> = ipam
        .held()
        .map(|(ip, pool, members)| (ip, pool.to_owned(), members.len()))
        .collect();
    assert_eq!(
        held.len(),
        4,
        "four distinct addresses, nothing twice: {held:?}"
    );
    assert!(held.iter().all(|(_, _, n)| *n == 1));
    for (ip_, pool_, _) in &held {
        let want = if *ip_ <= ip("198.51.100.9") {
            "b-older"
        } else {
            "a-newer"
        };
        assert_eq!(pool_, want);
    }
    let reports = ipam.pool_reports();
    let newer = reports.iter().find(|r| r.name == "a-newer").unwrap();
    assert!(newer.overlaps[0].contains("b-older"));
    assert_eq!((newer.assigned_v4, newer.available_v4), (2, 0));
    assert!(
        reports
            .iter()
            .find(|r| r.name == "b-older")
            .unwrap()
            .overlaps
            .is_empty()
    );
}

#[test]
fn r9_a_service_naming_the_newer_pool_is_served_from_it_inside_the_overlap() {
    // C-10 shape: the newer pool lies entirely inside the older one, so it owns nothing and
    // hands nothing out by itself; a Service naming it still keeps (R7), requests (R3) and
    // shares (R2) an address inside it, and the address is counted once, against the owner.
    let mut ipam = Ipam::new();
    ipam.upsert_pool(pool("pool", 1, &["198.51.100.0/24"]));
    ipam.upsert_pool(pool("pool-b", 2, &["198.51.100.0/26"]));
    let shared = |name: &str, created, proto: &str, named: Option<&str>| {
        let mut s = svc(name, created);
        s.sharing_key = Some("k".into());
        s.ports = [(proto.to_string(), 53)].into();
        s.requested = vec![ip("198.51.100.53")];
        s.pool = named.map(str::to_owned);
        s
    };
    ipam.upsert_service(shared("svc-a", 1, "TCP", None));
    ipam.upsert_service(shared("svc-b", 2, "UDP", Some("pool-b")));
    ipam.reconcile();
    assert_eq!(ips(&ipam, "svc-a"), vec![ip("198.51.100.53")]);
    assert_eq!(ips(&ipam, "svc-b"), vec![ip("198.51.100.53")]);
    assert_eq!(ipam.assignment(&key("svc-b")).unwrap().pool, "pool-b");
    assert_eq!(ipam.assignment(&key("svc-a")).unwrap().pool, "pool");
    // Kept across a reconcile and a fresh start from status (R1/R7), with no notes.
    assert!(ipam.reconcile().is_empty());
    let mut fresh = Ipam::new();
    fresh.upsert_pool(pool("pool-b", 2, &["198.51.100.0/26"]));
    fresh.upsert_pool(pool("pool", 1, &["198.51.100.0/24"]));
    fresh.upsert_service(with_status(
        shared("svc-b", 2, "UDP", Some("pool-b")),
        &["198.51.100.53"],
    ));
    assert!(
        fresh
            .reconcile()
            .iter()
            .all(|n| !matches!(n.note, Note::StatusReplaced { .. })),
        "a status inside the named pool is adopted"
    );
    assert_eq!(ips(&fresh, "svc-b"), vec![ip("198.51.100.53")]);
    // Counted once, against the older pool that owns it.
    let reports = ipam.pool_reports();
    let by = |n: &str| reports.iter().find(|r| r.name == n).unwrap().clone();
    assert_eq!(by("pool").assigned_v4, 1);
    assert_eq!(
        (by("pool-b").assigned_v4, by("pool-b").available_v4),
        (0, 0)
    );
    // Without a request, the newer pool hands nothing out of the overlap (R9).
    let mut c = svc("svc-c", 3);
    c.pool = Some("pool-b".into());
    ipam.upsert_service(c);
    ipam.reconcile();
    assert!(ips(&ipam, "svc-c").is_empty());
}

#[test]
fn r10_node_addresses_never_handed_out() {
    let mut ipam = Ipam::new();
    ipam.upsert_pool(pool("p", 0, &["198.51.100.1-198.51.100.3"]));
    ipam.upsert_service(with_status(svc("old", 0), &["198.51.100.2"]));
    ipam.reconcile();
    ipam.set_nodes(
        [
            (ip("198.51.100.1"), "node-1".into()),
            (ip("198.51.100.2"), "node-2".into()),
        ]
        .into(),
    );
    ipam.upsert_service(svc("new", 1));
    let notes = ipam.reconcile();
    assert_eq!(ips(&ipam, "old"), vec![ip("198.51.100.3")]);
    let [Note::Reallocated { why, .. }] = notes_for(&notes, "old")[..] else {
        panic!("{notes:?}")
    };
    assert!(why.contains("node node-2"), "{why}");
    assert!(ips(&ipam, "new").is_empty());
    let r = &ipam.pool_reports()[0];
    assert_eq!(r.node_conflicts.len(), 2);
    assert_eq!((r.assigned_v4, r.available_v4), (1, 0));
}

#[test]
fn r11_pending_served_when_capacity_appears() {
    // C-08 at the allocator level: a pool that cannot be parsed serves nothing and is named.
    let mut ipam = Ipam::new();
    ipam.upsert_pool(pool("p", 0, &["198.51.100.30-198.51.100.20"]));
    ipam.upsert_service(svc("s", 1));
    let notes = ipam.reconcile();
    let [Note::Failed(f)] = notes_for(&notes, "s")[..] else {
        panic!("{notes:?}")
    };
    assert!(
        f.to_string().starts_with("no pool can serve this Service"),
        "{f}"
    );
    assert!(
        ipam.pool_reports()[0]
            .invalid
            .as_ref()
            .unwrap()
            .to_string()
            .contains("198.51.100.30-198.51.100.20")
    );
    ipam.upsert_pool(pool("p", 0, &["198.51.100.20-198.51.100.30"]));
    ipam.reconcile();
    assert_eq!(ips(&ipam, "s"), vec![ip("198.51.100.20")]);
}

#[test]
fn pools_with_forbidden_entries_serve_nothing() {
    // Issue 10 item 6: a pool stored before the CEL rule, with an entry overlapping loopback
    // (a range spanning 127.0.0.0/8, which no single address of its ends shows) and one with
    // the metadata address, is treated as refused: nothing of it is handed out, not even its
    // good entry; the Service that held one of its addresses moves to another pool.
    let mut ipam = Ipam::new();
    let bad = [
        "198.51.100.0/28",
        "126.255.255.250-128.0.0.5",
        "169.254.169.254/32",
    ];
    ipam.upsert_pool(pool("bad", 0, &bad));
    ipam.upsert_pool(pool("good", 1, &["203.0.113.0/28"]));
    ipam.upsert_service(with_status(svc("held", 1), &["198.51.100.1"]));
    let mut loopback = svc("loopback", 2);
    loopback.requested = vec![ip("127.0.0.1")];
    ipam.upsert_service(loopback);
    let mut metadata = with_status(svc("metadata", 3), &["169.254.169.254"]);
    metadata.requested = vec![ip("169.254.169.254")];
    ipam.upsert_service(metadata);
    let notes = ipam.reconcile();
    assert_eq!(ips(&ipam, "held"), vec![ip("203.0.113.1")]);
    assert!(
        matches!(
            notes_for(&notes, "held")[..],
            [Note::StatusReplaced { .. }, Note::Allocated { .. }]
        ),
        "{notes:?}"
    );
    for s in ["loopback", "metadata"] {
        assert!(ips(&ipam, s).is_empty(), "{s}: {:?}", ips(&ipam, s));
        assert!(
            matches!(
                notes_for(&notes, s).last(),
                Some(Note::Failed(Failure::RequestedInNoPool { .. }))
            ),
            "{s}: {notes:?}"
        );
    }
    let report = ipam
        .pool_reports()
        .into_iter()
        .find(|r| r.name == "bad")
        .unwrap();
    assert_eq!((report.assigned_v4, report.available_v4), (0, 0));
    let why = report.invalid.unwrap().to_string();
    for want in [
        "spec.addresses[1]: addresses entry \"126.255.255.250-128.0.0.5\" overlaps 127.0.0.0/8",
        "spec.addresses[2]: addresses entry \"169.254.169.254/32\" overlaps 169.254.0.0/16",
    ] {
        assert!(why.contains(want), "{why}");
    }
    assert!(!why.contains("spec.addresses[0]"), "{why}");
}

#[test]
fn c09_big_ipv6_pools() {
    let mut ipam = Ipam::new();
    ipam.upsert_pool(pool("a", 0, &["2001:db8:0:3::/64", "198.51.100.0/24"]));
    ipam.upsert_pool(pool("b", 0, &["198.51.100.0/24", "2001:db8:0:3::/64"]));
    let r = ipam.pool_reports();
    // b overlaps a completely, so compare a with a fresh allocator holding only b.
    let mut only_b = Ipam::new();
    only_b.upsert_pool(pool("b", 0, &["198.51.100.0/24", "2001:db8:0:3::/64"]));
    let rb = only_b.pool_reports();
    assert_eq!(
        (r[0].available_v4, r[0].available_v6),
        (rb[0].available_v4, rb[0].available_v6)
    );
    assert_eq!(r[0].available_v4, 254);
    assert_eq!(r[0].available_v6, u64::MAX);

    let mut ipam = Ipam::new();
    ipam.upsert_pool(pool(
        "p",
        0,
        &[
            "2001:db8:0:4::/64",
            "2001:db8:0:5::/64",
            "2001:db8:0:6::/64",
        ],
    ));
    for i in 0..3 {
        let mut s = svc(&format!("s{i}"), i);
        s.families = vec![Family::V6];
        ipam.upsert_service(s);
    }
    let mut r = svc("req", 9);
    r.families = vec![Family::V6];
    r.requested = vec![ip("2001:db8:0:6:ffff:ffff:ffff:fffe")];
    ipam.upsert_service(r);
    ipam.reconcile();
    assert_eq!(
        ips(&ipam, "req"),
        vec![ip("2001:db8:0:6:ffff:ffff:ffff:fffe")]
    );
    assert_eq!(ips(&ipam, "s2"), vec![ip("2001:db8:0:4::2")]);

    let mut ipam = Ipam::new();
    ipam.upsert_pool(PoolConfig::simple("p", 0, &["198.51.100.0/32"], true));
    ipam.upsert_service(svc("s", 1));
    let notes = ipam.reconcile();
    assert_eq!(ipam.pool_reports()[0].available_v4, 0);
    let [Note::Failed(f)] = notes_for(&notes, "s")[..] else {
        panic!("{notes:?}")
    };
    assert!(
        f.to_string().starts_with("no pool can serve this Service"),
        "{f}"
    );
}

#[test]
fn invalid_request_keeps_held_addresses_and_pends_otherwise() {
    let mut ipam = Ipam::new();
    ipam.upsert_pool(pool("p", 0, &["198.51.100.0/28"]));
    ipam.upsert_service(svc("held", 1));
    ipam.reconcile();
    let before = ips(&ipam, "held");
    let mut bad = svc("held", 1);
    bad.invalid = Some("ferrolb.io/loadBalancerIPs: \"nope\" is not an IP address".into());
    ipam.upsert_service(bad.clone());
    bad.key = key("fresh");
    ipam.upsert_service(bad);
    let notes = ipam.reconcile();
    assert_eq!(ips(&ipam, "held"), before);
    assert!(matches!(
        notes_for(&notes, "fresh")[..],
        [Note::Failed(Failure::Invalid(_))]
    ));
    assert!(ipam.reconcile().is_empty());
}

mod props {
    use super::*;
    use ferrolb_crds::addresses::{AddressEntry, is_buggy_v4, to_offset};
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Pool {
            slot: u8,
            entries: Vec<String>,
            avoid_buggy: bool,
            /// `spec.allowSharingAcrossNamespaces` (issue #27 item 6).
            across: bool,
        },
        DropPool(u8),
        Nodes(Vec<u8>),
        Service {
            slot: u8,
            spec: SvcSpec,
        },
        DropService {
            slot: u8,
            deleted: bool,
        },
        Reconcile,
    }

    #[derive(Debug, Clone)]
    struct SvcSpec {
        sharing: Option<u8>,
        ports: Vec<u8>,
        local: Option<u8>,
        dual: u8,
        v6_first: bool,
        requested: Option<u8>,
        status: Vec<u8>,
    }

    /// Addresses of the test universe: 198.51.100.224–198.51.101.31 (crossing .255/.0) and
    /// 2001:db8::0–0x3f.
    fn addr(i: u8) -> IpAddr {
        if i < 64 {
            Family::V4.addr(to_offset(ip("198.51.100.224")) + u128::from(i))
        } else {
            Family::V6.addr(to_offset(ip("2001:db8::")) + u128::from(i - 64))
        }
    }

    fn entry() -> impl Strategy<Value = String> {
        prop_oneof![
            (0u8..64, 27u8..=32).prop_map(|(i, p)| format!("{}/{p}", addr(i))),
            (0u8..64, 0u8..8).prop_map(|(i, n)| format!("{}-{}", addr(i), addr((i + n).min(63)))),
            (64u8..128, 122u8..=128).prop_map(|(i, p)| format!("{}/{p}", addr(i))),
        ]
    }

    fn spec() -> impl Strategy<Value = SvcSpec> {
        (
            proptest::option::of(0u8..2),
            proptest::collection::vec(0u8..3, 1..3),
            proptest::option::of(0u8..2),
            0u8..3,
            any::<bool>(),
            proptest::option::weighted(0.2, 0u8..128),
            proptest::collection::vec(0u8..128, 0..3),
        )
            .prop_map(
                |(sharing, ports, local, dual, v6_first, requested, status)| SvcSpec {
                    sharing,
                    ports,
                    local,
                    dual,
                    v6_first,
                    requested,
                    status,
                },
            )
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0u8..3, proptest::collection::vec(entry(), 1..4), any::<bool>(), any::<bool>())
                .prop_map(|(slot, entries, avoid_buggy, across)| Op::Pool { slot, entries, avoid_buggy, across }),
            1 => (0u8..3).prop_map(Op::DropPool),
            1 => proptest::collection::vec(0u8..128, 0..4).prop_map(Op::Nodes),
            6 => (0u8..8, spec()).prop_map(|(slot, spec)| Op::Service { slot, spec }),
            2 => (0u8..8, any::<bool>()).prop_map(|(slot, deleted)| Op::DropService { slot, deleted }),
            4 => Just(Op::Reconcile),
        ]
    }

    /// Services of even slots live in `ns`, odd ones in `ns2`: sharing across namespaces is
    /// exercised both ways (issue #27 item 6).
    fn svc_key(slot: u8) -> ServiceKey {
        let ns = if slot.is_multiple_of(2) { "ns" } else { "ns2" };
        ServiceKey::new(ns, format!("s{slot}"))
    }

    fn request(slot: u8, created: i64, s: &SvcSpec) -> ServiceRequest {
        let families = if s.v6_first {
            vec![Family::V6, Family::V4]
        } else {
            vec![Family::V4, Family::V6]
        };
        let policy = [
            FamilyPolicy::SingleStack,
            FamilyPolicy::PreferDualStack,
            FamilyPolicy::RequireDualStack,
        ][usize::from(s.dual)];
        let mut r = ServiceRequest {
            key: svc_key(slot),
            created,
            families,
            policy,
            sharing_key: s.sharing.map(|k| format!("k{k}")),
            ports: s
                .ports
                .iter()
                .map(|p| ("TCP".to_string(), 80 + u16::from(*p)))
                .collect(),
            backend: match s.local {
                None => Backend::Cluster,
                Some(v) => Backend::Local([("app".to_string(), v.to_string())].into()),
            },
            observed: ObservedStatus::of(&s.status.iter().map(|i| addr(*i)).collect::<Vec<_>>()),
            ..Default::default()
        };
        if let Some(q) = s.requested
            && r.wanted_families().contains(&Family::of(addr(q)))
        {
            r.requested = vec![addr(q)];
        }
        r
    }

    /// Independent model of "may `ip` be handed out": the oldest pool whose entries (each with
    /// its own network/broadcast rule) contain it owns it; that pool's avoidBuggyIPs applies;
    /// Node addresses never.
    /// created, entries, avoidBuggyIPs, allowSharingAcrossNamespaces.
    type ModelPool = (i64, Vec<String>, bool, bool);

    struct Model {
        pools: BTreeMap<u8, ModelPool>,
        nodes: BTreeSet<IpAddr>,
    }

    impl Model {
        fn entry_usable(e: &str, ip: IpAddr) -> bool {
            let Ok(entry) = AddressEntry::parse(e) else {
                return false;
            };
            if !entry.range.contains(ip) {
                return false;
            }
            match (entry.prefix, Family::of(ip)) {
                (Some(p), Family::V4) if p <= 30 => {
                    ip != entry.range.first() && ip != entry.range.last()
                }
                _ => true,
            }
        }

        fn owner(&self, ip: IpAddr) -> Option<u8> {
            let mut by_age: Vec<(&u8, &ModelPool)> = self.pools.iter().collect();
            by_age.sort_by_key(|(slot, (created, _, _, _))| (*created, format!("pool{slot}")));
            by_age
                .into_iter()
                .find(|(_, (_, entries, _, _))| entries.iter().any(|e| Self::entry_usable(e, ip)))
                .map(|(slot, _)| *slot)
        }

        fn usable(&self, ip: IpAddr) -> Option<u8> {
            if self.nodes.contains(&ip) {
                return None;
            }
            let owner = self.owner(ip)?;
            let avoid = self.pools[&owner].2;
            (!(avoid && ip.is_ipv4() && is_buggy_v4(to_offset(ip)))).then_some(owner)
        }
    }

    type Snapshot = BTreeMap<ServiceKey, (ServiceRequest, Vec<IpAddr>, Option<u8>)>;

    fn check(ipam: &mut Ipam, model: &Model, before: &Snapshot) {
        let services: BTreeMap<ServiceKey, ServiceRequest> = ipam
            .services()
            .map(|s| (s.key.clone(), s.clone()))
            .collect();
        let mut on_ip: BTreeMap<IpAddr, Vec<&ServiceRequest>> = BTreeMap::new();
        for s in services.values() {
            let ips = ipam.desired_ips(&s.key);
            let fams: BTreeSet<Family> = ips.iter().map(|i| Family::of(*i)).collect();
            assert_eq!(fams.len(), ips.len(), "one address per family: {ips:?}");
            for i in &ips {
                assert!(s.wanted_families().contains(&Family::of(*i)));
                // Never outside every pool, never a Node address, never a network/broadcast
                // address of a ≤/30 IPv4 CIDR, never .0/.255 under avoidBuggyIPs.
                assert!(model.usable(*i).is_some(), "{} holds unusable {i}", s.key);
                on_ip.entry(*i).or_default().push(s);
            }
            if ips.is_empty() {
                assert!(
                    ipam.pending_reason(&s.key).is_some(),
                    "{} pending without reason",
                    s.key
                );
            }
        }
        // Never two non-sharing Services on one IP; across namespaces only where the pool
        // allows it.
        for (i, holders) in &on_ip {
            let Some(owner) = model.usable(*i) else {
                continue;
            };
            let name = format!("pool{owner}");
            let scope = sharing::SharingScope {
                pool: &name,
                across_namespaces: model.pools[&owner].3,
            };
            for a in holders {
                for b in holders {
                    if a.key < b.key {
                        assert_eq!(sharing::incompatibility(a, b, scope), None, "{i}");
                    }
                }
            }
        }
        // Never a re-address of a Service whose addresses are all still in its pool and whose
        // request did not change.
        for (k, (req_before, ips_before, pool_before)) in before {
            let Some(now) = services.get(k) else { continue };
            // A Service that shared with another namespace moves when its pool stops allowing
            // it (the newer sharer does): not checked here.
            let shared_across = before.iter().any(|(o, (_, o_ips, _))| {
                o.namespace != k.namespace && o_ips.iter().any(|i| ips_before.contains(i))
            });
            if now.clone() != req_before.clone()
                || shared_across
                || ips_before.iter().any(|i| model.usable(*i) != *pool_before)
            {
                continue;
            }
            let ips_now = ipam.desired_ips(k);
            for i in ips_before {
                assert!(
                    ips_now.contains(i),
                    "{k} lost {i}: {ips_before:?} → {ips_now:?}"
                );
            }
        }
        // No pending single-stack Service without a request while its family has a free address.
        for s in services.values() {
            if s.policy == FamilyPolicy::SingleStack
                && s.requested.is_empty()
                && ipam.desired_ips(&s.key).is_empty()
            {
                let family = s.wanted_families()[0];
                let free = (0u8..128)
                    .map(addr)
                    .filter(|i| Family::of(*i) == family)
                    .any(|i| model.usable(i).is_some() && !on_ip.contains_key(&i));
                assert!(!free, "{} pending with a free {family} address", s.key);
            }
        }
        // Counters add up.
        for r in ipam.pool_reports() {
            let slot: u8 = r.name.trim_start_matches("pool").parse().unwrap();
            let usable_v4 = (0u8..64)
                .filter(|i| model.usable(addr(*i)) == Some(slot))
                .count() as u64;
            assert_eq!(r.assigned_v4 + r.available_v4, usable_v4, "{r:?}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: std::env::var("FERROLB_PROP_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256), ..ProptestConfig::default() })]
        #[test]
        fn invariants_hold_over_random_histories(ops in proptest::collection::vec(op(), 1..60)) {
            let mut ipam = Ipam::new();
            // The same history, every pass over everything (`resync`): incremental passes
            // must decide exactly the same.
            let mut full = Ipam::new();
            let mut model = Model { pools: BTreeMap::new(), nodes: BTreeSet::new() };
            let mut clock = 0i64;
            let mut snapshot: Snapshot = BTreeMap::new();
            let mut created: BTreeMap<u8, i64> = BTreeMap::new();
            for op in ops.into_iter().chain([Op::Reconcile]) {
                clock += 1;
                match op {
                    Op::Pool { slot, entries, avoid_buggy, across } => {
                        let c = *model.pools.get(&slot).map(|(c, _, _, _)| c).unwrap_or(&clock);
                        let refs: Vec<&str> = entries.iter().map(String::as_str).collect();
                        let mut config = PoolConfig::simple(&format!("pool{slot}"), c, &refs, avoid_buggy);
                        config.sharing_across_namespaces = across;
                        ipam.upsert_pool(config.clone());
                        full.upsert_pool(config);
                        model.pools.insert(slot, (c, entries, avoid_buggy, across));
                    }
                    Op::DropPool(slot) => {
                        ipam.remove_pool(&format!("pool{slot}"));
                        full.remove_pool(&format!("pool{slot}"));
                        model.pools.remove(&slot);
                    }
                    Op::Nodes(list) => {
                        let nodes: BTreeMap<IpAddr, String> =
                            list.iter().map(|i| (addr(*i), format!("node-{i}"))).collect();
                        model.nodes = nodes.keys().copied().collect();
                        full.set_nodes(nodes.clone());
                        ipam.set_nodes(nodes);
                    }
                    Op::Service { slot, spec } => {
                        let c = *created.entry(slot).or_insert(clock);
                        ipam.upsert_service(request(slot, c, &spec));
                        full.upsert_service(request(slot, c, &spec));
                    }
                    Op::DropService { slot, deleted } => {
                        let gone = if deleted { Gone::Deleted } else { Gone::NotHandled };
                        let key = svc_key(slot);
                        prop_assert_eq!(ipam.remove_service(&key, gone), full.remove_service(&key, gone));
                        // Its addresses were released (R6): a later return is a new allocation.
                        snapshot.remove(&key);
                        if deleted {
                            created.remove(&slot);
                        }
                    }
                    Op::Reconcile => {
                        full.resync();
                        let notes = ipam.reconcile();
                        prop_assert_eq!(&notes, &full.reconcile(), "incremental pass = full pass");
                        for s in full.services() {
                            prop_assert_eq!(ipam.desired_ips(&s.key), full.desired_ips(&s.key));
                            prop_assert_eq!(ipam.pending_reason(&s.key), full.pending_reason(&s.key));
                        }
                        check(&mut ipam, &model, &snapshot);
                        prop_assert!(ipam.reconcile().is_empty(), "a second pass is quiet");
                        snapshot = ipam
                            .services()
                            .map(|s| {
                                let pool = ipam
                                    .assignment(&s.key)
                                    .and_then(|a| a.pool.trim_start_matches("pool").parse().ok());
                                (s.key.clone(), (s.clone(), ipam.desired_ips(&s.key), pool))
                            })
                            .collect();
                    }
                }
            }
        }
    }
}
