#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-proxy and kubectl (the test cluster and the process lab), and
# kubelet, kube-controller-manager and kube-scheduler (the real-node lab, issue #14) from the versions pinned in
# tests/cluster/go/go.mod into a cache outside the repository, keyed by the
# hash of go.mod + go.sum. A second run with the same pins does nothing.
#
#   tests/cluster/build.sh              all of them
#   tests/cluster/build.sh kubectl ...  only those named (release/build.sh needs kubectl alone);
#                                       same directory, so a later full run adds the others
#
# Prints the bin directory on stdout (the last line). Environment:
#   FERROLB_CACHE   cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/ferrolb)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${FERROLB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ferrolb}
key=$(cat "$here/go/go.mod" "$here/go/go.sum" | sha256sum | cut -c1-16)
bin="$cache/k8s-bin-$key"
tools=(
  "etcd=go.etcd.io/etcd/server/v3"
  "kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver"
  "kube-proxy=k8s.io/kubernetes/cmd/kube-proxy"
  "kubectl=k8s.io/kubernetes/cmd/kubectl"
  "kubelet=k8s.io/kubernetes/cmd/kubelet"
  "kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager"
  "kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler"
)
if [ $# -gt 0 ]; then
  wanted=()
  for name in "$@"; do
    found=
    for t in "${tools[@]}"; do [ "${t%%=*}" = "$name" ] && found=$t; done
    [ -n "$found" ] || { echo "build.sh: unknown binary $name (known: ${tools[*]%%=*})" >&2; exit 2; }
    wanted+=("$found")
  done
  tools=("${wanted[@]}")
fi
missing=()
for t in "${tools[@]}"; do [ -x "$bin/${t%%=*}" ] || missing+=("$t"); done
if [ ${#missing[@]} -gt 0 ]; then
  rm -rf "$bin.tmp"
  mkdir -p "$bin.tmp/out"
  cd "$here/go"
  pkgs=()
  for t in "${missing[@]}"; do pkgs+=("${t#*=}"); done
  echo "building ${missing[*]%%=*} ..." >&2
  # One `go build` for all of them: the packages they share compile once and the compiles and
  # links of different binaries overlap on every core (one build after another left cores idle
  # during each link). -trimpath and no VCS stamping: reproducible, independent of the clone.
  GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags="-s -w" \
    -o "$bin.tmp/out/" "${pkgs[@]}"
  # `go build -o DIR/` names a binary after its package path's last element that is not a major
  # version suffix (go.etcd.io/etcd/server/v3 -> server); rename to the names above.
  for t in "${missing[@]}"; do
    name=${t%%=*}; pkg=${t#*=}
    base=${pkg%/v[0-9]*}; base=${base##*/}
    mv "$bin.tmp/out/$base" "$bin.tmp/$name"
  done
  rmdir "$bin.tmp/out"
  mkdir -p "$bin"
  mv "$bin.tmp"/* "$bin"/
  rmdir "$bin.tmp"
fi
echo "$bin"
