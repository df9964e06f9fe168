//! Waiting for the end: SIGTERM (what the kubelet sends) or SIGINT (Ctrl-C).

/// Resolves on the first SIGTERM or SIGINT. If the SIGTERM handler cannot be installed, only
/// SIGINT ends the wait.
pub async fn signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}
