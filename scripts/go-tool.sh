# Sourced by the scripts that build a Go tool from the Go module proxy into the e2e cache
# (tests/deploy/build-helm.sh, tests/monitoring/build-promtool.sh, scripts/build-kustomize.sh): one
# place for the cache layout, the `--print-path` contract and the build environment.
#
#   REVERSER_E2E_CACHE   cache root (default ~/.cache/reverser-e2e)

# go_tool_begin TOOL VERSION [--print-path]: sets BIN_DIR and BINARY; prints the binary's path and
# exits when asked only for the path or when the binary is already built; otherwise checks for Go
# and exports the build environment.
go_tool_begin() {
  local tool="$1" version="$2"
  local cache="${REVERSER_E2E_CACHE:-$HOME/.cache/reverser-e2e}"
  BIN_DIR="$cache/bin/$tool-$version"
  BINARY="$BIN_DIR/$tool"
  if [[ "${3:-}" == "--print-path" || -x "$BINARY" ]]; then
    echo "$BINARY"
    exit 0
  fi
  command -v go >/dev/null || { echo "build-$tool.sh: the Go toolchain is required" >&2; exit 1; }
  mkdir -p "$BIN_DIR"
  export GOMODCACHE="$cache/gomod" GOCACHE="$cache/gobuild" GOTOOLCHAIN=local CGO_ENABLED=0
}

# go_tool_install LDFLAGS PACKAGE@VERSION: builds into BIN_DIR, niced (the machine has 2 cores),
# and prints the binary's path on the last line.
go_tool_install() {
  GOBIN="$BIN_DIR" nice -n 15 go install -p 2 -trimpath "-ldflags=$1" "$2"
  echo "$BINARY"
}
