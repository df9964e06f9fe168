//! What was built: the crate version and git commit (recorded by `build.rs`), logged once at
//! start and exposed as the `…_build_info{version, commit} 1` gauge (the Prometheus convention
//! for build metadata).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The workspace version (`Cargo.toml`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The git commit, 12 hex digits, or `unknown`.
pub const COMMIT: &str = env!("FERROLB_GIT_COMMIT");

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: String,
    commit: String,
}

/// Registers `build_info` (gauge, always 1) in `registry`.
pub fn register(registry: &mut Registry) {
    let family = Family::<BuildLabels, Gauge>::default();
    family
        .get_or_create(&BuildLabels {
            version: VERSION.into(),
            commit: COMMIT.into(),
        })
        .set(1);
    registry.register(
        "build_info",
        "Version and git commit of this binary",
        family,
    );
}

/// Logs the startup line: binary, version, commit.
pub fn log_startup(binary: &str) {
    tracing::info!(binary, version = VERSION, commit = COMMIT, "starting");
}
