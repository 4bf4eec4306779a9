"""The real node of tests/e2e/node, started once per module and torn down with the host restored.

Marked `e2e` and `node`: `make e2e-node` selects them (`-m "e2e and node"`), `make e2e` leaves them
out. They skip, naming what is missing, without root, the node binaries
(`tests/e2e/cluster/build-binaries.sh --node`) or the Debian tools
(`scripts/install-system-tools.sh node`).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.helm import helm_path
from tests.e2e.cluster.controlplane import binaries_dir
from tests.e2e.node.node import Node, missing_prerequisites

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def image_ref() -> str:
    """The image of `make image` (cached by input hash), in build/ as an OCI archive."""
    built = subprocess.run(
        [str(ROOT / "deploy" / "image" / "build.sh"), "--no-load"],
        capture_output=True, text=True, timeout=3600, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-4000:]
    return built.stdout.splitlines()[-1]


@pytest.fixture(scope="module")
def helm() -> Path:
    path = helm_path()
    if path is None:
        pytest.skip("helm is not built; run tests/deploy/build-helm.sh")
    return path


@pytest.fixture(scope="module")
def node(image_ref: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    bin_dir = binaries_dir()
    missing = missing_prerequisites(bin_dir)
    if missing:
        pytest.skip(
            f"the real node needs {', '.join(missing)}: run tests/e2e/cluster/build-binaries.sh --node "
            "and scripts/install-system-tools.sh node, as root"
        )
    version = image_ref.rsplit(":", 1)[1]
    node = Node(tmp_path_factory.mktemp("node"), bin_dir)
    node.image_archives = (ROOT / "build" / f"reverser-pipeline-{version}.oci.tar",)
    node.start()
    try:
        yield node
    finally:
        node.stop()
