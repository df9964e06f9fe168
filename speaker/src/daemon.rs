//! The speaker's main loop: a thin executor around the sans-IO [`SpeakerCore`]
//! (`ferrolb_l2::node`), which decides everything — claim gate, stalls, declared down, carrier
//! gating of the membership, the lease, the plan and the owned set.
//!
//! On every wake-up (a watch event, a membership change or event, or the core's timer, 100 ms)
//! the loop reads the time and what the responder, the membership and the stores show
//! ([`executor::Executor::observe`]), steps the core, and applies its outputs in order
//! ([`executor::Executor::apply`]): the responder's owned set and lease, membership joins and
//! leaves, and the reports of a new plan ([`reporting`]: Events, `L2Announcement`s, gauges).
//! On SIGTERM it withdraws and leaves explicitly (S3). Events never block the loop
//! ([`crate::event_sink`]).

mod executor;
mod lookups;
mod mismatch;
mod reporting;

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use kube::Client;

use crate::claim::ClaimSettings;
use crate::event_sink::EventSinkConfig;
use crate::l2::L2Config;
use crate::membership::{KeySource, MembershipConfig};
use crate::node::{NodeConfig, SpeakerCore, Wake};
use crate::view::ViewSettings;

/// Everything the daemon needs, from the CLI.
#[derive(Clone, Debug)]
pub struct SpeakerConfig {
    /// This node's name (`spec.nodeName` of the speaker pod).
    pub node_name: String,
    /// Which Services, and `--ignore-exclude-lb`.
    pub view: ViewSettings,
    /// Where the membership key ring comes from (the Secret, waited for; or a file).
    pub keys: KeySource,
    /// UDP port of the membership.
    pub memberlist_port: u16,
    /// The address peers reach us at; default: this Node's first InternalIP.
    pub advertise_address: Option<IpAddr>,
    /// Membership timings.
    pub membership: MembershipConfig,
    /// Responder settings.
    pub l2: L2Config,
    /// Where `/livez`, `/readyz`, `/metrics` listen.
    pub metrics_address: SocketAddr,
    /// The claim gate (convergence, majority, stalls).
    pub claim: ClaimSettings,
    /// The Event queue.
    pub events: EventSinkConfig,
    /// The namespace of the L2Announcement reports (the speakers' own).
    pub namespace: String,
}

/// Runs the speaker until SIGTERM/SIGINT.
///
/// The loop is executor → core → executor: each wake-up becomes an observation for
/// [`SpeakerCore::step`], whose outputs the executor applies; the responder applies the owned
/// set at once, and Events go to the [`crate::event_sink::EventSink`] queue, which never waits
/// on the API server (issue #8 F2).
///
/// # Errors
/// Start-up failures: the key file (a key Secret is waited for, ready=false, never an error), the
/// membership socket, the packet sockets, the HTTP address;
/// later, a supervised task that ended (watches, HTTP server, Event writer, membership).
pub async fn run(client: Client, config: SpeakerConfig) -> anyhow::Result<()> {
    let node = NodeConfig::new(config.node_name.clone(), config.claim.clone());
    let mut io = executor::Executor::start(client, config).await?;
    let mut core = SpeakerCore::new(node, Instant::now());
    core.set_view(io.view());
    let mut shutdown = std::pin::pin!(ferrolb_runtime::shutdown::signal());
    let mut wake = Wake::Tick;
    let outcome = loop {
        let now = Instant::now();
        if let Some(task) = io.dead() {
            break Err(anyhow::anyhow!("supervised task '{task}' ended"));
        }
        // A view change, and every due re-plan while the gate is open (a guard against a lost
        // change notice), reads the stores again.
        if wake == Wake::ViewChanged || (core.standing().may_claim() && core.replan_due(now)) {
            core.set_view(io.view());
        }
        core.step(now, io.observe(wake));
        io.apply(now, &mut core).await;
        // A whole tick after the step's I/O, as the loop always slept: a slow step counts
        // toward the gap the stall detector sees (`SpeakerCore::poll_timeout`).
        match io.wake(&mut shutdown, core.config().tick).await {
            Some(next) => wake = next,
            None => break Ok(()),
        }
    };
    io.shut_down(&outcome).await;
    outcome
}
