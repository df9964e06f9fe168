//! Keeps the responder's map of peer speakers' MACs current ([`crate::l2::peers`]): the kernel's
//! neighbour table is dumped off the async threads every [`REFRESH_EVERY`] and joined with the
//! Nodes' addresses and the speakers heard alive in the membership within [`PEER_MEMORY`], so a
//! peer counts within one refresh of being heard, and stops counting [`PEER_MEMORY`] after it
//! was last heard.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use crate::l2::Responder;
use crate::l2::{neighbours, peers};
use crate::view::node_addresses;
use crate::watch::Stores;
use crate::wire::MacAddr;

/// How often the neighbour table is read.
pub const REFRESH_EVERY: Duration = Duration::from_secs(2);

/// A speaker heard alive in the membership counts as a peer this long after it was last heard:
/// the voter memory of the claim gate ([`crate::claim::VOTER_MEMORY`], 5 minutes).
pub const PEER_MEMORY: Duration = crate::claim::VOTER_MEMORY;

type Dump = io::Result<Vec<(IpAddr, MacAddr)>>;

/// The refresh state, owned by the daemon loop ([`PeerMacRefresh::tick`] once per tick).
#[derive(Default)]
pub struct PeerMacRefresh {
    last_dump: Option<Instant>,
    pending: Option<JoinHandle<Dump>>,
    neighbours: Vec<(IpAddr, MacAddr)>,
    heard: BTreeMap<String, Instant>,
    applied: Option<(BTreeSet<String>, usize)>,
    failed_once: bool,
    failures_in_a_row: u32,
}

/// After this many failed dumps in a row the last good one is dropped (no peer known: claims
/// are conflicts again) rather than trusted indefinitely.
const STALE_AFTER_FAILURES: u32 = 3;

impl PeerMacRefresh {
    /// Collects a finished dump, starts a new one when due, records `alive` (the membership's
    /// live set), and hands the responder the map of the speakers heard within [`PEER_MEMORY`]
    /// (never `me`) when the neighbours or that set changed. Never blocks.
    pub fn tick(
        &mut self,
        now: Instant,
        alive: &BTreeSet<String>,
        stores: &Stores,
        me: &str,
        responder: &Responder,
    ) {
        let mut fresh_dump = false;
        if self.pending.as_ref().is_some_and(JoinHandle::is_finished)
            && let Some(handle) = self.pending.take()
        {
            // `is_finished`: polling it now does not wait.
            match futures::FutureExt::now_or_never(handle) {
                Some(Ok(Ok(entries))) => {
                    self.neighbours = entries;
                    self.failures_in_a_row = 0;
                    fresh_dump = true;
                }
                _ => {
                    self.failures_in_a_row = self.failures_in_a_row.saturating_add(1);
                    if !self.failed_once {
                        self.failed_once = true;
                        tracing::warn!(
                            "cannot read the neighbour table; after three failures in a row, announcements of peer speakers are treated as a foreign host's (conflicts)"
                        );
                    }
                    if self.failures_in_a_row >= STALE_AFTER_FAILURES && !self.neighbours.is_empty()
                    {
                        self.neighbours.clear();
                        fresh_dump = true;
                    }
                }
            }
        }
        if self.pending.is_none()
            && self
                .last_dump
                .is_none_or(|at| now.saturating_duration_since(at) >= REFRESH_EVERY)
        {
            self.last_dump = Some(now);
            self.pending = Some(tokio::task::spawn_blocking(neighbours::dump));
        }
        for name in alive {
            self.heard.insert(name.clone(), now);
        }
        self.heard
            .retain(|_, at| now.saturating_duration_since(*at) <= PEER_MEMORY);
        let heard: BTreeSet<String> = self.heard.keys().cloned().collect();
        let key = (heard, self.neighbours.len());
        if !fresh_dump && self.applied.as_ref() == Some(&key) {
            return;
        }
        let nodes: BTreeMap<String, BTreeSet<IpAddr>> = stores
            .nodes
            .state()
            .iter()
            .filter_map(|n| {
                let name = n.metadata.name.clone()?;
                Some((name, node_addresses(n).into_iter().collect()))
            })
            .collect();
        let map = peers::peer_macs(&self.neighbours, &nodes, &key.0, me);
        tracing::debug!(peers = ?map, "peer speakers' MACs");
        responder.set_peer_macs(map);
        self.applied = Some(key);
    }
}
