//! `ferrolb-test-pause`: the sandbox ("pause") container of the real-node lab's pods, in the image
//! `tests/image/build.sh` tags as containerd's default sandbox image (no registry is reachable
//! there, so `registry.k8s.io/pause` cannot be pulled).
//!
//! Like Kubernetes' own `pause`, it holds the pod's namespaces open by doing nothing: it blocks
//! until SIGTERM or SIGINT and then exits 0, and as PID 1 of the pod it reaps every child that
//! exits (orphans of other containers are re-parented to it when the pod shares one PID
//! namespace), so no zombie is left behind.
//!
//! The three signals are blocked and taken with `sigwait`, not handled: the kernel discards a
//! signal sent to a PID 1 that neither handles nor blocks it, but queues a blocked one.

use std::process::ExitCode;

use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};

fn main() -> ExitCode {
    let mut signals = SigSet::empty();
    for s in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGCHLD] {
        signals.add(s);
    }
    // Before any thread exists, so every thread inherits the mask and none takes them instead.
    if let Err(e) = signals.thread_block() {
        eprintln!("ferrolb-test-pause: blocking signals: {e}");
        return ExitCode::FAILURE;
    }
    loop {
        match signals.wait() {
            Ok(Signal::SIGCHLD) => reap(),
            Ok(_) => return ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("ferrolb-test-pause: sigwait: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
}

/// Collects every child that has exited (one SIGCHLD may stand for several).
fn reap() {
    while let Ok(status) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
}
