#!/usr/bin/env bash
# Build promtool (Prometheus's rule checker and rule unit-test runner) from the Go module proxy into
# the e2e cache, so the chart's alert rules are checked by Prometheus's own code rather than by eye.
# prometheus's module has no replace directives, so a plain `go install` works. Prints the binary's
# path on the last line; a warm cache returns at once.
#
#   PROMETHEUS_VERSION   Go module version of github.com/prometheus/prometheus (v0.316.0 = 3.16.0)
#   REVERSER_E2E_CACHE   cache root (default ~/.cache/reverser-e2e)
set -euo pipefail
source "$(dirname "$0")/../../scripts/go-tool.sh"

PROMETHEUS_VERSION="${PROMETHEUS_VERSION:-v0.316.0}"
go_tool_begin promtool "$PROMETHEUS_VERSION" "${1:-}"

# Module version v0.3MM.P is Prometheus release 3.MM.P (v0.316.0 is 3.16.0); stamp it for --version.
release="3.$(echo "$PROMETHEUS_VERSION" | sed -E 's/^v0\.3([0-9]+)\.([0-9]+).*/\1.\2/' | sed -E 's/^0*([0-9])/\1/')"
go_tool_install "-s -w -X github.com/prometheus/common/version.Version=$release" \
  "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_VERSION"
