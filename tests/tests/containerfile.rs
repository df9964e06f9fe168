//! The `Containerfile` copies every workspace member into the build stage: Cargo refuses to load a
//! workspace with a member missing, so an image build would fail at once (no CI job builds the
//! image; this catches the mistake without a container engine).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeSet;

use ferrolb_tests::cluster::repo_root;

#[test]
fn every_workspace_member_is_copied_into_the_build_stage() {
    let root = repo_root();
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let line = manifest
        .lines()
        .find(|l| l.starts_with("members = ["))
        .expect("a one-line `members = [...]` in Cargo.toml");
    let members: BTreeSet<String> = line
        .split('"')
        .skip(1)
        .step_by(2)
        .map(|m| m.split('/').next().unwrap().to_owned())
        .collect();
    assert!(
        members.contains("runtime") && members.len() >= 5,
        "{members:?}"
    );
    let containerfile = std::fs::read_to_string(root.join("Containerfile")).unwrap();
    let copied: BTreeSet<String> = containerfile
        .lines()
        .filter_map(|l| l.strip_prefix("COPY "))
        .filter(|l| !l.starts_with("--from"))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect();
    let missing: Vec<&String> = members.difference(&copied).collect();
    assert!(
        missing.is_empty(),
        "Containerfile does not COPY workspace members {missing:?}"
    );
}
