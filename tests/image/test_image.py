"""The OCI image of `make image`, run with podman as the chart runs it: uid 65532, read-only root.

`make e2e` runs this (the `e2e` marker; it takes minutes cold): the fixture builds the image with
deploy/image/build.sh, which reuses its cached layer while the image's inputs are unchanged, then
the tests run `reverser --version` and the whole demo in a container with `--read-only --tmpfs /tmp
--user 65532 --network none`, and read what it committed from the host. They skip, saying why, when
this is not root or podman/mmdebstrap are missing (`scripts/install-system-tools.sh image`).
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import shutil
import subprocess
import tarfile
import tomllib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.secrets.keys import AgeKey, sops_decrypt

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
REF = f"localhost/reverser-pipeline:{VERSION}"
ARCHIVE = ROOT / "build" / f"reverser-pipeline-{VERSION}.oci.tar"
DEMO_SECRET = "clusters/default/shop/secrets/payment-gateway.sops.yaml"
SECRET_VALUE = b"demo-not-a-real-key"
#: What deploy/image/build.sh takes SOURCE_DATE_EPOCH from.
IMAGE_INPUTS = ("pyproject.toml", "README.md", "pipeline", "schemas", "deploy/image")
#: What this machine needs for podman here (docs/deploy.md): cgroupfs and file events (no systemd),
#: runc (crun refuses hybrid cgroup v1), and a nofile limit within the VM's hard limit.
PODMAN = ["podman", "--cgroup-manager=cgroupfs", "--events-backend=file"]
RUN = [
    "run", "--rm", "--runtime=runc", "--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768",
    "--network=none", "--read-only", "--tmpfs", "/tmp", "--user", "65532",
]  # fmt: skip


@dataclass(frozen=True)
class Image:
    ref: str
    config: dict[str, object]


@pytest.fixture(scope="module")
def image() -> Image:
    """The image from deploy/image/build.sh (cached by input hash), loaded into podman's store."""
    missing = [tool for tool in ("podman", "mmdebstrap", "runc") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} missing: run scripts/install-system-tools.sh image (root)")
    if os.geteuid() != 0:
        pytest.skip("building the image needs root (mmdebstrap, chroot)")
    build = ROOT / "deploy" / "image" / "build.sh"
    built = subprocess.run([str(build)], capture_output=True, text=True, timeout=3600, check=False)
    assert built.returncode == 0, built.stderr[-4000:]
    assert built.stdout.splitlines()[-1] == REF
    inspected = subprocess.run(
        [*PODMAN, "image", "inspect", REF], capture_output=True, text=True, check=True
    ).stdout
    return Image(REF, json.loads(inspected)[0])


def podman_run(image: Image, *args: str, volume: Path | None = None) -> subprocess.CompletedProcess[str]:
    mount = ["--volume", f"{volume}:/tmp/x"] if volume is not None else []
    return subprocess.run(
        [*PODMAN, *RUN, *mount, image.ref, *args], capture_output=True, text=True, timeout=600, check=False
    )


def test_reverser_version_runs_as_65532_on_a_read_only_root(image: Image) -> None:
    result = podman_run(image, "--version")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == f"reverser {VERSION}"


def test_the_image_config_runs_reverser_as_65532_with_the_oci_labels(image: Image) -> None:
    config = image.config["Config"]
    assert isinstance(config, dict)
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["reverser"]
    labels = config["Labels"]
    assert labels["org.opencontainers.image.version"] == VERSION
    revision = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert labels["org.opencontainers.image.revision"] in (revision, f"{revision}-dirty")
    assert labels["org.opencontainers.image.source"]
    # created is SOURCE_DATE_EPOCH (the last commit of the image's files), not the time of the build,
    # so the same tree gives the same image ID.
    epoch = subprocess.run(
        ["git", "-C", str(ROOT), "log", "-1", "--format=%ct", "--", *IMAGE_INPUTS],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    created = datetime.fromtimestamp(int(epoch), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert labels["org.opencontainers.image.created"] == created
    assert str(image.config["Created"]).startswith(created.removesuffix("Z"))


@pytest.fixture(scope="module")
def demo(image: Image, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`reverser run --demo --once --workdir /tmp/x` in the container; /tmp/x is a host directory."""
    workdir = tmp_path_factory.mktemp("image-demo")
    os.chown(workdir, 65532, 65532)
    result = podman_run(image, "run", "--demo", "--once", "--workdir", "/tmp/x", volume=workdir)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "git repository: /tmp/x/demo/remote.git" in result.stdout
    return workdir / "demo"


def git(remote: Path, *args: str) -> bytes:
    return subprocess.run(
        ["git", "-c", "safe.directory=*", f"--git-dir={remote}", *args], capture_output=True, check=True
    ).stdout


def test_the_demo_commits_from_the_image(demo: Path) -> None:
    authors = git(demo / "remote.git", "log", "main", "--format=%an").decode().splitlines()
    assert len(authors) >= 5
    assert {"Alice Liddell", "Carol Danvers", "Erin Hannon"} <= set(authors)


def test_the_demo_secret_is_only_encrypted_in_git_and_decrypts_with_its_key(
    demo: Path, tmp_path: Path
) -> None:
    """sops ran as uid 65532 on the read-only root: the bundled binary was executable in the image."""
    sealed = git(demo / "remote.git", "show", f"main:{DEMO_SECRET}")
    assert b"ENC[AES256_GCM" in sealed
    assert SECRET_VALUE not in sealed
    assert base64.b64encode(SECRET_VALUE) not in sealed
    decrypted = sops_decrypt(sealed, AgeKey.from_file(demo / "age.key"), tmp_path)
    assert base64.b64decode(decrypted["data"]["api-key"]) == SECRET_VALUE


def local_ca_bodies() -> dict[str, bytes]:
    """The base64 bodies of the CAs this host adds to Debian's bundle (an egress proxy's, here)."""
    bodies: dict[str, bytes] = {}
    for crt in sorted(Path("/usr/local/share/ca-certificates").glob("**/*.crt")):
        lines = crt.read_bytes().splitlines()
        body = b"".join(line for line in lines if line and not line.startswith(b"-----"))
        if body:
            bodies[str(crt)] = body[:64]
    return bodies


def test_the_build_hosts_ca_bundle_is_not_in_the_image(image: Image) -> None:
    """The host's trust store served pip during the build only: no added CA ships in any file."""
    assert ARCHIVE.is_file()
    bodies = local_ca_bodies()
    found: list[str] = []
    names: list[str] = []
    with tarfile.open(ARCHIVE) as archive:
        index = json.loads(member_bytes(archive, "index.json"))
        manifest = json.loads(member_bytes(archive, blob(index["manifests"][0]["digest"])))
        layer = archive.extractfile(blob(manifest["layers"][0]["digest"]))
        assert layer is not None
        with tarfile.open(fileobj=gzip.GzipFile(fileobj=layer), mode="r|") as rootfs:
            for member in rootfs:
                names.append(member.name)
                content = rootfs.extractfile(member) if member.isfile() else None
                if content is not None:
                    data = content.read()
                    found += [f"{member.name} holds {crt}" for crt, body in bodies.items() if body in data]
    assert found == []
    added = "./usr/local/share/ca-certificates/"
    assert not [name for name in names if name.startswith(added) and name.endswith(".crt")]
    assert not [name for name in names if "build-ca" in name or name.endswith("pip.conf")]
    config = image.config["Config"]
    assert isinstance(config, dict)
    assert not [item for item in config["Env"] if item.startswith(("PIP_", "SSL_CERT", "REQUESTS_CA"))]


def blob(digest: str) -> str:
    return "blobs/sha256/" + digest.removeprefix("sha256:")


def member_bytes(archive: tarfile.TarFile, name: str) -> bytes:
    member = archive.extractfile(name)
    assert member is not None, name
    return member.read()
