#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-proxy and kubectl (the test cluster and the process lab), and
# kubelet, kube-controller-manager and kube-scheduler (the real-node lab, issue #14) from the versions pinned in
# tests/cluster/go/go.mod into a cache outside the repository, keyed by the
# hash of go.mod + go.sum. A second run with the same pins does nothing.
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
missing=()
for t in "${tools[@]}"; do [ -x "$bin/${t%%=*}" ] || missing+=("$t"); done
if [ ${#missing[@]} -gt 0 ]; then
  mkdir -p "$bin.tmp"
  cd "$here/go"
  for t in "${missing[@]}"; do
    name=${t%%=*}; pkg=${t#*=}
    echo "building $name ($pkg) ..." >&2
    # -trimpath and no VCS stamping: reproducible, independent of where the clone is.
    GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags="-s -w" \
      -o "$bin.tmp/$name" "$pkg"
  done
  mkdir -p "$bin"
  mv "$bin.tmp"/* "$bin"/
  rmdir "$bin.tmp"
fi
echo "$bin"
