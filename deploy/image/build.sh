#!/usr/bin/env bash
# `make image`: the service's OCI image from the project's own files and Debian packages, no registry.
#
#   deploy/image/build.sh [--force] [--no-load] [--verify]
#
# 1. wheels: the project's wheel and the wheels of its dependencies (`secrets` extra), built on the
#    host with its pip (PyPI, through whatever CA bundle the host trusts; none of it enters the image)
# 2. root filesystem: mmdebstrap (minbase, Debian bookworm with updates and security) with python3,
#    git, openssh-client, gnupg, ca-certificates; deploy/image/customize.sh installs the wheels into a
#    venv at /opt/venv, makes sops executable, adds uid 65532 and drops caches, logs and byte code
# 3. one layer: a sorted tar with numeric owners and every mtime set to SOURCE_DATE_EPOCH, gzip -n
# 4. deploy/image/oci.py: the OCI archive build/reverser-pipeline-<version>.oci.tar (config, labels)
# 5. `podman load` into the local image store (skipped with --no-load or when the image is there)
#
# The layer is cached under ~/.cache/reverser-image/layers/<input hash>: the hash covers the files
# that go into the image, this directory, the package list and SOURCE_DATE_EPOCH, so an unchanged
# tree reuses it and only steps 4-5 run. --force rebuilds it; --verify builds it a second time from
# scratch and fails unless both builds have the same layer digest (docs/deploy.md, "Reproducible").
# SOURCE_DATE_EPOCH defaults to the time of the last commit that touched those files.
# Needs root (mmdebstrap, chroot); the Debian tools come from `scripts/install-system-tools.sh image`.
# The last line of the output is the image reference, localhost/reverser-pipeline:<version>.
set -euo pipefail
cd "$(dirname "$0")/../.."

force=0 load=1 verify=0
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    --no-load) load=0 ;;
    --verify) verify=1 ;;
    *) echo "image: unknown argument '$arg' (--force, --no-load, --verify)" >&2; exit 2 ;;
  esac
done

step() { echo "image: $*" >&2; }
die() { echo "image: $*" >&2; exit 1; }

PYTHON="${PYTHON:-python3}"
# What goes into the image, and what decides how it is built.
inputs=(pyproject.toml README.md pipeline schemas requirements/runtime.lock)
recipe=(deploy/image)
suite=bookworm
mirrors=(
  "deb http://deb.debian.org/debian $suite main"
  "deb http://deb.debian.org/debian $suite-updates main"
  "deb http://deb.debian.org/debian-security $suite-security main"
)
packages=python3,python3-venv,git,ca-certificates,openssh-client,gnupg
cache="${REVERSER_IMAGE_CACHE:-$HOME/.cache/reverser-image}"

version="$("$PYTHON" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')" \
  || die "reading the version from pyproject.toml failed"
ref="localhost/reverser-pipeline:$version"
archive="build/reverser-pipeline-$version.oci.tar"

if [[ -z "${SOURCE_DATE_EPOCH:-}" ]]; then
  SOURCE_DATE_EPOCH="$(git log -1 --format=%ct -- "${inputs[@]}" "${recipe[@]}" 2>/dev/null)" \
    || die "SOURCE_DATE_EPOCH is not set and this is not a git checkout"
  [[ -n "$SOURCE_DATE_EPOCH" ]] || die "SOURCE_DATE_EPOCH is not set and git has no commit of the image's files"
fi
export SOURCE_DATE_EPOCH
created="$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)"
revision="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
if [[ -n "$(git status --porcelain -- "${inputs[@]}" "${recipe[@]}" 2>/dev/null)" ]]; then
  revision="$revision-dirty"
fi
# The repository the image was built from, without any credentials in the URL.
source_url="${REVERSER_IMAGE_SOURCE:-$(git remote get-url origin 2>/dev/null || echo unknown)}"
source_url="$(sed -E 's#^([a-z+]+://)[^/@]*@#\1#' <<<"$source_url")"

# The files of the image, as git sees them (tracked, and new files not ignored), in a fixed order.
mapfile -t files < <(git ls-files -co --exclude-standard -- "${inputs[@]}" "${recipe[@]}" | LC_ALL=C sort)
(( ${#files[@]} > 0 )) || die "git ls-files found none of ${inputs[*]}"
input_hash="$(
  {
    printf '%s\n' "suite=$suite" "packages=$packages" "epoch=$SOURCE_DATE_EPOCH" "arch=$(uname -m)" "${mirrors[@]}"
    for f in "${files[@]}"; do
      if [[ -L "$f" ]]; then printf 'link %s %s\n' "$f" "$(readlink "$f")"; else sha256sum "$f"; fi
    done
  } | sha256sum | cut -c1-32
)"

# build_layer <dir>: steps 1-3 into <dir>/layer.tar.gz and <dir>/diff-id.
build_layer() {
  local dest="$1" work
  [[ "$(id -u)" == 0 ]] || die "building the root filesystem needs root (mmdebstrap, chroot)"
  command -v mmdebstrap >/dev/null || die "mmdebstrap is missing: run scripts/install-system-tools.sh image"
  "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
    || die "$PYTHON is not Python 3.11: the host builds the wheels for Debian $suite's python3 (3.11); set PYTHON"
  mkdir -p "$cache"
  work="$(mktemp -d "$cache/work.XXXXXX")"
  # shellcheck disable=SC2064
  trap "rm -rf '$work'" EXIT

  step "1/3 wheels (pip wheel on the host)"
  mkdir -p "$work/src" "$work/wheels"
  tar -cf - "${files[@]}" | tar -C "$work/src" -xf - || die "copying the project's files failed"
  "$PYTHON" -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$work/wheels" "$work/src" \
    || die "pip wheel of the project failed"
  local wheel
  wheel="$(echo "$work"/wheels/reverser_pipeline-"$version"-*.whl)"
  [[ -f "$wheel" ]] || die "pip wheel made no reverser_pipeline-$version wheel"
  # The dependencies exactly as pinned (with their hashes) by the lockfile `make install` uses.
  "$PYTHON" -m pip wheel --quiet --disable-pip-version-check --require-hashes -w "$work/wheels" \
    -r requirements/runtime.lock || die "pip wheel of requirements/runtime.lock failed"

  step "2/3 root filesystem (mmdebstrap $suite: $packages)"
  IMAGE_WHEELS="$work/wheels" IMAGE_VERSION="$version" mmdebstrap --quiet --mode=root --variant=minbase \
    --include="$packages" \
    --aptopt='APT::Install-Recommends "false"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/lintian/*' \
    --customize-hook='deploy/image/customize.sh "$1"' \
    "$suite" "$work/rootfs" "${mirrors[@]}" \
    || die "mmdebstrap failed (see its output above)"

  step "3/3 layer (sorted tar, mtimes at SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH, gzip -n)"
  # The runtime mounts /dev, /proc, /sys, /run and /tmp: their directories ship, their contents do not.
  tar -C "$work/rootfs" --sort=name --format=posix --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' --exclude='./run/*' --exclude='./tmp/*' \
    -cf "$work/layer.tar" . || die "tar of the root filesystem failed"
  echo "sha256:$(sha256sum "$work/layer.tar" | cut -d' ' -f1)" >"$work/diff-id"
  gzip -n -6 "$work/layer.tar" || die "gzip of the layer failed"
  mkdir -p "$dest"
  mv "$work/layer.tar.gz" "$work/diff-id" "$dest/"
  rm -rf "$work"
  trap - EXIT
}

layer_dir="$cache/layers/$input_hash"
if (( force )) || [[ ! -f "$layer_dir/layer.tar.gz" || ! -f "$layer_dir/diff-id" ]]; then
  started=$SECONDS
  rm -rf "$layer_dir"
  build_layer "$layer_dir.partial"
  mv "$layer_dir.partial" "$layer_dir"
  step "layer built in $((SECONDS - started)) s"
  # Keep the three newest layers: a few branches' worth, not every build ever made.
  find "$cache/layers" -mindepth 1 -maxdepth 1 -type d -printf '%T@ %p\n' | sort -rn | tail -n +4 \
    | cut -d' ' -f2- | xargs -r rm -rf
else
  step "layer cached ($layer_dir)"
fi

if (( verify )); then
  step "--verify: building the layer a second time from scratch"
  rm -rf "$layer_dir.verify"
  build_layer "$layer_dir.verify"
  first="$(sha256sum "$layer_dir/layer.tar.gz" | cut -d' ' -f1)"
  second="$(sha256sum "$layer_dir.verify/layer.tar.gz" | cut -d' ' -f1)"
  if [[ "$first" != "$second" || "$(cat "$layer_dir/diff-id")" != "$(cat "$layer_dir.verify/diff-id")" ]]; then
    die "--verify: the two builds differ (layer sha256:$first vs sha256:$second); the second is in $layer_dir.verify"
  fi
  rm -rf "$layer_dir.verify"
  step "--verify: both builds have layer sha256:$first"
fi

mkdir -p build
digests="$(
  "$PYTHON" deploy/image/oci.py --layer "$layer_dir/layer.tar.gz" --diff-id "$(cat "$layer_dir/diff-id")" \
    --ref "$ref" --created "$created" --out "$archive" \
    --label "org.opencontainers.image.title=reverser-pipeline" \
    --label "org.opencontainers.image.description=Every change to a Kubernetes cluster as an attributed Git commit" \
    --label "org.opencontainers.image.licenses=Apache-2.0" \
    --label "org.opencontainers.image.version=$version" \
    --label "org.opencontainers.image.revision=$revision" \
    --label "org.opencontainers.image.source=$source_url" \
    --label "org.opencontainers.image.created=$created"
)" || die "writing the OCI archive $archive failed"
config_digest="$(awk '$1 == "config" {print $2}' <<<"$digests")"
step "$archive: $(du -m "$archive" | cut -f1) MB; $(tr '\n' ' ' <<<"$digests")"

if (( load )); then
  command -v podman >/dev/null || die "podman is missing: run scripts/install-system-tools.sh image"
  present="$(podman image inspect --format '{{.Id}}' "$ref" 2>/dev/null || true)"
  if [[ "sha256:$present" == "$config_digest" || "$present" == "$config_digest" ]]; then
    step "$ref is already in podman's image store"
  else
    podman load --quiet --input "$archive" >/dev/null || die "podman load of $archive failed"
    present="$(podman image inspect --format '{{.Id}}' "$ref" 2>/dev/null)" \
      || die "podman load did not name the image $ref"
    [[ "sha256:$present" == "$config_digest" ]] || die "podman has $ref as $present, not $config_digest"
    step "loaded into podman's image store"
  fi
fi
echo "$ref"
