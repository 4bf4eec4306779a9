#!/usr/bin/env bash
# Build promtool (Prometheus's rule checker and rule unit-test runner) from the Go module proxy into
# the e2e cache, so the chart's alert rules are checked by Prometheus's own code rather than by eye.
# prometheus's module has no replace directives, so a plain `go install` works. Prints the binary's
# path on the last line; a warm cache returns at once.
#
#   PROMETHEUS_VERSION   Go module version of github.com/prometheus/prometheus (v0.316.0 = 3.16.0)
#   REVERSER_E2E_CACHE   cache root (default ~/.cache/reverser-e2e)
set -euo pipefail

PROMETHEUS_VERSION="${PROMETHEUS_VERSION:-v0.316.0}"
CACHE="${REVERSER_E2E_CACHE:-$HOME/.cache/reverser-e2e}"
BIN_DIR="$CACHE/bin/promtool-$PROMETHEUS_VERSION"

if [[ "${1:-}" == "--print-path" ]]; then
  echo "$BIN_DIR/promtool"
  exit 0
fi

if [[ ! -x "$BIN_DIR/promtool" ]]; then
  command -v go >/dev/null || { echo "build-promtool.sh: the Go toolchain is required" >&2; exit 1; }
  mkdir -p "$BIN_DIR"
  export GOMODCACHE="$CACHE/gomod" GOCACHE="$CACHE/gobuild" GOTOOLCHAIN=local CGO_ENABLED=0
  # Module version v0.3MM.P is Prometheus release 3.MM.P (v0.316.0 is 3.16.0); stamp it for --version.
  release="3.$(echo "$PROMETHEUS_VERSION" | sed -E 's/^v0\.3([0-9]+)\.([0-9]+).*/\1.\2/' | sed -E 's/^0*([0-9])/\1/')"
  ldflags="-s -w -X github.com/prometheus/common/version.Version=$release"
  GOBIN="$BIN_DIR" nice -n 15 go install -p 2 -trimpath "-ldflags=$ldflags" \
    "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_VERSION"
fi
echo "$BIN_DIR/promtool"
