#!/usr/bin/env bash
# The one-command demo (README, docs/demo.md). Run as root on Linux:
#
#   ./demo.sh [--verbose] [--proxy-mode nftables|iptables] [--implementation ferrolb|metallb]
#   ./demo.sh --real-nodes [--upgrade]
#
# Installs the system tools it needs if they are missing (apt-get: iproute2, nftables, iptables,
# conntrack),
# builds the pinned etcd/kube-apiserver/kube-proxy/kubectl once into ~/.cache/ferrolb (Go, ~10 min
# the first time), builds ferrolb's controller, speaker and the demo, then runs `ferrolb-demo`:
# a real API server, three node network namespaces each with a real kube-proxy (nftables mode, or
# iptables mode with --proxy-mode iptables) and
# a speaker, one controller, three backend pods and a client — a LoadBalancer Service, ARP, 300
# HTTP requests and a speaker failover. Everything happens in namespaces the demo creates and
# deletes again; nothing is added to this machine's own network.
#
# --implementation metallb (issue #11): the same story with MetalLB v0.15.2's controller and
# speakers instead of ferrolb's, built once from its Go module (tests/metallb/build.sh, ~2 minutes),
# to compare the two side by side (docs/comparison.md has the measured figures).
#
# --real-nodes (issue #14): the same LAN, but each node runs containerd and kubelet (plus
# kube-controller-manager and kube-scheduler next to the API server), ferrolb is installed with
# `kubectl apply -k deploy/` from images built offline (tests/image/build.sh), and the story is
# told with pods: a speaker pod deleted, the controller's leader pod deleted, the uninstall;
# --upgrade adds the day-two work of docs/operations.md before the uninstall (roll-outs of the
# controller and the speakers with HTTP requests counted throughout, a drain, a node's hard stop,
# a whole-cluster power cycle). The
# first run also builds containerd, runc and the CNI plugins (tests/nodes/build.sh, needs gcc,
# pkg-config and libseccomp-dev) and ferrolb in release mode for the image.
set -euo pipefail
cd "$(dirname "$0")"

if [ "$(id -u)" -ne 0 ]; then
  echo "demo.sh creates network namespaces: run it as root (e.g. sudo -E ./demo.sh)" >&2
  exit 1
fi
need=()
command -v ip >/dev/null || need+=(iproute2)
command -v nft >/dev/null || need+=(nftables)
command -v conntrack >/dev/null || need+=(conntrack)
command -v iptables-restore >/dev/null || need+=(iptables)
real_nodes=false
implementation=${FERROLB_DEMO_IMPLEMENTATION:-ferrolb}
prev=
for a in "$@"; do
  [ "$a" = --real-nodes ] && real_nodes=true
  [ "$prev" = --implementation ] && implementation=$a
  case "$a" in --implementation=*) implementation=${a#--implementation=} ;; esac
  prev=$a
done
[ "${FERROLB_DEMO_REAL_NODES:-}" = true ] && real_nodes=true
implementation=$(echo "$implementation" | tr '[:upper:]' '[:lower:]')
if $real_nodes && [ "$implementation" != ferrolb ]; then
  echo "--real-nodes installs ferrolb's manifests; it runs ferrolb only" >&2
  exit 2
fi
if $real_nodes; then
  command -v gcc >/dev/null || need+=(gcc libc6-dev)
  command -v pkg-config >/dev/null || need+=(pkg-config)
  [ -e /usr/include/seccomp.h ] || need+=(libseccomp-dev)
fi
if [ ${#need[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null; then
    echo "installing ${need[*]} ..." >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    echo "please install: ${need[*]} (ip, nft, iptables-restore and conntrack commands)" >&2
    exit 1
  fi
fi
command -v go >/dev/null || { echo "Go is required once, to build kube-apiserver, etcd, kube-proxy and kubectl" >&2; exit 1; }
command -v cargo >/dev/null || { echo "Rust (cargo) is required to build ferrolb" >&2; exit 1; }

echo "building (first run: ~10 minutes for the Kubernetes binaries, cached afterwards) ..." >&2
FERROLB_K8S_BIN="$(tests/cluster/build.sh | tail -n 1)"
export FERROLB_K8S_BIN
if [ "$implementation" = metallb ]; then
  echo "building MetalLB's speaker and controller (first run: ~2 minutes, cached afterwards) ..." >&2
  FERROLB_METALLB_BIN="$(tests/metallb/build.sh | tail -n 1)"
  export FERROLB_METALLB_BIN
fi
if $real_nodes; then
  FERROLB_NODE_BIN="$(tests/nodes/build.sh | tail -n 1)"
  FERROLB_IMAGES="$(tests/image/build.sh | tail -n 1)"
  export FERROLB_NODE_BIN FERROLB_IMAGES
fi
cargo build --quiet --locked -p ferrolb-controller -p ferrolb-speaker --bins
cargo build --quiet --locked -p ferrolb-tests --bin ferrolb-demo
exec "${CARGO_TARGET_DIR:-target}/debug/ferrolb-demo" "$@"
