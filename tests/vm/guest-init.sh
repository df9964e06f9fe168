#!/bin/sh
# The VM lab's second stage (issue #30), run by the initramfs's /init (tests/vm/build.sh) in the
# guest's root: this machine's root filesystem, read-only, under a tmpfs (writes stay in the
# guest). Mounts what a test needs, lets the kernel load modules on demand from the distribution
# kernel's tree, runs the command in $out/cmd with its output in $out/log and its exit status in
# $out/rc, and powers the guest off.
set -u
# The host directory the host test reads (a second 9p share, writable).
out=/ferrolb-out
mount -t proc proc /proc
mount -t sysfs sys /sys
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mkdir -p /run/netns
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null || true
mount -t bpf bpf /sys/fs/bpf 2>/dev/null || true
# Modules load on demand (veth, bridge, 8021q, bonding, nf_tables, ip_vs, ...) with this
# machine's modprobe from /lib/modules/$(uname -r), linked to the cached tree by /init.
echo /usr/sbin/modprobe >/proc/sys/kernel/modprobe 2>/dev/null || true
hostname ferrolb-vm
ip link set lo up
export HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
cd /
(
  # shellcheck source=/dev/null
  if [ -f "$out/env" ]; then . "$out/env"; fi
  sh "$out/cmd"
) >"$out/log" 2>&1 </dev/null
echo $? >"$out/rc"
sync
echo o >/proc/sysrq-trigger
# Wait for the power-off without running a binary: the 9p root may already be gone, and init
# must not exit (the kernel would panic).
while :; do :; done
