//! Flags both binaries take, with the same names and environment variables (flattened into
//! each binary's own `clap` parser). Old spellings stay as hidden aliases for one release:
//! `--http-addr` (controller) and `--metrics-address` (speaker) for `--admin-address`;
//! `--log-json` (speaker) for `--log-format json`; likewise the old environment variables
//! `FERROLB_HTTP_ADDR`, `FERROLB_METRICS_ADDRESS` and `FERROLB_LOG_JSON` are still read when
//! the new ones are unset.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{ArgAction, Args};

use crate::logging::LogFormat;

/// Settings every ferrolb binary has.
#[derive(Debug, Clone, Args)]
pub struct SharedArgs {
    /// kubeconfig file; default: the in-cluster configuration, then `$KUBECONFIG` /
    /// `~/.kube/config`.
    #[arg(long, env = "FERROLB_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Where `/livez`, `/readyz` and `/metrics` listen [default: 0.0.0.0:7472 for the
    /// controller, 0.0.0.0:7473 for the speaker].
    #[arg(
        long,
        env = "FERROLB_ADMIN_ADDRESS",
        alias = "http-addr",
        alias = "metrics-address"
    )]
    pub admin_address: Option<SocketAddr>,
    /// Log format: `text` (human-readable lines) or `json` (one object per line). Logs go to
    /// stderr; the filter is `FERROLB_LOG` (tracing `EnvFilter` syntax, e.g.
    /// `info,ferrolb_speaker=debug`), else `RUST_LOG`, else `info`.
    #[arg(long, env = "FERROLB_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Deprecated spelling of `--log-format json` (kept for one release).
    #[arg(long, hide = true, action = ArgAction::SetTrue)]
    pub log_json: bool,
}

impl SharedArgs {
    /// The log format, honouring the deprecated `--log-json` / `FERROLB_LOG_JSON=true`.
    pub fn log_format(&self) -> LogFormat {
        let old_env = std::env::var("FERROLB_LOG_JSON").is_ok_and(|v| v == "true" || v == "1");
        if self.log_json || (old_env && std::env::var_os("FERROLB_LOG_FORMAT").is_none()) {
            LogFormat::Json
        } else {
            self.log_format
        }
    }

    /// The admin address: the flag or `FERROLB_ADMIN_ADDRESS`, else a valid deprecated
    /// `FERROLB_HTTP_ADDR` / `FERROLB_METRICS_ADDRESS`, else `default` (each binary has its own
    /// port).
    pub fn admin_address(&self, default: SocketAddr) -> SocketAddr {
        self.admin_address
            .or_else(|| {
                ["FERROLB_HTTP_ADDR", "FERROLB_METRICS_ADDRESS"]
                    .iter()
                    .find_map(|v| std::env::var(v).ok()?.parse().ok())
            })
            .unwrap_or(default)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        shared: SharedArgs,
    }

    #[test]
    fn old_spellings_are_aliases() {
        for flag in ["--admin-address", "--http-addr", "--metrics-address"] {
            let c = Cli::try_parse_from(["x", flag, "127.0.0.1:9"]).unwrap();
            assert_eq!(
                c.shared.admin_address(([0, 0, 0, 0], 1).into()),
                ([127, 0, 0, 1], 9).into()
            );
        }
        let c = Cli::try_parse_from(["x", "--log-json"]).unwrap();
        assert_eq!(c.shared.log_format(), LogFormat::Json);
        let c = Cli::try_parse_from(["x"]).unwrap();
        assert_eq!(c.shared.log_format(), LogFormat::Text);
        assert!(Cli::try_parse_from(["x", "--log-format", "yaml"]).is_err());
    }
}
