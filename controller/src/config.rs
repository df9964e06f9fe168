//! Command-line flags of `ferrolb-controller`. Every flag can also be set from an environment
//! variable `FERROLB_<FLAG>` (flag wins over variable). The settings both binaries share
//! (`--kubeconfig`, `--admin-address`, `--log-format`) come from [`ferrolb_runtime::SharedArgs`].

use std::net::SocketAddr;

use clap::{ArgAction, Parser};
use ferrolb_runtime::SharedArgs;

/// Where the controller's admin endpoints listen unless `--admin-address` says otherwise.
pub const DEFAULT_ADMIN_ADDRESS: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 7472);

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
    /// Identity in the Lease; default: `$HOSTNAME` plus the process id.
    #[arg(long, env = "FERROLB_IDENTITY")]
    pub identity: Option<String>,
    /// Seconds a Lease stays valid without renewal: the longest a standby waits to take over.
    #[arg(long, env = "FERROLB_LEASE_DURATION_SECONDS", default_value_t = 15)]
    pub lease_duration_seconds: u64,
    /// Seconds before expiry at which the leader renews.
    #[arg(long, env = "FERROLB_LEASE_GRACE_SECONDS", default_value_t = 5)]
    pub lease_grace_seconds: u64,
    /// Seconds between full resyncs (safety net; changes are acted on at once) (R11).
    #[arg(long, env = "FERROLB_RESYNC_SECONDS", default_value_t = 300)]
    pub resync_seconds: u64,
    /// Seconds a Service whose status another field manager keeps rewriting is left alone
    /// before ferrolb tries again, unless its spec changes first (R8, `crate::contest`: at most
    /// 3 writes per spec and per period).
    #[arg(
        long,
        env = "FERROLB_STATUS_CONFLICT_BACKOFF_SECONDS",
        default_value_t = 600
    )]
    pub status_conflict_backoff_seconds: u64,
    /// Status writes and Events sent concurrently.
    #[arg(long, env = "FERROLB_WRITE_CONCURRENCY", default_value_t = 32)]
    pub write_concurrency: usize,
}

impl Config {
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
        assert_eq!(c.status_conflict_backoff_seconds, 600);
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
}
