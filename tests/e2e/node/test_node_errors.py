"""A node part that fails to start is named, and what had started is torn down with the host restored.

Runs without the node binaries: etcd is replaced by a script that exits at once, so the start fails
right after the bridge, the PKI and the host snapshot. Needs root (the bridge), like the node itself.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.node.host import BRIDGE
from tests.e2e.node.node import Node, NodeError

pytestmark = [pytest.mark.e2e, pytest.mark.node]


@pytest.fixture
def failing_bin_dir(tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        pytest.skip("the node's bridge needs root")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    etcd = bin_dir / "etcd"
    etcd.write_text("#!/bin/sh\necho 'etcd: simulated start failure' >&2\nexit 3\n")
    etcd.chmod(0o755)
    return bin_dir


def test_a_part_that_fails_is_named_and_the_host_is_restored(failing_bin_dir: Path, tmp_path: Path) -> None:
    node = Node(tmp_path / "node", failing_bin_dir)
    with pytest.raises(NodeError) as caught:
        node.start()
    message = str(caught.value)
    assert message.startswith("node: etcd failed: etcd exited with 3")
    assert "simulated start failure" in message
    assert not Path(f"/sys/class/net/{BRIDGE}").exists(), "the bridge outlived the failed start"
