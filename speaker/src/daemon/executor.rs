//! The speaker's I/O around [`SpeakerCore`]: starts the watches, the responder, the membership,
//! the Event and report writers and the HTTP endpoints; turns what they show into the core's
//! [`Observation`]s, and applies the core's [`Output`]s.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use kube::Client;
use kube::runtime::events::Reporter;
use tokio::sync::{Notify, broadcast, watch};

use crate::announcement_writer::{AnnouncementWriter, WriteCounters};
use crate::eligibility::Interfaces;
use crate::event_sink::{EventCounters, EventSink};
use crate::events::EventPlanner;
use crate::http::Health;
use crate::l2::Responder;
use crate::membership::key_source::{self, KeyUpdates};
use crate::membership::{KeyRing, Membership, MembershipEvent, MembershipSettings};
use crate::metrics::SpeakerMetrics;
use crate::node::{
    MembershipCommand, MembershipObservation, Note, Observation, Output, SpeakerCore, Wake,
};
use crate::watch::Stores;

use super::SpeakerConfig;
use super::lookups::{
    held_reported, named_interfaces, own_addresses, own_internal_ip, peer_addresses,
};
use super::reporting::Reporting;

/// Everything the loop does I/O with.
pub(super) struct Executor {
    config: SpeakerConfig,
    /// The key ring in use: the membership's (and a rejoin's) and the claim proofs'.
    keys: KeyRing,
    /// The key ring the source holds now ([`key_source::follow`]); applied by
    /// [`Executor::apply_keys`] when it changes (issue #27 item 2).
    key_source: watch::Receiver<KeyRing>,
    advertise: std::net::IpAddr,
    pub(super) changed: Arc<Notify>,
    pub(super) stores: Stores,
    supervised: Vec<(&'static str, tokio::task::JoinHandle<()>)>,
    metrics: Arc<SpeakerMetrics>,
    health: Arc<Health>,
    responder: Responder,
    membership: Option<Membership>,
    members: Option<watch::Receiver<BTreeSet<String>>>,
    member_events: Option<broadcast::Receiver<MembershipEvent>>,
    /// The holders' replies to our handover asks (issue #32 G5.8): a change wakes the core.
    replies: Option<watch::Receiver<crate::membership::HandoverReplies>>,
    peer_macs: crate::peer_macs::PeerMacRefresh,
    reporting: Reporting,
    /// The live set the last observation showed.
    observed_alive: BTreeSet<String>,
    /// The voting set the core last named (`Output::SetVoters`).
    voters: BTreeSet<String>,
    /// Refused peers last reported (issue #32 G5.4).
    mismatches: super::mismatch::MismatchReports,
}

impl Executor {
    /// Starts every task and the first membership (see [`super::run`] for the errors).
    pub(super) async fn start(client: Client, config: SpeakerConfig) -> anyhow::Result<Self> {
        let changed = Arc::new(Notify::new());
        let (stores, watches) = Stores::start(&client, &changed, &config.namespace);
        let mut supervised: Vec<(&'static str, _)> =
            watches.into_iter().map(|h| ("watch", h)).collect();

        let l2_counters = Arc::new(crate::l2::Counters::default());
        let event_counters = Arc::new(EventCounters::default());
        let announcement_counters = Arc::new(WriteCounters::default());
        let member_report_counters = Arc::new(WriteCounters::default());
        let metrics = Arc::new(SpeakerMetrics {
            l2: l2_counters.clone(),
            membership: std::sync::Mutex::new(None),
            membership_receive_buffer: Default::default(),
            membership_refused: Default::default(),
            owned_ips: Default::default(),
            no_eligible_node_ips: Default::default(),
            forbidden_ips: Default::default(),
            kernel_arp_conflicts: Default::default(),
            ip_conflicts: Default::default(),
            ip_conflict_reports_withheld: Default::default(),
            held_ips: Default::default(),
            events: event_counters.clone(),
            announcements: announcement_counters.clone(),
            member_reports: member_report_counters.clone(),
            claim: Default::default(),
            keys: Default::default(),
        });
        let health = Arc::new(Health {
            ready: Default::default(),
            waiting_for: Default::default(),
            registry: metrics.registry(),
        });
        let listener_health = health.clone();
        let metrics_address = config.metrics_address;
        supervised.push((
            "http",
            tokio::spawn(async move {
                if let Err(e) =
                    ferrolb_runtime::admin::serve(metrics_address, listener_health).await
                {
                    tracing::error!(error = %e, %metrics_address, "HTTP endpoints failed");
                }
            }),
        ));
        // Not ready (with the reason in /readyz) until the key ring is read: a key Secret is
        // waited for, however long the controller takes to create it (issue #27 item 1).
        let keys = crate::membership::key_source::load(&client, &config.keys, &|why| {
            if let Ok(mut w) = health.waiting_for.lock() {
                *w = why;
            }
        })
        .await?;
        // From now on the source is followed: a changed key ring is applied without a restart
        // (issue #27 item 2, `Executor::apply_keys`).
        let key_updates = Arc::new(KeyUpdates::default());
        let (key_tx, key_rx) = watch::channel(keys.clone());
        supervised.push((
            "membership key watch",
            tokio::spawn(key_source::follow(
                client.clone(),
                config.keys.clone(),
                key_tx,
                key_updates.clone(),
            )),
        ));
        metrics.keys.show(&keys, key_updates);

        tokio::time::timeout(Duration::from_secs(120), stores.wait_ready())
            .await
            .context("watch stores did not sync within 120 s")??;
        // The L2Announcement reports say which IPs another host holds (probed first, whoever
        // owns them): give their watch a moment, but never block on it (CRD or RBAC may be
        // missing).
        let _ = tokio::time::timeout(
            Duration::from_secs(5),
            stores.announcements.wait_until_ready(),
        )
        .await;
        let advertise = match config.advertise_address {
            Some(ip) => ip,
            None => own_internal_ip(&stores, &config.node_name).with_context(|| {
                format!(
                    "Node {} has no InternalIP; pass --advertise-address",
                    config.node_name
                )
            })?,
        };
        let responder = Responder::start(config.l2.clone(), l2_counters)
            .context("starting the ARP/NDP responder")?;
        // Announcements carry a proof keyed like the membership; only proven claims make an
        // owner yield (DESIGN S15).
        responder.set_claim_keys(crate::wire::claim_proof::ClaimKeys::from_ring(&keys));
        let recorder = ferrolb_runtime::events::Publisher::new(
            client.clone(),
            Reporter {
                controller: "ferrolb.io/speaker".into(),
                instance: Some(config.node_name.clone()),
            },
        );
        let (sink, sink_task) = EventSink::spawn(
            recorder,
            stores.clone(),
            config.events.clone(),
            event_counters,
        );
        supervised.push(("event writer", sink_task));
        let (announcement_writer, announcement_task) =
            AnnouncementWriter::spawn(client.clone(), &config.namespace, announcement_counters);
        supervised.push(("announcement writer", announcement_task));
        // The membership report has a writer of its own, so its writes are counted apart
        // (`membership_report_writes_total`) and never wait behind thousands of IP reports.
        let (member_report_writer, member_report_task) =
            AnnouncementWriter::spawn(client.clone(), &config.namespace, member_report_counters);
        supervised.push(("membership report writer", member_report_task));
        let reporting = Reporting {
            me: config.node_name.clone(),
            l2: config.l2.clone(),
            metrics: metrics.clone(),
            sink,
            announcement_writer,
            announcements_ready: stores.announcements_ready(),
            planner: EventPlanner::new(&config.node_name),
            announcement_planner: Default::default(),
            member_report_writer,
            member_report_planner: Default::default(),
            networks: Vec::new(),
            networks_read: None,
            networks_auto: false,
            probes: Default::default(),
            probe_round: None,
            probe_results: std::sync::mpsc::channel(),
            last_announcements: None,
            last_forbidden: BTreeSet::new(),
            kernel_arp: Default::default(),
            conflicts: Default::default(),
            held_reports: Default::default(),
            conflict_budget: Default::default(),
        };
        let mut executor = Executor {
            config,
            keys,
            key_source: key_rx,
            advertise,
            changed,
            stores,
            supervised,
            metrics,
            health,
            responder,
            membership: None,
            members: None,
            member_events: None,
            replies: None,
            peer_macs: Default::default(),
            reporting,
            observed_alive: BTreeSet::new(),
            voters: BTreeSet::new(),
            mismatches: Default::default(),
        };
        let membership = Membership::start(executor.settings())
            .await
            .context("starting the membership")?;
        executor.joined(membership);
        tracing::info!(node = %executor.config.node_name, %advertise, "speaker running; converging before claiming");
        Ok(executor)
    }

    fn settings(&self) -> MembershipSettings {
        let addr = SocketAddr::new(self.advertise, self.config.memberlist_port);
        MembershipSettings {
            node_name: self.config.node_name.clone(),
            bind_addr: addr,
            advertise_addr: Some(addr),
            keys: self.keys.clone(),
            config: self.config.membership.clone(),
            generation: None,
        }
    }

    fn joined(&mut self, m: Membership) {
        if let Ok(mut slot) = self.metrics.membership.lock() {
            *slot = Some(m.counters_handle());
        }
        self.metrics.membership_receive_buffer.store(
            u64::try_from(m.receive_buffer().granted).unwrap_or(u64::MAX),
            std::sync::atomic::Ordering::Relaxed,
        );
        self.members = Some(m.members());
        self.member_events = Some(m.events());
        self.replies = Some(m.handover_replies());
        self.membership = Some(m);
        self.set_quorum();
    }

    /// Hands the responder what its quorum lease is computed from: the voters and the current
    /// membership's evidence (none while out of it).
    fn set_quorum(&self) {
        self.responder
            .set_quorum(Some(crate::l2::responder::Quorum {
                me: self.config.node_name.clone(),
                voters: self.voters.clone(),
                evidence: self.membership.as_ref().map(Membership::evidence),
            }));
    }

    /// Waits for the next wake-up: a view change, a membership change or event, or `timeout`.
    /// `None` on SIGTERM/SIGINT.
    pub(super) async fn wake(
        &mut self,
        shutdown: &mut (impl std::future::Future<Output = ()> + Unpin),
        timeout: Duration,
    ) -> Option<Wake> {
        let members_changed = async {
            match self.members.as_mut() {
                Some(rx) => {
                    if rx.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
                None => std::future::pending::<()>().await,
            }
        };
        let member_event = async {
            match self.member_events.as_mut() {
                Some(rx) => rx.recv().await.ok(),
                None => std::future::pending().await,
            }
        };
        let released = async {
            match self.replies.as_mut() {
                Some(rx) => {
                    if rx.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
                None => std::future::pending::<()>().await,
            }
        };
        let me = self.config.node_name.as_str();
        tokio::select! {
            _ = shutdown => None,
            _ = self.changed.notified() => Some(Wake::ViewChanged),
            _ = members_changed => Some(Wake::MembersChanged),
            _ = released => Some(Wake::HandoverReply),
            event = member_event => Some(Wake::MemberEvent {
                restarted_peer: matches!(
                    &event,
                    Some(MembershipEvent::Restarted(n) | MembershipEvent::Up(n)) if n != me
                ),
            }),
            () = tokio::time::sleep(timeout) => Some(Wake::Tick),
        }
    }

    /// The name of a supervised task (or the membership) that has ended, if any.
    pub(super) fn dead(&self) -> Option<&'static str> {
        self.supervised
            .iter()
            .find(|(_, handle)| handle.is_finished())
            .map(|(name, _)| *name)
            .or_else(|| {
                self.membership
                    .as_ref()
                    .filter(|m| !m.is_running())
                    .map(|_| "membership")
            })
    }

    /// The current API view.
    pub(super) fn view(&self) -> Arc<crate::view::View> {
        Arc::new(self.stores.view(&self.config.view))
    }

    /// What the core needs for one step, read now.
    pub(super) fn observe(&mut self, wake: Wake) -> Observation {
        let membership = self.membership.as_ref().map(|m| MembershipObservation {
            alive: self
                .members
                .as_ref()
                .map(|rx| rx.borrow().clone())
                .unwrap_or_default(),
            self_rejoins: m.counters().self_rejoins,
            evidence: m.evidence().borrow().clone(),
            agreeing: m.agreeing().borrow().clone(),
            handover_replies: self
                .replies
                .as_mut()
                .map(|rx| rx.borrow_and_update().clone())
                .unwrap_or_default(),
            carriers: m.carriers().borrow().clone(),
            revisions: m.peer_revisions().borrow().clone(),
            askers: m.handover_askers().borrow().clone(),
            releases_given: m.releases_given().borrow().clone(),
        });
        self.observed_alive = membership
            .as_ref()
            .map(|m| m.alive.clone())
            .unwrap_or_default();
        let wall_secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let held_reported = if self.reporting.announcements_ready.load(Ordering::Relaxed) {
            held_reported(&self.stores)
        } else {
            BTreeSet::new()
        };
        Observation {
            wake,
            carrier: self.responder.carrier(&Interfaces::All),
            links: self.responder.link_report(&named_interfaces(&self.stores)),
            membership,
            wall_secs,
            held_reported,
        }
    }

    /// Applies the core's outputs in order, then the per-step upkeep: membership peers, peer
    /// MACs, metrics, readiness, and the reports of a new plan.
    pub(super) async fn apply(&mut self, now: Instant, core: &mut SpeakerCore) {
        let mut planned = None;
        while let Some(output) = core.poll_output() {
            match output {
                Output::SetLease(until) => self.responder.set_lease(until),
                Output::SetVoters(voters) => {
                    self.voters = voters;
                    self.set_quorum();
                }
                Output::SetFresh(fresh) => self.responder.set_fresh(fresh),
                Output::SetOwned(owned) => self.responder.set_owned(owned),
                // After the responder applied the owned set: never say an IP is let go while it
                // is still answered for.
                Output::SetHandovers {
                    asks,
                    holding,
                    plan,
                    revision,
                } => {
                    if let Some(m) = &self.membership {
                        m.set_handovers(&asks, &holding, plan, revision);
                    }
                }
                Output::Reannounce => self.responder.reannounce(),
                Output::Membership(MembershipCommand::Leave { grace }) => self.leave(grace),
                Output::Membership(MembershipCommand::Join) => {
                    match Membership::start(self.settings()).await {
                        Ok(m) => self.joined(m),
                        Err(e) => {
                            tracing::warn!(error = %e, "could not rejoin the membership; retrying");
                            core.join_failed();
                        }
                    }
                }
                Output::Withdrawn => self.reporting.withdrawn(),
                Output::Planned { plan, .. } => {
                    self.responder
                        .set_node_addresses(own_addresses(&self.stores, &self.config.node_name));
                    planned = Some(plan);
                }
                Output::Note(note) => log(note),
                Output::SetCarrier(report) => {
                    if let Some(m) = &self.membership {
                        m.set_carrier_report(report);
                    }
                }
            }
        }
        self.apply_keys().await;
        if let Some(m) = &self.membership {
            m.set_voters(&self.voters);
            m.set_peers(peer_addresses(
                &self.stores,
                &self.config.node_name,
                self.config.memberlist_port,
            ));
        }
        self.peer_macs.tick(
            now,
            &self.observed_alive,
            &self.stores,
            &self.config.node_name,
            &self.responder,
        );
        let refused = self
            .membership
            .as_ref()
            .map(|m| m.refused().borrow().clone())
            .unwrap_or_default();
        self.mismatches.update(
            now,
            &refused,
            &self.metrics,
            &self.reporting.sink,
            &self.config.node_name,
        );
        let counters = core.counters();
        let claim = &self.metrics.claim;
        claim.set(core.standing());
        claim.stalls.store(counters.stalls, Ordering::Relaxed);
        claim
            .declared_down
            .store(counters.declared_down, Ordering::Relaxed);
        self.health
            .ready
            .store(core.ready() && self.membership.is_some(), Ordering::Relaxed);
        let members = if self.membership.is_some() {
            u32::try_from(self.observed_alive.len()).unwrap_or(u32::MAX)
        } else {
            0
        };
        self.reporting
            .report_members(now, members, &self.stores, &self.responder);
        if let Some(plan) = planned {
            self.reporting
                .report(now, &plan, core.view(), &self.stores, &self.responder);
        }
    }

    /// Applies a changed key ring without a restart (issue #27 item 2): to the running
    /// membership (`Membership::set_keys`: the first key seals from now on, all open; hellos
    /// with the new fingerprints go to every member), to the claim proofs, and to the next
    /// rejoin; then `/metrics` shows it (`membership_key_info`). Runs at every step, so a change
    /// is applied within a tick of the source showing it.
    async fn apply_keys(&mut self) {
        if !self.key_source.has_changed().unwrap_or(false) {
            return;
        }
        let ring = self.key_source.borrow_and_update().clone();
        if ring == self.keys {
            return;
        }
        self.keys = ring;
        self.responder
            .set_claim_keys(crate::wire::claim_proof::ClaimKeys::from_ring(&self.keys));
        if let Some(m) = &self.membership {
            m.set_keys(self.keys.clone()).await;
        }
        self.metrics.keys.applied(&self.keys);
        tracing::info!(
            primary = %key_source::fingerprint_hex(self.keys.primary()),
            keys = self.keys.keys().len(),
            "membership key ring applied"
        );
    }

    /// Leaves the membership (carrier lost, declared down, stalled) and drops its receivers.
    /// The leave runs off the loop: it waits for its datagrams, and the loop must keep ticking
    /// (a late tick reads as a stall).
    fn leave(&mut self, grace: Duration) {
        if let Some(m) = self.membership.take() {
            tokio::spawn(m.leave(grace));
        }
        self.members = None;
        self.member_events = None;
        self.replies = None;
        self.set_quorum();
    }

    /// Withdraws everything and leaves the membership (SIGTERM, or a supervised task ended).
    pub(super) async fn shut_down(mut self, outcome: &anyhow::Result<()>) {
        self.health.ready.store(false, Ordering::Relaxed);
        match outcome {
            Ok(()) => tracing::info!("shutting down: withdrawing and leaving the membership"),
            Err(e) => {
                tracing::error!(error = %e, "withdrawing, leaving the membership and exiting")
            }
        }
        self.responder.set_owned(Default::default());
        if let Some(m) = self.membership.take() {
            m.leave(Duration::from_secs(1)).await;
        }
    }
}

/// The core's notes as log lines.
fn log(note: Note) {
    use crate::claim::Standing;
    match note {
        Note::DeclaredDownLeaving { hold_off } => tracing::warn!(
            ?hold_off,
            "the others declared this speaker down; withdrawing every IP and leaving the membership for a hold-off"
        ),
        Note::DeclaredDownAfterPause => tracing::warn!(
            "the others declared this speaker down right after a pause of ours; withdrawing every IP until the membership has converged again"
        ),
        Note::CarrierLost => {
            tracing::warn!("no announce interface has carrier; leaving the membership")
        }
        Note::Rejoining => tracing::info!("rejoining the membership"),
        Note::Stalled { gap } => tracing::warn!(
            ?gap,
            "speaker was stalled; withdrawing and leaving the membership until the resync is over"
        ),
        Note::Standing(Standing::Converging { missing }) => {
            tracing::info!(?missing, "claim gate: converging, claiming nothing")
        }
        Note::Standing(Standing::Minority { alive, expected }) => tracing::warn!(
            alive,
            expected,
            "claim gate: this speaker sees a minority of the expected speakers; withdrawing every IP"
        ),
        Note::Standing(Standing::Majority) => tracing::info!("claim gate: open"),
        Note::MembershipChanged(members) => {
            tracing::info!(?members, "membership changed")
        }
    }
}
