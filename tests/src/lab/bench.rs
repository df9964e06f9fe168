//! Helpers for the lab benchmarks (`ferrolb-bench-lab`, DESIGN §7): speakers started from a chosen
//! binary (a release build, say) instead of [`Lab::start_speaker`]'s debug one, the real speaker
//! pid inside its namespace, the speaker's CPU time from `/proc`, a speaker interface's receive
//! counter, and nearest-rank percentiles.
//!
//! Everything here uses only the lab's public API; the caller owns the returned processes
//! ([`Supervised`] stops them when dropped — drop them before the [`Lab`]).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};

use super::{Lab, in_netns, sh};
use crate::cluster::Supervised;

/// The process name the kernel reports for the speaker (`/proc/<pid>/comm`, at most 15 bytes).
pub const SPEAKER_COMM: &str = "ferrolb-speaker";

/// Starts `bin` as node `node`'s speaker inside its namespace, with the same arguments as
/// [`Lab::start_speaker`] (node name, the relayed kubeconfig, the lab's membership key, metrics on
/// `127.0.0.1:7473`, default timings) plus `extra_args`. Output is appended to the lab's
/// `speaker-<node>.log`, so [`Lab::speaker_log`] shows it.
///
/// # Errors
/// No such node, or the process could not be started.
pub fn start_speaker_with(
    lab: &Lab,
    bin: &Path,
    node: &str,
    extra_args: &[&str],
) -> anyhow::Result<Supervised> {
    spawn_speaker(lab, bin, node, true, extra_args)
}

/// Like [`start_speaker_with`], without `--memberlist-key-file`: the speaker reads its key ring
/// through the API from the Secret `--memberlist-secret` in `--namespace` (issue #27), waiting
/// until it exists.
///
/// # Errors
/// No such node, or the process could not be started.
pub fn start_speaker_key_from_secret(
    lab: &Lab,
    bin: &Path,
    node: &str,
    extra_args: &[&str],
) -> anyhow::Result<Supervised> {
    spawn_speaker(lab, bin, node, false, extra_args)
}

fn spawn_speaker(
    lab: &Lab,
    bin: &Path,
    node: &str,
    key_file: bool,
    extra_args: &[&str],
) -> anyhow::Result<Supervised> {
    let n = lab
        .nodes
        .iter()
        .find(|n| n.name == node)
        .with_context(|| format!("no lab node {node}"))?;
    let log = lab.dir().join(format!("speaker-{node}.log"));
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &n.netns])
        .arg(bin)
        .args(["--node-name", &n.name])
        .arg("--kubeconfig")
        .arg(lab.node_kubeconfig());
    if key_file {
        cmd.arg("--memberlist-key-file").arg(lab.key_file());
    }
    cmd.args(["--admin-address", "127.0.0.1:7473"])
        .args(extra_args)
        .env("RUST_LOG", "info,ferrolb_speaker=debug");
    Supervised::spawn_command(&format!("speaker {node}"), &mut cmd, &log, false)
}

/// The pid of the `ferrolb-speaker` process started as `launched` (the pid of `ip netns exec …`)
/// in namespace `netns`: [`process_pid`] with [`SPEAKER_COMM`].
///
/// # Errors
/// As [`process_pid`].
pub fn speaker_pid(launched: u32, netns: &str) -> anyhow::Result<u32> {
    process_pid(launched, netns, SPEAKER_COMM)
}

/// The pid of the process named `name` (`/proc/<pid>/comm`) started as `launched` (the pid of
/// `ip netns exec …`) in namespace `netns`. `ip netns exec` normally `exec`s the program in
/// place, so this is usually `launched` itself once the exec happened; otherwise the one process
/// named `name` among `ip netns pids <netns>` is taken. Polls for up to 5 s (the exec may not
/// have happened yet).
///
/// # Errors
/// No such process appeared, or more than one is in the namespace.
pub fn process_pid(launched: u32, netns: &str, name: &str) -> anyhow::Result<u32> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if comm(launched).as_deref() == Some(name) {
            return Ok(launched);
        }
        let pids: Vec<u32> = sh("ip", &["netns", "pids", netns])?
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .filter(|p| comm(*p).as_deref() == Some(name))
            .collect();
        match pids.as_slice() {
            [pid] => return Ok(*pid),
            [] if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            [] => bail!("no {name} process in {netns} (launched as pid {launched})"),
            many => bail!("several {name} processes in {netns}: {many:?}"),
        }
    }
}

fn comm(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim_end().to_owned())
}

/// A `kB` field of `/proc/<pid>/status` (proc(5)), KiB: `VmRSS:` (resident now) or `VmHWM:`
/// (peak resident). `None` if the process is gone or has no such field.
pub fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// CPU time consumed by a process so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuSample {
    /// `utime + stime` from `/proc/<pid>/stat` (fields 14 and 15, proc(5)), in clock ticks
    /// ([`clock_ticks_per_second`]); includes threads that have exited.
    pub ticks: u64,
    /// Sum over the process's current threads of the first field of
    /// `/proc/<pid>/task/<tid>/schedstat` (time on a CPU, nanoseconds). Finer than `ticks` but it
    /// misses threads that exited in between; `None` if the kernel has no schedstats.
    pub thread_ns: Option<u64>,
}

/// Reads [`CpuSample`] for `pid`.
///
/// # Errors
/// The process is gone or `/proc/<pid>/stat` is not in the proc(5) format.
pub fn cpu_sample(pid: u32) -> anyhow::Result<CpuSample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    let ticks = parse_stat_cpu_ticks(&stat)
        .with_context(|| format!("unexpected /proc/{pid}/stat: {stat}"))?;
    let mut thread_ns = Some(0u64);
    for entry in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let path = entry?.path().join("schedstat");
        // A thread may exit between the listing and the read: it then simply does not count.
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        thread_ns = match (thread_ns, parse_schedstat_ns(&text)) {
            (Some(sum), Some(ns)) => Some(sum + ns),
            _ => None,
        };
    }
    Ok(CpuSample { ticks, thread_ns })
}

/// `utime + stime` (clock ticks) from the text of `/proc/<pid>/stat` (proc(5)): fields 14 and 15,
/// counted after the parenthesised command name, which may itself contain spaces or `)`.
/// `None` if the text does not have that shape.
pub fn parse_stat_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // `rest` starts at field 3 (state): utime is field 14 → index 11, stime index 12.
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    utime.checked_add(stime)
}

/// The first field of `/proc/<pid>/task/<tid>/schedstat` (nanoseconds on a CPU), or `None`.
pub fn parse_schedstat_ns(text: &str) -> Option<u64> {
    text.split_whitespace().next()?.parse().ok()
}

/// The kernel's clock ticks per second (`getconf CLK_TCK`, almost always 100), the unit of
/// [`CpuSample::ticks`].
///
/// # Errors
/// `getconf` is missing or printed something else than a positive number.
pub fn clock_ticks_per_second() -> anyhow::Result<u64> {
    let out = sh("getconf", &["CLK_TCK"])?;
    match out.trim().parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => bail!("getconf CLK_TCK printed {out:?}"),
    }
}

/// The receive packet counter of interface `ifname` in namespace `netns`
/// (`/sys/class/net/<if>/statistics/rx_packets`): every frame the interface got, including those
/// the kernel drops afterwards because they are addressed to another host.
///
/// # Errors
/// No such namespace or interface.
pub fn rx_packets(netns: &str, ifname: &str) -> anyhow::Result<u64> {
    let out = in_netns(
        netns,
        "cat",
        &[&format!("/sys/class/net/{ifname}/statistics/rx_packets")],
    )?;
    out.trim()
        .parse()
        .with_context(|| format!("rx_packets of {ifname} in {netns}: {out:?}"))
}

/// A signal ready to be sent to a process with as little delay as possible: a shell started ahead
/// of time that blocks reading its stdin and then runs its built-in `kill` (no fork or exec on the
/// path). [`ArmedSignal::fire`] gives the timestamp taken right before releasing it and how long
/// until the shell had exited — an upper bound on when the signal was delivered. Dropping it
/// unfired stops the shell without signalling.
pub struct ArmedSignal {
    shell: std::process::Child,
}

impl ArmedSignal {
    /// Prepares `kill -s <signal> <pid>`; `signal` is a name such as `KILL` or `TERM`.
    ///
    /// # Errors
    /// `signal` is not a plain upper-case name, or `/bin/sh` could not be started.
    pub fn arm(pid: u32, signal: &str) -> anyhow::Result<ArmedSignal> {
        if signal.is_empty()
            || !signal
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
        {
            bail!("not a signal name: {signal:?}");
        }
        let shell = Command::new("/bin/sh")
            .args([
                "-c",
                r#"read _ && kill -s "$1" "$2""#,
                "sh",
                signal,
                &pid.to_string(),
            ])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .context("starting /bin/sh")?;
        Ok(ArmedSignal { shell })
    }

    /// Sends the signal. Returns `(before_us, window_us)`: the wall-clock time
    /// ([`unix_now_us`]) right before releasing the shell, and the time from then until the
    /// shell had exited.
    ///
    /// # Errors
    /// The shell was gone, or `kill` failed (no such process).
    pub fn fire(mut self) -> anyhow::Result<(u64, u64)> {
        use std::io::Write;
        let mut stdin = self
            .shell
            .stdin
            .take()
            .context("the shell's stdin is gone")?;
        let before = unix_now_us();
        stdin.write_all(b"\n").context("releasing the shell")?;
        drop(stdin);
        let status = self.shell.wait()?;
        let window = unix_now_us().saturating_sub(before);
        if !status.success() {
            bail!("kill failed: {status}");
        }
        Ok((before, window))
    }
}

impl Drop for ArmedSignal {
    fn drop(&mut self) {
        if self.shell.try_wait().ok().flatten().is_none() {
            let _ = self.shell.kill();
            let _ = self.shell.wait();
        }
    }
}

/// Wall-clock time now, microseconds since the Unix epoch — the same clock and unit as the
/// capture's `Seen::…::unix_us`.
pub fn unix_now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// The nearest-rank `p`-th percentile (`1 ≤ p ≤ 100`, whole percent) of `sorted` (ascending): the
/// value at rank `⌈p · n / 100⌉` (1-based), computed in integers. With fewer than 100 samples the
/// 99th percentile is therefore the maximum; with 100 it is the second largest. `None` for no
/// samples or `p` out of range.
pub fn percentile(sorted: &[u64], p: u32) -> Option<u64> {
    if sorted.is_empty() || !(1..=100).contains(&p) {
        return None;
    }
    let n = sorted.len();
    let rank = (n.checked_mul(p as usize)?).div_ceil(100);
    sorted.get(rank.clamp(1, n) - 1).copied()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        // A real line's shape, with a command name holding a space and a parenthesis.
        let stat = "4242 (tokio rt) x)) S 1 4242 4242 0 -1 4194560 1000 0 0 0 37 5 0 0 20 0 12 0 9999 1000000 500 18446744073709551615";
        assert_eq!(parse_stat_cpu_ticks(stat), Some(42));
        assert_eq!(parse_stat_cpu_ticks("1 (x) S 1 2 3"), None);
        assert_eq!(parse_stat_cpu_ticks("no parenthesis"), None);
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert!(parse_stat_cpu_ticks(&stat).is_some(), "{stat}");
    }

    #[test]
    fn schedstat_first_field() {
        assert_eq!(parse_schedstat_ns("123456 789 10\n"), Some(123_456));
        assert_eq!(parse_schedstat_ns(""), None);
        assert_eq!(parse_schedstat_ns("x 1 2"), None);
    }

    #[test]
    fn armed_signal_reaches_the_process_only_when_fired() {
        use std::os::unix::process::ExitStatusExt;
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        drop(ArmedSignal::arm(child.id(), "TERM").unwrap());
        assert!(
            child.try_wait().unwrap().is_none(),
            "dropping an unfired signal sends nothing"
        );
        let (before, _window) = ArmedSignal::arm(child.id(), "TERM")
            .unwrap()
            .fire()
            .unwrap();
        assert!(before > 0);
        assert_eq!(child.wait().unwrap().signal(), Some(15));
        assert!(ArmedSignal::arm(child.id(), "TERM; true").is_err());
        assert!(ArmedSignal::arm(child.id(), "").is_err());
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=20).collect();
        assert_eq!(percentile(&v, 50), Some(10));
        assert_eq!(percentile(&v, 90), Some(18));
        assert_eq!(
            percentile(&v, 99),
            Some(20),
            "with < 100 samples p99 is the max"
        );
        assert_eq!(percentile(&v, 100), Some(20));
        let v: Vec<u64> = (1..=99).collect();
        assert_eq!(percentile(&v, 99), Some(99));
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(
            percentile(&v, 99),
            Some(99),
            "with 100 samples p99 is the second largest"
        );
        assert_eq!(percentile(&v, 90), Some(90));
        let v: Vec<u64> = (1..=200).collect();
        assert_eq!(percentile(&v, 99), Some(198));
        assert_eq!(percentile(&[7], 1), Some(7));
        assert_eq!(percentile(&[], 50), None);
        assert_eq!(percentile(&v, 0), None);
        assert_eq!(percentile(&v, 101), None);
    }
}
