#!/usr/bin/env bash
# Installs the Debian packages the tests run for real. Skipped when everything is already there;
# needs root (CI runs as root). Without root it says what is missing and exits 0, and the tests that
# need the tools skip with that reason.
#
#   scripts/install-system-tools.sh          what `make test` needs: openssh-server (an sshd on
#                                            127.0.0.1 behind the SSH remote tests), openssh-client
#                                            and gnupg (commit signing), haproxy (the load balancer in
#                                            front of the replicas in `make chaos`), zsh (the
#                                            completion script run in a real zsh)
#   scripts/install-system-tools.sh image    what `make image` and the image test need: mmdebstrap
#                                            (the Debian root filesystem), podman with runc (loading
#                                            and running the image), skopeo
#   scripts/install-system-tools.sh node     what the real node of tests/e2e/node needs besides the
#                                            image tools: containerd, the CNI plugins, iptables,
#                                            conntrack, gcc (the static pause binary)
set -euo pipefail

group="${1:-test}"
need=()
# want <command> <package>: the package when the command is missing
want() { command -v "$1" >/dev/null 2>&1 || need+=("$2"); }
case "$group" in
  test)
    want /usr/sbin/sshd openssh-server
    want ssh-keygen openssh-client
    want gpg gnupg
    want gpg-agent gpg-agent
    want haproxy haproxy
    want zsh zsh
    ;;
  image | node)
    want mmdebstrap mmdebstrap
    want podman podman
    want runc runc
    want skopeo skopeo
    # podman's rootful overlay storage and its default network stack
    want fuse-overlayfs fuse-overlayfs
    want netavark netavark
    [[ -e /usr/share/keyrings/debian-archive-keyring.gpg ]] || need+=(debian-archive-keyring)
    if [[ "$group" == node ]]; then
      want containerd containerd
      want ctr containerd
      [[ -x /usr/lib/cni/bridge ]] || need+=(containernetworking-plugins)
      want iptables iptables
      want conntrack conntrack
      want gcc gcc
      [[ -e /usr/lib/x86_64-linux-gnu/libc.a || -e /usr/lib/aarch64-linux-gnu/libc.a ]] || need+=(libc6-dev)
    fi
    ;;
  *)
    echo "install-system-tools: unknown group '$group' (test, image or node)" >&2
    exit 2
    ;;
esac
if (( ${#need[@]} == 0 )); then
  exit 0
fi
if [[ "$(id -u)" != 0 ]]; then
  echo "install-system-tools: not root; missing Debian packages ($group): ${need[*]}" >&2
  exit 0
fi
mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
export DEBIAN_FRONTEND=noninteractive
# Other jobs on the machine may hold the dpkg lock for a while: wait for it rather than fail.
apt_opts=(-o DPkg::Lock::Timeout=600)
apt-get "${apt_opts[@]}" update -qq || { echo "install-system-tools: apt-get update failed" >&2; exit 1; }
apt-get "${apt_opts[@]}" install -y -qq --no-install-recommends "${need[@]}" \
  || { echo "install-system-tools: apt-get install ${need[*]} failed" >&2; exit 1; }
