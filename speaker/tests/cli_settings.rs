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
        (
            &["--announce-refresh-s", "18446744073709551615"][..],
            "--announce-refresh-s",
        ),
        (
            &["--announce-offsets-ms", "0,18446744073709551615"],
            "--announce-offsets-ms",
        ),
        (&["--probe-period-ms", "0"], "--probe-period-ms"),
        (
            &["--timing-profile", "safe", "--probe-rtt-ms", "0"],
            "--probe-rtt-ms",
        ),
        (&["--timing-profile", "quick"], "--timing-profile"),
        (
            &["--suspect-timeout-ms", "18446744073709551615"],
            "--suspect-timeout-ms",
        ),
        (
            &["--converge-timeout-ms", "18446744073709551615"],
            "--converge-timeout-ms",
        ),
    ] {
        let out = speaker(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(stderr.contains(flag), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}
