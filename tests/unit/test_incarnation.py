"""The replica's record of what it holds (pipeline.incarnation): handed to the next run on the same
workdir only once the run that wrote it is gone, so a restart never takes from a live process."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.incarnation import RECORD_FILE, Incarnation

# A run that records a membership and a Lease identity, says so, and waits to be killed.
_RUN = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from pipeline.incarnation import Incarnation
    incarnation = Incarnation.claim(Path(sys.argv[1]))
    assert incarnation is not None
    incarnation.joined("router", "member-of-the-dead-run")
    incarnation.holds_leases_as("replica-7-run-1")
    print("recorded", flush=True)
    time.sleep(600)
    """
)


@pytest.fixture
def running(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """A real process holding the workdir; killed at the end if the test did not kill it."""
    process = subprocess.Popen(
        [sys.executable, "-c", _RUN, str(tmp_path / "work")],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "recorded"
        yield process
    finally:
        process.kill()
        process.wait()


def test_a_sigkilled_run_hands_its_memberships_and_lease_to_the_next(
    tmp_path: Path, running: subprocess.Popen[str]
) -> None:
    running.send_signal(signal.SIGKILL)
    running.wait()
    incarnation = Incarnation.claim(tmp_path / "work")
    assert incarnation is not None
    try:
        assert incarnation.predecessor_lease_identity == "replica-7-run-1"
        assert incarnation.take_predecessor_members() == {"router": "member-of-the-dead-run"}
        assert incarnation.take_predecessor_members() == {}, "handed out once"
    finally:
        incarnation.close()


def test_a_live_run_keeps_what_it_holds(tmp_path: Path, running: subprocess.Popen[str]) -> None:
    assert Incarnation.claim(tmp_path / "work") is None
    assert running.poll() is None


def test_a_clean_stop_leaves_nothing_to_take(tmp_path: Path) -> None:
    first = Incarnation.claim(tmp_path)
    assert first is not None
    first.joined("router", "m-1")
    first.joined("commit", "m-2")
    first.left("router")
    first.close()
    second = Incarnation.claim(tmp_path)
    assert second is not None
    assert second.take_predecessor_members() == {"commit": "m-2"}
    second.close()
    # the second run recorded nothing of its own: a third finds nothing
    third = Incarnation.claim(tmp_path)
    assert third is not None
    assert third.take_predecessor_members() == {}
    assert third.predecessor_lease_identity == ""
    third.close()


def test_a_new_member_id_replaces_the_old_one(tmp_path: Path) -> None:
    first = Incarnation.claim(tmp_path)
    assert first is not None
    first.joined("router", "m-1")
    first.joined("router", "m-2")  # rejoined after the coordinator forgot m-1
    first.close()
    second = Incarnation.claim(tmp_path)
    assert second is not None
    assert second.take_predecessor_members() == {"router": "m-2"}
    second.close()


@pytest.mark.parametrize(
    "record",
    [
        '{"members": ',
        '["not", "an", "object"]',
        '{"members": {"router": 7, "commit": ""}, "lease_identity": 3}',
    ],
)
def test_an_unreadable_record_is_ignored(
    tmp_path: Path, record: str, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / RECORD_FILE).write_text(record)
    with caplog.at_level(logging.WARNING, logger="pipeline.incarnation"):
        incarnation = Incarnation.claim(tmp_path)
    assert incarnation is not None
    assert incarnation.take_predecessor_members() == {}
    assert incarnation.predecessor_lease_identity == ""
    incarnation.close()
