//! The ferrolb CRDs on a real kube-apiserver: valid pools and advertisements are accepted, and a
//! table of invalid inputs is refused at admission with a message naming the bad entry (case C-08
//! and more). The Rust parser (`ferrolb_crds::addresses`) must agree with the API server on every
//! address entry, so the controller never sees an entry the API server would have refused.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use ferrolb_crds::addresses::{
    AddressEntry, FORBIDDEN_BLOCKS, Family, PoolAddresses, forbidden_message,
};
use ferrolb_crds::{IPAddressPool, L2Advertisement};
use ferrolb_tests::cluster::TestCluster;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::ApiResource;
use kube::{Client, Resource};
use serde_json::{Value, json};

fn dynamic_api<K: Resource<DynamicType = ()>>(client: &Client) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &ApiResource::erase::<K>(&()))
}

async fn create(
    api: &Api<DynamicObject>,
    kind: &str,
    name: &str,
    spec: Value,
    dry_run: bool,
) -> Result<(), String> {
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "ferrolb.io/v1beta1",
        "kind": kind,
        "metadata": { "name": name },
        "spec": spec,
    }))
    .unwrap();
    let pp = PostParams {
        dry_run,
        ..Default::default()
    };
    match api.create(&pp, &obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) => Err(e.message),
        Err(e) => panic!("unexpected client error: {e}"),
    }
}

fn pool_spec(entries: &[&str]) -> Value {
    json!({ "addresses": entries })
}

#[tokio::test]
async fn crds_admission() {
    let cluster = TestCluster::start().await.expect("test cluster");
    let client = cluster.client().await.unwrap();
    let pools = dynamic_api::<IPAddressPool>(&client);
    let l2s = dynamic_api::<L2Advertisement>(&client);

    // --- valid objects are accepted (for real, then read back with defaults applied) ---
    let valid_pools: &[(&str, &[&str])] = &[
        ("v4-cidr", &["198.51.100.0/24"]),
        ("v6-cidr", &["2001:db8::/120"]),
        ("single-v4", &["198.51.100.7/32"]),
        ("single-v6", &["2001:db8::7/128"]),
        ("range-spaces", &["198.51.100.10 - 198.51.100.20"]),
        ("range-tight", &["198.51.100.10-198.51.100.20"]),
        ("range-one", &["198.51.100.20-198.51.100.20"]),
        ("range-v6", &["2001:db8::1-2001:db8::ff"]),
        ("range-v6-wide", &["2001:db8::-2001:db8:1::"]),
        ("mixed-families", &["198.51.100.0/28", "2001:db8:0:1::/120"]),
        ("big-v6", &["2001:db8:0:3::/64", "198.51.100.0/24"]),
        ("host-bits", &["198.51.100.7/24"]),
        // Right next to the forbidden blocks (issue 10 item 6), on either side.
        (
            "beside-forbidden-v4",
            &[
                "1.0.0.0-126.255.255.255",
                "128.0.0.0-169.253.255.255",
                "169.255.0.0-223.255.255.255",
                "169.255.0.0/16",
            ],
        ),
        (
            "beside-forbidden-v6",
            &[
                "::2-::fffe:ffff:ffff",
                "::1:0:0:0-fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                "fec0::/10",
                "::fffe:0:0/96",
            ],
        ),
    ];
    for (name, entries) in valid_pools {
        create(&pools, "IPAddressPool", name, pool_spec(entries), false)
            .await
            .unwrap_or_else(|e| panic!("pool {name} {entries:?} refused: {e}"));
        for e in *entries {
            AddressEntry::parse(e)
                .unwrap_or_else(|err| panic!("API server accepted {e:?}, parser refused: {err}"));
        }
    }
    // The controller would serve every accepted pool.
    for (name, entries) in valid_pools {
        PoolAddresses::parse(entries, false)
            .unwrap_or_else(|err| panic!("API server accepted {name}, parser refused: {err}"));
    }
    let typed: Api<IPAddressPool> = Api::all(client.clone());
    let p = typed.get("v4-cidr").await.unwrap();
    assert!(p.spec.auto_assign, "autoAssign defaults to true");
    assert!(!p.spec.avoid_buggy_ips, "avoidBuggyIPs defaults to false");
    assert!(
        !p.spec.allow_sharing_across_namespaces,
        "allowSharingAcrossNamespaces defaults to false (issue #27 item 6)"
    );

    create(
        &pools,
        "IPAddressPool",
        "with-allocation",
        json!({
            "addresses": ["203.0.113.0/28"],
            "autoAssign": false,
            "avoidBuggyIPs": true,
            "allowSharingAcrossNamespaces": true,
            "serviceAllocation": {
                "priority": 1,
                "namespaces": ["team-a"],
                "namespaceSelectors": [{ "matchLabels": { "team": "a" } }],
                "serviceSelectors": [{ "matchExpressions": [
                    { "key": "tier", "operator": "In", "values": ["web"] },
                    { "key": "legacy", "operator": "DoesNotExist" }
                ] }]
            }
        }),
        false,
    )
    .await
    .unwrap();
    assert!(
        typed
            .get("with-allocation")
            .await
            .unwrap()
            .spec
            .allow_sharing_across_namespaces,
        "allowSharingAcrossNamespaces: true is kept"
    );
    create(
        &pools,
        "IPAddressPool",
        "empty-allocation",
        json!({ "addresses": ["203.0.113.16/28"], "serviceAllocation": {} }),
        false,
    )
    .await
    .unwrap();
    // An automatic pool (issue #28): no addresses, 1-256 examined; `addresses: []` beside it is
    // the same as absent.
    for (name, spec) in [
        ("auto-1", json!({ "autoAddresses": { "size": 1 } })),
        (
            "auto-256",
            json!({ "autoAddresses": { "size": 256 }, "addresses": [] }),
        ),
    ] {
        create(&pools, "IPAddressPool", name, spec, false)
            .await
            .unwrap_or_else(|e| panic!("automatic pool {name} refused: {e}"));
    }
    // The committed example (deploy/examples/auto-pool) is accepted as written.
    let example: Vec<Value> =
        serde_saphyr::from_multiple(include_str!("../../deploy/examples/auto-pool/pool.yaml"))
            .unwrap();
    for doc in example.iter().filter(|d| !d.is_null()) {
        let api = match doc["kind"].as_str() {
            Some("IPAddressPool") => &pools,
            Some("L2Advertisement") => &l2s,
            other => panic!("unexpected kind {other:?} in the auto-pool example"),
        };
        let obj: DynamicObject = serde_json::from_value(doc.clone()).unwrap();
        api.create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &obj,
        )
        .await
        .unwrap_or_else(|e| panic!("the auto-pool example is refused: {e}"));
    }
    let auto = typed.get("auto-256").await.unwrap();
    assert_eq!(auto.spec.auto_addresses.map(|a| a.size), Some(256));
    assert!(
        auto.address_entries().is_empty(),
        "no addresses before the controller resolves it"
    );
    let sixty_four: Vec<String> = (0..64).map(|i| format!("198.51.100.{i}/32")).collect();
    create(
        &pools,
        "IPAddressPool",
        "sixty-four",
        json!({ "addresses": sixty_four }),
        true,
    )
    .await
    .unwrap();

    for (name, spec) in [
        ("all-pools", json!({})),
        (
            "full",
            json!({
                "ipAddressPools": ["v4-cidr"],
                "ipAddressPoolSelectors": [{ "matchLabels": { "lb": "l2" } }],
                "nodeSelectors": [{ "matchExpressions": [{ "key": "node-role.kubernetes.io/control-plane", "operator": "DoesNotExist" }] }],
                "interfaces": ["eth0", "bond0.100"]
            }),
        ),
    ] {
        create(&l2s, "L2Advertisement", name, spec, false)
            .await
            .unwrap_or_else(|e| panic!("L2Advertisement {name} refused: {e}"));
    }

    // --- invalid inputs are refused, each with a message naming the bad entry ---
    let too_long = format!(
        "2001:db8:ffff:ffff:ffff:ffff:ffff:1{pad}-{pad}2001:db8:ffff:ffff:ffff:ffff:ffff:ffff",
        pad = " ".repeat(12)
    );
    assert!(too_long.len() > ferrolb_crds::v1beta1::ADDRESS_ENTRY_MAX_LEN);
    let sixty_five: Vec<String> = (0..65).map(|i| format!("198.51.100.{i}/32")).collect();
    let invalid_pools: Vec<(&str, Value, Vec<String>)> = vec![
        (
            "dash",
            pool_spec(&["-"]),
            vec![
                r#"spec.addresses[0]"#.into(),
                r#""-" is neither a CIDR"#.into(),
            ],
        ),
        (
            "empty-string",
            pool_spec(&[""]),
            vec![r#"addresses entry "" is empty"#.into()],
        ),
        (
            "whitespace",
            pool_spec(&["   "]),
            vec![r#"addresses entry "   " is empty"#.into()],
        ),
        (
            "reversed-v4",
            pool_spec(&["198.51.100.30-198.51.100.20"]),
            vec![r#""198.51.100.30-198.51.100.20" is a range whose start is above its end"#.into()],
        ),
        (
            "reversed-v6",
            pool_spec(&["2001:db8::ff-2001:db8::1"]),
            vec![r#""2001:db8::ff-2001:db8::1" is a range whose start is above its end"#.into()],
        ),
        (
            "reversed-v6-low-bits",
            pool_spec(&["2001:db8::1:1-2001:db8::1:0"]),
            vec![r#""2001:db8::1:1-2001:db8::1:0" is a range whose start is above its end"#.into()],
        ),
        (
            "octet-300",
            pool_spec(&["198.51.100.300/32"]),
            vec![r#""198.51.100.300/32" is neither a CIDR"#.into()],
        ),
        (
            "mixed-range",
            pool_spec(&["198.51.100.1-2001:db8::1"]),
            vec![r#""198.51.100.1-2001:db8::1" mixes IPv4 and IPv6"#.into()],
        ),
        (
            "prefix-33",
            pool_spec(&["198.51.100.0/33"]),
            vec![r#""198.51.100.0/33" is neither a CIDR"#.into()],
        ),
        (
            "prefix-129",
            pool_spec(&["2001:db8::/129"]),
            vec![r#""2001:db8::/129" is neither a CIDR"#.into()],
        ),
        (
            "zone",
            pool_spec(&["fe80::1%eth0/128"]),
            vec![r#""fe80::1%eth0/128" is neither a CIDR"#.into()],
        ),
        (
            "hostname",
            pool_spec(&["lb.example.com"]),
            vec![r#""lb.example.com" is neither a CIDR"#.into()],
        ),
        (
            "hostname-range",
            pool_spec(&["a-b"]),
            vec![r#""a-b" is neither a CIDR"#.into()],
        ),
        (
            "bare-ip",
            pool_spec(&["198.51.100.1"]),
            vec![r#""198.51.100.1" is neither a CIDR"#.into()],
        ),
        (
            "leading-zero",
            pool_spec(&["198.51.100.010/32"]),
            vec![r#""198.51.100.010/32" is neither a CIDR"#.into()],
        ),
        (
            "prefix-leading-zero",
            pool_spec(&["198.51.100.0/024"]),
            vec![r#""198.51.100.0/024" is neither a CIDR"#.into()],
        ),
        (
            "v4-mapped",
            pool_spec(&["::ffff:198.51.100.1/128"]),
            vec![r#""::ffff:198.51.100.1/128" is neither a CIDR"#.into()],
        ),
        (
            "two-dashes",
            pool_spec(&["198.51.100.1-198.51.100.2-198.51.100.3"]),
            vec![r#""198.51.100.1-198.51.100.2-198.51.100.3" is neither a CIDR"#.into()],
        ),
        (
            "cidr-spaces",
            pool_spec(&[" 198.51.100.0/24"]),
            vec![r#"" 198.51.100.0/24" is neither a CIDR"#.into()],
        ),
        (
            "second-entry-bad",
            pool_spec(&["198.51.100.0/24", "nope"]),
            vec![
                "spec.addresses[1]".into(),
                r#""nope" is neither a CIDR"#.into(),
            ],
        ),
        (
            "too-long",
            pool_spec(&[too_long.as_str()]),
            vec!["spec.addresses[0]".into(), "Too long".into()],
        ),
        (
            "empty-list",
            json!({ "addresses": [] }),
            vec!["spec sets neither addresses (a non-empty list) nor autoAddresses".into()],
        ),
        (
            "no-addresses",
            json!({}),
            vec!["spec sets neither addresses (a non-empty list) nor autoAddresses".into()],
        ),
        (
            "auto-and-addresses",
            json!({ "addresses": ["198.51.100.0/24"], "autoAddresses": { "size": 8 } }),
            vec!["spec sets both addresses and autoAddresses".into()],
        ),
        (
            "auto-size-0",
            json!({ "autoAddresses": { "size": 0 } }),
            vec![
                "spec.autoAddresses".into(),
                "autoAddresses.size must be 1-256".into(),
            ],
        ),
        (
            "auto-size-257",
            json!({ "autoAddresses": { "size": 257 } }),
            vec![
                "spec.autoAddresses".into(),
                "autoAddresses.size must be 1-256".into(),
            ],
        ),
        (
            "auto-no-size",
            json!({ "autoAddresses": {} }),
            vec!["spec.autoAddresses.size".into(), "Required value".into()],
        ),
        (
            "sixty-five",
            json!({ "addresses": sixty_five }),
            vec!["spec.addresses".into(), "Too many: 65".into()],
        ),
        (
            "auto-assign-type",
            json!({ "addresses": ["198.51.100.0/24"], "autoAssign": "yes" }),
            vec!["spec.autoAssign".into(), "boolean".into()],
        ),
        (
            "sharing-across-type",
            json!({ "addresses": ["198.51.100.0/24"], "allowSharingAcrossNamespaces": "yes" }),
            vec!["spec.allowSharingAcrossNamespaces".into(), "boolean".into()],
        ),
        (
            "bad-operator",
            json!({ "addresses": ["198.51.100.0/24"], "serviceAllocation": { "serviceSelectors": [
                { "matchExpressions": [{ "key": "tier", "operator": "Equals", "values": ["web"] }] }] } }),
            vec![
                "spec.serviceAllocation.serviceSelectors[0].matchExpressions[0].operator".into(),
                r#"Unsupported value: "Equals""#.into(),
            ],
        ),
        (
            "in-without-values",
            json!({ "addresses": ["198.51.100.0/24"], "serviceAllocation": { "namespaceSelectors": [
                { "matchExpressions": [{ "key": "team", "operator": "In" }] }] } }),
            vec![
                r#"matchExpressions entry for key "team": operator In needs at least one value"#
                    .into(),
            ],
        ),
        (
            "exists-with-values",
            json!({ "addresses": ["198.51.100.0/24"], "serviceAllocation": { "serviceSelectors": [
                { "matchExpressions": [{ "key": "tier", "operator": "Exists", "values": ["x"] }] }] } }),
            vec![
                r#"matchExpressions entry for key "tier": operator Exists takes no values"#.into(),
            ],
        ),
    ];
    // Every kind of forbidden block, as a CIDR, as a range with an end in it, and as a range
    // spanning it with both ends outside: refused, naming the entry and the block.
    let forbidden: &[(&str, &str)] = &[
        ("0.0.0.0/32", "0.0.0.0/8"),
        ("0.0.0.0-1.0.0.5", "0.0.0.0/8"),
        ("127.0.0.1/32", "127.0.0.0/8"),
        ("126.0.0.0/7", "127.0.0.0/8"),
        ("126.255.255.250-128.0.0.5", "127.0.0.0/8"),
        ("169.254.169.254/32", "169.254.0.0/16"),
        ("169.254.0.0 - 169.254.0.10", "169.254.0.0/16"),
        ("169.253.255.255-169.255.0.0", "169.254.0.0/16"),
        ("224.0.0.1/32", "224.0.0.0/4"),
        ("223.255.255.255-224.0.0.0", "224.0.0.0/4"),
        ("255.255.255.255/32", "240.0.0.0/4"),
        ("240.0.0.0/4", "240.0.0.0/4"),
        ("::/128", "::/128"),
        ("::1/128", "::1/128"),
        ("::1-::5", "::1/128"),
        ("::/64", "::/128"),
        ("::fffe:0:0/95", "::ffff:0:0/96"),
        ("::fffe:ffff:ffff-::1:0:0:0", "::ffff:0:0/96"),
        ("fe80::1/128", "fe80::/10"),
        ("fe7f::-fec0::", "fe80::/10"),
        ("ff02::1/128", "ff00::/8"),
        ("2001:db8::-ff00::", "fe80::/10"),
    ];
    for (i, (entry, block)) in forbidden.iter().enumerate() {
        let spec = pool_spec(&["198.51.100.0/24", entry]);
        let err = create(
            &pools,
            "IPAddressPool",
            &format!("forbidden-{i}"),
            spec,
            true,
        )
        .await
        .expect_err(&format!("{entry} should be refused"));
        let block = FORBIDDEN_BLOCKS.iter().find(|b| b.cidr == *block).unwrap();
        let want = forbidden_message(entry, block);
        assert!(
            err.contains("spec.addresses[1]") && err.contains(&want),
            "{entry}: message {err:?} lacks {want:?}"
        );
        // The controller's parser refuses it with the same words.
        let parsed = PoolAddresses::parse(&["198.51.100.0/24", entry], false).unwrap_err();
        assert!(parsed.to_string().contains(&want), "{entry}: {parsed}");
    }

    assert!(invalid_pools.len() >= 20);
    for (name, spec, wants) in &invalid_pools {
        let err = create(&pools, "IPAddressPool", name, spec.clone(), true)
            .await
            .expect_err(&format!("pool {name} should be refused: {spec}"));
        for want in wants {
            assert!(
                err.contains(want.as_str()),
                "pool {name}: message {err:?} lacks {want:?}"
            );
        }
        // The parser refuses every bad entry the API server refuses.
        if let Some(entries) = spec.get("addresses").and_then(Value::as_array) {
            let all_parse = entries.iter().filter_map(Value::as_str).all(|e| {
                e.len() <= ferrolb_crds::v1beta1::ADDRESS_ENTRY_MAX_LEN
                    && PoolAddresses::parse(&[e], false).is_ok()
            });
            let schema_only = [
                "empty-list",
                "auto-and-addresses",
                "sixty-five",
                "auto-assign-type",
                "sharing-across-type",
                "bad-operator",
                "in-without-values",
                "exists-with-values",
            ];
            if !schema_only.contains(name) {
                assert!(
                    !all_parse,
                    "pool {name}: API server refused {entries:?} but the parser accepts them all"
                );
            }
        }
    }

    let invalid_l2: Vec<(&str, Value, &str)> = vec![
        (
            "long-interface",
            json!({ "interfaces": ["eth0123456789012"] }),
            "spec.interfaces[0]",
        ),
        (
            "slash-interface",
            json!({ "interfaces": ["eth0/1"] }),
            "spec.interfaces[0]",
        ),
        (
            "bad-node-selector",
            json!({ "nodeSelectors": [{ "matchExpressions": [{ "key": "zone", "operator": "in", "values": ["a"] }] }] }),
            r#"Unsupported value: "in""#,
        ),
    ];
    for (name, spec, want) in invalid_l2 {
        let err = create(&l2s, "L2Advertisement", name, spec.clone(), true)
            .await
            .expect_err(&format!("L2Advertisement {name} should be refused: {spec}"));
        assert!(
            err.contains(want),
            "L2Advertisement {name}: message {err:?} lacks {want:?}"
        );
    }

    // --- the CEL range-order rule and the parser agree on ranges across both families ---
    let mut seed: u64 = 0x5eed_f0e1_b0a7;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for i in 0..40 {
        let (a, b) = if i % 2 == 0 {
            let x = (next() % 4) as u32;
            let y = (next() % 4) as u32;
            let base = u32::from(std::net::Ipv4Addr::new(198, 51, 100, 0));
            let pick = |k: u32, r: u64| base + k * 60 + (r % 60) as u32;
            (
                Family::V4.addr(pick(x, next()).into()),
                Family::V4.addr(pick(y, next()).into()),
            )
        } else {
            let base = u128::from("2001:db8::".parse::<std::net::Ipv6Addr>().unwrap());
            let shift = (next() % 96) as u32;
            let pick = |r: u64| base + (((r % 7) as u128) << shift) + (r % 3) as u128;
            (Family::V6.addr(pick(next())), Family::V6.addr(pick(next())))
        };
        let entry = format!("{a}-{b}");
        let server = create(
            &pools,
            "IPAddressPool",
            &format!("order-{i}"),
            pool_spec(&[entry.as_str()]),
            true,
        )
        .await;
        let parser = AddressEntry::parse(&entry);
        assert_eq!(
            server.is_ok(),
            parser.is_ok(),
            "{entry}: API server {server:?}, parser {parser:?}"
        );
    }

    // --- the CEL forbidden-block rules and the parser agree on entries near every block edge ---
    for i in 0..60 {
        let block = &FORBIDDEN_BLOCKS[(next() as usize) % FORBIDDEN_BLOCKS.len()];
        let f = block.family();
        let r = block.range();
        let near = |edge: u128, r: u64| {
            let d = u128::from(r % 5);
            if r.is_multiple_of(2) {
                edge.saturating_sub(d)
            } else {
                edge.saturating_add(d).min(f.max_offset())
            }
        };
        let edges = [r.first_offset(), r.last_offset()];
        let a = near(edges[(next() % 2) as usize], next());
        let entry = if i % 3 == 0 {
            let prefix = f.bits() - (next() % 12) as u32;
            format!("{}/{prefix}", f.addr(a))
        } else {
            let b = near(edges[(next() % 2) as usize], next());
            let len = u128::from(next() % 300);
            let b = b.max(a).saturating_add(len).min(f.max_offset());
            format!("{}-{}", f.addr(a), f.addr(b))
        };
        let server = create(
            &pools,
            "IPAddressPool",
            &format!("edge-{i}"),
            pool_spec(&[entry.as_str()]),
            true,
        )
        .await;
        let parser = PoolAddresses::parse(&[entry.as_str()], false);
        assert_eq!(
            server.is_ok(),
            parser.is_ok(),
            "{entry}: API server {server:?}, parser {parser:?}"
        );
    }
}
