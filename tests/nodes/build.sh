#!/usr/bin/env bash
# Builds the container runtime of the real-node lab (issue #14; docs/testing.md, "The real-node
# lab") from the Go module proxy into a cache outside the repository, keyed by the hash of this
# script (the pins below are the only ones). A second run with the same pins does nothing.
#
#   containerd, ctr, containerd-shim-runc-v2   github.com/containerd/containerd/v2  (Kubernetes
#                                              1.36+ needs containerd 2)
#   runc                                       github.com/opencontainers/runc, cgo + libseccomp
#                                              (Debian 12's runc 1.1.5 fails every container
#                                              containerd 2.4 creates: "can't get final child's
#                                              PID from pipe"; the pods use seccomp RuntimeDefault)
#   bridge, host-local, loopback, portmap      github.com/containernetworking/plugins
#
# kubelet, kube-controller-manager and kube-scheduler come from tests/cluster/build.sh (the same
# pinned k8s.io/kubernetes as the API server).
#
# Needs gcc, pkg-config and libseccomp-dev for runc (.ci/run installs them). Prints the bin
# directory on stdout (the last line); tests/run.sh exports it as FERROLB_NODE_BIN. Environment:
#   FERROLB_CACHE   cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/ferrolb)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${FERROLB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ferrolb}
containerd=v2.4.2
runc=v1.5.3
cni=v1.10.0
key=$(sha256sum "$here/build.sh" | cut -c1-16)
bin="$cache/node-bin-$key"
names=(containerd ctr containerd-shim-runc-v2 runc bridge host-local loopback portmap)
complete=true
for n in "${names[@]}"; do [ -x "$bin/$n" ] || complete=false; done
if ! $complete; then
  rm -rf "$bin.tmp"
  mkdir -p "$bin.tmp"
  # `go install pkg@version` builds each at its own go.mod (none of these has replace directives),
  # outside any module of ours; -trimpath and no VCS stamping keep it independent of the clone.
  export GOBIN="$bin.tmp" GOFLAGS=
  echo "building containerd $containerd ..." >&2
  CGO_ENABLED=0 go install -trimpath -ldflags="-s -w" \
    "github.com/containerd/containerd/v2/cmd/containerd@$containerd" \
    "github.com/containerd/containerd/v2/cmd/ctr@$containerd" \
    "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$containerd"
  echo "building runc $runc ..." >&2
  CGO_ENABLED=1 go install -tags seccomp -trimpath -ldflags="-s -w" \
    "github.com/opencontainers/runc@$runc"
  echo "building CNI plugins $cni ..." >&2
  CGO_ENABLED=0 go install -trimpath -ldflags="-s -w" \
    "github.com/containernetworking/plugins/plugins/main/bridge@$cni" \
    "github.com/containernetworking/plugins/plugins/ipam/host-local@$cni" \
    "github.com/containernetworking/plugins/plugins/main/loopback@$cni" \
    "github.com/containernetworking/plugins/plugins/meta/portmap@$cni"
  rm -rf "$bin"
  mv "$bin.tmp" "$bin"
fi
echo "$bin"
