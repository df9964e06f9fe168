//! The one polling helper of the tests, benches and the demo: check a condition every 100 ms (or a
//! given interval) until it holds or a timeout passes. Tests never sleep a fixed time to "let
//! things settle".

use std::future::Future;
use std::time::{Duration, Instant};

/// How often [`until`] checks.
pub const INTERVAL: Duration = Duration::from_millis(100);

/// Calls `check` every [`INTERVAL`] until it returns `true`.
///
/// # Errors
/// `timeout` passed first; the message names `what`.
pub async fn until<F, Fut>(what: &str, timeout: Duration, check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    until_every(what, timeout, INTERVAL, check).await
}

/// Like [`until`], checking every `every` instead of [`INTERVAL`]: for checks that cost the
/// system under test something (a process started per check, an API list) on a slow machine
/// such as the VM lab's emulated guest.
///
/// # Errors
/// `timeout` passed first; the message names `what`.
pub async fn until_every<F, Fut>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut check: F,
) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if check().await {
            return Ok(());
        }
        if start.elapsed() >= timeout {
            anyhow::bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(every).await;
    }
}

/// Like [`until`], for a check that yields a value: calls `check` every [`INTERVAL`] until it
/// returns `Some`, and returns that value.
///
/// # Errors
/// `timeout` passed first; the message names `what`.
pub async fn until_some<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(value) = check().await {
            return Ok(value);
        }
        if start.elapsed() >= timeout {
            anyhow::bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(INTERVAL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn returns_when_the_condition_holds_and_fails_after_the_timeout() {
        let mut calls = 0;
        until("third call", Duration::from_secs(5), || {
            calls += 1;
            let done = calls >= 3;
            async move { done }
        })
        .await
        .unwrap();
        assert_eq!(calls, 3);
        let err = until("never", Duration::from_millis(250), || async { false })
            .await
            .unwrap_err();
        assert!(err.to_string().contains("waiting for never"), "{err}");
    }
}
