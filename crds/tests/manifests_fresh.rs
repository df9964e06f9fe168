//! `deploy/crds/*.yaml` must be exactly what the Rust types generate. When this fails, run
//! `cargo run -p ferrolb-crds --bin ferrolb-crdgen` and commit the result.
#![allow(clippy::unwrap_used, missing_docs)]

use std::path::Path;

#[test]
fn committed_crds_are_fresh() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds");
    for (file, crd) in ferrolb_crds::manifests::crds() {
        let committed = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
        let generated = ferrolb_crds::manifests::to_yaml(&crd).unwrap();
        assert!(
            committed == generated,
            "deploy/crds/{file} is stale: run `cargo run -p ferrolb-crds --bin ferrolb-crdgen` and commit"
        );
    }
}
