//! CPU starvation for lab processes (issue #8 F4): a cgroup v1 `cpu` group with a CFS quota, the
//! way a container CPU limit is enforced (`cpu.cfs_quota_us` / `cpu.cfs_period_us`, see the
//! kernel's `Documentation/scheduler/sched-bwc.rst`), optionally shared with a busy loop so the
//! group really runs out of quota every period: the confined process then runs only in the first
//! few milliseconds of each period and waits for the rest, like a speaker whose Pod sits at its
//! CPU limit.
//!
//! [`CpuQuota::share`] models the other case, a CPU request without a limit (`cpu.shares`, no
//! quota), next to a neighbour that keeps every CPU busy.
//!
//! The group lives under `/sys/fs/cgroup/cpu/ferrolb-lab/` and is removed on drop (its processes
//! are moved back to the root group first). Machines with cgroup v2 only are refused with a clear
//! error; this project's CI machines run cgroup v1 (hybrid).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context, bail};

/// Root of the cgroup v1 `cpu` hierarchy.
const CPU_ROOT: &str = "/sys/fs/cgroup/cpu";

/// A CFS bandwidth limit on one or more processes; undone on drop.
pub struct CpuQuota {
    dir: PathBuf,
    hog: Option<Child>,
    /// [`CpuQuota::share`]'s busy loops, in their own group `busy_dir`.
    busy: Vec<Child>,
    busy_dir: Option<PathBuf>,
}

/// Throttling statistics of a group (`cpu.stat`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Throttling {
    /// Enforcement periods that elapsed with runnable tasks in the group.
    pub periods: u64,
    /// Periods in which the group ran out of quota and was throttled.
    pub throttled_periods: u64,
    /// Total time the group's tasks spent throttled, in nanoseconds.
    pub throttled_ns: u64,
}

impl CpuQuota {
    /// Confines process `pid` (all its threads) to `percent` % of one CPU, enforced every 100 ms
    /// period (quota = `percent` ms per period; at least 1 ms, the kernel's minimum). With
    /// `hog`, a busy-loop process joins the group so the quota is used up every period.
    ///
    /// # Errors
    /// No cgroup v1 `cpu` hierarchy, `percent` outside 1..=100, or a cgroup file write failed.
    pub fn confine(name: &str, pid: u32, percent: u32, hog: bool) -> anyhow::Result<CpuQuota> {
        if !(1..=100).contains(&percent) {
            bail!("CPU quota {percent}% is outside 1..=100");
        }
        let mut quota = CpuQuota::group(name, "cpu.cfs_quota_us")?;
        quota.write("cpu.cfs_period_us", "100000")?;
        quota.write("cpu.cfs_quota_us", &(u64::from(percent) * 1000).to_string())?;
        quota.write("cgroup.procs", &pid.to_string())?;
        if hog {
            let child = busy_loop()?;
            let hog_pid = child.id();
            quota.hog = Some(child);
            quota.write("cgroup.procs", &hog_pid.to_string())?;
        }
        Ok(quota)
    }

    /// Puts process `pid` (all its threads) in a group with `cpu.shares` = `shares` and no
    /// quota — what the kubelet does for a container with a CPU request and no CPU limit
    /// (shares = request in millicores × 1024 / 1000, at least 2) — and, with `hog`, runs one busy
    /// loop per online CPU in a sibling group with 1024 shares per loop: a neighbour Pod that
    /// requested every CPU of the node and uses them all. CFS then gives the confined process
    /// its share of each contended CPU instead of stopping it for the rest of a period.
    ///
    /// # Errors
    /// No cgroup v1 `cpu` hierarchy, `shares` below 2, or a cgroup file write failed.
    pub fn share(name: &str, pid: u32, shares: u32, hog: bool) -> anyhow::Result<CpuQuota> {
        if shares < 2 {
            bail!("cpu.shares {shares} is below the kernel's minimum of 2");
        }
        let mut quota = CpuQuota::group(name, "cpu.shares")?;
        quota.write("cpu.shares", &shares.to_string())?;
        quota.write("cgroup.procs", &pid.to_string())?;
        if hog {
            let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
            let busy_dir = Path::new(CPU_ROOT)
                .join("ferrolb-lab")
                .join(format!("{name}-neighbour"));
            std::fs::create_dir_all(&busy_dir)
                .with_context(|| format!("creating {}", busy_dir.display()))?;
            quota.busy_dir = Some(busy_dir.clone());
            std::fs::write(busy_dir.join("cpu.shares"), (1024 * cpus).to_string())
                .context("writing the neighbour's cpu.shares")?;
            for _ in 0..cpus {
                let child = busy_loop()?;
                let busy_pid = child.id();
                quota.busy.push(child);
                std::fs::write(busy_dir.join("cgroup.procs"), busy_pid.to_string())
                    .context("moving a busy loop into the neighbour group")?;
            }
        }
        Ok(quota)
    }

    /// Creates the group `ferrolb-lab/<name>` (nothing in it yet), after checking that the
    /// cgroup v1 `cpu` hierarchy has `file` at its root.
    fn group(name: &str, file: &str) -> anyhow::Result<CpuQuota> {
        if !Path::new(CPU_ROOT).join(file).exists() {
            bail!(
                "no cgroup v1 cpu controller at {CPU_ROOT} (cgroup v2-only machines are not supported by the lab)"
            );
        }
        let dir = Path::new(CPU_ROOT).join("ferrolb-lab").join(name);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(CpuQuota {
            dir,
            hog: None,
            busy: Vec::new(),
            busy_dir: None,
        })
    }

    /// The group's throttling so far.
    ///
    /// # Errors
    /// `cpu.stat` cannot be read.
    pub fn throttling(&self) -> anyhow::Result<Throttling> {
        let text = std::fs::read_to_string(self.dir.join("cpu.stat"))?;
        Ok(parse_cpu_stat(&text))
    }

    fn write(&self, file: &str, value: &str) -> anyhow::Result<()> {
        let path = self.dir.join(file);
        std::fs::write(&path, value)
            .with_context(|| format!("writing {value} to {}", path.display()))
    }
}

/// A `sh` busy loop.
fn busy_loop() -> anyhow::Result<Child> {
    Command::new("sh")
        .args(["-c", "while :; do :; done"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting a busy loop")
}

impl Drop for CpuQuota {
    fn drop(&mut self) {
        for mut hog in self.hog.take().into_iter().chain(self.busy.drain(..)) {
            let _ = hog.kill();
            let _ = hog.wait();
        }
        if let Some(dir) = self.busy_dir.take() {
            let _ = std::fs::remove_dir(dir);
        }
        // Lift the quota first so nothing is left throttled, then move the rest back to the root.
        let _ = self.write("cpu.cfs_quota_us", "-1");
        if let Ok(procs) = std::fs::read_to_string(self.dir.join("cgroup.procs")) {
            for pid in procs.lines() {
                let _ = std::fs::write(Path::new(CPU_ROOT).join("cgroup.procs"), pid);
            }
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Parses cgroup v1 `cpu.stat` (`nr_periods`, `nr_throttled`, `throttled_time` in ns); missing
/// or malformed lines count as zero.
pub fn parse_cpu_stat(text: &str) -> Throttling {
    let mut t = Throttling::default();
    for line in text.lines() {
        let mut parts = line.split_whitespace();
        let (Some(key), Some(value)) = (parts.next(), parts.next()) else {
            continue;
        };
        let value = value.parse().unwrap_or(0);
        match key {
            "nr_periods" => t.periods = value,
            "nr_throttled" => t.throttled_periods = value,
            "throttled_time" => t.throttled_ns = value,
            _ => {}
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_stat_fields() {
        let t = parse_cpu_stat(
            "nr_periods 600\nnr_throttled 598\nthrottled_time 57000000000\nnr_bursts 0\n",
        );
        assert_eq!(
            t,
            Throttling {
                periods: 600,
                throttled_periods: 598,
                throttled_ns: 57_000_000_000
            }
        );
        assert_eq!(
            parse_cpu_stat("garbage\nnr_periods x"),
            Throttling::default()
        );
    }
}
