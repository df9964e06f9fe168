//! The Kubernetes version floor at start-up (issue #28 item 4): the controller reads the API
//! server's `/version` and refuses a server older than [`MIN_KUBERNETES`] — the rule and its
//! parser are `ferrolb_crds::version`, the one place `ferrolb status` uses too.

use std::time::Duration;

use ferrolb_crds::version::{self, MIN_KUBERNETES, Refusal, VersionInfo};

/// First wait between reads of `/version` while the API server cannot be reached; doubled per
/// failure up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(500);
/// Longest wait between reads of `/version`.
const RETRY_MAX: Duration = Duration::from_secs(10);

/// What `/version` said, in the shared crate's shape.
fn info(v: k8s_openapi::apimachinery::pkg::version::Info) -> VersionInfo {
    VersionInfo {
        git_version: v.git_version,
        major: v.major,
        minor: v.minor,
        emulation: v.emulation_major.zip(v.emulation_minor),
    }
}

/// Reads `/version` and checks it against [`MIN_KUBERNETES`]. A server that cannot be reached is
/// asked again (0.5 s doubling to 10 s, each failure logged): it is no verdict on its version. A
/// server that answers `/version` with an error status (an unusual authorizer: the path is
/// public in every default RBAC) is not checked, with a warning.
///
/// # Errors
/// The server is older than the floor, or its `/version` names no version; the error's text names
/// the version found and the one required.
pub async fn check_floor(client: &kube::Client) -> Result<(), Refusal> {
    let mut wait = RETRY_FIRST;
    loop {
        match client.apiserver_version().await {
            Ok(v) => {
                let v = info(v);
                let (major, minor) = version::check(&v)?;
                tracing::info!(
                    version = %v.git_version,
                    parsed = %format!("{major}.{minor}"),
                    minimum = %format!("{}.{}", MIN_KUBERNETES.0, MIN_KUBERNETES.1),
                    "Kubernetes version supported"
                );
                return Ok(());
            }
            Err(kube::Error::Api(status)) => {
                tracing::warn!(
                    code = status.code,
                    message = %status.message,
                    "the API server answered /version with an error; the Kubernetes version floor is not checked"
                );
                return Ok(());
            }
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?wait, "cannot read the API server's /version");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(RETRY_MAX);
            }
        }
    }
}
