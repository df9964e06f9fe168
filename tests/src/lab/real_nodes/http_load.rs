//! A client's HTTP load through the external IPs during a day-two step (issue #29: "a client
//! sending a new HTTP request every few milliseconds through the external IPs"): one thread per
//! IP in a client's network namespace, each sending `GET /hostname` over a new connection
//! (kube-proxy picks a backend per connection), waiting [`PAUSE`] between the end of one and the
//! start of the next, until stopped; then, per IP, what a user would count: requests sent,
//! requests failed, and the longest time requests kept failing.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::lab::{http_client, within_netns};

/// The pause between one request's end and the next one's start, per IP.
pub const PAUSE: Duration = Duration::from_millis(5);

/// How long one request may take (connect, then each read and write): a SYN lost once is
/// retransmitted after 1 s, so a request still unanswered after this counts as failed.
pub const REQUEST_TIMEOUT: Duration = Duration::from_millis(1500);

/// What one IP's client thread counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpCounts {
    /// The external IP.
    pub ip: Option<Ipv4Addr>,
    /// Requests sent (each on a new TCP connection).
    pub sent: usize,
    /// Those that failed (refused, reset, timed out after [`REQUEST_TIMEOUT`], not a 200).
    pub failed: usize,
    /// The longest failing spell: from the start of the first failed request of a run of
    /// failures to the start of the next request that succeeded (or the end of the load). Zero
    /// when nothing failed.
    pub longest_failing: Duration,
    /// The first few errors, with their time from the start of the load.
    pub errors: Vec<String>,
}

/// One request: when it started (from the start of the load) and its error, if it failed.
pub type Outcome = (Duration, Option<String>);

/// Summarises one IP's outcomes, in the order sent; `end` is the load's duration.
pub fn summarize(ip: Ipv4Addr, outcomes: &[Outcome], end: Duration) -> HttpCounts {
    let mut counts = HttpCounts {
        ip: Some(ip),
        sent: outcomes.len(),
        ..HttpCounts::default()
    };
    let mut failing_since: Option<Duration> = None;
    for (at, error) in outcomes {
        match error {
            Some(e) => {
                counts.failed += 1;
                failing_since.get_or_insert(*at);
                if counts.errors.len() < 5 {
                    counts
                        .errors
                        .push(format!("{:.3} s: {e}", at.as_secs_f64()));
                }
            }
            None => {
                if let Some(since) = failing_since.take() {
                    counts.longest_failing = counts.longest_failing.max(at.saturating_sub(since));
                }
            }
        }
    }
    if let Some(since) = failing_since {
        counts.longest_failing = counts.longest_failing.max(end.saturating_sub(since));
    }
    counts
}

/// A running load; [`Self::finish`] stops it and counts.
pub struct HttpLoad {
    stop: Arc<AtomicBool>,
    started: Instant,
    threads: Vec<(
        Ipv4Addr,
        tokio::task::JoinHandle<anyhow::Result<Vec<Outcome>>>,
    )>,
}

impl HttpLoad {
    /// Starts one client thread per IP of `ips` in the network namespace `netns`, port 80.
    pub fn start(netns: &str, ips: &[Ipv4Addr]) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let started = Instant::now();
        let threads = ips
            .iter()
            .map(|&ip| {
                let (netns, stop) = (netns.to_owned(), stop.clone());
                let handle = tokio::task::spawn_blocking(move || {
                    within_netns(&netns, move || {
                        let addr = SocketAddr::from((ip, 80));
                        let mut outcomes = Vec::new();
                        while !stop.load(Ordering::Relaxed) {
                            let at = started.elapsed();
                            let result = http_client::get_hostname(addr, REQUEST_TIMEOUT);
                            outcomes.push((at, result.err().map(|e| format!("{e:#}"))));
                            std::thread::sleep(PAUSE);
                        }
                        Ok(outcomes)
                    })
                });
                (ip, handle)
            })
            .collect();
        Self {
            stop,
            started,
            threads,
        }
    }

    /// Stops every thread (each ends after its request in flight) and counts, per IP in the
    /// order given to [`Self::start`].
    ///
    /// # Errors
    /// A thread could not enter the namespace, or panicked.
    pub async fn finish(self) -> anyhow::Result<Vec<HttpCounts>> {
        self.stop.store(true, Ordering::Relaxed);
        let end = self.started.elapsed();
        let mut counts = Vec::new();
        for (ip, thread) in self.threads {
            counts.push(summarize(ip, &thread.await??, end));
        }
        Ok(counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_failing_spell_runs_from_the_first_failure_to_the_next_success() {
        let ms = Duration::from_millis;
        let err = || Some("refused".to_owned());
        let ip = Ipv4Addr::new(192, 0, 2, 250);
        let outcomes = vec![
            (ms(0), None),
            (ms(10), err()),
            (ms(20), err()),
            (ms(35), None),
            (ms(50), err()),
            (ms(55), None),
            (ms(60), err()),
        ];
        let c = summarize(ip, &outcomes, ms(100));
        assert_eq!((c.sent, c.failed), (7, 4));
        // 10 → 35 (25 ms), 50 → 55, and 60 → the end (40 ms).
        assert_eq!(c.longest_failing, ms(40));
        assert_eq!(c.errors.len(), 4);
        let clean = summarize(ip, &[(ms(0), None), (ms(5), None)], ms(10));
        assert_eq!((clean.failed, clean.longest_failing), (0, Duration::ZERO));
    }
}
