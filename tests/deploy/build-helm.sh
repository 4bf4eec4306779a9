#!/usr/bin/env bash
# Build the helm CLI from the Go module proxy into the e2e cache, so the chart can be linted and
# rendered without downloading a release binary. helm's module has no replace directives, so a
# plain `go install` works. Prints the binary's path on the last line; a warm cache returns at once.
#
#   HELM_VERSION         helm release to build (default below)
#   REVERSER_E2E_CACHE   cache root (default ~/.cache/reverser-e2e)
set -euo pipefail
source "$(dirname "$0")/../../scripts/go-tool.sh"

HELM_VERSION="${HELM_VERSION:-v3.22.0}"
go_tool_begin helm "$HELM_VERSION" "${1:-}"

# helm's release build stamps the Kubernetes version it was built against (from its client-go
# requirement); unstamped, `helm template` assumes Kubernetes v1.20 and refuses newer charts.
helm_mod="$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/^\s*"GoMod": "\(.*\)",\?$/\1/p')"
client_go="$(awk '$1 == "k8s.io/client-go" {print $2}' "$helm_mod")"
k8s_minor="$(echo "$client_go" | cut -d. -f2)"
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
done
go_tool_install "$ldflags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
