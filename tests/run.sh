#!/usr/bin/env bash
# The project's test command (README): checks formatting and lints, builds the pinned
# etcd/kube-apiserver/kube-proxy/kubectl/kubelet/kube-controller-manager/kube-scheduler, helm,
# containerd/runc/CNI plugins and the lab's images once into a cache outside the repository,
# downloads MetalLB's Go module source into the Go module cache, builds MetalLB's speaker and
# controller (cached the same way), builds ferrolb, then runs every test of the workspace.
# Run as root: the lab tests create network namespaces. Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
FERROLB_K8S_BIN="$(tests/cluster/build.sh | tail -n 1)"
export FERROLB_K8S_BIN
# MetalLB's module source (sample configurations and CRDs for the `ferrolb migrate` tests).
FERROLB_METALLB_DIR="$(tests/metallb/fetch.sh | tail -n 1)"
export FERROLB_METALLB_DIR
FERROLB_HELM_BIN="$(tests/cluster/build-helm.sh | tail -n 1)"
export FERROLB_HELM_BIN
# MetalLB's speaker and controller built from its Go module, with its CRDs, for the MetalLB lab
# (issue #11; a couple of minutes the first time, cached afterwards).
FERROLB_METALLB_BIN="$(tests/metallb/build.sh | tail -n 1)"
export FERROLB_METALLB_BIN
# The real-node lab (issue #14): containerd, runc and the CNI plugins (cached like the rest), and
# the images its nodes import, built offline from the release binaries (cached by their hash).
FERROLB_NODE_BIN="$(tests/nodes/build.sh | tail -n 1)"
export FERROLB_NODE_BIN
# Its release build goes to a target directory in the same cache, so a fresh clone reuses it.
FERROLB_IMAGES="$(CARGO_TARGET_DIR="${FERROLB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ferrolb}/release-target" \
  tests/image/build.sh | tail -n 1)"
export FERROLB_IMAGES
cargo build --workspace --bins --locked
cargo test --workspace --locked --no-fail-fast "$@"
