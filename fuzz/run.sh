#!/usr/bin/env bash
# Runs ferrolb's fuzz targets (issue #27 item 13; docs/testing.md, "Fuzzing").
#
#   fuzz/run.sh                       every target for 30 s (the extended tier, tests/run.sh --extended)
#   fuzz/run.sh --seconds S [T...]    targets T (default: all) for S seconds each
#   fuzz/run.sh --runs N [T...]       targets T for N executions each (the long runs: -runs=10000000)
#   --keep                            new inputs go into fuzz/corpus/<target>/ (then `cargo fuzz cmin`)
#
# Before fuzzing it checks that fuzz/Cargo.lock holds no version of a crate the main Cargo.lock
# holds in another version, and replays the kept corpus on stable (`cargo test` of the fuzz
# crate, which also checks that the sealed seed script gets past authentication). Each target
# then runs with `cargo +nightly fuzz run` from its corpus in fuzz/corpus/<target>/; the new
# inputs libFuzzer finds go to a temporary directory (with --keep into the corpus: minimise it
# with `cargo fuzz cmin` before committing). A crash fails the script; libFuzzer writes the input
# to fuzz/artifacts/<target>/.
#
# Without a nightly toolchain or cargo-fuzz it prints why and exits 0 (the fuzz targets are the
# extended tier's; nothing else needs nightly). The fuzz build goes to fuzz/target (ignored by git).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=(-max_total_time=30)
keep=false
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) mode=("-max_total_time=$2"); shift 2 ;;
    --runs) mode=("-runs=$2"); shift 2 ;;
    --keep) keep=true; shift ;;
    -h | --help) sed -n '2,19p' "$0"; exit 0 ;;
    -*) echo "fuzz/run.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if [ ${#targets[@]} -eq 0 ]; then targets=(arp ndp membership pool); fi

# The versions both lockfiles hold must agree (the project's one version of each crate).
# (`name` is reset at each file's start: both begin with the lockfile's own `version = 4`.)
mismatch=$(awk '
  FNR == 1 { name = "" }
  /^name = / { name = $3 }
  /^version = / { v = $3; if (FILENAME == ARGV[1]) main[name] = main[name] " " v; else if (name in main && index(main[name] " ", " " v " ") == 0) print name, v, "(main:" main[name] ")" }
' Cargo.lock fuzz/Cargo.lock)
if [ -n "$mismatch" ]; then
  echo "fuzz/Cargo.lock holds versions the main Cargo.lock does not (make it from a copy of Cargo.lock):" >&2
  echo "$mismatch" >&2
  exit 1
fi

if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "fuzz/run.sh: SKIPPED: no nightly toolchain (rustup toolchain install nightly)" >&2
  exit 0
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz/run.sh: SKIPPED: cargo-fuzz is not installed (cargo install --locked cargo-fuzz@0.13.2)" >&2
  exit 0
fi

# The fuzz workspace builds into fuzz/target, whatever the caller's CARGO_TARGET_DIR (the main
# workspace's artefacts are built with other flags and would not be reused).
unset CARGO_TARGET_DIR
cargo test --manifest-path fuzz/Cargo.toml --locked --lib

new=$(mktemp -d)
trap 'rm -rf "$new"' EXIT
for t in "${targets[@]}"; do
  echo "== fuzz target $t (${mode[*]}) =="
  if $keep; then
    corpus=(fuzz/corpus/"$t")
  else
    mkdir -p "$new/$t"
    corpus=("$new/$t" fuzz/corpus/"$t")
  fi
  # (cargo fuzz has no --locked: the `cargo test --locked` above checked the lockfile.)
  cargo +nightly fuzz run "$t" "${corpus[@]}" -- "${mode[@]}" -print_final_stats=1
done
