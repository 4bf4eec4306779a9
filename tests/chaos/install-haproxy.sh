#!/usr/bin/env bash
# Installs HAProxy from Debian's packages for `make chaos` (the audit webhook reaches the three
# replicas through it). Skipped when haproxy is already on PATH; needs root (CI runs as root).
set -euo pipefail
if command -v haproxy >/dev/null; then
  exit 0
fi
if [[ "$(id -u)" != 0 ]]; then
  echo "install-haproxy.sh: haproxy is missing and installing it needs root (apt-get install haproxy)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends haproxy >/dev/null
# The package enables a system service; the tests run their own instances only.
if command -v systemctl >/dev/null && systemctl is-active --quiet haproxy 2>/dev/null; then
  systemctl stop haproxy || true
fi
command -v haproxy
