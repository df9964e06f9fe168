//! `ferrolb-helmgen`: writes the generated files of the Helm chart `deploy/helm/ferrolb/` from the
//! kustomize base `deploy/` (see `ferrolb_tests::chart`). Run it after changing `deploy/` or the
//! workspace version, and commit the result; `tests/tests/helm_chart_fresh.rs` fails until then.

use anyhow::Context;
use ferrolb_tests::chart::{CHART_DIR, generate, stale_files};
use ferrolb_tests::cluster::repo_root;

fn main() -> anyhow::Result<()> {
    let root = repo_root();
    let chart = root.join(CHART_DIR);
    for (path, text) in generate(&root)? {
        let path = chart.join(path);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
            println!("wrote {}", path.display());
        }
    }
    // Files neither generated nor written by hand (e.g. the template of a resource the base
    // dropped) are reported, not deleted.
    for problem in stale_files(&root)? {
        eprintln!("{CHART_DIR}/{problem}");
    }
    Ok(())
}
