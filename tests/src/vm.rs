//! The VM lab (issue #30): a test that needs kernel features this machine's kernel lacks (802.1Q
//! VLANs, bonding, dummy links, IPVS) runs inside a qemu guest booted from Debian's distribution
//! kernel (`tests/vm/build.sh`, cached).
//!
//! The guest mounts this machine's root filesystem read-only over 9p with a tmpfs on top, so it
//! runs the same test binary, speaker and Kubernetes binaries; the whole lab — test cluster,
//! namespaces, speakers, clients — lives in the guest's kernel. A test calls [`run_in_guest`]
//! first: on the host it boots the guest, which runs that same test (selected by name with
//! `--exact`) with [`GUEST_ENV`] set, and the host asserts on its exit status with its output
//! printed; in the guest the call returns and the test's body runs.
//!
//! Why the cluster is inside the guest and not on the host: the guest then needs no network
//! link to the host at all (`-nic none`; qemu itself runs in an empty lab network namespace), the
//! lab code is the same as the native lab's, and the API server's extra cost under TCG is paid
//! once per boot (about 10 s of the ~50 s a small test takes in the guest). The guest is
//! emulated (TCG: a KVM guest hung after the kernel's decompression on this machine), many times
//! slower than the host: speakers there run the `safe` timing profile ([`GUEST_TIMING`]) and no
//! failover figure from the guest is compared with the native lab (`docs/testing.md`).
//!
//! Guests run one at a time on the machine (a lock file in the cache): each uses both CPUs.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::cluster::{cached_bin_dir, k8s_bin, repo_root, target_dir, workspace_bin};

/// Set (to `1`) in the guest's environment: the test runs there.
pub const GUEST_ENV: &str = "FERROLB_IN_VM";

/// The speakers' timing profile in the guest (`--timing-profile`): emulation is many times slower
/// than the host, so the slowest profile; failover figures from the guest are not compared with
/// the native lab's.
pub const GUEST_TIMING: &str = "safe";

/// The guest's memory (MiB) and CPUs: 4 GiB, both of this machine's CPUs.
const MEMORY_MIB: u32 = 4096;
const CPUS: u32 = 2;

/// True inside the guest.
pub fn in_guest() -> bool {
    std::env::var_os(GUEST_ENV).is_some()
}

/// What a guest run left: the test's output, its exit status and the guest's console.
#[derive(Debug)]
pub struct GuestRun {
    /// The test binary's stdout and stderr in the guest.
    pub log: String,
    /// Its exit status (`None`: the guest stopped before it finished, e.g. a timeout).
    pub status: Option<i32>,
    /// The guest's serial console (kernel messages).
    pub console: String,
    /// Wall time from qemu's start to its exit.
    pub elapsed: Duration,
}

/// On the host: boots the guest, runs the current test binary's test `test` (its full name as
/// `cargo test` prints it) there, prints its output, and panics unless it passed; then the caller
/// returns (the body already ran in the guest). In the guest: returns at once, and the caller's
/// body runs. Returns true in the guest.
///
/// # Panics
/// The guest could not be prepared or booted, the test failed in it, or it did not finish within
/// `timeout` (guest boot included).
#[allow(clippy::panic)]
pub fn run_in_guest(test: &str, timeout: Duration) -> bool {
    if in_guest() {
        return true;
    }
    let run = match boot(test, timeout) {
        Ok(run) => run,
        Err(e) => panic!("VM lab: {e:#}"),
    };
    eprintln!(
        "==== guest output ({test}, {:.0} s) ====\n{}\n==== end of guest output ====",
        run.elapsed.as_secs_f64(),
        run.log
    );
    // A misspelt name selects nothing, and an empty run exits 0.
    if run.status == Some(0) && !run.log.contains("test result: ok. 1 passed") {
        panic!(
            "{test}: the guest ran no test of that name (the name given to run_in_guest must be the test's full name)"
        );
    }
    if run.status != Some(0) {
        let console: Vec<&str> = run.console.lines().collect();
        let tail = console[console.len().saturating_sub(40)..].join("\n");
        panic!(
            "{test} in the VM: exit status {:?}; guest console (last lines):\n{tail}",
            run.status
        );
    }
    false
}

/// The guest kernel and initramfs directory (`tests/vm/build.sh`; `FERROLB_VM_DIR` overrides).
///
/// # Errors
/// The build script failed (no apt package index, no busybox-static, ...).
pub fn vm_dir() -> anyhow::Result<PathBuf> {
    cached_bin_dir("FERROLB_VM_DIR", "tests/vm/build.sh")
}

/// Boots the guest and runs `test` of the current test binary there (see [`run_in_guest`]).
///
/// # Errors
/// qemu or the VM files are missing, the guest did not power off within `timeout`.
pub fn boot(test: &str, timeout: Duration) -> anyhow::Result<GuestRun> {
    let qemu = which("qemu-system-x86_64").context(
        "qemu-system-x86_64 is missing (apt-get install qemu-system-x86; .ci/run installs it)",
    )?;
    let dir = vm_dir()?;
    let exe = std::env::current_exe().context("the test binary's path")?;
    // Everything the guest runs must exist before it boots (its filesystem is read-only).
    let k8s_dir = k8s_bin("kube-apiserver")?
        .parent()
        .map(Path::to_path_buf)
        .context("k8s bin dir")?;
    // `cargo build` (quick when they are up to date): a guest must never run a stale speaker
    // (`workspace_bin` builds a binary only when it is missing).
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    // Without the variables cargo sets for this test binary (`CARGO_MANIFEST_DIR`,
    // `CARGO_PKG_NAME`, ...): build scripts that watch them (ring's) would rerun and relink the
    // binaries on every switch between this build and tests/run.sh's.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        let set_by_cargo_test = key.starts_with("CARGO_PKG_")
            || key.starts_with("CARGO_BIN_EXE_")
            || matches!(
                key.as_ref(),
                "CARGO_MANIFEST_DIR"
                    | "CARGO_MANIFEST_PATH"
                    | "CARGO_CRATE_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
                    | "CARGO_TARGET_TMPDIR"
                    | "CARGO_RUSTC_CURRENT_DIR"
                    | "OUT_DIR"
            );
        if set_by_cargo_test {
            build.env_remove(key.as_ref());
        }
    }
    let built = build
        .args([
            "build",
            "--bin",
            "ferrolb-speaker",
            "--bin",
            "ferrolb-controller",
        ])
        .current_dir(repo_root())
        .status()
        .context("running cargo build")?;
    if !built.success() {
        bail!("cargo build of the speaker and controller failed");
    }
    workspace_bin("ferrolb-speaker")?;
    workspace_bin("ferrolb-controller")?;

    let cache = cache_dir();
    std::fs::create_dir_all(&cache)?;
    let lock_file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(cache.join("vm.lock"))?;
    let _lock = nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| anyhow::anyhow!("locking the VM lab: {e}"))?;

    let out = tempfile::Builder::new().prefix("ferrolb-vm-").tempdir()?;
    let mut env = format!(
        "export {GUEST_ENV}=1 FERROLB_K8S_BIN={} CARGO_TARGET_DIR={} RUST_BACKTRACE=1\n",
        shell_word(&k8s_dir),
        shell_word(&target_dir()),
    );
    if let Ok(level) = std::env::var("RUST_LOG") {
        env.push_str(&format!("export RUST_LOG={}\n", shell_quote(&level)));
    }
    std::fs::write(out.path().join("env"), env)?;
    std::fs::write(
        out.path().join("cmd"),
        format!(
            // --include-ignored: a test the host runs runs in the guest too, even an ignored one
            // the host was asked to run (`-- --ignored`).
            "cd {}\nexec {} --exact {} --include-ignored --nocapture --test-threads 1\n",
            shell_word(&repo_root().join("tests")),
            shell_word(&exe),
            shell_quote(test),
        ),
    )?;

    // qemu runs in a lab network namespace of its own (empty: the guest has no NIC).
    let netns = format!("flbvm{:04x}", std::process::id() & 0xffff);
    if Path::new("/run/netns").join(&netns).exists() {
        let _ = Command::new("ip").args(["netns", "del", &netns]).status();
    }
    let ok = Command::new("ip")
        .args(["netns", "add", &netns])
        .status()?
        .success();
    if !ok {
        bail!("ip netns add {netns} failed");
    }
    let _netns = DeleteNetns(netns.clone());
    let append = format!(
        "console=ttyS0 quiet panic=-1 ferrolb.modules={} ferrolb.init={}",
        dir.join("lib/modules").display(),
        repo_root().join("tests/vm/guest-init.sh").display()
    );
    let console_path = out.path().join("console");
    let console = std::fs::File::create(&console_path)?;
    let started = Instant::now();
    let mut child = Command::new("ip")
        .args(["netns", "exec", &netns])
        .arg(qemu)
        .args(["-accel", "tcg", "-cpu", "max"])
        .args(["-smp", &CPUS.to_string(), "-m", &MEMORY_MIB.to_string()])
        .args(["-nographic", "-no-reboot", "-nic", "none"])
        .arg("-kernel")
        .arg(dir.join("vmlinuz"))
        .arg("-initrd")
        .arg(dir.join("initramfs.cpio.gz"))
        .args(["-append", &append])
        .args([
            "-virtfs",
            "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
        ])
        .arg("-virtfs")
        .arg(format!(
            "local,path={},mount_tag=out,security_model=none",
            out.path().display()
        ))
        .stdin(Stdio::null())
        .stdout(console.try_clone()?)
        .stderr(console)
        .spawn()
        .context("starting qemu")?;
    let exited = loop {
        if child.try_wait()?.is_some() {
            break true;
        }
        if started.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            break false;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let elapsed = started.elapsed();
    let log = std::fs::read_to_string(out.path().join("log")).unwrap_or_default();
    let status = std::fs::read_to_string(out.path().join("rc"))
        .ok()
        .and_then(|s| s.trim().parse().ok());
    let console = std::fs::read_to_string(&console_path).unwrap_or_default();
    if !exited {
        bail!(
            "the guest did not power off within {timeout:?}; its output so far:\n{log}\n\
             console:\n{console}"
        );
    }
    Ok(GuestRun {
        log,
        status,
        console,
        elapsed,
    })
}

struct DeleteNetns(String);

impl Drop for DeleteNetns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("FERROLB_CACHE") {
        return PathBuf::from(dir);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into())).join(".cache")
        });
    base.join("ferrolb")
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(program))
            .find(|p| p.is_file())
    })
}

/// `path` single-quoted for sh.
fn shell_word(path: &Path) -> String {
    shell_quote(&path.display().to_string())
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}
