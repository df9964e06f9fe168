//! Command-line flags of `ferrolb-controller`. Every flag can also be set from an environment
//! variable `FERROLB_<FLAG>` (flag wins over variable). The settings both binaries share
//! (`--kubeconfig`, `--admin-address`, `--log-format`) come from [`ferrolb_runtime::SharedArgs`].

use std::net::SocketAddr;
use std::time::Duration;

use clap::{ArgAction, Parser};
use ferrolb_runtime::{SharedArgs, duration};

/// Where the controller's admin endpoints listen unless `--admin-address` says otherwise.
pub const DEFAULT_ADMIN_ADDRESS: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 7472);

/// `d` in whole seconds, rounded up, at least 1.
fn whole_seconds(d: Duration) -> u64 {
    let secs = d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0));
    secs.max(1)
}

/// Flags of the controller binary.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "ferrolb-controller",
    version,
    about = "ferrolb controller: IPAM for LoadBalancer Services"
)]
pub struct Config {
    /// `spec.loadBalancerClass` handled by this controller.
    #[arg(long, env = "FERROLB_LB_CLASS", default_value = "ferrolb.io/l2")]
    pub lb_class: String,
    /// Also handle LoadBalancer Services without `spec.loadBalancerClass` (`--default-class=false`
    /// to leave them to another implementation).
    #[arg(long, env = "FERROLB_DEFAULT_CLASS", default_value_t = true, action = ArgAction::Set)]
    pub default_class: bool,
    /// Settings shared with the speaker.
    #[command(flatten)]
    pub shared: SharedArgs,
    /// Name of the Lease used for leader election (R13).
    #[arg(long, env = "FERROLB_LEASE_NAME", default_value = "ferrolb-controller")]
    pub lease_name: String,
    /// Namespace of the Lease; default: the Pod's own namespace (service-account file), else
    /// `default`.
    #[arg(long, env = "FERROLB_LEASE_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// Namespace of the speakers' `L2Announcement` reports, whose stale ones the leader deletes
    /// (issue #27 item 5); default: the Lease namespace (the manifests install both workloads in
    /// one namespace).
    #[arg(long, env = "FERROLB_ANNOUNCEMENT_NAMESPACE")]
    pub announcement_namespace: Option<String>,
    /// Identity in the Lease; default: `$HOSTNAME` plus the process id.
    #[arg(long, env = "FERROLB_IDENTITY")]
    pub identity: Option<String>,
    /// How long a Lease stays valid without renewal: the longest a standby waits to take over
    /// (whole seconds, the Lease API's unit) [default: 15s].
    #[arg(long, env = "FERROLB_LEASE_DURATION", value_parser = duration::parse)]
    pub lease_duration: Option<Duration>,
    /// How long before expiry the leader renews [default: 5s].
    #[arg(long, env = "FERROLB_LEASE_GRACE", value_parser = duration::parse)]
    pub lease_grace: Option<Duration>,
    /// Time between full resyncs (a safety net; changes are acted on at once) (R11)
    /// [default: 5m].
    #[arg(long, env = "FERROLB_RESYNC", value_parser = duration::parse)]
    pub resync: Option<Duration>,
    /// How long a Service whose status another field manager keeps rewriting is left alone
    /// before ferrolb tries again, unless its spec changes first (R8, `crate::contest`: at most
    /// 3 writes per spec and per period) [default: 10m].
    #[arg(long, env = "FERROLB_STATUS_CONFLICT_BACKOFF", value_parser = duration::parse)]
    pub status_conflict_backoff: Option<Duration>,
    /// Deprecated spellings (one release): a bare number is in seconds.
    #[command(flatten)]
    pub legacy: LegacyDurations,
    /// The Secret, in the controller's namespace (`--lease-namespace`), holding the speakers'
    /// membership key under `key`; created with 32 random bytes (64 hex digits) when absent,
    /// never replaced (`docs/membership.md`).
    #[arg(long, env = "FERROLB_MEMBERLIST_SECRET", default_value = crate::k8s::memberlist_secret::DEFAULT_NAME)]
    pub memberlist_secret: String,
    /// Create `--memberlist-secret` when it is absent (`false` when you bring your own key, e.g.
    /// the Helm chart's `memberlist.existingSecret`).
    #[arg(long, env = "FERROLB_CREATE_MEMBERLIST_SECRET", default_value_t = true, action = ArgAction::Set)]
    pub create_memberlist_secret: bool,
    /// Status writes and Events sent concurrently.
    #[arg(long, env = "FERROLB_WRITE_CONCURRENCY", default_value_t = 32)]
    pub write_concurrency: usize,
}

/// The duration flags as they were spelled before issue #9 (`-seconds` in the name), hidden;
/// each also read from its old environment variable. The new spelling wins when both are given.
#[derive(Debug, Clone, clap::Args)]
pub struct LegacyDurations {
    #[arg(long, hide = true, env = "FERROLB_LEASE_DURATION_SECONDS", value_parser = duration::parse_legacy_seconds)]
    lease_duration_seconds: Option<Duration>,
    #[arg(long, hide = true, env = "FERROLB_LEASE_GRACE_SECONDS", value_parser = duration::parse_legacy_seconds)]
    lease_grace_seconds: Option<Duration>,
    #[arg(long, hide = true, env = "FERROLB_RESYNC_SECONDS", value_parser = duration::parse_legacy_seconds)]
    resync_seconds: Option<Duration>,
    #[arg(long, hide = true, env = "FERROLB_STATUS_CONFLICT_BACKOFF_SECONDS", value_parser = duration::parse_legacy_seconds)]
    status_conflict_backoff_seconds: Option<Duration>,
}

impl Config {
    /// `--lease-duration` in whole seconds (rounded up, at least 1), as the Lease API takes it.
    pub fn lease_duration_secs(&self) -> u64 {
        whole_seconds(
            self.lease_duration
                .or(self.legacy.lease_duration_seconds)
                .unwrap_or(Duration::from_secs(15)),
        )
    }

    /// `--lease-grace` in whole seconds (rounded up, at least 1).
    pub fn lease_grace_secs(&self) -> u64 {
        whole_seconds(
            self.lease_grace
                .or(self.legacy.lease_grace_seconds)
                .unwrap_or(Duration::from_secs(5)),
        )
    }

    /// `--resync`, at least one second.
    pub fn resync(&self) -> Duration {
        self.resync
            .or(self.legacy.resync_seconds)
            .unwrap_or(Duration::from_secs(300))
            .max(Duration::from_secs(1))
    }

    /// `--status-conflict-backoff`.
    pub fn status_conflict_backoff(&self) -> Duration {
        self.status_conflict_backoff
            .or(self.legacy.status_conflict_backoff_seconds)
            .unwrap_or(Duration::from_secs(600))
    }

    /// The namespace of the speakers' reports (see [`Config::announcement_namespace`]).
    pub fn announcement_namespace(&self) -> String {
        self.announcement_namespace
            .clone()
            .unwrap_or_else(|| self.lease_namespace())
    }

    /// The Lease namespace to use (see [`Config::lease_namespace`]).
    pub fn lease_namespace(&self) -> String {
        self.lease_namespace.clone().unwrap_or_else(|| {
            std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                .map(|s| s.trim().to_owned())
                .ok()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "default".to_owned())
        })
    }

    /// The Lease identity to use (see [`Config::identity`]).
    pub fn identity(&self) -> String {
        self.identity.clone().unwrap_or_else(|| {
            let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "ferrolb-controller".into());
            format!("{host}-{}", std::process::id())
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn defaults_and_flags() {
        let c = Config::try_parse_from(["ferrolb-controller"]).unwrap();
        assert_eq!(c.lb_class, "ferrolb.io/l2");
        assert!(c.default_class);
        assert_eq!(c.status_conflict_backoff(), Duration::from_secs(600));
        assert_eq!((c.lease_duration_secs(), c.lease_grace_secs()), (15, 5));
        assert_eq!(c.resync(), Duration::from_secs(300));
        assert_eq!(
            c.shared.admin_address(DEFAULT_ADMIN_ADDRESS).port(),
            7472,
            "the controller's port"
        );
        let c = Config::try_parse_from([
            "ferrolb-controller",
            "--default-class=false",
            "--lb-class",
            "x/y",
        ])
        .unwrap();
        assert!(!c.default_class);
        assert_eq!(c.lb_class, "x/y");
    }

    /// Issue #27 item 1: the controller creates the speakers' key Secret `ferrolb-memberlist`
    /// unless told not to.
    #[test]
    fn the_membership_key_secret_is_created_by_default() {
        let c = Config::try_parse_from(["ferrolb-controller"]).unwrap();
        assert_eq!(c.memberlist_secret, "ferrolb-memberlist");
        assert!(c.create_memberlist_secret);
        let c = Config::try_parse_from([
            "ferrolb-controller",
            "--memberlist-secret=mine",
            "--create-memberlist-secret=false",
        ])
        .unwrap();
        assert_eq!(c.memberlist_secret, "mine");
        assert!(!c.create_memberlist_secret);
    }

    #[test]
    fn durations_carry_their_unit_and_the_old_spellings_still_work() {
        let new = Config::try_parse_from([
            "ferrolb-controller",
            "--lease-duration=3s",
            "--lease-grace=1500ms",
            "--resync=1m",
            "--status-conflict-backoff=20s",
        ])
        .unwrap();
        let old = Config::try_parse_from([
            "ferrolb-controller",
            "--lease-duration-seconds=3",
            "--lease-grace-seconds=2",
            "--resync-seconds=60",
            "--status-conflict-backoff-seconds=20",
        ])
        .unwrap();
        for c in [&new, &old] {
            assert_eq!((c.lease_duration_secs(), c.lease_grace_secs()), (3, 2));
            assert_eq!(c.resync(), Duration::from_secs(60));
            assert_eq!(c.status_conflict_backoff(), Duration::from_secs(20));
        }
        assert!(Config::try_parse_from(["ferrolb-controller", "--resync", "60"]).is_err());
    }
}
