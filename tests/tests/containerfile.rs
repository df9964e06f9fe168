//! The `Containerfile`, by form (no container engine and no registry where the tests run, so it
//! is never built here; the release workflow builds it):
//!
//! - every workspace member is copied into the stages that load the workspace (the cargo-chef
//!   `planner` and the `build` stage): Cargo refuses to load a workspace with a member missing,
//!   so an image build would fail at once;
//! - the dependency layer is the one the final build uses: `cargo chef cook` runs before any
//!   source is copied into the build stage, with exactly the flags of the final `cargo build`
//!   (other flags would build the dependencies with other features, and the final build would
//!   compile them again: the cache would be a no-op; issue #28 item 3);
//! - `.dockerignore` keeps the build context to what the COPY lines take (an allowlist), and
//!   lets every one of them through;
//! - every base image is pinned by digest (issue #27 item 12; the form only).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeSet;

use ferrolb_tests::cluster::repo_root;

/// One stage of the Containerfile: its name (`AS name`, or its index) and its instructions, each
/// with continuation lines joined.
struct Stage {
    name: String,
    instructions: Vec<String>,
}

fn stages() -> Vec<Stage> {
    let text = std::fs::read_to_string(repo_root().join("Containerfile")).unwrap();
    let mut joined = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let t = line.trim();
        if current.is_empty() && (t.is_empty() || t.starts_with('#')) {
            continue;
        }
        match t.strip_suffix('\\') {
            Some(part) => {
                current.push_str(part);
                current.push(' ');
            }
            None => {
                current.push_str(t);
                joined.push(std::mem::take(&mut current));
            }
        }
    }
    let mut out: Vec<Stage> = Vec::new();
    for instruction in joined {
        let words: Vec<&str> = instruction.split_whitespace().collect();
        if words[0].eq_ignore_ascii_case("FROM") {
            let name = match words[..] {
                [.., as_, name] if as_.eq_ignore_ascii_case("AS") => name.to_owned(),
                _ => out.len().to_string(),
            };
            out.push(Stage {
                name,
                instructions: Vec::new(),
            });
        }
        out.last_mut()
            .expect("an instruction before the first FROM")
            .instructions
            .push(instruction);
    }
    out
}

/// The sources of the `COPY` instructions (not `--from`) of a stage, in order.
fn copied(stage: &Stage) -> Vec<String> {
    stage
        .instructions
        .iter()
        .filter_map(|i| i.strip_prefix("COPY "))
        .filter(|i| !i.trim_start().starts_with("--from"))
        .flat_map(|i| {
            let words: Vec<&str> = i.split_whitespace().collect();
            words[..words.len() - 1]
                .iter()
                .map(|w| (*w).to_owned())
                .collect::<Vec<_>>()
        })
        .collect()
}

fn workspace_members() -> BTreeSet<String> {
    let manifest = std::fs::read_to_string(repo_root().join("Cargo.toml")).unwrap();
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
    members
}

#[test]
fn every_workspace_member_is_copied_into_the_stages_that_load_the_workspace() {
    let members = workspace_members();
    let stages = stages();
    for name in ["planner", "build"] {
        let stage = stages
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no stage `{name}`"));
        let copied: BTreeSet<String> = copied(stage).into_iter().collect();
        let missing: Vec<&String> = members.difference(&copied).collect();
        assert!(
            missing.is_empty(),
            "Containerfile stage {name} does not COPY workspace members {missing:?}"
        );
        for file in ["Cargo.toml", "Cargo.lock"] {
            assert!(copied.contains(file), "stage {name} does not COPY {file}");
        }
    }
}

/// The flags of a `cargo …` command line after its subcommand, minus those only `cook` has.
fn cargo_flags(command: &str, subcommand: &[&str]) -> BTreeSet<String> {
    let at = command
        .find(&subcommand.join(" "))
        .unwrap_or_else(|| panic!("no `{}` in {command}", subcommand.join(" ")));
    let rest = &command[at + subcommand.join(" ").len()..];
    let rest = rest.split("&&").next().unwrap();
    let words: Vec<&str> = rest.split_whitespace().collect();
    let mut flags = BTreeSet::new();
    let mut i = 0;
    while i < words.len() {
        if words[i] == "--recipe-path" {
            i += 2;
            continue;
        }
        if words[i] == "--bin" {
            flags.insert(format!("--bin {}", words[i + 1]));
            i += 2;
            continue;
        }
        flags.insert(words[i].to_owned());
        i += 1;
    }
    flags
}

#[test]
fn the_dependency_layer_is_cooked_before_the_sources_with_the_final_builds_flags() {
    let stages = stages();
    let planner = stages.iter().find(|s| s.name == "planner").unwrap();
    assert!(
        planner
            .instructions
            .iter()
            .any(|i| i.starts_with("RUN cargo chef prepare --recipe-path recipe.json")),
        "the planner does not prepare the recipe"
    );
    let build = stages.iter().find(|s| s.name == "build").unwrap();
    let position = |what: &dyn Fn(&str) -> bool| {
        build
            .instructions
            .iter()
            .position(|i| what(i))
            .unwrap_or_else(|| panic!("build stage: instruction missing"))
    };
    let recipe =
        position(&|i: &str| i.starts_with("COPY --from=planner") && i.contains("recipe.json"));
    let cook = position(&|i: &str| i.starts_with("RUN cargo chef cook"));
    let first_source = position(&|i: &str| i.starts_with("COPY ") && !i.starts_with("COPY --from"));
    let final_build = position(&|i: &str| i.starts_with("RUN cargo build"));
    assert!(
        recipe < cook && cook < first_source && first_source < final_build,
        "build stage order: recipe {recipe}, cook {cook}, first source {first_source}, build {final_build}"
    );
    // Nothing that changes with every commit before the cook: an ARG would be part of its key.
    assert!(
        !build.instructions[..cook]
            .iter()
            .any(|i| i.starts_with("ARG ")),
        "an ARG before the cook invalidates the dependency layer"
    );
    let cook_flags = cargo_flags(&build.instructions[cook], &["cargo", "chef", "cook"]);
    let build_flags = cargo_flags(&build.instructions[final_build], &["cargo", "build"]);
    assert!(cook_flags.contains("--release") && cook_flags.contains("--locked"));
    assert_eq!(
        cook_flags, build_flags,
        "`cargo chef cook` and the final `cargo build` must take the same flags"
    );
}

#[test]
fn dockerignore_is_an_allowlist_that_lets_every_copy_through() {
    let root = repo_root();
    let ignore = std::fs::read_to_string(root.join(".dockerignore")).unwrap();
    let patterns: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(
        patterns.first(),
        Some(&"*"),
        ".dockerignore must start by excluding everything (`*`): target/ alone is many GB"
    );
    let allowed: BTreeSet<&str> = patterns
        .iter()
        .filter_map(|p| p.strip_prefix('!'))
        .map(|p| p.trim_end_matches('/'))
        .collect();
    for stage in stages() {
        for source in copied(&stage) {
            assert!(
                allowed.contains(source.trim_end_matches('/')),
                ".dockerignore does not let `{source}` (COPY in stage {}) through",
                stage.name
            );
            assert!(root.join(&source).exists(), "COPY of a missing {source}");
        }
    }
    // Never in the context, even inside an allowed directory.
    for never in ["**/target", "**/*.swp"] {
        assert!(
            patterns.iter().any(|p| p.trim_end_matches('/') == never),
            ".dockerignore does not exclude {never}"
        );
    }
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
