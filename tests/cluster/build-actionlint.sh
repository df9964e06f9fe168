#!/usr/bin/env bash
# Builds actionlint (github.com/rhysd/actionlint, the linter of GitHub Actions workflows) at the
# version pinned below from the Go module proxy into a cache outside the repository, keyed by the
# hash of this script (the version is in it). A second run does nothing. tests/tests/release.rs
# lints .github/workflows/ with it; the release workflow cannot run here, so the lint is what
# checks it (docs/versioning.md, "Releasing").
#
# Prints the bin directory on stdout (the last line). Environment:
#   FERROLB_CACHE   cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/ferrolb)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=v1.7.12
cache=${FERROLB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ferrolb}
key=$(sha256sum "$here/build-actionlint.sh" | cut -c1-16)
bin="$cache/actionlint-bin-$key"
if [ ! -x "$bin/actionlint" ]; then
  echo "building actionlint $version (github.com/rhysd/actionlint/cmd/actionlint) ..." >&2
  rm -rf "$bin.tmp"
  mkdir -p "$bin.tmp"
  # `go install pkg@version` builds exactly that module version with its own go.sum (checked
  # against the checksum database), outside any module of ours. -trimpath: reproducible.
  # actionlint's `-version` reads the module version from the build info, so it says v1.7.12.
  GOBIN="$bin.tmp" CGO_ENABLED=0 GOFLAGS=-trimpath \
    go install -ldflags="-s -w" "github.com/rhysd/actionlint/cmd/actionlint@$version"
  mkdir -p "$bin"
  mv "$bin.tmp/actionlint" "$bin/actionlint"
  rmdir "$bin.tmp"
fi
echo "$bin"
