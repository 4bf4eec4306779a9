#!/usr/bin/env bash
# Installs the Debian packages the tests run for real: openssh-server (an sshd on 127.0.0.1 behind
# the SSH remote tests), openssh-client and gnupg (commit signing), haproxy (the load balancer in
# front of the replicas in `make chaos`). Skipped when everything is
# already there; needs root (CI runs as root). Without root it says what is missing and exits 0,
# and the tests that need the tools skip with that reason.
set -euo pipefail

need=()
command -v /usr/sbin/sshd >/dev/null 2>&1 || need+=(openssh-server)
command -v ssh-keygen >/dev/null 2>&1 || need+=(openssh-client)
command -v gpg >/dev/null 2>&1 || need+=(gnupg)
command -v gpg-agent >/dev/null 2>&1 || need+=(gpg-agent)
command -v haproxy >/dev/null 2>&1 || need+=(haproxy)
if (( ${#need[@]} == 0 )); then
  exit 0
fi
if [[ "$(id -u)" != 0 ]]; then
  echo "install-system-tools: not root; missing Debian packages: ${need[*]}" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}"
