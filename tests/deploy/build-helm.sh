#!/usr/bin/env bash
# Build the helm CLI from the Go module proxy into the e2e cache, so the chart can be linted and
# rendered without downloading a release binary. helm's module has no replace directives, so a
# plain `go install` works. Prints the binary's path on the last line; a warm cache returns at once.
#
#   HELM_VERSION         helm release to build (default below)
#   REVERSER_E2E_CACHE   cache root (default ~/.cache/reverser-e2e)
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"
CACHE="${REVERSER_E2E_CACHE:-$HOME/.cache/reverser-e2e}"
BIN_DIR="$CACHE/bin/helm-$HELM_VERSION"

if [[ "${1:-}" == "--print-path" ]]; then
  echo "$BIN_DIR/helm"
  exit 0
fi

if [[ ! -x "$BIN_DIR/helm" ]]; then
  command -v go >/dev/null || { echo "build-helm.sh: the Go toolchain is required" >&2; exit 1; }
  mkdir -p "$BIN_DIR"
  GOMODCACHE="$CACHE/gomod" GOCACHE="$CACHE/gobuild" GOTOOLCHAIN=local CGO_ENABLED=0 GOBIN="$BIN_DIR" \
    nice -n 15 go install -p 2 -trimpath "-ldflags=-s -w" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
fi
echo "$BIN_DIR/helm"
