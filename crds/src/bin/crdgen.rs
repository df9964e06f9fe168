//! Writes the CRD manifests to `deploy/crds/` (or the directory given as the only argument).

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds"));
    std::fs::create_dir_all(&dir)?;
    for (file, crd) in ferrolb_crds::manifests::crds() {
        let path = dir.join(file);
        std::fs::write(&path, ferrolb_crds::manifests::to_yaml(&crd)?)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
