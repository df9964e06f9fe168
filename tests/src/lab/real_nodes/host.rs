//! What a real-node lab changes on the machine itself, and how it is put back: cgroups, mounts and
//! the kernel settings kubelet writes.
//!
//! - **cgroups** (v1, cgroupfs driver): each node gets a root cgroup `/<name>` in every mounted
//!   controller hierarchy; its containerd (and so every shim) runs in `/<name>/runtime`, kubelet's
//!   `cgroupRoot` is `/<name>` (pods under `/<name>/kubepods`). Killing every process in that
//!   tree ([`CgroupRoot::kill_all`]) stops the node's containers, which outlive containerd
//!   otherwise (their shims re-parent to init).
//! - **mounts**: kubelet (secret and projected volumes, tmpfs) and containerd (overlay root
//!   filesystems, network-namespace bind mounts under its state directory with
//!   `netns_mounts_under_state_dir`) mount under the node's directory in the machine's mount
//!   namespace; [`unmount_under`] detaches them all before the directory is removed.
//! - **sysctls**: kubelet sets `vm.overcommit_memory`, `kernel.panic`, `kernel.panic_on_oops`, …
//!   to its defaults at start (`protectKernelDefaults: false`; `true` would refuse to start on a
//!   machine with other values). [`SavedSysctls`] records them first and writes them back.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;

/// The cgroup v1 hierarchies on this machine: the mount points of type `cgroup` in
/// `/proc/self/mountinfo` (so a cgroup v2 machine, whose `/sys/fs/cgroup` is one `cgroup2` mount,
/// has none and the lab refuses to start instead of creating groups in systemd's slices).
fn hierarchies() -> Vec<PathBuf> {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = info.lines().filter_map(cgroup_v1_mount).collect();
    dirs.sort();
    dirs.dedup();
    dirs
}

/// The mount point of a `/proc/self/mountinfo` line whose filesystem type is `cgroup` (v1).
fn cgroup_v1_mount(line: &str) -> Option<PathBuf> {
    let (left, right) = line.split_once(" - ")?;
    if right.split(' ').next()? != "cgroup" {
        return None;
    }
    left.split(' ')
        .nth(4)
        .map(|p| PathBuf::from(unescape_mount_path(p)))
}

/// A node's root cgroup in every v1 hierarchy. Created by [`CgroupRoot::create`]; removed (with
/// everything in it killed) by [`CgroupRoot::remove`].
pub struct CgroupRoot {
    name: String,
}

impl CgroupRoot {
    /// Creates `/<name>` and `/<name>/runtime` in every hierarchy. The cpuset hierarchy does not
    /// inherit CPUs and memory nodes into a new group, so they are copied from the root.
    ///
    /// # Errors
    /// A directory could not be created or a cpuset file not written (not root, or no cgroup v1).
    pub fn create(name: &str) -> anyhow::Result<CgroupRoot> {
        let all = hierarchies();
        anyhow::ensure!(
            !all.is_empty(),
            "no cgroup v1 hierarchy under /sys/fs/cgroup: the real-node lab runs kubelet with the cgroupfs driver on cgroup v1"
        );
        for h in &all {
            for dir in [h.join(name), h.join(name).join("runtime")] {
                std::fs::create_dir_all(&dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
                if h.ends_with("cpuset") {
                    for file in ["cpuset.cpus", "cpuset.mems"] {
                        let value = std::fs::read_to_string(h.join(file))?;
                        std::fs::write(dir.join(file), value.trim())
                            .with_context(|| format!("writing {}", dir.join(file).display()))?;
                    }
                }
            }
        }
        Ok(CgroupRoot {
            name: name.to_owned(),
        })
    }

    /// The cgroup path kubelet takes as `cgroupRoot` (`/<name>`).
    pub fn path(&self) -> String {
        format!("/{}", self.name)
    }

    /// Moves process `pid` into `/<name>/runtime` of every hierarchy (its future children follow).
    ///
    /// # Errors
    /// A `cgroup.procs` file could not be written.
    pub fn adopt(&self, pid: u32) -> anyhow::Result<()> {
        for h in hierarchies() {
            let procs = h.join(&self.name).join("runtime").join("cgroup.procs");
            std::fs::write(&procs, pid.to_string())
                .with_context(|| format!("writing {}", procs.display()))?;
        }
        Ok(())
    }

    /// Every process id in the tree, from the `pids` hierarchy (or the first one there is).
    fn pids(&self) -> Vec<i32> {
        let all = hierarchies();
        let Some(h) = all
            .iter()
            .find(|h| h.ends_with("pids"))
            .or_else(|| all.first())
        else {
            return Vec::new();
        };
        let mut pids = Vec::new();
        let mut stack = vec![h.join(&self.name)];
        while let Some(dir) = stack.pop() {
            if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
                pids.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
            }
            if let Ok(entries) = std::fs::read_dir(&dir) {
                stack.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
            }
        }
        pids
    }

    /// SIGKILLs every process in the tree until none is left (at most `timeout`); returns how many
    /// remain (0 normally).
    pub fn kill_all(&self, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        loop {
            let pids = self.pids();
            if pids.is_empty() || Instant::now() > deadline {
                return pids.len();
            }
            for pid in pids {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills everything in the tree, then removes its groups deepest first in every hierarchy.
    /// Best effort: what cannot be removed is logged.
    pub fn remove(&self) {
        let left = self.kill_all(Duration::from_secs(10));
        if left > 0 {
            tracing::warn!(cgroup = %self.name, left, "processes survived SIGKILL");
        }
        for h in hierarchies() {
            let mut dirs = Vec::new();
            let mut stack = vec![h.join(&self.name)];
            while let Some(dir) = stack.pop() {
                if let Ok(entries) = std::fs::read_dir(&dir) {
                    stack.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
                }
                dirs.push(dir);
            }
            // Children were pushed after their parents: remove in reverse.
            for dir in dirs.iter().rev() {
                if dir.exists()
                    && let Err(e) = std::fs::remove_dir(dir)
                {
                    tracing::warn!(dir = %dir.display(), error = %e, "cgroup not removed");
                }
            }
        }
    }
}

impl Drop for CgroupRoot {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Lazily unmounts every mount point at or under `dir` (deepest first), as listed in
/// `/proc/self/mountinfo`. Returns how many were unmounted.
pub fn unmount_under(dir: &Path) -> usize {
    let mut done = 0;
    // Stacked mounts on one path come off one per pass.
    for _ in 0..5 {
        let points = mounts_under(dir);
        if points.is_empty() {
            return done;
        }
        for p in &points {
            let ok = std::process::Command::new("umount")
                .args(["-l", p])
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                done += 1;
            }
        }
    }
    let left = mounts_under(dir);
    if !left.is_empty() {
        tracing::warn!(?left, "mounts left under the lab directory");
    }
    done
}

/// Mount points at or under `dir`, deepest first, once each.
fn mounts_under(dir: &Path) -> Vec<String> {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let mut points: Vec<String> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(unescape_mount_path)
        .filter(|p| Path::new(p).starts_with(dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    points.dedup();
    points
}

/// Removes the containerd shim sockets under `/run/containerd/s` (a fixed path in containerd 2.4
/// for root) that nothing listens on any more — a SIGKILLed shim leaves its socket behind. A
/// socket some other containerd's shim still serves is listed in `/proc/net/unix` and kept.
pub fn remove_dead_shim_sockets() {
    let Ok(entries) = std::fs::read_dir("/run/containerd/s") else {
        return;
    };
    let listening: std::collections::HashSet<String> = std::fs::read_to_string("/proc/net/unix")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(7))
        .map(|p| p.trim_start_matches('@').to_owned())
        .collect();
    for e in entries.flatten() {
        let path = e.path();
        if !listening.contains(path.to_string_lossy().as_ref()) {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// `/proc/self/mountinfo` escapes space, tab, newline and backslash as `\ooo` octal.
fn unescape_mount_path(raw: &str) -> String {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && let Ok(v) = u8::from_str_radix(&raw[i + 1..i + 4], 8)
        {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The kernel settings kubelet's container manager writes at start (kubelet `setupKernelTunables`,
/// Kubernetes v1.37).
pub const KUBELET_SYSCTLS: [&str; 6] = [
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
];

/// Values of [`KUBELET_SYSCTLS`] read before kubelet starts; [`SavedSysctls::restore`] writes them
/// back (also on drop).
pub struct SavedSysctls {
    saved: Vec<(PathBuf, String)>,
}

impl SavedSysctls {
    /// Reads the current values (missing ones are skipped).
    pub fn save() -> SavedSysctls {
        let saved = KUBELET_SYSCTLS
            .iter()
            .map(|k| Path::new("/proc/sys").join(k))
            .filter_map(|p| {
                let v = std::fs::read_to_string(&p).ok()?;
                Some((p, v.trim().to_owned()))
            })
            .collect();
        SavedSysctls { saved }
    }

    /// Writes the saved values back where they changed.
    pub fn restore(&self) {
        for (path, value) in &self.saved {
            let now = std::fs::read_to_string(path).unwrap_or_default();
            if now.trim() != value
                && let Err(e) = std::fs::write(path, value)
            {
                tracing::warn!(sysctl = %path.display(), error = %e, "not restored");
            }
        }
    }
}

impl Drop for SavedSysctls {
    fn drop(&mut self) {
        self.restore();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_cgroup_v1_mounts_are_hierarchies() {
        let v1 = "35 26 0:30 / /sys/fs/cgroup/pids rw,relatime shared:15 - cgroup cgroup rw,pids";
        let v2 = "30 26 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw";
        let tmpfs = "26 25 0:22 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755";
        assert_eq!(
            cgroup_v1_mount(v1),
            Some(PathBuf::from("/sys/fs/cgroup/pids"))
        );
        assert_eq!(cgroup_v1_mount(v2), None);
        assert_eq!(cgroup_v1_mount(tmpfs), None);
        assert_eq!(cgroup_v1_mount("garbage"), None);
    }

    #[test]
    fn mountinfo_escapes_are_decoded() {
        assert_eq!(unescape_mount_path(r"/tmp/a\040b"), "/tmp/a b");
        assert_eq!(unescape_mount_path(r"/tmp/x\134y"), r"/tmp/x\y");
        assert_eq!(unescape_mount_path("/plain/path"), "/plain/path");
        // A backslash too close to the end is kept as it is.
        assert_eq!(unescape_mount_path(r"/tmp/a\04"), r"/tmp/a\04");
    }
}
