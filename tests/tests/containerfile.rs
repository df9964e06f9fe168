//! The `Containerfile` copies every workspace member into the build stage: Cargo refuses to load a
//! workspace with a member missing, so an image build would fail at once (no CI job builds the
//! image; this catches the mistake without a container engine), and pins every base image by
//! digest (issue #27 item 12; the form only: no registry is reachable here).
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

/// Whether `image` is `name:tag@sha256:<64 lowercase hex digits>`.
fn pinned_by_digest(image: &str) -> bool {
    let Some((named, digest)) = image.split_once("@sha256:") else {
        return false;
    };
    let tagged = named
        .rsplit_once('/')
        .map_or(named, |(_, last)| last)
        .split_once(':')
        .is_some_and(|(n, t)| !n.is_empty() && !t.is_empty());
    tagged
        && digest.len() == 64
        && digest
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[test]
fn base_images_are_pinned_by_digest() {
    let containerfile = std::fs::read_to_string(repo_root().join("Containerfile")).unwrap();
    let mut stages: BTreeSet<String> = BTreeSet::new();
    let mut images = Vec::new();
    for line in containerfile.lines() {
        let mut words = line.split_whitespace();
        if !words.next().is_some_and(|w| w.eq_ignore_ascii_case("FROM")) {
            continue;
        }
        let words: Vec<&str> = words.filter(|w| !w.starts_with("--")).collect();
        let image = words.first().copied().unwrap_or_default();
        // `FROM build` names an earlier stage, not an image.
        if !stages.contains(image) {
            images.push(image.to_owned());
        }
        if let [_, as_, stage] = words[..]
            && as_.eq_ignore_ascii_case("AS")
        {
            stages.insert(stage.to_owned());
        }
    }
    assert!(images.len() >= 2, "{images:?}");
    let loose: Vec<&String> = images.iter().filter(|i| !pinned_by_digest(i)).collect();
    assert!(
        loose.is_empty(),
        "base images not pinned as name:tag@sha256:<64 hex>: {loose:?}"
    );
}

#[test]
fn the_digest_form_check_refuses_loose_references() {
    let d = "9dac0a79194e45a7da0158a9c6da57b217585af0786db3845d1f0ec1a0dd182f";
    assert!(pinned_by_digest(&format!(
        "gcr.io/distroless/cc-debian12:nonroot@sha256:{d}"
    )));
    assert!(pinned_by_digest(&format!(
        "localhost:5000/rust:1.95@sha256:{d}"
    )));
    for bad in [
        "gcr.io/distroless/cc-debian12:nonroot".to_owned(),
        format!("gcr.io/distroless/cc-debian12@sha256:{d}"),
        format!("localhost:5000/rust@sha256:{d}"),
        format!("rust:1.95@sha256:{}", &d[1..]),
        format!("rust:1.95@sha256:{}", d.to_uppercase()),
        format!("rust:1.95@sha512:{d}"),
    ] {
        assert!(!pinned_by_digest(&bad), "{bad}");
    }
}
