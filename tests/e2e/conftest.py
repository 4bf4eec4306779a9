"""Fixtures for the end-to-end tests: a real etcd + kube-apiserver on loopback.

End-to-end tests carry the `e2e` marker and are deselected unless the `-m` expression names `e2e`
(`make e2e` passes `-m e2e`; the deselection is in `tests/conftest.py`, so it covers e2e tests in
any folder). When selected but the binaries were never built, they skip and say how to build them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster.controlplane import ControlPlane, find_binaries
from tests.support.net import free_port

SKIP_REASON = (
    "kube-apiserver/etcd are not built; run `make e2e` or tests/e2e/cluster/build-binaries.sh "
    "(Go toolchain, Go module proxy; ~10 min cold)"
)


@pytest.fixture(scope="session")
def controlplane_bin_dir() -> Path:
    """The directory holding etcd and kube-apiserver, or a skip naming how to build them."""
    directory = find_binaries()
    if directory is None:
        pytest.skip(SKIP_REASON)
    return directory


@pytest.fixture(scope="module")
def audit_port() -> int:
    """The loopback port the module's audit webhook endpoint listens on."""
    return free_port()


@pytest.fixture(scope="module")
def plane(controlplane_bin_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """An etcd + kube-apiserver (no audit backend) for the module, stopped after it."""
    control = ControlPlane(tmp_path_factory.mktemp("plane"), controlplane_bin_dir)
    control.start()
    try:
        yield control
    finally:
        control.stop()
