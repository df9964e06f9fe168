//! `ferrolb-speaker`: the DaemonSet process of DESIGN §5. Every flag is also an environment
//! variable (`FERROLB_…`, shown in `--help`).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use ferrolb_crds::service::{ClassFilter, DEFAULT_LB_CLASS};
use ferrolb_runtime::client::client;
use ferrolb_runtime::{SharedArgs, build_info, duration, logging};
use ferrolb_speaker::claim::ClaimSettings;
use ferrolb_speaker::daemon::{SpeakerConfig, run};
use ferrolb_speaker::eligibility::ExcludeLbLabel;
use ferrolb_speaker::event_sink::EventSinkConfig;
use ferrolb_speaker::l2::exclusions::NameExclusions;
use ferrolb_speaker::l2::probe::ProbeSettings;
use ferrolb_speaker::l2::{AnnounceSchedule, L2Config};
use ferrolb_speaker::membership::key_source::{self, KeySource};
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
    /// When the node.kubernetes.io/exclude-from-external-load-balancers label keeps a Node from
    /// announcing: `auto` (honoured unless every Node carries it — the only node of a minikube
    /// or kind cluster does — then set aside, and each Service says so in a Warning Event
    /// `ExclusionLabelIgnored`), `honour` (always, as MetalLB; `honor` is accepted) or `ignore`.
    #[arg(long, env = "FERROLB_EXCLUDE_LB_LABEL", default_value = "auto", value_parser = exclude_lb_label)]
    exclude_lb_label: ExcludeLbLabel,
    /// The same as `--exclude-lb-label=ignore` (the flag before `--exclude-lb-label`).
    #[arg(
        long,
        env = "FERROLB_IGNORE_EXCLUDE_LB",
        conflicts_with = "exclude_lb_label"
    )]
    ignore_exclude_lb: bool,
    /// Keep announcing from cordoned Nodes (`spec.unschedulable`). By default a cordoned node's
    /// IPs move to an uncordoned node, and stay when every eligible node is cordoned
    /// (docs/operations.md, "Cordon and drain").
    #[arg(long, env = "FERROLB_IGNORE_CORDON")]
    ignore_cordon: bool,
    /// The default announce interfaces, comma-separated (e.g. `eth1` or `bond0,eth2`): IPs whose
    /// L2Advertisements name no `interfaces` are announced on exactly these, as given. Empty:
    /// chosen automatically (every interface that is up, can broadcast and is not virtual; one
    /// per segment, preferring the one holding the Node's address).
    #[arg(long, env = "FERROLB_INTERFACES", value_delimiter = ',', value_parser = interface_name)]
    interfaces: Vec<String>,
    /// The interface names the automatic default set leaves out, comma-separated: `default`
    /// (the built-in list: veth*, docker*, cni*, cali*, flannel*, cilium*, kube-ipvs*, lxc*,
    /// virbr*, dummy*, tunl*, nodelocaldns*), name patterns where `*` is any run of characters,
    /// or `none`. `default,br-*` extends the list, `veth*,docker*` replaces it. Not applied to
    /// `--interfaces` or an L2Advertisement's `spec.interfaces` (docs/configuration.md).
    #[arg(
        long,
        env = "FERROLB_EXCLUDE_INTERFACES",
        default_value = "default",
        value_parser = NameExclusions::parse
    )]
    exclude_interfaces: NameExclusions,
    /// A file holding the membership key ring (lines of 64 hex digits, the first one seals), for
    /// a key you mount yourself; read once, an error stops the speaker. Unset (the manifests'
    /// default): the key ring is read through the API from `--memberlist-secret`.
    #[arg(long, env = "FERROLB_MEMBERLIST_KEY_FILE")]
    memberlist_key_file: Option<PathBuf>,
    /// The Secret in `--namespace` holding the membership key ring under `key` (the controller
    /// creates `ferrolb-memberlist` when it is absent); read through the API, and waited for
    /// (not ready) while absent. Ignored when `--memberlist-key-file` is set.
    #[arg(long, env = "FERROLB_MEMBERLIST_SECRET", default_value = key_source::DEFAULT_SECRET)]
    memberlist_secret: String,
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
    /// SWIM probe period, with its unit (e.g. 100ms) [default: from --timing-profile].
    #[arg(long, env = "FERROLB_PROBE_PERIOD", value_parser = duration::parse)]
    probe_period: Option<Duration>,
    /// SWIM direct-probe timeout (e.g. 40ms) [default: from --timing-profile].
    #[arg(long, env = "FERROLB_PROBE_RTT", value_parser = duration::parse)]
    probe_rtt: Option<Duration>,
    /// How long a suspect member has to refute before it is declared down (e.g. 200ms)
    /// [default: from --timing-profile].
    #[arg(long, env = "FERROLB_SUSPECT_TIMEOUT", value_parser = duration::parse)]
    suspect_timeout: Option<Duration>,
    /// Offsets of the gratuitous ARP / unsolicited NA burst after gaining an IP, comma-separated
    /// [default: 0s,500ms,2s,5s].
    #[arg(long, env = "FERROLB_ANNOUNCE_OFFSETS", value_delimiter = ',', value_parser = duration::parse)]
    announce_offsets: Vec<Duration>,
    /// Re-announce owned IPs this often after the burst (0s = never) [default: 0s].
    #[arg(long, env = "FERROLB_ANNOUNCE_REFRESH", value_parser = duration::parse)]
    announce_refresh: Option<Duration>,
    /// Namespace of the L2Announcement reports ("who answers for what") and of the membership-key
    /// Secret; the manifests set it to the speaker pod's own namespace.
    #[arg(long, env = "FERROLB_NAMESPACE", default_value = "ferrolb-system")]
    namespace: String,
    /// Probes sent for a newly assigned IP before its first announcement (ARP probes / DAD
    /// Neighbor Solicitations, RFC 5227 §2.1.1 scaled down); another host answering holds the IP
    /// back and raises an IPConflict Warning. 0 = announce at once, as MetalLB does.
    #[arg(long, env = "FERROLB_ADDRESS_PROBES", default_value_t = 3, value_parser = clap::value_parser!(u32).range(0..=10))]
    address_probes: u32,
    /// Time between those probes (1ms to 10s); the round ends two intervals after the last one.
    #[arg(long, env = "FERROLB_ADDRESS_PROBE_INTERVAL", value_parser = probe_interval, default_value = "100ms")]
    address_probe_interval: Duration,
    /// Longest wait after a start, rejoin or stall for every expected speaker (each Ready Node
    /// runs one) to be heard from before claiming IPs [default: 3s].
    #[arg(long, env = "FERROLB_CONVERGE_TIMEOUT", value_parser = duration::parse)]
    converge_timeout: Option<Duration>,
    /// Deprecated spellings (one release): a bare number is in the unit of the old name.
    #[command(flatten)]
    legacy: LegacyDurations,
}

/// The duration flags as they were spelled before issue #9 (unit in the name), hidden; each
/// also read from its old environment variable. The new spelling wins when both are given.
#[derive(clap::Args, Debug)]
struct LegacyDurations {
    #[arg(long, hide = true, env = "FERROLB_PROBE_PERIOD_MS", value_parser = duration::parse_legacy_ms)]
    probe_period_ms: Option<Duration>,
    #[arg(long, hide = true, env = "FERROLB_PROBE_RTT_MS", value_parser = duration::parse_legacy_ms)]
    probe_rtt_ms: Option<Duration>,
    #[arg(long, hide = true, env = "FERROLB_SUSPECT_TIMEOUT_MS", value_parser = duration::parse_legacy_ms)]
    suspect_timeout_ms: Option<Duration>,
    #[arg(long, hide = true, env = "FERROLB_ANNOUNCE_OFFSETS_MS", value_delimiter = ',', value_parser = duration::parse_legacy_ms)]
    announce_offsets_ms: Vec<Duration>,
    #[arg(long, hide = true, env = "FERROLB_ANNOUNCE_REFRESH_S", value_parser = duration::parse_legacy_seconds)]
    announce_refresh_s: Option<Duration>,
    #[arg(long, hide = true, env = "FERROLB_CONVERGE_TIMEOUT_MS", value_parser = duration::parse_legacy_ms)]
    converge_timeout_ms: Option<Duration>,
}

/// `--exclude-lb-label`: `auto`, `honour` (or `honor`) or `ignore`
/// ([`ExcludeLbLabel::from_str`](std::str::FromStr)).
fn exclude_lb_label(s: &str) -> Result<ExcludeLbLabel, String> {
    s.parse()
}

/// `--interfaces`: a Linux interface name (1 to 15 bytes, `IFNAMSIZ` − 1; no `/`, whitespace or
/// `:`), the rule of `L2Advertisement.spec.interfaces`, and not `.` or `..` (Linux refuses them).
fn interface_name(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 15
        && s != "."
        && s != ".."
        && !s.chars().any(|c| c == '/' || c == ':' || c.is_whitespace());
    if ok {
        Ok(s.to_owned())
    } else {
        Err(format!(
            "{s:?} is not an interface name (1 to 15 characters, no '/', ':' or whitespace)"
        ))
    }
}

/// `--address-probe-interval`: a duration from 1 ms to 10 s (0 would send no probe at all;
/// longer delays every new Service by more than half a minute).
fn probe_interval(s: &str) -> Result<Duration, String> {
    let d = duration::parse(s)?;
    if d < Duration::from_millis(1) || d > Duration::from_secs(10) {
        return Err(format!("{s}: must be from 1ms to 10s"));
    }
    Ok(d)
}

/// `--timing-profile` values (see [`TimingProfile`]).
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Profile {
    Fast,
    Safe,
}

impl Cli {
    /// `(probe_period, probe_rtt, suspect_timeout)`: the profile's, overridden by flags.
    fn timings(&self) -> (Duration, Duration, Duration) {
        let profile = match self.timing_profile {
            Profile::Fast => TimingProfile::Fast,
            Profile::Safe => TimingProfile::Safe,
        };
        let (period, rtt, suspect) = profile.timings();
        let l = &self.legacy;
        (
            self.probe_period.or(l.probe_period_ms).unwrap_or(period),
            self.probe_rtt.or(l.probe_rtt_ms).unwrap_or(rtt),
            self.suspect_timeout
                .or(l.suspect_timeout_ms)
                .unwrap_or(suspect),
        )
    }

    /// The announcement burst offsets.
    fn announce_offsets(&self) -> Vec<Duration> {
        if !self.announce_offsets.is_empty() {
            self.announce_offsets.clone()
        } else if !self.legacy.announce_offsets_ms.is_empty() {
            self.legacy.announce_offsets_ms.clone()
        } else {
            [0, 500, 2000, 5000].map(Duration::from_millis).to_vec()
        }
    }

    /// The periodic refresh (zero = none).
    fn announce_refresh(&self) -> Duration {
        self.announce_refresh
            .or(self.legacy.announce_refresh_s)
            .unwrap_or(Duration::ZERO)
    }

    /// Where the membership key ring comes from: the file if one is given, else the Secret.
    fn key_source(&self) -> KeySource {
        match &self.memberlist_key_file {
            Some(path) => KeySource::File(path.clone()),
            None => KeySource::Secret {
                namespace: self.namespace.clone(),
                name: self.memberlist_secret.clone(),
            },
        }
    }

    /// The convergence wait.
    fn converge_timeout(&self) -> Duration {
        self.converge_timeout
            .or(self.legacy.converge_timeout_ms)
            .unwrap_or(Duration::from_secs(3))
    }
}

/// Where the speaker's admin endpoints listen unless `--admin-address` says otherwise.
const DEFAULT_ADMIN_ADDRESS: SocketAddr =
    SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 7473);

/// Refuses settings that cannot work or would overflow a timer (issue #8 F6), naming the flag.
fn check(cli: &Cli) -> anyhow::Result<()> {
    const MS: Duration = Duration::from_millis(1);
    const MINUTE: Duration = Duration::from_secs(60);
    const HOUR: Duration = Duration::from_secs(3600);
    const DAY: Duration = Duration::from_secs(86_400);
    let (period, rtt, suspect) = cli.timings();
    let limits: [(&str, Duration, Duration, Duration); 5] = [
        ("--probe-period", period, MS, MINUTE),
        ("--probe-rtt", rtt, MS, MINUTE),
        ("--suspect-timeout", suspect, MS, HOUR),
        (
            "--announce-refresh",
            cli.announce_refresh(),
            Duration::ZERO,
            DAY,
        ),
        (
            "--converge-timeout",
            cli.converge_timeout(),
            Duration::ZERO,
            HOUR,
        ),
    ];
    for (flag, value, min, max) in limits {
        anyhow::ensure!(
            (min..=max).contains(&value),
            "{flag} {} is outside {}..={}",
            duration::format(value),
            duration::format(min),
            duration::format(max)
        );
    }
    for offset in cli.announce_offsets() {
        anyhow::ensure!(
            offset <= HOUR,
            "--announce-offsets {} is above one hour",
            duration::format(offset)
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
    let (probe_period, probe_rtt, suspect_timeout) = cli.timings();
    let membership = MembershipConfig {
        probe_period,
        probe_rtt,
        suspect_timeout,
        ..MembershipConfig::default()
    };
    let config = SpeakerConfig {
        node_name: cli.node_name.clone(),
        view: ViewSettings {
            class: ClassFilter {
                lb_class: cli.lb_class.clone(),
                default_class: cli.default_class,
            },
            exclude_lb_label: if cli.ignore_exclude_lb {
                ExcludeLbLabel::Ignore
            } else {
                cli.exclude_lb_label
            },
            ignore_cordon: cli.ignore_cordon,
        },
        keys: cli.key_source(),
        memberlist_port: cli.memberlist_port,
        advertise_address: cli.advertise_address,
        membership: membership.clone(),
        l2: L2Config {
            schedule: AnnounceSchedule {
                offsets: cli.announce_offsets(),
                refresh: Some(cli.announce_refresh()).filter(|d| !d.is_zero()),
                ..AnnounceSchedule::default()
            },
            probe: ProbeSettings {
                count: cli.address_probes,
                interval: cli.address_probe_interval,
                ..ProbeSettings::default()
            },
            default_interfaces: (!cli.interfaces.is_empty())
                .then(|| cli.interfaces.iter().cloned().collect()),
            excluded_interfaces: cli.exclude_interfaces.clone(),
            ..L2Config::default()
        },
        metrics_address: cli.shared.admin_address(DEFAULT_ADMIN_ADDRESS),
        claim: ClaimSettings {
            converge_timeout: cli.converge_timeout(),
            ..ClaimSettings::for_membership(membership.probe_period, membership.suspect_timeout)
        },
        events: EventSinkConfig::default(),
        namespace: cli.namespace.clone(),
    };
    let client = client(cli.shared.kubeconfig.as_deref()).await?;
    run(client, config).await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(["ferrolb-speaker", "--node-name", "n"].iter().chain(args)).unwrap()
    }

    /// Issue #28 item 1: `--exclude-lb-label` defaults to `auto`; `--ignore-exclude-lb` is
    /// `ignore` and refused beside `--exclude-lb-label`; a bad value is named.
    #[test]
    fn exclude_lb_label_defaults_to_auto_and_keeps_the_old_flag() {
        assert_eq!(parse(&[]).exclude_lb_label, ExcludeLbLabel::Auto);
        assert_eq!(
            parse(&["--exclude-lb-label", "honour"]).exclude_lb_label,
            ExcludeLbLabel::Honour
        );
        let old = parse(&["--ignore-exclude-lb"]);
        assert!(old.ignore_exclude_lb && old.exclude_lb_label == ExcludeLbLabel::Auto);
        let both = ["--ignore-exclude-lb", "--exclude-lb-label", "honour"];
        assert!(
            Cli::try_parse_from(["ferrolb-speaker", "--node-name", "n"].iter().chain(&both))
                .is_err()
        );
        let e = Cli::try_parse_from([
            "ferrolb-speaker",
            "--node-name",
            "n",
            "--exclude-lb-label",
            "sometimes",
        ])
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("\"sometimes\"") && e.contains("auto, honour or ignore"),
            "{e}"
        );
    }

    /// `--interfaces` / `FERROLB_INTERFACES`: a comma-separated list replacing the default
    /// interface set; a bad name is refused with the name in the message.
    #[test]
    fn interfaces_flag_lists_names_and_refuses_bad_ones() {
        assert!(parse(&[]).interfaces.is_empty());
        assert_eq!(
            parse(&["--interfaces", "eth1,bond0.100"]).interfaces,
            ["eth1", "bond0.100"]
        );
        for bad in ["a-name-longer-than-15", "eth/0", "eth 0", "eth0:1", ".."] {
            let e =
                Cli::try_parse_from(["ferrolb-speaker", "--node-name", "n", "--interfaces", bad])
                    .unwrap_err()
                    .to_string();
            assert!(
                e.contains(bad) && e.contains("interface name"),
                "{bad}: {e}"
            );
        }
    }

    /// `--exclude-interfaces` / `FERROLB_EXCLUDE_INTERFACES`: the built-in list by default,
    /// extended or replaced; a bad pattern is refused naming it.
    #[test]
    fn exclude_interfaces_flag_defaults_extends_replaces_and_refuses() {
        assert_eq!(parse(&[]).exclude_interfaces, NameExclusions::default());
        let ext = parse(&["--exclude-interfaces", "default,br-*"]).exclude_interfaces;
        assert!(ext.matches("br-9") && ext.matches("veth0"));
        let rep = parse(&["--exclude-interfaces=br-*"]).exclude_interfaces;
        assert!(rep.matches("br-9") && !rep.matches("veth0"));
        assert!(
            parse(&["--exclude-interfaces="])
                .exclude_interfaces
                .patterns()
                .is_empty()
        );
        let e = Cli::try_parse_from([
            "ferrolb-speaker",
            "--node-name",
            "n",
            "--exclude-interfaces",
            "default,eth0:1",
        ])
        .unwrap_err()
        .to_string();
        assert!(e.contains("eth0:1") && e.contains("interface name"), "{e}");
    }

    /// Reviewer finding F5: an interval of 0 (no probe would ever be sent) or above 10 s, and
    /// more than 10 probes, are refused with a message naming the flag's value.
    #[test]
    fn address_probe_settings_are_bounded() {
        let ok = parse(&["--address-probe-interval", "250ms", "--address-probes", "0"]);
        assert_eq!(ok.address_probe_interval, Duration::from_millis(250));
        assert_eq!(ok.address_probes, 0);
        for bad in [
            &["--address-probe-interval", "0s"][..],
            &["--address-probe-interval", "11s"],
            &["--address-probes", "11"],
        ] {
            let args = ["ferrolb-speaker", "--node-name", "n"].iter().chain(bad);
            let err = Cli::try_parse_from(args).err().map(|e| e.to_string());
            assert!(
                err.as_deref().is_some_and(|e| e.contains(bad[1])),
                "{bad:?}: {err:?}"
            );
        }
    }

    /// Issue #27 item 1: without `--memberlist-key-file` the key ring comes from the Secret
    /// `ferrolb-memberlist` (or `--memberlist-secret`) in `--namespace`; a key file, for users
    /// who mount their own, wins.
    #[test]
    fn the_key_comes_from_the_secret_unless_a_file_is_given() {
        assert_eq!(
            parse(&[]).key_source(),
            KeySource::Secret {
                namespace: "ferrolb-system".into(),
                name: "ferrolb-memberlist".into()
            }
        );
        assert_eq!(
            parse(&["--namespace", "lb", "--memberlist-secret", "mine"]).key_source(),
            KeySource::Secret {
                namespace: "lb".into(),
                name: "mine".into()
            }
        );
        assert_eq!(
            parse(&["--memberlist-key-file", "/k", "--memberlist-secret", "mine"]).key_source(),
            KeySource::File("/k".into())
        );
    }

    #[test]
    fn durations_carry_their_unit_and_the_old_spellings_still_work() {
        let d = parse(&[]);
        let fast = TimingProfile::Fast.timings();
        assert_eq!(d.timings(), fast);
        assert_eq!(
            d.announce_offsets(),
            [0, 500, 2000, 5000].map(Duration::from_millis)
        );
        assert_eq!(d.announce_refresh(), Duration::ZERO);
        assert_eq!(d.converge_timeout(), Duration::from_secs(3));

        let new = parse(&[
            "--probe-period=150ms",
            "--probe-rtt=50ms",
            "--suspect-timeout=1s",
            "--announce-offsets=0s,1s",
            "--announce-refresh=30s",
            "--converge-timeout=2s",
        ]);
        let old = parse(&[
            "--probe-period-ms=150",
            "--probe-rtt-ms=50",
            "--suspect-timeout-ms=1000",
            "--announce-offsets-ms=0,1000",
            "--announce-refresh-s=30",
            "--converge-timeout-ms=2000",
        ]);
        for c in [&new, &old] {
            assert_eq!(
                c.timings(),
                (
                    Duration::from_millis(150),
                    Duration::from_millis(50),
                    Duration::from_secs(1)
                )
            );
            assert_eq!(
                c.announce_offsets(),
                [Duration::ZERO, Duration::from_secs(1)]
            );
            assert_eq!(c.announce_refresh(), Duration::from_secs(30));
            assert_eq!(c.converge_timeout(), Duration::from_secs(2));
        }
        // The new spelling wins over the old one.
        let both = parse(&["--probe-period=120ms", "--probe-period-ms=300"]);
        assert_eq!(both.timings().0, Duration::from_millis(120));
        // A bare number needs the old spelling.
        assert!(
            Cli::try_parse_from([
                "ferrolb-speaker",
                "--node-name",
                "n",
                "--probe-period",
                "100"
            ])
            .is_err()
        );
    }
}
