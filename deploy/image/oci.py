"""Writes the image as an OCI archive from one gzipped layer, byte for byte the same for the same inputs.

Why not `podman import` or `buildah commit`: both stamp the current time into the image config and
history, so two builds of the same files would never have the same image ID. Here every field is
derived from the inputs (the layer, the labels, SOURCE_DATE_EPOCH), the JSON is serialized with
sorted keys and the archive is a sorted tar with fixed owners and mtimes. Standard library only: it
runs with the host's python3 before any venv exists.

    python3 deploy/image/oci.py --layer layer.tar.gz --diff-id sha256:... --ref localhost/x:1 \
        --created 2026-01-01T00:00:00Z --label k=v ... --out image.oci.tar
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import platform
import shutil
import tarfile
from pathlib import Path
from typing import Any

MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
_GOARCH = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le", "s390x": "s390x"}


def canonical(document: dict[str, Any]) -> bytes:
    """JSON with sorted keys and no whitespace: the same document always has the same digest."""
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def descriptor(
    media_type: str, data: bytes | None = None, *, digest: str = "", size: int = 0
) -> dict[str, Any]:
    """An OCI descriptor, of `data` when given, else of a blob already hashed (the layer)."""
    if data is not None:
        digest, size = "sha256:" + hashlib.sha256(data).hexdigest(), len(data)
    return {"mediaType": media_type, "digest": digest, "size": size}


def file_digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(1 << 20):
            sha.update(chunk)
    return "sha256:" + sha.hexdigest()


def image_config(args: argparse.Namespace, labels: dict[str, str]) -> dict[str, Any]:
    """The runtime configuration the Dockerfile declares, plus the labels and the layer's diff ID."""
    return {
        "created": args.created,
        "architecture": _GOARCH.get(platform.machine(), platform.machine()),
        "os": "linux",
        "config": {
            "User": "65532:65532",
            "WorkingDir": "/var/lib/reverser",
            "Env": [
                "PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "HOME=/var/lib/reverser",
                "LANG=C.UTF-8",
                "PYTHONUNBUFFERED=1",
                # The root filesystem is read-only in the chart and the .pyc files are prebuilt.
                "PYTHONDONTWRITEBYTECODE=1",
            ],
            "Entrypoint": ["reverser"],
            "Cmd": ["run"],
            "ExposedPorts": {"9444/tcp": {}, "9464/tcp": {}},
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": [args.diff_id]},
        "history": [{"created": args.created, "created_by": "deploy/image/build.sh"}],
    }


def add(archive: tarfile.TarFile, name: str, data: bytes | None = None, source: Path | None = None) -> None:
    """One archive member with fixed owner, mode and mtime (0: the archive is a container of blobs)."""
    info = tarfile.TarInfo(name)
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    if data is None and source is None:
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        archive.addfile(info)
        return
    info.mode = 0o644
    if source is not None:
        info.size = source.stat().st_size
        with source.open("rb") as stream:
            archive.addfile(info, stream)
    else:
        assert data is not None
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layer", type=Path, required=True, help="the gzipped layer tar")
    parser.add_argument("--diff-id", required=True, help="sha256:<hex> of the uncompressed layer")
    parser.add_argument("--ref", required=True, help="the image name, e.g. localhost/reverser-pipeline:0.1.0")
    parser.add_argument("--created", required=True, help="RFC 3339 time from SOURCE_DATE_EPOCH")
    parser.add_argument("--label", action="append", default=[], help="key=value, repeatable")
    parser.add_argument("--out", type=Path, required=True, help="the OCI archive to write")
    args = parser.parse_args()

    labels = dict(item.split("=", 1) for item in args.label)
    config = canonical(image_config(args, labels))
    layer = descriptor(MEDIA_LAYER, digest=file_digest(args.layer), size=args.layer.stat().st_size)
    manifest = canonical(
        {
            "schemaVersion": 2,
            "mediaType": MEDIA_MANIFEST,
            "config": descriptor(MEDIA_CONFIG, config),
            "layers": [layer],
            "annotations": labels,
        }
    )
    index = canonical(
        {
            "schemaVersion": 2,
            "mediaType": MEDIA_INDEX,
            "manifests": [
                {
                    **descriptor(MEDIA_MANIFEST, manifest),
                    "annotations": {"org.opencontainers.image.ref.name": args.ref},
                }
            ],
        }
    )
    blobs = {
        descriptor(MEDIA_CONFIG, config)["digest"]: config,
        descriptor(MEDIA_MANIFEST, manifest)["digest"]: manifest,
    }
    partial = args.out.with_name(args.out.name + ".partial")
    with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as archive:
        add(archive, "blobs")
        add(archive, "blobs/sha256")
        members = sorted([*blobs, layer["digest"]])
        for digest in members:
            name = "blobs/sha256/" + digest.removeprefix("sha256:")
            if digest == layer["digest"]:
                add(archive, name, source=args.layer)
            else:
                add(archive, name, blobs[digest])
        add(archive, "index.json", index)
        add(archive, "oci-layout", canonical({"imageLayoutVersion": "1.0.0"}))
    shutil.move(partial, args.out)
    print(f"config {descriptor(MEDIA_CONFIG, config)['digest']}")
    print(f"manifest {descriptor(MEDIA_MANIFEST, manifest)['digest']}")
    print(f"layer {layer['digest']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
