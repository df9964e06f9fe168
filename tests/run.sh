#!/usr/bin/env bash
# The project's test command (README): checks formatting and lints, builds the pinned
# etcd/kube-apiserver/kube-proxy/kubectl/kubelet/kube-controller-manager/kube-scheduler, helm,
# actionlint, containerd/runc/CNI plugins and the lab's images once into a cache outside the repository,
# downloads MetalLB's Go module source into the Go module cache, checks the crate graphs with
# cargo-deny (bans, licenses, sources), builds ferrolb, then runs every test of the workspace's
# fast tier (docs/testing.md, "Tiers").
#
#   tests/run.sh               the fast tier (CI; the 60-minute budget of a fresh machine)
#   tests/run.sh --extended    the fast tier and the extended tier: the MetalLB side-by-side
#                              tests (builds MetalLB's speaker and controller from its Go
#                              module), the one-minute starvation soaks and 30 s of each fuzz
#                              target (fuzz/run.sh: nightly and cargo-fuzz, skipped without them)
#
# Run as root: the lab tests create network namespaces. Other arguments go to `cargo test`.
# Each step's wall time is printed at the end (and to $FERROLB_STEP_TIMES when set).
set -euo pipefail
cd "$(dirname "$0")/.."

extended=false
args=()
for a in "$@"; do
  case "$a" in
    --extended) extended=true ;;
    *) args+=("$a") ;;
  esac
done

cache=${FERROLB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ferrolb}
# In CI every run is a fresh clone: its Rust build goes to a target directory in the cache, so a
# fresh clone on a warm machine recompiles the workspace's own crates only (their paths differ
# per clone), never the dependencies. Without incremental compilation (nothing to reuse in a
# fresh clone; it only writes). A developer's own clone keeps its ./target. Pruned when it grows
# past 20 GiB (every clone path adds its own copy of the workspace's crates).
if [ -n "${CI:-}" ] && [ -z "${CARGO_TARGET_DIR:-}" ]; then
  export CARGO_TARGET_DIR="$cache/target" CARGO_INCREMENTAL=0
  if [ -d "$CARGO_TARGET_DIR" ] &&
    [ "$(du -s --block-size=1G "$CARGO_TARGET_DIR" | cut -f1)" -gt 20 ]; then
    rm -rf "$CARGO_TARGET_DIR"
  fi
fi
features=()
if $extended; then features=(--features ferrolb-tests/extended); fi

times=$(mktemp)
started=$(date +%s)
trap 'rm -f "$times"' EXIT
# step NAME CMD...: runs CMD, records its wall time, returns its exit status.
step() {
  local name=$1 t0 status
  shift
  t0=$(date +%s)
  "$@"
  status=$?
  echo "$name $(($(date +%s) - t0))" >>"$times"
  return "$status"
}
report() {
  echo "== tests/run.sh step times (s) ==" >&2
  column -t <"$times" >&2 || cat "$times" >&2
  echo "total $(($(date +%s) - started))" >&2
  if [ -n "${FERROLB_STEP_TIMES:-}" ]; then
    { cat "$times"; echo "total $(($(date +%s) - started))"; } >"$FERROLB_STEP_TIMES"
  fi
}

# The Go builds (cached outside the clone, keyed by their inputs) run in the background while
# cargo lints and builds: on a fresh machine they are mostly module downloads and single-threaded
# links, which leave a core free for rustc. Each prints its output directory as its last line.
go_out=$(mktemp -d)
go_builds() {
  local t0
  t0=$(date +%s); tests/cluster/build.sh | tail -n 1 >"$go_out/k8s"
  echo "go:kubernetes+etcd $(($(date +%s) - t0))" >>"$times"
  # MetalLB's module source (sample configurations and CRDs for the `ferrolb migrate` tests).
  t0=$(date +%s); tests/metallb/fetch.sh | tail -n 1 >"$go_out/metallb-src"
  echo "go:metallb-source $(($(date +%s) - t0))" >>"$times"
  t0=$(date +%s); tests/cluster/build-helm.sh | tail -n 1 >"$go_out/helm"
  echo "go:helm $(($(date +%s) - t0))" >>"$times"
  # The real-node lab (issue #14): containerd, runc and the CNI plugins.
  t0=$(date +%s); tests/nodes/build.sh | tail -n 1 >"$go_out/nodes"
  echo "go:containerd+runc+cni $(($(date +%s) - t0))" >>"$times"
  # actionlint, which lints the release workflow (tests/tests/release.rs, issue #28).
  t0=$(date +%s); tests/cluster/build-actionlint.sh | tail -n 1 >"$go_out/actionlint"
  echo "go:actionlint $(($(date +%s) - t0))" >>"$times"
  if $extended; then
    # MetalLB's speaker and controller built from its Go module, with its CRDs (issue #11).
    t0=$(date +%s); tests/metallb/build.sh | tail -n 1 >"$go_out/metallb"
    echo "go:metallb $(($(date +%s) - t0))" >>"$times"
  fi
}
go_t0=$(date +%s)
go_builds &
go_pid=$!

step fmt cargo fmt --all -- --check
# The crate graphs of the main and the fuzz workspace (deny.toml, fuzz/deny.toml; docs/testing.md,
# "Dependency rules"): one version of each crate, allowed licences, crates.io only. Not
# `advisories`: it fetches the RustSec database, which this machine cannot reach.
deny() {
  command -v cargo-deny >/dev/null ||
    { echo "cargo-deny is missing: cargo install --locked cargo-deny@0.20.2 (.ci/run does)" >&2; return 1; }
  cargo deny --locked check bans licenses sources &&
    cargo deny --manifest-path fuzz/Cargo.toml --config fuzz/deny.toml --locked check bans licenses sources
}
step deny deny
# --all-features: the extended tier's test targets are linted too.
step clippy cargo clippy --workspace --all-targets --all-features --locked -- -D warnings
step build cargo build --workspace --bins --locked
# The tests' binaries, built before the clock of the test run starts (what `cargo test` would
# otherwise build first).
step build-tests cargo test --workspace --locked "${features[@]}" --no-run

wait "$go_pid" || { echo "a Go build failed (see above)" >&2; exit 1; }
echo "go:all(wall,background) $(($(date +%s) - go_t0))" >>"$times"
FERROLB_K8S_BIN=$(cat "$go_out/k8s")
FERROLB_METALLB_DIR=$(cat "$go_out/metallb-src")
FERROLB_HELM_BIN=$(cat "$go_out/helm")
FERROLB_NODE_BIN=$(cat "$go_out/nodes")
FERROLB_ACTIONLINT_BIN=$(cat "$go_out/actionlint")
export FERROLB_K8S_BIN FERROLB_METALLB_DIR FERROLB_HELM_BIN FERROLB_NODE_BIN FERROLB_ACTIONLINT_BIN
if $extended; then
  FERROLB_METALLB_BIN=$(cat "$go_out/metallb")
  export FERROLB_METALLB_BIN
fi
rm -rf "$go_out"

# The images the real-node lab's containerd imports, packed from the debug binaries just built
# (stripped; the same build the other lab tests run), not from a second, release build.
images_out=$(mktemp)
step images env FERROLB_IMAGE_PROFILE=dev tests/image/build.sh >"$images_out"
FERROLB_IMAGES=$(tail -n 1 "$images_out")
rm -f "$images_out"
export FERROLB_IMAGES

# The tests: binaries one after another (lab tests assert timings; a second binary beside them
# would compete for the two CPUs), each with libtest's default of one thread per CPU.
set +e
step test cargo test --workspace --locked "${features[@]}" --no-fail-fast "${args[@]}"
rc=$?
if $extended; then
  # After the tests, not beside them (the lab tests assert timings on two CPUs).
  step fuzz fuzz/run.sh --seconds 30 || rc=1
fi
set -e
report
exit "$rc"
