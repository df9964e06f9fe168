#!/usr/bin/env bash
# The project's test command (README): builds the pinned etcd/kube-apiserver/kube-proxy/kubectl
# once into a cache outside the repository, builds ferrolb, then runs every test of the workspace.
# Run as root: the lab tests create network namespaces. Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
FERROLB_K8S_BIN="$(tests/cluster/build.sh | tail -n 1)"
export FERROLB_K8S_BIN
cargo build --workspace --bins --locked
cargo test --workspace --locked --no-fail-fast "$@"
