//! `ferrolb-speaker`: the DaemonSet process of DESIGN §5. Every flag is also an environment
//! variable (`FERROLB_…`, shown in `--help`).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use ferrolb_crds::service::{ClassFilter, DEFAULT_LB_CLASS};
use ferrolb_runtime::client::client;
use ferrolb_runtime::{SharedArgs, build_info, logging};
use ferrolb_speaker::claim::ClaimSettings;
use ferrolb_speaker::daemon::{SpeakerConfig, run};
use ferrolb_speaker::event_sink::EventSinkConfig;
use ferrolb_speaker::l2::{AnnounceSchedule, L2Config};
use ferrolb_speaker::membership::{DEFAULT_PORT, MembershipConfig, TimingProfile};
use ferrolb_speaker::view::ViewSettings;

#[derive(Parser, Debug)]
#[command(
    version,
    about = "ferrolb speaker: answers ARP/NDP for the LoadBalancer IPs this node owns"
)]
struct Cli {
    /// This node's name (the pod's spec.nodeName).
    #[arg(long, env = "FERROLB_NODE_NAME")]
    node_name: String,
    /// Settings shared with the controller.
    #[command(flatten)]
    shared: SharedArgs,
    /// The spec.loadBalancerClass this speaker announces.
    #[arg(long, env = "FERROLB_LB_CLASS", default_value = DEFAULT_LB_CLASS)]
    lb_class: String,
    /// Also announce Services without a loadBalancerClass.
    #[arg(long, env = "FERROLB_DEFAULT_CLASS", default_value_t = true, action = clap::ArgAction::Set)]
    default_class: bool,
    /// Ignore the node.kubernetes.io/exclude-from-external-load-balancers label (single-node clusters).
    #[arg(long, env = "FERROLB_IGNORE_EXCLUDE_LB")]
    ignore_exclude_lb: bool,
    /// File holding the membership key (64 hex characters; mounted from the Secret).
    #[arg(
        long,
        env = "FERROLB_MEMBERLIST_KEY_FILE",
        default_value = "/etc/ferrolb/memberlist/key"
    )]
    memberlist_key_file: PathBuf,
    /// UDP port of the SWIM membership.
    #[arg(long, env = "FERROLB_MEMBERLIST_PORT", default_value_t = DEFAULT_PORT)]
    memberlist_port: u16,
    /// Address other speakers reach this one at; default: this Node's InternalIP.
    #[arg(long, env = "FERROLB_ADVERTISE_ADDRESS")]
    advertise_address: Option<IpAddr>,
    /// Failure-detection timings: `fast` (100/40/200 ms, sub-second failover) or `safe`
    /// (1000/500/5000 ms, for nodes whose speaker may be CPU-starved). The three flags below
    /// override single values.
    #[arg(long, env = "FERROLB_TIMING_PROFILE", value_enum, default_value_t = Profile::Fast)]
    timing_profile: Profile,
    /// SWIM probe period in milliseconds [default: from --timing-profile].
    #[arg(long, env = "FERROLB_PROBE_PERIOD_MS")]
    probe_period_ms: Option<u64>,
    /// SWIM direct-probe timeout in milliseconds [default: from --timing-profile].
    #[arg(long, env = "FERROLB_PROBE_RTT_MS")]
    probe_rtt_ms: Option<u64>,
    /// How long a suspect member has to refute before it is declared down, in milliseconds
    /// [default: from --timing-profile].
    #[arg(long, env = "FERROLB_SUSPECT_TIMEOUT_MS")]
    suspect_timeout_ms: Option<u64>,
    /// Offsets (ms, comma-separated) of the gratuitous ARP / unsolicited NA burst after gaining an IP.
    #[arg(
        long,
        env = "FERROLB_ANNOUNCE_OFFSETS_MS",
        value_delimiter = ',',
        default_value = "0,500,2000,5000"
    )]
    announce_offsets_ms: Vec<u64>,
    /// Re-announce owned IPs every this many seconds after the burst (0 = never).
    #[arg(long, env = "FERROLB_ANNOUNCE_REFRESH_S", default_value_t = 0)]
    announce_refresh_s: u64,
    /// Longest wait after a start, rejoin or stall for every expected speaker (each Ready Node
    /// runs one) to be heard from before claiming IPs, in milliseconds.
    #[arg(long, env = "FERROLB_CONVERGE_TIMEOUT_MS", default_value_t = 3000)]
    converge_timeout_ms: u64,
}

/// `--timing-profile` values (see [`TimingProfile`]).
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Profile {
    Fast,
    Safe,
}

impl Cli {
    /// `(probe_period_ms, probe_rtt_ms, suspect_timeout_ms)`: the profile's, overridden by flags.
    fn timings_ms(&self) -> (u64, u64, u64) {
        let profile = match self.timing_profile {
            Profile::Fast => TimingProfile::Fast,
            Profile::Safe => TimingProfile::Safe,
        };
        let (period, rtt, suspect) = profile.timings();
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        (
            self.probe_period_ms.unwrap_or(ms(period)),
            self.probe_rtt_ms.unwrap_or(ms(rtt)),
            self.suspect_timeout_ms.unwrap_or(ms(suspect)),
        )
    }
}

/// Where the speaker's admin endpoints listen unless `--admin-address` says otherwise.
const DEFAULT_ADMIN_ADDRESS: SocketAddr =
    SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 7473);

/// Refuses settings that cannot work or would overflow a timer (issue #8 F6), naming the flag.
fn check(cli: &Cli) -> anyhow::Result<()> {
    const HOUR_MS: u64 = 3_600_000;
    let (period, rtt, suspect) = cli.timings_ms();
    let limits: [(&str, u64, u64, u64); 5] = [
        ("--probe-period-ms", period, 1, 60_000),
        ("--probe-rtt-ms", rtt, 1, 60_000),
        ("--suspect-timeout-ms", suspect, 1, HOUR_MS),
        ("--announce-refresh-s", cli.announce_refresh_s, 0, 86_400),
        ("--converge-timeout-ms", cli.converge_timeout_ms, 0, HOUR_MS),
    ];
    for (flag, value, min, max) in limits {
        anyhow::ensure!(
            (min..=max).contains(&value),
            "{flag} {value} is outside {min}..={max}"
        );
    }
    for offset in &cli.announce_offsets_ms {
        anyhow::ensure!(
            *offset <= HOUR_MS,
            "--announce-offsets-ms {offset} is above one hour ({HOUR_MS} ms)"
        );
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    check(&cli)?;
    // Crash-only (issue #8 F6): a panic in any task ends the process, so a node never keeps
    // ownership (in the membership's eyes) while a task that serves it has died.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        std::process::abort();
    }));
    logging::init(cli.shared.log_format(), "info");
    build_info::log_startup("ferrolb-speaker");
    let (period, rtt, suspect) = cli.timings_ms();
    let membership = MembershipConfig {
        probe_period: Duration::from_millis(period),
        probe_rtt: Duration::from_millis(rtt),
        suspect_timeout: Duration::from_millis(suspect),
        ..MembershipConfig::default()
    };
    let config = SpeakerConfig {
        node_name: cli.node_name.clone(),
        view: ViewSettings {
            class: ClassFilter {
                lb_class: cli.lb_class.clone(),
                default_class: cli.default_class,
            },
            ignore_exclude_lb: cli.ignore_exclude_lb,
        },
        key_file: cli.memberlist_key_file.clone(),
        memberlist_port: cli.memberlist_port,
        advertise_address: cli.advertise_address,
        membership: membership.clone(),
        l2: L2Config {
            schedule: AnnounceSchedule {
                offsets: cli
                    .announce_offsets_ms
                    .iter()
                    .map(|ms| Duration::from_millis(*ms))
                    .collect(),
                refresh: (cli.announce_refresh_s > 0)
                    .then(|| Duration::from_secs(cli.announce_refresh_s)),
            },
            ..L2Config::default()
        },
        metrics_address: cli.shared.admin_address(DEFAULT_ADMIN_ADDRESS),
        claim: ClaimSettings {
            converge_timeout: Duration::from_millis(cli.converge_timeout_ms),
            ..ClaimSettings::for_membership(membership.probe_period, membership.suspect_timeout)
        },
        events: EventSinkConfig::default(),
    };
    let client = client(cli.shared.kubeconfig.as_deref()).await?;
    run(client, config).await
}
