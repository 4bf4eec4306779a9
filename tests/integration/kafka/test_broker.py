"""The test broker harness itself: its failure paths must say what went wrong."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.kafka.broker import BrokerError, KafkaBroker, answers_metadata
from tests.support.net import free_port

REPO_ROOT = Path(__file__).resolve().parents[3]
CLI = [sys.executable, "-m", "tests.integration.kafka.broker"]


@pytest.mark.kafka
def test_start_failure_reports_the_broker_log_tail(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        broker = KafkaBroker(tmp_path / "broker")
        broker.port, broker.controller_port = taken.getsockname()[1], free_port()
        with pytest.raises(
            BrokerError, match=r"(?s)exited during start-up.*server\.log.*Address already in use"
        ):
            broker.start(timeout_s=120)
    assert not broker.running()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, check=False, timeout=300, cwd=REPO_ROOT
    )


@pytest.mark.kafka
def test_cli_start_is_idempotent_and_stop_ends_the_broker(tmp_path: Path) -> None:
    where, bootstrap_file = ["--workdir", str(tmp_path / "cli")], tmp_path / "bootstrap"
    first = cli("start", *where, "--bootstrap-file", str(bootstrap_file))
    try:
        assert first.returncode == 0, first.stderr
        address = first.stdout.strip()
        assert bootstrap_file.read_text().strip() == address
        host, port = address.split(":")
        assert answers_metadata(host, int(port))
        assert cli("start", *where).stdout.strip() == address
        status = cli("status", *where)
        assert (status.returncode, status.stdout.split()[:2]) == (0, ["running", address])
    finally:
        assert cli("stop", *where).returncode == 0
    assert not answers_metadata(host, int(port))
    status = cli("status", *where)
    assert (status.returncode, status.stdout.strip()) == (1, "not running")
