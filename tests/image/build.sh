#!/usr/bin/env bash
# Builds, without any container registry or engine, the three images the real-node lab loads into
# containerd with `ctr -n k8s.io images import FILE` (issue #14), as docker-archive files (the
# `docker save` format; `docker load` / `podman load` take them too):
#
#   ferrolb.tar   ferrolb:<version>                 what the Containerfile builds: ferrolb-controller,
#                                                   ferrolb-speaker and ferrolb in /usr/local/bin,
#                                                   USER 65532:65532, CMD ["ferrolb-controller"]
#   pause.tar     registry.k8s.io/pause:3.10.2      containerd's default sandbox image (v2.4.2,
#                 registry.k8s.io/pause:3.10        internal/cri/config DefaultSandboxImage), and
#                                                   3.10 for configurations that pin that; here
#                                                   src/bin/pause.rs as /pause, USER 65535:65535
#   backend.tar   ferrolb-test-backend:<version>    src/bin/backend.rs, USER 65532:65532
#   agnhost.tar   registry.k8s.io/e2e-test-images/  the same program as /agnhost, ENTRYPOINT
#                 agnhost:2.53                      ["/agnhost"], USER 65532:65532: the lab's stand-in
#                                                   for the e2e image the README quickstart and
#                                                   deploy/examples/demo run (`agnhost netexec
#                                                   --http-port=N` answers GET /hostname the same way;
#                                                   nothing else of agnhost is there)
#
# <version> is the workspace version in Cargo.toml, the tag deploy/kustomization.yaml gives the
# manifests. Short names mean docker.io/library/…, which is how containerd lists them.
#
# Each image is one layer, like distroless cc-debian12 (the Containerfile's base) but built from
# this host (Debian 12, the same release): the release binaries, the shared libraries `ldd` finds
# for them (glibc, libgcc_s) at the paths it reports, and for ferrolb and the backend a minimal
# /etc/passwd and /etc/group (root, nonroot = 65532), /etc/nsswitch.conf (/etc/hosts before DNS,
# as in distroless), /tmp (1777), /root and /home/nonroot. No shell, no CA certificates: in a Pod
# the binaries trust only the ServiceAccount's ca.crt.
#
# The archives are written by tests/image/go/main.go with go-containerregistry v0.22.1 (pinned in
# its go.mod, from the Go module proxy; Go is needed for the test cluster anyway): no daemon, no
# image storage, no root, nothing written outside the cache; every entry has mtime 0 and fixed
# owners, so the same binaries give byte-identical archives. Debian's buildah was the other
# candidate: an apt package with a container-storage directory per run, a policy.json, root or
# user namespaces, and the build time stamped into the image unless told otherwise.
#
# The archives go into a cache outside the repository, keyed by the hash of the binaries, the
# libraries, the version, this script and the Go program: a run with nothing changed only runs
# `cargo build` (a no-op) and hashes. Image sets unused for 7 days are removed. Prints that
# directory on stdout (the last line). Environment:
#   FERROLB_CACHE     cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/ferrolb)
#   CARGO_TARGET_DIR  as for cargo
#   FERROLB_IMAGE_PROFILE  `release` (default: what users and the demo get) or `dev`: the debug
#                     binaries of the workspace build, with their debug info stripped into the
#                     image (tests/run.sh: one Rust build serves the lab and the images)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=${FERROLB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ferrolb}
pause_tags=(registry.k8s.io/pause:3.10.2 registry.k8s.io/pause:3.10)
agnhost_tag=registry.k8s.io/e2e-test-images/agnhost:2.53
version=$(awk -F'"' '/^\[/ { in_pkg = ($0 == "[workspace.package]") }
  in_pkg && /^version *=/ { print $2; exit }' "$root/Cargo.toml")
[ -n "$version" ] || { echo "no version in [workspace.package] of $root/Cargo.toml" >&2; exit 1; }

cd "$root"
# One invocation, no -p: the same package selection (the default members) as the Containerfile's
# build, so features unify the same way and ferrolb-* are the binaries it would put in the image.
bins=(ferrolb-controller ferrolb-speaker ferrolb ferrolb-test-pause ferrolb-test-backend)
profile=${FERROLB_IMAGE_PROFILE:-release}
case "$profile" in
  release) profile_dir=release ;;
  dev) profile_dir=debug ;;
  *) echo "FERROLB_IMAGE_PROFILE must be release or dev, not $profile" >&2; exit 1 ;;
esac
cargo build --profile "$profile" --locked "${bins[@]/#/--bin=}" >&2
target=$(cargo metadata --no-deps --format-version 1 --locked |
  sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
release=$target/$profile_dir
if [ "$profile" = dev ]; then
  # Debug info is most of a debug binary's size; the images carry stripped copies.
  stripped=$(mktemp -d)
  trap 'rm -rf "$stripped"' EXIT
  for b in "${bins[@]}"; do strip --strip-debug -o "$stripped/$b" "$release/$b"; done
  release=$stripped
fi

# The shared libraries the binaries load, as this host resolves them (absolute paths, sorted).
libs_of() {
  local out
  out=$(ldd "$@")
  if grep -q 'not found' <<<"$out"; then
    echo "$out" >&2
    return 1
  fi
  awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// && $2 ~ /^\(/ { print $1 }' <<<"$out" |
    sort -u
}
ferrolb_libs=$(libs_of "$release/ferrolb-controller" "$release/ferrolb-speaker" "$release/ferrolb")
pause_libs=$(libs_of "$release/ferrolb-test-pause")
backend_libs=$(libs_of "$release/ferrolb-test-backend")

key=$(
  echo "$version ${pause_tags[*]} $agnhost_tag"
  for f in "${bins[@]/#/$release/}" $(printf '%s\n' $ferrolb_libs $pause_libs $backend_libs | sort -u); do
    echo "$f $(sha256sum <"$f" | cut -c1-64)"
  done | sed "s|^$release/||"
  cat "$here/build.sh" "$here/go/go.mod" "$here/go/go.sum" "$here/go/main.go"
)
key=$(sha256sum <<<"$key" | cut -c1-16)
out="$cache/images-$key"
complete() { [ -s "$1/ferrolb.tar" ] && [ -s "$1/pause.tar" ] && [ -s "$1/backend.tar" ] && [ -s "$1/agnhost.tar" ]; }
if ! complete "$out"; then
  mkdir -p "$cache"
  tmp=$(mktemp -d "$out.tmp.XXXXXX")
  trap 'rm -rf "$tmp" ${stripped:+"$stripped"}' EXIT
  echo "building the images ferrolb:$version, ${pause_tags[*]}, ferrolb-test-backend:$version, $agnhost_tag ..." >&2
  (cd "$here/go" && GOFLAGS=-mod=readonly CGO_ENABLED=0 \
    go build -trimpath -buildvcs=false -o "$tmp/imagetar" .)

  # The files of a distroless-like base: users, name service order, /tmp and the home directories.
  printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' \
    'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >"$tmp/passwd"
  printf '%s\n' 'root:x:0:' 'nonroot:x:65532:' >"$tmp/group"
  printf '%s\n' 'passwd: files' 'group: files' 'hosts: files dns' >"$tmp/nsswitch.conf"
  base() {
    echo "file /etc/passwd 0644 0 0 $tmp/passwd"
    echo "file /etc/group 0644 0 0 $tmp/group"
    echo "file /etc/nsswitch.conf 0644 0 0 $tmp/nsswitch.conf"
    echo "dir /tmp 1777 0 0"
    echo "dir /root 0700 0 0"
    echo "dir /home/nonroot 0700 65532 65532"
  }
  libs() { for l in $1; do echo "file $l $(stat -L -c %a "$l") 0 0 $l"; done; }
  path=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

  {
    base
    libs "$ferrolb_libs"
    for b in ferrolb-controller ferrolb-speaker ferrolb; do
      echo "file /usr/local/bin/$b 0755 0 0 $release/$b"
    done
  } >"$tmp/ferrolb.spec"
  "$tmp/imagetar" -out "$tmp/ferrolb.tar" -spec "$tmp/ferrolb.spec" -tag "ferrolb:$version" \
    -user 65532:65532 -workdir /home/nonroot -env "$path" -cmd '["ferrolb-controller"]'

  {
    libs "$pause_libs"
    echo "file /pause 0755 0 0 $release/ferrolb-test-pause"
  } >"$tmp/pause.spec"
  "$tmp/imagetar" -out "$tmp/pause.tar" -spec "$tmp/pause.spec" "${pause_tags[@]/#/-tag=}" \
    -user 65535:65535 -entrypoint '["/pause"]'

  {
    base
    libs "$backend_libs"
    echo "file /usr/local/bin/ferrolb-test-backend 0755 0 0 $release/ferrolb-test-backend"
  } >"$tmp/backend.spec"
  "$tmp/imagetar" -out "$tmp/backend.tar" -spec "$tmp/backend.spec" \
    -tag "ferrolb-test-backend:$version" -user 65532:65532 -workdir /home/nonroot -env "$path" \
    -cmd '["ferrolb-test-backend"]'

  {
    base
    libs "$backend_libs"
    echo "file /agnhost 0755 0 0 $release/ferrolb-test-backend"
  } >"$tmp/agnhost.spec"
  "$tmp/imagetar" -out "$tmp/agnhost.tar" -spec "$tmp/agnhost.spec" -tag "$agnhost_tag" \
    -user 65532:65532 -workdir /home/nonroot -env "$path" -entrypoint '["/agnhost"]'

  mkdir "$tmp/out"
  mv "$tmp"/{ferrolb,pause,backend,agnhost}.tar "$tmp/out/"
  # A rename, so a reader never sees half a directory. It fails if another run finished the same
  # key meanwhile (same inputs, same bytes: keep that) or a broken leftover is in the way.
  if ! mv -T "$tmp/out" "$out" 2>/dev/null && ! complete "$out"; then
    rm -rf "$out"
    mv -T "$tmp/out" "$out"
  fi
fi
# Every change to the binaries makes a new set (about 25 MB): keep the ones used this week.
touch "$out"
find "$cache" -maxdepth 1 -name 'images-*' -mtime +7 -exec rm -rf {} +
echo "$out"
