//! When each node's speaker was restarting during a roll-out (issue #29 O1: "each IP moves …
//! only when that node's speaker restarts"): the speaker pods are listed every [`POLL`], and a
//! node's speaker counts as restarting from the first list in which it has no Ready pod that is
//! not being deleted until the next list in which it has one again.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

use crate::lab::http_client::unix_us;

/// How often the speaker pods are listed.
pub const POLL: Duration = Duration::from_millis(200);

/// Per node name, the spells (Unix µs, from and to) its speaker was restarting.
pub type RestartWindows = BTreeMap<String, Vec<(u64, u64)>>;

/// A running watch; [`Self::finish`] stops it.
pub struct SpeakerRestarts {
    task: tokio::task::JoinHandle<()>,
    windows: Arc<Mutex<(RestartWindows, BTreeMap<String, u64>)>>,
}

fn serving(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

impl SpeakerRestarts {
    /// Starts listing the pods matching `selector` in `namespace` for the nodes of `nodes`.
    pub fn start(client: kube::Client, namespace: &str, selector: &str, nodes: &[String]) -> Self {
        let pods: Api<Pod> = Api::namespaced(client, namespace);
        let params = ListParams::default().labels(selector);
        let windows: Arc<Mutex<(RestartWindows, BTreeMap<String, u64>)>> = Arc::default();
        let nodes = nodes.to_vec();
        let shared = windows.clone();
        let task = tokio::spawn(async move {
            loop {
                if let Ok(list) = pods.list(&params).await {
                    let now = unix_us();
                    let mut state = shared
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    let (done, open) = &mut *state;
                    for node in &nodes {
                        let up = list.items.iter().any(|p| {
                            p.spec.as_ref().and_then(|s| s.node_name.as_deref())
                                == Some(node.as_str())
                                && serving(p)
                        });
                        match (up, open.get(node).copied()) {
                            (false, None) => {
                                open.insert(node.clone(), now);
                            }
                            (true, Some(since)) => {
                                open.remove(node);
                                done.entry(node.clone()).or_default().push((since, now));
                            }
                            _ => {}
                        }
                    }
                }
                tokio::time::sleep(POLL).await;
            }
        });
        Self { task, windows }
    }

    /// Stops the watch; a spell still open ends now.
    pub fn finish(self) -> RestartWindows {
        self.task.abort();
        let now = unix_us();
        let mut state = self
            .windows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (done, open) = &mut *state;
        let mut windows = std::mem::take(done);
        for (node, since) in std::mem::take(open) {
            windows.entry(node).or_default().push((since, now));
        }
        windows
    }
}

/// The moves (Unix µs) that fall outside every window of `node`, each window widened by
/// `before` and `after`.
pub fn outside(
    moves: &[u64],
    windows: &RestartWindows,
    node: &str,
    (before, after): (Duration, Duration),
) -> Vec<u64> {
    let widen = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    let spells = windows.get(node).map(Vec::as_slice).unwrap_or_default();
    moves
        .iter()
        .copied()
        .filter(|t| {
            !spells.iter().any(|(from, to)| {
                from.saturating_sub(widen(before)) <= *t && *t <= to.saturating_add(widen(after))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_move_counts_inside_its_nodes_widened_window_only() {
        let windows: RestartWindows =
            [("node-1".to_owned(), vec![(10_000_000, 14_000_000)])].into();
        let s = Duration::from_secs;
        let moves = [9_500_000, 12_000_000, 14_900_000, 16_000_000];
        assert_eq!(
            outside(&moves, &windows, "node-1", (s(1), s(1))),
            vec![16_000_000]
        );
        assert_eq!(
            outside(&moves, &windows, "node-2", (s(1), s(1))),
            moves.to_vec()
        );
    }
}
