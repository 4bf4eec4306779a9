#!/usr/bin/env bash
# Build kube-apiserver and etcd from the Go module proxy into a cache, so the end-to-end tests run
# against a real control plane without downloading release tarballs.
#
# k8s.io/kubernetes cannot be `go install`ed: its go.mod replaces every staging module (k8s.io/api,
# k8s.io/apiserver, ...) with a local directory. This script writes a tiny module that requires
# k8s.io/kubernetes and replaces each staging module with its published v0.Y.Z twin instead; the
# list is generated from k8s.io/kubernetes' own go.mod, so a version bump needs no edit here.
#
# Usage: build-binaries.sh [--print-dir | --node]
#   --node         also build the node binaries of tests/e2e/node (kubelet, kube-controller-manager,
#                  kube-scheduler, kube-proxy) into the same directory; a cold build adds about
#                  7 minutes once kube-apiserver's build cache is warm
#   KUBE_VERSION   kubernetes version to build (default below)
#   ETCD_VERSION   etcd server version to build (default: the one k8s.io/kubernetes requires)
#   REVERSER_E2E_CACHE  cache root (default ~/.cache/reverser-e2e); binaries land in $CACHE/bin/
# Prints the binary directory on the last line. Reruns with a warm cache finish in seconds.
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.37.2}"
CACHE="${REVERSER_E2E_CACHE:-$HOME/.cache/reverser-e2e}"
BIN_DIR="$CACHE/bin/kube-$KUBE_VERSION${ETCD_VERSION:+-etcd-$ETCD_VERSION}"
WORK="$CACHE/src/kube-$KUBE_VERSION${ETCD_VERSION:+-etcd-$ETCD_VERSION}"

NODE_BINARIES=(kube-scheduler kube-proxy kube-controller-manager kubelet)
case "${1:-}" in
  --print-dir) echo "$BIN_DIR"; exit 0 ;;
  --node | "") ;;
  *) echo "build-binaries.sh: unknown argument '$1' (--print-dir or --node)" >&2; exit 2 ;;
esac

command -v go >/dev/null || { echo "build-binaries.sh: the Go toolchain is required" >&2; exit 1; }

export GOMODCACHE="$CACHE/gomod"
export GOCACHE="$CACHE/gobuild"
export GOTOOLCHAIN=local
export CGO_ENABLED=0
export GOFLAGS="-mod=mod -buildvcs=false"
mkdir -p "$BIN_DIR" "$WORK" "$GOMODCACHE" "$GOCACHE"

# The machine is shared: build at low priority and with at most two parallel compile jobs.
NICE=(nice -n 15)
BUILD_FLAGS=(-p 2 -trimpath)

write_build_module() {
  local kube_mod
  kube_mod="$(cd "$WORK" && go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^\s*"GoMod": "\(.*\)",\?$/\1/p')"
  [[ -f "$kube_mod" ]] || { echo "build-binaries.sh: no go.mod for k8s.io/kubernetes@$KUBE_VERSION" >&2; exit 1; }
  # Staging modules are published as v0.<minor>.<patch> for kubernetes v1.<minor>.<patch>.
  local staging_version="v0.${KUBE_VERSION#v1.}"
  # etcd's server module has replace directives of its own too, so it cannot be `go install`ed
  # either; requiring it here builds the etcd release kubernetes itself was tested against.
  local etcd_version="${ETCD_VERSION:-$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2}' "$kube_mod")}"
  {
    echo "module reverser.invalid/controlplane-build"
    echo
    echo "go $(sed -n 's/^go \([0-9.]*\)$/\1/p' "$kube_mod")"
    echo
    echo "require ("
    echo "	k8s.io/kubernetes $KUBE_VERSION"
    echo "	go.etcd.io/etcd/server/v3 $etcd_version"
    echo ")"
    echo
    # Only modules that k8s.io/kubernetes both requires and replaces from ./staging need a twin.
    awk '/^\t*k8s\.io\/[a-z0-9-]+ v0\.0\.0$/ {print $1}' "$kube_mod" | sort -u | while read -r m; do
      if grep -qE "^\s*$m => \./staging/" "$kube_mod"; then
        echo "replace $m => $m $staging_version"
      fi
    done
  } > "$WORK/go.mod"
}

build() {
  local pkg="$1" name="$2" ldflags="-s -w ${3:-}"
  (cd "$WORK" && "${NICE[@]}" go build "${BUILD_FLAGS[@]}" "-ldflags=$ldflags" -o "$BIN_DIR/$name.tmp" "$pkg")
  mv "$BIN_DIR/$name.tmp" "$BIN_DIR/$name"
}

# What the kubernetes release build stamps with -X; without it /version says v0.0.0-master.
kube_version_ldflags() {
  local pkg=k8s.io/component-base/version minor="${KUBE_VERSION#v1.}"
  echo "-X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor%%.*} -X $pkg.gitTreeState=clean"
}

start_s=$SECONDS
if [[ ! -x "$BIN_DIR/etcd" || ! -x "$BIN_DIR/kube-apiserver" ]]; then
  write_build_module
  [[ -x "$BIN_DIR/etcd" ]] || build go.etcd.io/etcd/server/v3 etcd
  [[ -x "$BIN_DIR/kube-apiserver" ]] || build k8s.io/kubernetes/cmd/kube-apiserver kube-apiserver "$(kube_version_ldflags)"
fi
echo "build-binaries.sh: kube-apiserver $KUBE_VERSION and etcd ready in $((SECONDS - start_s)) s" >&2
if [[ "${1:-}" == "--node" ]]; then
  node_start_s=$SECONDS
  for name in "${NODE_BINARIES[@]}"; do
    if [[ ! -x "$BIN_DIR/$name" ]]; then
      [[ -f "$WORK/go.mod" ]] || write_build_module
      build "k8s.io/kubernetes/cmd/$name" "$name" "$(kube_version_ldflags)" \
        || { echo "build-binaries.sh: go build of $name failed" >&2; exit 1; }
    fi
  done
  echo "build-binaries.sh: ${NODE_BINARIES[*]} $KUBE_VERSION ready in $((SECONDS - node_start_s)) s" >&2
fi
echo "$BIN_DIR"
