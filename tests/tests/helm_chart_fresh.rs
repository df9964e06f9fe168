//! `deploy/helm/ferrolb/` must be exactly what `ferrolb-helmgen` generates from the kustomize base
//! `deploy/` and the workspace version (`ferrolb_tests::chart`): one source of truth, no hand-kept
//! copy. When this fails, run `cargo run -p ferrolb-tests --bin ferrolb-helmgen` and commit.
#![allow(clippy::unwrap_used, missing_docs)]

use ferrolb_tests::chart::{CHART_VERSION, GENERATOR, stale_files};
use ferrolb_tests::cluster::repo_root;

#[test]
fn committed_chart_is_fresh() {
    let problems = stale_files(&repo_root()).unwrap();
    assert!(
        problems.is_empty(),
        "deploy/helm/ferrolb is out of date with deploy/ (or with the crate version \
         {CHART_VERSION}): run `{GENERATOR}` and commit.\n{}",
        problems.join("\n")
    );
}
