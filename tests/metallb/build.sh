#!/usr/bin/env bash
# Builds MetalLB's speaker and controller, at the version pinned in tests/metallb/build/go.mod (the
# one pin: its `require go.universe.tf/metallb` line), from the Go module proxy into a cache
# outside the repository, keyed by the hash of go.mod, go.sum, tools.go and this script, and
# copies the same module's CRDs (config/crd/bases) next to them as crd/, with the version in
# `version`. A second run with the same pins does nothing. The lab runs these next to ferrolb on
# the same nodes (issue #11; docs/testing.md, "MetalLB in the lab").
#
# v0.15.2, not the newest v0.16.2: that one needs github.com/metallb/frr-k8s v0.0.27, which the
# module proxy does not serve (and v0.0.26 lacks the types it uses).
#
# Prints the bin directory on stdout (the last line); tests/run.sh exports it as
# FERROLB_METALLB_BIN. Environment:
#   FERROLB_CACHE   cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/ferrolb)
# The Go build and module caches stay where Go keeps them (outside the repository).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${FERROLB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ferrolb}
key=$(cat "$here/build/go.mod" "$here/build/go.sum" "$here/build/tools.go" "$here/build.sh" |
  sha256sum | cut -c1-16)
bin="$cache/metallb-bin-$key"
tools=(
  "speaker=go.universe.tf/metallb/speaker"
  "controller=go.universe.tf/metallb/controller"
)
if ! [ -x "$bin/speaker" ] || ! [ -x "$bin/controller" ] || ! [ -d "$bin/crd" ] ||
  ! [ -s "$bin/version" ]; then
  rm -rf "$bin.tmp"
  mkdir -p "$bin.tmp"
  cd "$here/build"
  # -mod=readonly: go.mod and go.sum are the pin, never rewritten by a build.
  export GOFLAGS=-mod=readonly CGO_ENABLED=0
  for t in "${tools[@]}"; do
    name=${t%%=*}; pkg=${t#*=}
    echo "building MetalLB $name ($pkg) ..." >&2
    go build -trimpath -buildvcs=false -ldflags="-s -w" -o "$bin.tmp/$name" "$pkg"
  done
  module=$(go list -m -f '{{.Dir}} {{.Version}}' go.universe.tf/metallb)
  cp -r "${module% *}/config/crd/bases" "$bin.tmp/crd"
  chmod -R u+w "$bin.tmp/crd"
  echo "${module#* }" > "$bin.tmp/version"
  rm -rf "$bin"
  mv "$bin.tmp" "$bin"
fi
echo "$bin"
