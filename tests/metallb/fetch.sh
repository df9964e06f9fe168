#!/usr/bin/env bash
# Downloads MetalLB's Go module (source only, nothing is built) into the Go module cache, for the
# `ferrolb migrate` tests: they read MetalLB's own sample configurations (configsamples/ and
# configmaptocrs/testdata/) and CRDs (config/crd/bases/) from it at test time, so none of MetalLB's
# files is copied into this repository. A second run with the module cached does nothing.
#
# The Go toolchain checks the download against the checksum database (sum.golang.org); the hash is
# also pinned here. Prints the module directory on stdout (the last line); tests/run.sh exports it
# as FERROLB_METALLB_DIR. Needs Go, and network access on the first run (GOPROXY).
set -euo pipefail
module=go.universe.tf/metallb
version=v0.16.2
sum='h1:RCSAGoZmqcvTg0e56+Okbwz8iTuQVX30JpKX5mYEPUM='
# Outside any Go module, so no go.mod is read or written.
tmp=$(mktemp -d)
trap 'rmdir "$tmp"' EXIT
cd "$tmp"
json=$(go mod download -json "$module@$version")
field() { printf '%s\n' "$json" | sed -n "s/^[[:space:]]*\"$1\": \"\(.*\)\",\{0,1\}$/\1/p"; }
if [ -n "$(field Error)" ]; then
  echo "go mod download $module@$version: $(field Error)" >&2
  exit 1
fi
if [ "$(field Sum)" != "$sum" ]; then
  echo "go mod download $module@$version: checksum $(field Sum), expected $sum" >&2
  exit 1
fi
dir=$(field Dir)
[ -d "$dir/configsamples" ] || { echo "$dir/configsamples is missing" >&2; exit 1; }
echo "$dir"
