//! `ferrolb-test-peak COMMAND [ARGS…]`: runs the command, waits for it, and prints its peak
//! resident memory as `peak_rss_kib=N` (the largest RSS the kernel saw for the child over its
//! whole life, `getrusage(RUSAGE_CHILDREN).ru_maxrss`, in KiB) on its own stderr line. The
//! command's stdin, stdout and stderr are its own; the exit status is the command's (1 if it did
//! not exit normally or could not start).
//!
//! For a process that exits right after the work measured (`ferrolb uninstall`), where sampling
//! `VmHWM` in `/proc` could miss the end: `tests/tests/memory_bounds.rs`. As the only child of
//! this process its `ru_maxrss` is exact, not the maximum over other children.

use std::process::{Command, ExitCode};

use nix::sys::resource::{UsageWho, getrusage};

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let Some(program) = args.next() else {
        eprintln!("usage: ferrolb-test-peak COMMAND [ARGS...]");
        return ExitCode::FAILURE;
    };
    let status = match Command::new(&program).args(args).status() {
        Ok(status) => status,
        Err(e) => {
            eprintln!(
                "ferrolb-test-peak: starting {}: {e}",
                program.to_string_lossy()
            );
            return ExitCode::FAILURE;
        }
    };
    match getrusage(UsageWho::RUSAGE_CHILDREN) {
        Ok(usage) => eprintln!("peak_rss_kib={}", usage.max_rss()),
        Err(e) => eprintln!("ferrolb-test-peak: getrusage: {e}"),
    }
    match status.code() {
        Some(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        None => ExitCode::FAILURE,
    }
}
