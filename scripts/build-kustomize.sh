#!/usr/bin/env bash
# Build kustomize from the Go module proxy into the e2e cache. The commit worker renders a user's
# kustomize folder with the real kustomize before and after each edit (docs/commit-worker.md), so the
# tests run the same binary users run, with no release download. kustomize/v5's module has no
# replace directives, so a plain `go install` works (about 20 seconds cold). Prints the binary's
# path on the last line; a warm cache returns at once.
#
#   KUSTOMIZE_VERSION    Go module version of sigs.k8s.io/kustomize/kustomize/v5 (default below)
#   REVERSER_E2E_CACHE   cache root (default ~/.cache/reverser-e2e)
set -euo pipefail
source "$(dirname "$0")/go-tool.sh"

# v5.8.1 builds with this machine's Go; later ones need a newer Go toolchain.
KUSTOMIZE_VERSION="${KUSTOMIZE_VERSION:-v5.8.1}"
go_tool_begin kustomize "$KUSTOMIZE_VERSION" "${1:-}"
go_tool_install "-s -w -X sigs.k8s.io/kustomize/api/provenance.version=$KUSTOMIZE_VERSION" \
  "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION"
