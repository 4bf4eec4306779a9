"""The embedded log keeps what it acknowledged: fsync, damaged group files, and transactions that a
SIGKILL interrupts at each step (a real child process kills itself at a crash point)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from pipeline.config import LogSettings, Settings
from pipeline.demo.runner import demo_settings
from pipeline.log import GroupOffsets, PendingRecord, TopicPartition, TopicSpec, open_log
from pipeline.log.embedded import EmbeddedLog
from pipeline.log.faults import CRASH_AT_ENV

REPO_ROOT = Path(__file__).resolve().parents[2]
GROUP = "router"
IN = TopicPartition("in", 0)


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.fixture
def fsynced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Paths passed to fsync(2), recorded around the real call (which still happens)."""
    paths: list[str] = []
    real = os.fsync

    def recording(fd: int) -> None:
        paths.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", recording)
    return paths


def test_the_service_fsyncs_by_default_and_the_demo_does_not(tmp_path: Path) -> None:
    service = open_log(Settings(workdir=tmp_path))
    assert isinstance(service, EmbeddedLog)
    assert service.fsync
    demo = open_log(demo_settings(Settings(workdir=tmp_path)))
    assert isinstance(demo, EmbeddedLog)
    assert not demo.fsync
    assert LogSettings(fsync=False).fsync is False


async def test_acknowledged_records_offsets_and_their_directories_are_fsynced(
    tmp_path: Path, fsynced: list[str]
) -> None:
    log = EmbeddedLog(tmp_path / "log", segment_bytes=256)
    await log.start()
    try:
        await log.create_topics([TopicSpec("t", 1), TopicSpec("in", 1)])
        fsynced.clear()
        await log.append("t", b"x" * 100)
        partition_dir = str(tmp_path / "log" / "topics" / "t" / "0")
        assert fsynced == [f"{partition_dir}/{0:020d}.log"]
        fsynced.clear()
        await log.append_many("t", [PendingRecord(b"y" * 100) for _ in range(3)])  # rolls a segment
        assert partition_dir in fsynced
        assert any(p.endswith(".log") and not p.endswith(f"{0:020d}.log") for p in fsynced)
        fsynced.clear()
        await log.commit_group_offsets(GROUP, {IN: 1})
        groups = str(tmp_path / "log" / "groups")
        assert fsynced == [f"{groups}/{GROUP}.json.tmp", groups]
    finally:
        await log.close()


async def test_without_fsync_nothing_is_fsynced_per_append(tmp_path: Path, fsynced: list[str]) -> None:
    log = EmbeddedLog(tmp_path / "log", fsync=False)
    await log.start()
    try:
        await log.create_topics([TopicSpec("t", 1)])
        fsynced.clear()
        await log.append("t", b"x")
        await log.commit_group_offsets(GROUP, {TopicPartition("t", 0): 1})
        assert fsynced == []
    finally:
        await log.close()


async def committed_twice(directory: Path) -> Path:
    log = EmbeddedLog(directory)
    await log.start()
    await log.create_topics([TopicSpec("in", 1)])
    await log.commit_group_offsets(GROUP, {IN: 3})
    await log.commit_group_offsets(GROUP, {IN: 5})
    await log.close()
    return directory / "groups" / f"{GROUP}.json"


@pytest.mark.parametrize(
    "damage", [b"", b'{"group": "router", "offs', b"\x00\x00\x00\x00", b'{"offsets": 3}']
)
async def test_a_damaged_group_file_is_reported_and_the_previous_commit_recovered(
    tmp_path: Path, damage: bytes
) -> None:
    path = await committed_twice(tmp_path / "log")
    path.write_bytes(damage)
    before = metric("reverser_log_embedded_damaged_files_total", kind="group")
    log = EmbeddedLog(tmp_path / "log")
    await log.start()
    try:
        assert await log.group_offsets(GROUP) == {IN: 3}
        assert metric("reverser_log_embedded_damaged_files_total", kind="group") == before + 1
        await log.commit_group_offsets(GROUP, {IN: 6})
    finally:
        await log.close()
    assert json.loads(path.read_text())["offsets"] == [["in", 0, 6]]


async def test_a_group_with_both_versions_damaged_starts_from_its_reset_policy(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = await committed_twice(tmp_path / "log")
    path.write_bytes(b"")
    path.with_name(path.name + ".prev").write_bytes(b"{")
    log = EmbeddedLog(tmp_path / "log")
    await log.start()
    try:
        assert await log.group_offsets(GROUP) == {}
        assert any("no usable previous version" in r.getMessage() for r in caplog.records)
    finally:
        await log.close()


# transactions interrupted by SIGKILL ----------------------------------------------------------------

CHILD = """
import asyncio, sys
from pathlib import Path
from pipeline.log import GroupOffsets, PendingRecord, TopicPartition
from pipeline.log.embedded import EmbeddedLog

async def main() -> None:
    log = EmbeddedLog(Path(sys.argv[1]), segment_bytes=100)
    await log.start()
    producer = log.transactional_producer("router-0")
    await producer.start()
    records = [PendingRecord(b"w%d" % i, partition=i % 2) for i in range(6)]
    await producer.commit({"out": records}, GroupOffsets("router", {TopicPartition("in", 0): 10}))
    print("committed", flush=True)

asyncio.run(main())
"""


async def run_child(directory: Path, crash_at: str) -> tuple[int, str]:
    env = {**os.environ, CRASH_AT_ENV: crash_at}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, str(directory), env=env, cwd=REPO_ROOT, stdout=asyncio.subprocess.PIPE
    )
    stdout, _ = await asyncio.wait_for(process.communicate(), 120)
    return process.returncode or 0, stdout.decode()


@pytest.mark.parametrize(
    ("crash_at", "visible"),
    [
        ("embedded-transaction-prepared", False),
        ("embedded-transaction-written", False),
        ("embedded-transaction-committed", True),
        ("nowhere", True),
    ],
)
async def test_a_transaction_killed_at_any_step_is_all_or_nothing(
    tmp_path: Path, crash_at: str, visible: bool
) -> None:
    directory = tmp_path / "log"
    log = EmbeddedLog(directory)
    await log.start()
    await log.create_topics([TopicSpec("in", 1), TopicSpec("out", 2)])
    await log.append("out", b"before", partition=0)
    await log.close()

    code, out = await run_child(directory, crash_at)
    if crash_at == "nowhere":
        assert (code, out.strip()) == (0, "committed")
    else:
        assert code == -9
        assert out == ""

    log = EmbeddedLog(directory)
    await log.start()
    try:
        tps = [TopicPartition("out", 0), TopicPartition("out", 1)]
        ends = await log.end_offsets(tps)
        reader = log.reader()
        await reader.assign(dict.fromkeys(tps, 0))
        fetched = await reader.fetch(timeout_ms=0, max_records=100)
        await reader.close()
        values = sorted(r.value or b"" for r in fetched.records)
        segments = len(list((directory / "topics" / "out" / "0").glob("*.log")))
        # the child rolled segments; a rollback removes the new ones
        assert segments > 1 if visible else segments == 1
        if visible:
            assert ends == {tps[0]: 4, tps[1]: 3}
            assert values == sorted([b"before", *(b"w%d" % i for i in range(6))])
            assert await log.group_offsets(GROUP) == {IN: 10}
        else:
            assert ends == {tps[0]: 1, tps[1]: 0}
            assert values == [b"before"]
            assert await log.group_offsets(GROUP) == {}
        assert list((directory / "transactions").iterdir()) == []
        # the log keeps working where the transaction left it
        producer = log.transactional_producer("router-0")
        await producer.start()
        await producer.commit({"out": [PendingRecord(b"next", partition=1)]}, GroupOffsets(GROUP, {IN: 11}))
        assert await log.group_offsets(GROUP) == {IN: 11}
    finally:
        await log.close()
