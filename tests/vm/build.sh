#!/usr/bin/env bash
# Prepares the VM lab (issue #30): Debian's distribution kernel (the one `linux-image-amd64`
# depends on today, resolved at run time) with its modules, and a busybox initramfs whose /init
# mounts this machine's root filesystem read-only over 9p/virtio, lays a tmpfs over it (overlayfs)
# and runs tests/vm/guest-init.sh from there, so the guest runs the same binaries as the host.
# Cached outside the repository, keyed by the kernel package's version and this script; a second
# run with the same kernel does nothing.
#
# Prints the VM directory on stdout (the last line): vmlinuz, initramfs.cpio.gz, lib/modules/ (the
# package's, with depmod's index) and kernel-version. Environment:
#   FERROLB_CACHE   cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/ferrolb)
# Needs apt-get (the package index is refreshed when the kernel package is unknown), dpkg, kmod,
# cpio, gzip and busybox-static (.ci/run installs them with qemu-system-x86).
set -euo pipefail
cache=${FERROLB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ferrolb}

# The kernel package linux-image-amd64 depends on: its ABI number changes with point releases.
kernel_pkg() {
  apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9].*-amd64\)$/\1/p' | head -n1
}
pkg=$(kernel_pkg)
if [ -z "$pkg" ]; then
  apt-get update -qq >&2
  pkg=$(kernel_pkg)
fi
[ -n "$pkg" ] || { echo "vm/build.sh: apt-cache knows no linux-image-amd64" >&2; exit 1; }
pkg_version=$(apt-cache show "$pkg" | sed -n 's/^Version: //p' | head -n1)
key=$(printf '%s %s\n' "$pkg" "$pkg_version" | cat - "$0" | sha256sum | cut -c1-16)
dir="$cache/vm-$key"
if [ -f "$dir/initramfs.cpio.gz" ]; then
  echo "$dir"
  exit 0
fi

for tool in dpkg depmod cpio gzip; do
  command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] || [ -x "/sbin/$tool" ] ||
    { echo "vm/build.sh: $tool is missing (apt-get install kmod cpio)" >&2; exit 1; }
done
busybox=$(command -v busybox || true)
[ -n "$busybox" ] || { echo "vm/build.sh: busybox is missing (apt-get install busybox-static)" >&2; exit 1; }
if ldd "$busybox" >/dev/null 2>&1; then
  echo "vm/build.sh: $busybox is dynamically linked; the initramfs needs busybox-static" >&2
  exit 1
fi
PATH="$PATH:/usr/sbin:/sbin"

echo "vm/build.sh: fetching $pkg $pkg_version ..." >&2
rm -rf "$dir.tmp"
mkdir -p "$dir.tmp/deb" "$dir.tmp/initramfs"
(cd "$dir.tmp/deb" && apt-get download "$pkg" >&2)
dpkg -x "$dir.tmp"/deb/*.deb "$dir.tmp/root"
version=$(ls "$dir.tmp/root/lib/modules")
# The package ships no module index (its postinst runs depmod): build it for modprobe in the guest.
depmod -b "$dir.tmp/root" "$version"
mv "$dir.tmp/root/boot/vmlinuz-$version" "$dir.tmp/vmlinuz"
mkdir -p "$dir.tmp/lib"
mv "$dir.tmp/root/lib/modules" "$dir.tmp/lib/modules"
echo "$version" >"$dir.tmp/kernel-version"

# The initramfs: busybox, the modules that mount the host's root (9p over virtio, overlayfs) in
# dependency order, and /init.
ir="$dir.tmp/initramfs"
mkdir -p "$ir"/{bin,dev,proc,sys,host,rw,newroot,modules}
cp "$busybox" "$ir/bin/busybox"
ln -s busybox "$ir/bin/sh"
: >"$ir/modules/order"
for m in virtio_pci 9pnet_virtio 9p overlay; do
  modprobe -d "$dir.tmp" -S "$version" --show-depends "$m" |
    sed -n 's/^insmod \([^ ]*\).*/\1/p' | while read -r ko; do
      name=$(basename "$ko")
      grep -qx "$name" "$ir/modules/order" && continue
      cp "$ko" "$ir/modules/$name"
      echo "$name" >>"$ir/modules/order"
    done
done
cat >"$ir/init" <<'INIT'
#!/bin/sh
# The VM lab's first stage (tests/vm/build.sh): load the 9p and overlay modules, mount the host's
# root read-only with a tmpfs over it, bind the kernel's modules, hand over to guest-init.sh.
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /modules/order); do insmod "/modules/$m" || echo "init: insmod $m failed"; done
arg() { for w in $(cat /proc/cmdline); do case "$w" in "$1="*) echo "${w#*=}" ;; esac; done; }
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=1048576 hostroot /host ||
  { echo "init: cannot mount the host root"; echo o >/proc/sysrq-trigger; }
mount -t tmpfs -o size=75% tmpfs /rw
mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/host,upperdir=/rw/upper,workdir=/rw/work /newroot ||
  { echo "init: overlay failed"; echo o >/proc/sysrq-trigger; }
modules=$(arg ferrolb.modules)
mkdir -p "/newroot/lib/modules"
ln -sfn "$modules/$(uname -r)" "/newroot/lib/modules/$(uname -r)"
mkdir -p /newroot/ferrolb-out
mount -t 9p -o trans=virtio,version=9p2000.L,msize=1048576 out /newroot/ferrolb-out ||
  { echo "init: cannot mount the output directory"; echo o >/proc/sysrq-trigger; }
init=$(arg ferrolb.init)
umount /proc /sys
mount --move /dev /newroot/dev
exec switch_root /newroot /bin/sh "$init"
INIT
chmod +x "$ir/init"
(cd "$ir" && find . | cpio -o -H newc --quiet | gzip -1 >"$dir.tmp/initramfs.cpio.gz")
rm -rf "$dir.tmp/deb" "$dir.tmp/root" "$ir"
rm -rf "$dir"
mv "$dir.tmp" "$dir"
echo "$dir"
