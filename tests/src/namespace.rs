//! A fresh, uniquely named namespace for one test.

use std::sync::atomic::{AtomicU32, Ordering};

use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};

/// Creates a namespace named `<prefix>-<pid>-<n>` and returns its name. The cluster is thrown away
/// after the test (there is no namespace controller to finish deletions), so nothing is deleted.
///
/// # Errors
/// The API server refused the namespace.
pub async fn fresh(client: &Client, prefix: &str) -> anyhow::Result<String> {
    static N: AtomicU32 = AtomicU32::new(0);
    let name = format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    Ok(name)
}
