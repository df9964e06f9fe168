#!/usr/bin/env bash
# Builds ferrolb's release artefacts into one directory (docs/versioning.md, "Releasing"):
#
#   binaries  static linux binaries ferrolb (and the link kubectl-ferrolb to it, the kubectl
#             plugin name), ferrolb-controller, ferrolb-speaker (glibc linked in,
#             `+crt-static`; `ldd` must say so) in ferrolb-VERSION-linux-ARCH/ with LICENSE,
#             README.md and CHANGELOG.md, and that directory as a .tar.gz
#   manifest  ferrolb.yaml: the kustomize base deploy/ rendered into one file (`kubectl
#             kustomize`), its image pointed at FERROLB_IMAGE:VERSION (or @FERROLB_IMAGE_DIGEST)
#   chart     ferrolb-VERSION.tgz: the Helm chart deploy/helm/ferrolb, linted (`helm lint
#             --strict`) and packaged, its default image repository FERROLB_IMAGE
#
# and then SHA256SUMS over every artefact in the directory (those above, and an SBOM
# ferrolb-*.spdx.json the release workflow puts there first).
#
#   release/build.sh                     all three steps
#   release/build.sh manifest chart      only the steps named, in the order above
#   release/build.sh version             prints the version (the workspace's, Cargo.toml) only
#
# VERSION is the workspace version ([workspace.package] in Cargo.toml): the chart's version and
# appVersion and the base's image tag are generated from it, and this script refuses to run when
# they disagree (a stale chart: run `cargo run -p ferrolb-tests --bin ferrolb-helmgen`).
#
# Environment:
#   FERROLB_DIST          output directory (default: dist/ in the repository, which git ignores)
#   FERROLB_IMAGE         image repository of the manifest and the chart, without tag (default:
#                         ferrolb, as in deploy/: an image loaded into the nodes); the release
#                         workflow passes ghcr.io/OWNER/ferrolb
#   FERROLB_IMAGE_DIGEST  sha256:<64 hex> of the released image index: the manifest then names the
#                         image by digest (what was signed), not by tag
#   FERROLB_TARGET        Rust target of the binaries (default: x86_64-unknown-linux-gnu, i.e.
#                         linux/amd64; aarch64-unknown-linux-gnu for linux/arm64, built natively)
#   KUBECTL, HELM         the tools to use; default: the ones the tests use, built from the
#                         versions pinned in tests/cluster/ and cached in ~/.cache/ferrolb
#                         ($FERROLB_K8S_BIN/kubectl, $FERROLB_HELM_BIN/helm when set, as
#                         tests/run.sh exports them; else tests/cluster/build.sh kubectl and
#                         tests/cluster/build-helm.sh)
#   CARGO_TARGET_DIR      as for cargo (default: target/)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

die() {
  echo "release/build.sh: $*" >&2
  exit 1
}

version=$(sed -n '/^\[workspace\.package\]/,/^\[/s/^version = "\([^"]*\)"$/\1/p' Cargo.toml)
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] ||
  die "no semver version under [workspace.package] in Cargo.toml (found '$version')"

steps=("$@")
if [ ${#steps[@]} -eq 0 ]; then steps=(binaries manifest chart); fi
if [ "${steps[*]}" = version ]; then
  echo "$version"
  exit 0
fi
for s in "${steps[@]}"; do
  case $s in
    binaries | manifest | chart) ;;
    *) die "unknown step '$s' (binaries, manifest, chart, or version alone)" ;;
  esac
done
want() {
  local s
  for s in "${steps[@]}"; do [ "$s" = "$1" ] && return 0; done
  return 1
}

image=${FERROLB_IMAGE:-ferrolb}
# A repository only: a tag or digest here would be doubled by the ones this script adds.
[[ $image =~ ^[a-z0-9][a-z0-9._/:-]*[a-z0-9]$ && ${image##*/} != *:* ]] ||
  die "FERROLB_IMAGE must be a repository without tag or digest, lower case (got '$image')"
digest=${FERROLB_IMAGE_DIGEST:-}
[ -z "$digest" ] || [[ $digest =~ ^sha256:[0-9a-f]{64}$ ]] ||
  die "FERROLB_IMAGE_DIGEST must be sha256:<64 lowercase hex digits> (got '$digest')"

dist=${FERROLB_DIST:-$root/dist}
mkdir -p "$dist"
dist=$(cd "$dist" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# The base and the chart must carry the workspace version (both are generated or checked from it).
base_tag=$(sed -n 's/^  newTag: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' deploy/kustomization.yaml)
[ "$base_tag" = "$version" ] ||
  die "deploy/kustomization.yaml's image tag is '$base_tag', the workspace version $version"
chart_version=$(sed -n 's/^version: //p' deploy/helm/ferrolb/Chart.yaml)
[ "$chart_version" = "$version" ] ||
  die "the chart's version is '$chart_version', the workspace version $version: run \`cargo run -p ferrolb-tests --bin ferrolb-helmgen\`"

if want binaries; then
  target=${FERROLB_TARGET:-x86_64-unknown-linux-gnu}
  case $target in
    x86_64-unknown-linux-gnu) arch=amd64 ;;
    aarch64-unknown-linux-gnu) arch=arm64 ;;
    *) die "FERROLB_TARGET '$target': only x86_64- and aarch64-unknown-linux-gnu are released" ;;
  esac
  bins=(ferrolb ferrolb-controller ferrolb-speaker)
  echo "== binaries: cargo build --release --target $target (+crt-static)" >&2
  # With --target, RUSTFLAGS reach the target's code only, not build scripts and proc macros
  # (which run here and stay dynamic). The release profile is the workspace's (thin LTO).
  build_args=(build --release --locked --target "$target")
  for b in "${bins[@]}"; do build_args+=(--bin "$b"); done
  RUSTFLAGS='-C target-feature=+crt-static' cargo "${build_args[@]}"
  out="${CARGO_TARGET_DIR:-$root/target}/$target/release"
  name="ferrolb-$version-linux-$arch"
  rm -rf "${dist:?}/$name" "$dist/$name.tar.gz"
  mkdir -p "$dist/$name"
  for b in "${bins[@]}"; do
    # A static executable: `not a dynamic executable` (static) or `statically linked`
    # (static-pie, what rustc makes with +crt-static); anything else lists shared libraries.
    linkage=$(ldd "$out/$b" 2>&1 || true)
    case $linkage in
      *"statically linked"* | *"not a dynamic executable"*) ;;
      *) die "$b is not static; ldd says:"$'\n'"$linkage" ;;
    esac
    install -m 0755 "$out/$b" "$dist/$name/$b"
    if [ "$(uname -m)" = "${target%%-*}" ]; then
      said=$("$dist/$name/$b" --version)
      [[ $said == *" $version" ]] || die "$b --version says '$said', not $version"
    fi
  done
  # kubectl runs `kubectl ferrolb …` as the executable kubectl-ferrolb on PATH: the same binary.
  ln -s ferrolb "$dist/$name/kubectl-ferrolb"
  cp LICENSE README.md CHANGELOG.md "$dist/$name/"
  # Reproducible archive: sorted names, no owner, the commit's time as every mtime.
  mtime=$(git log -1 --format=%ct 2>/dev/null || echo 0)
  tar -C "$dist" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$mtime" \
    -cf - "$name" | gzip -n >"$dist/$name.tar.gz"
  echo "$dist/$name.tar.gz" >&2
fi

if want manifest; then
  kubectl=${KUBECTL:-}
  if [ -z "$kubectl" ]; then
    if [ -n "${FERROLB_K8S_BIN:-}" ]; then
      kubectl=$FERROLB_K8S_BIN/kubectl
    else
      kubectl="$(tests/cluster/build.sh kubectl | tail -n 1)/kubectl"
    fi
  fi
  echo "== manifest: $kubectl kustomize deploy/ (image $image)" >&2
  # An overlay of deploy/ that only sets the image. kustomize refuses an absolute path to a base,
  # so it is given relative to the overlay.
  overlay="$scratch/overlay"
  mkdir -p "$overlay"
  {
    echo "apiVersion: kustomize.config.k8s.io/v1beta1"
    echo "kind: Kustomization"
    echo "resources:"
    echo "- $(realpath --relative-to="$overlay" "$root/deploy")"
    echo "images:"
    echo "- name: ferrolb"
    echo "  newName: $image"
    echo "  newTag: \"$version\""
    if [ -n "$digest" ]; then echo "  digest: $digest"; fi
  } >"$overlay/kustomization.yaml"
  {
    echo "# ferrolb $version: the whole install in one file — the namespace ferrolb-system (Pod"
    echo "# Security \"privileged\": the speaker needs hostNetwork and CAP_NET_RAW), the CRDs, RBAC,"
    echo "# the controller Deployment and the speaker DaemonSet. Generated by release/build.sh from"
    echo "# the kustomize base deploy/; never edit. No key step: the controller creates the"
    echo "# speakers' membership key. Install or upgrade (docs/install.md, docs/versioning.md):"
    echo "#   kubectl apply --server-side -f ferrolb.yaml"
    "$kubectl" kustomize "$overlay"
  } >"$scratch/ferrolb.yaml"
  mv "$scratch/ferrolb.yaml" "$dist/ferrolb.yaml"
  echo "$dist/ferrolb.yaml" >&2
fi

if want chart; then
  helm=${HELM:-}
  if [ -z "$helm" ]; then
    if [ -n "${FERROLB_HELM_BIN:-}" ]; then
      helm=$FERROLB_HELM_BIN/helm
    else
      helm="$(tests/cluster/build-helm.sh | tail -n 1)/helm"
    fi
  fi
  echo "== chart: $helm lint --strict, helm package (image repository $image)" >&2
  # helm keeps its own state out of the user's home.
  export HELM_CACHE_HOME="$scratch/helm/cache" HELM_CONFIG_HOME="$scratch/helm/config" \
    HELM_DATA_HOME="$scratch/helm/data"
  chart="$scratch/chart/ferrolb"
  mkdir -p "$(dirname "$chart")"
  cp -R deploy/helm/ferrolb "$chart"
  if [ "$image" != ferrolb ]; then
    # values.yaml is generated (tests/src/chart.rs): `image:` then `  repository: ferrolb`.
    awk -v image="$image" '
      prev == "image:" && $0 == "  repository: ferrolb" { $0 = "  repository: " image; n++ }
      { print; prev = $0 }
      END { if (n != 1) exit 1 }
    ' deploy/helm/ferrolb/values.yaml >"$chart/values.yaml" ||
      die "deploy/helm/ferrolb/values.yaml has no 'image:' block with 'repository: ferrolb'"
  fi
  "$helm" lint --strict "$chart" >&2
  rm -f "$dist/ferrolb-$version.tgz"
  "$helm" package "$chart" --destination "$dist" >&2
  [ -f "$dist/ferrolb-$version.tgz" ] || die "helm package made no $dist/ferrolb-$version.tgz"
fi

# Checksums of every artefact present (also those of earlier runs into the same directory, e.g.
# the other architecture's binaries in the release workflow).
(
  cd "$dist"
  shopt -s nullglob
  files=(ferrolb.yaml ferrolb-*.tgz ferrolb-*-linux-*.tar.gz ferrolb-*.spdx.json)
  existing=()
  for f in "${files[@]}"; do [ -f "$f" ] && existing+=("$f"); done
  if [ ${#existing[@]} -gt 0 ]; then sha256sum "${existing[@]}" >SHA256SUMS; fi
)
echo "$dist"
