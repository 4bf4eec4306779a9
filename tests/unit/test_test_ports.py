"""The test port allocator: processes racing for ports never get the same one.

A CI run lost a Kafka fixture because a port the kernel handed out (and the test released) was
taken by someone else before the broker bound it; these tests pin the properties that prevent it.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import net
from tests.support.net import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def counter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ports.counter"
    monkeypatch.setattr(net, "COUNTER_FILE", path)
    return path


def test_ports_lie_below_the_ephemeral_range_and_are_not_repeated(counter: Path) -> None:
    first_ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    assert all(net.LOWEST_PORT <= port < first_ephemeral for port in ports)
    assert counter.exists()


def test_a_port_somebody_listens_on_is_skipped(counter: Path) -> None:
    counter.write_text("100\n")
    upcoming = net.LOWEST_PORT + 100
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", upcoming))
        taken.listen()
        assert free_port() == upcoming + 1
    assert counter.read_text() == "102\n"


def test_processes_drawing_at_once_share_no_port(tmp_path: Path) -> None:
    """Four processes of 40 draws each, all against the one counter file (as xdist workers are)."""
    draw = (
        "import sys\n"
        "from pathlib import Path\n"
        "from tests.support import net\n"
        "net.COUNTER_FILE = Path(sys.argv[1])\n"
        "print(' '.join(str(net.free_port()) for _ in range(40)))\n"
    )
    counter = tmp_path / "ports.counter"
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", draw, str(counter)], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    drawn = [int(port) for worker in workers for port in worker.communicate(timeout=60)[0].split()]
    assert [worker.returncode for worker in workers] == [0, 0, 0, 0]
    assert len(drawn) == 160
    assert len(set(drawn)) == 160
