#!/usr/bin/env bash
# Builds `helm` from the version pinned in tests/cluster/helm/go.mod into a cache outside the
# repository, keyed by the hash of go.mod + go.sum and of this script (its -ldflags are part of
# the build; the sibling of build.sh, which builds the Kubernetes binaries). A second run with the same pins does nothing. tests/tests/helm_chart.rs
# uses it to lint, render and install deploy/helm/ferrolb.
#
# The version strings a release build gets from helm's Makefile are set the same way here, from
# go.mod: `helm version` says v3.22.0, and `helm template` / `helm lint` assume the Kubernetes
# minor of the client-go helm is built with (not helm's fallback 1.20).
#
# Prints the bin directory on stdout (the last line). Environment:
#   FERROLB_CACHE   cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/ferrolb)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${FERROLB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ferrolb}
key=$(cat "$here/helm/go.mod" "$here/helm/go.sum" "$here/build-helm.sh" | sha256sum | cut -c1-16)
bin="$cache/helm-bin-$key"
if [ ! -x "$bin/helm" ]; then
  cd "$here/helm"
  export GOFLAGS=-mod=mod
  helm_version=$(go list -m -f '{{.Version}}' helm.sh/helm/v3)
  client_go=$(go list -m -f '{{.Version}}' k8s.io/client-go)   # v0.37.0 -> Kubernetes 1.37
  k8s_minor=$(echo "$client_go" | cut -d. -f2)
  ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version"
  ldflags+=" -X helm.sh/helm/v3/internal/version.metadata="
  for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
  done
  echo "building helm $helm_version (helm.sh/helm/v3/cmd/helm) ..." >&2
  mkdir -p "$bin.tmp"
  # -trimpath and no VCS stamping: reproducible, independent of where the clone is.
  CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags="$ldflags" \
    -o "$bin.tmp/helm" helm.sh/helm/v3/cmd/helm
  mkdir -p "$bin"
  mv "$bin.tmp/helm" "$bin/helm"
  rmdir "$bin.tmp"
fi
echo "$bin"
