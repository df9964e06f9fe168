//! Logging for both binaries: `tracing` to **stderr**, text or JSON, filtered by `FERROLB_LOG`
//! (else `RUST_LOG`, else `info`), ANSI colours only on a terminal.

use clap::ValueEnum;
use tracing_subscriber::EnvFilter;

/// Log output format (`--log-format`, `FERROLB_LOG_FORMAT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The filter: `FERROLB_LOG`, else `RUST_LOG`, else `default` (an `EnvFilter` directive).
pub fn filter(default: &str) -> EnvFilter {
    EnvFilter::try_from_env("FERROLB_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new(default))
}

/// Installs the global subscriber. Call once, first thing in `main`.
pub fn init(format: LogFormat, default_filter: &str) {
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter(default_filter))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}
