//! One duration style for every flag of both binaries (issue #9 item 3): a duration is written
//! with its unit — `250ms`, `5s`, `10m`, `1h30m` (the `humantime` format) — and parsed by these
//! `clap` value parsers. The flags that used to carry the unit in their name (`--probe-period-ms`,
//! `--lease-duration-seconds`, …) stay as hidden aliases for one release, with their own
//! environment variables; for them, and only for them, a bare number still means the old unit.

use std::time::Duration;

/// A duration with its unit (`"250ms"`, `"5s"`, `"10m"`, `"0s"`).
///
/// # Errors
/// A message naming the accepted forms when `text` is not one of them (also for a bare number:
/// the unit is required).
pub fn parse(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim().to_owned();
    // humantime 2.4 panics (in `Duration::new`) on a sum that lands exactly on `u64::MAX`
    // seconds with a whole second of nanoseconds to carry; input must never panic.
    match std::panic::catch_unwind(move || humantime::parse_duration(&trimmed)) {
        Ok(Ok(d)) => Ok(d),
        Ok(Err(e)) => Err(format!(
            "{text:?} is not a duration ({e}); write it with its unit, e.g. 250ms, 5s, 10m"
        )),
        Err(_) => Err(format!("{text:?} is too long a duration")),
    }
}

/// As [`parse`], but a bare number counts in milliseconds (the old `-ms` flags).
///
/// # Errors
/// As [`parse`].
pub fn parse_legacy_ms(text: &str) -> Result<Duration, String> {
    match text.trim().parse::<u64>() {
        Ok(n) => Ok(Duration::from_millis(n)),
        Err(_) => parse(text),
    }
}

/// As [`parse`], but a bare number counts in seconds (the old `-seconds`/`-s` flags).
///
/// # Errors
/// As [`parse`].
pub fn parse_legacy_seconds(text: &str) -> Result<Duration, String> {
    match text.trim().parse::<u64>() {
        Ok(n) => Ok(Duration::from_secs(n)),
        Err(_) => parse(text),
    }
}

/// `d` as a flag value would write it (`"250ms"`, `"5s"`, `"10m"`), for `--help` and logs.
pub fn format(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn units_are_required_except_on_the_old_flags() {
        assert_eq!(parse("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse(" 1m30s ").unwrap(), Duration::from_secs(90));
        assert_eq!(parse("0s").unwrap(), Duration::ZERO);
        let err = parse("100").unwrap_err();
        assert!(err.contains("with its unit"), "{err}");
        assert!(parse("soon").is_err());
        assert!(parse("18446744073709551615s 1000ms").is_err(), "no panic");
        assert_eq!(parse_legacy_ms("100").unwrap(), Duration::from_millis(100));
        assert_eq!(parse_legacy_ms("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_legacy_seconds("15").unwrap(), Duration::from_secs(15));
        assert_eq!(
            parse_legacy_seconds("500ms").unwrap(),
            Duration::from_millis(500)
        );
        assert!(parse_legacy_seconds("-1").is_err());
        assert_eq!(format(Duration::from_millis(1500)), "1s 500ms");
    }
}
