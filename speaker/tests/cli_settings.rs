//! Issue #8 F6: settings that would overflow a timer or cannot work are refused at start, with
//! the flag named, before the speaker touches the network or the API server.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::process::Command;

fn speaker(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ferrolb-speaker"))
        .args(["--node-name", "node-1"])
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .unwrap()
}

#[test]
fn f6_overflow_prone_settings_are_refused_at_start() {
    for (args, flag) in [
        (&["--announce-refresh", "2days"][..], "--announce-refresh"),
        (&["--announce-offsets", "0s,2h"], "--announce-offsets"),
        (&["--probe-period", "0s"], "--probe-period"),
        (&["--probe-period", "100"], "--probe-period"),
        (
            &["--timing-profile", "safe", "--probe-rtt", "0ms"],
            "--probe-rtt",
        ),
        (&["--timing-profile", "quick"], "--timing-profile"),
        (&["--suspect-timeout", "2h"], "--suspect-timeout"),
        (&["--converge-timeout", "soon"], "--converge-timeout"),
        // The old spellings (a bare number in the old unit) are still read and still checked.
        (
            &["--announce-refresh-s", "18446744073709551615"],
            "--announce-refresh",
        ),
        (
            &["--announce-offsets-ms", "0,18446744073709551615"],
            "--announce-offsets",
        ),
        (&["--probe-period-ms", "0"], "--probe-period"),
        (
            &["--converge-timeout-ms", "18446744073709551615"],
            "--converge-timeout",
        ),
    ] {
        let out = speaker(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(stderr.contains(flag), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}
