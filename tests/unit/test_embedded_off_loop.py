"""The embedded log's slow disk work runs in worker threads while the event loop goes on (issue 32).

A compaction reads and rewrites its segments in a thread: appends and fetches on the loop are
answered meanwhile, and the swap at the end keeps every offset, every newest value per key and
every append made during the pass. A transaction commit and a segment roll fsync in threads too,
and still acknowledge only what is durable and show a transaction only whole. A worker thread
parked on a `threading.Event` stands in for a large compaction or a slow disk (`SlowDisk` wraps
the real `os.fsync`), so the tests decide the order, not timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.log import GroupOffsets, LogError, PendingRecord, Record, TopicPartition, TopicSpec
from pipeline.log.embedded import EmbeddedLog
from pipeline.log.embedded import log as embedded_log_module
from pipeline.log.embedded.segments import CLEANED_SUFFIX, finish_compaction, run_compaction

HOUR_MS = 3_600_000
TP = TopicPartition("state", 0)
_T = TypeVar("_T")


@pytest.fixture
async def log(tmp_path: Path) -> AsyncIterator[EmbeddedLog]:
    async with started(
        tmp_path / "log", [TopicSpec("state", 1, "compact", segment_ms=HOUR_MS)], segment_bytes=512
    ) as embedded:
        yield embedded


@contextlib.asynccontextmanager
async def started(path: Path, topics: list[TopicSpec], **options: Any) -> AsyncIterator[EmbeddedLog]:
    """An embedded log at `path` holding `topics` (`options` as `EmbeddedLog` takes them), closed
    on the way out."""
    embedded = EmbeddedLog(path, **options)
    await embedded.start()
    try:
        await embedded.create_topics(topics)
        yield embedded
    finally:
        await embedded.close()


async def read_all(log: EmbeddedLog, start: int = 0) -> list[Record]:
    reader = log.reader()
    await reader.assign({TP: start})
    records: list[Record] = []
    try:
        while True:
            fetched = await reader.fetch(timeout_ms=0, max_records=7)
            if not fetched.records:
                return records
            records += fetched.records
    finally:
        await reader.close()


class ParkedThread:
    """Wraps a function run in a worker thread so it waits for `release` once it has started."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def wrap(self, work: Callable[..., _T]) -> Callable[..., _T]:
        def parked(*args: object) -> _T:
            self.entered.set()
            self.release.wait()
            return work(*args)

        return parked

    async def wait_entered(self) -> None:
        await asyncio.to_thread(self.entered.wait)


async def test_appends_and_fetches_are_answered_while_a_compaction_runs(
    log: EmbeddedLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes = [(f"k{i % 5}".encode(), f"v{i}".encode() * 8) for i in range(40)]
    results = await log.append_many("state", [PendingRecord(v, key=k) for k, v in writes])
    before = await read_all(log)
    parked = ParkedThread()
    monkeypatch.setattr(embedded_log_module, "run_compaction", parked.wrap(run_compaction))

    compaction = asyncio.create_task(log.retention_pass(now_ms=results[-1].timestamp_ms))
    await parked.wait_entered()
    during = [(b"k1", b"during-1"), (b"new", b"during-2")]
    appended = await log.append_many("state", [PendingRecord(v, key=k) for k, v in during])
    fetched = await read_all(log)
    assert not compaction.done(), "the appends and the fetch were answered while the compaction ran"
    assert [(r.offset, r.value) for r in fetched] == [(r.offset, r.value) for r in before] + [
        (a.offset, v) for a, (_, v) in zip(appended, during, strict=True)
    ]

    parked.release.set()
    report = await compaction
    assert report.compacted_records > 0
    after = await read_all(log)
    newest = {k: v for k, v in [*writes, *during]}
    assert {r.key: r.value for r in after} == newest
    assert {(r.offset, r.key, r.value) for r in after} <= {(r.offset, r.key, r.value) for r in fetched}
    assert [r.offset for r in after][-2:] == [a.offset for a in appended]
    assert await log.end_offsets([TP]) == {TP: len(writes) + len(during)}
    assert not list((log.directory / "topics" / "state" / "0").glob(f"*{CLEANED_SUFFIX}"))


async def test_a_pass_in_one_go_skips_a_partition_whose_compaction_is_in_a_thread(
    log: EmbeddedLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    results = await log.append_many("state", [PendingRecord(b"x" * 60, key=b"k") for _ in range(30)])
    sealed = sum(len(segment) for segment in log.partition(TP).segments[:-1])
    parked = ParkedThread()
    monkeypatch.setattr(embedded_log_module, "run_compaction", parked.wrap(run_compaction))
    compaction = asyncio.create_task(log.retention_pass(now_ms=results[-1].timestamp_ms))
    await parked.wait_entered()
    assert log.enforce_retention(now_ms=results[-1].timestamp_ms).compacted_records == 0
    parked.release.set()
    assert (await compaction).compacted_records == sealed
    assert [r.offset for r in await read_all(log)] == list(range(sealed, 30))


async def test_closing_the_log_waits_for_the_compaction_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = EmbeddedLog(tmp_path / "log", segment_bytes=512, retention_interval_s=0)
    parked = ParkedThread()
    monkeypatch.setattr(embedded_log_module, "run_compaction", parked.wrap(run_compaction))
    await log.start()
    await log.create_topics([TopicSpec("state", 1, "compact", segment_ms=HOUR_MS)])
    await log.append_many("state", [PendingRecord(b"x" * 60, key=b"k") for _ in range(30)])
    await parked.wait_entered()
    closing = asyncio.create_task(log.close())
    await asyncio.sleep(0)
    assert not closing.done()
    parked.release.set()
    await closing
    reopened = EmbeddedLog(tmp_path / "log", segment_bytes=512)
    await reopened.start()
    try:
        assert [r.offset for r in await read_all(reopened)][-1] == 29
        assert await reopened.end_offsets([TP]) == {TP: 30}
    finally:
        await reopened.close()


KEYS = [b"a", b"b", b"c", b"d", b"e"]
VALUES = st.binary(max_size=40)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    first=st.lists(
        st.tuples(st.sampled_from([b"a", b"b", b"c"]), st.binary(max_size=40)), min_size=1, max_size=40
    ),
    while_reading=st.lists(
        st.tuples(st.sampled_from([b"a", b"b", b"d"]), st.binary(max_size=40)), max_size=20
    ),
    before_swap=st.lists(st.tuples(st.sampled_from([b"a", b"c", b"e"]), st.binary(max_size=40)), max_size=20),
)
def test_appends_interleaved_with_a_compaction_keep_every_offset_and_newest_value(
    first: list[tuple[bytes, bytes]],
    while_reading: list[tuple[bytes, bytes]],
    before_swap: list[tuple[bytes, bytes]],
) -> None:
    """Model: the log is its list of writes; a compaction may only drop a record with a newer one
    of its key, and every offset it keeps holds the same record as before."""

    async def scenario(directory: Path) -> None:
        log = EmbeddedLog(directory, segment_bytes=200)
        await log.start()
        await log.create_topics([TopicSpec("state", 1, "compact", segment_ms=HOUR_MS)])
        writes: list[tuple[bytes, bytes]] = []

        async def append(batch: list[tuple[bytes, bytes]]) -> None:
            if batch:
                await log.append_many("state", [PendingRecord(v, key=k) for k, v in batch])
                writes.extend(batch)

        await append(first)
        partition = log.partition(TP)
        plan = partition.plan_compaction(2**62, HOUR_MS)
        await append(while_reading)
        compacted = run_compaction(plan) if plan is not None else None
        await append(before_swap)
        if compacted is not None:
            partition.swap_compacted(compacted)
            finish_compaction(compacted)
        after = await read_all(log)
        assert [r.offset for r in after] == sorted({r.offset for r in after})
        for record in after:
            assert (record.key, record.value) == writes[record.offset]
        newest = {k: offset for offset, (k, _) in enumerate(writes)}
        assert {r.key: r.offset for r in after} == newest
        assert await log.end_offsets([TP]) == {TP: len(writes)}
        await log.close()
        reopened = EmbeddedLog(directory, segment_bytes=200)
        await reopened.start()
        assert [(r.offset, r.value) for r in await read_all(reopened)] == [(r.offset, r.value) for r in after]
        await reopened.close()

    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(scenario(Path(directory)))


class SlowDisk:
    """`os.fsync` standing in for a slow or failing disk: an fsync in a worker thread whose path
    `matches` waits for `release` (or raises `fail`); one on the event loop's thread is recorded
    in `on_loop`, the stall this module is about. The real fsync runs in every other case."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, matches: Callable[[str, int], bool]) -> None:
        self.matches = matches
        self.seen: dict[str, int] = {}
        self.on_loop: list[str] = []
        self.synced: list[str] = []
        self.held = threading.Event()
        self.release = threading.Event()
        self.fail: OSError | None = None
        real = os.fsync

        def fsync(fd: int) -> None:
            path = os.readlink(f"/proc/self/fd/{fd}")
            if threading.current_thread() is threading.main_thread():
                self.on_loop.append(path)
            else:
                self.seen[path] = self.seen.get(path, 0) + 1
                if self.matches(path, self.seen[path]):
                    self.held.set()
                    self.release.wait()
                    if self.fail is not None:
                        raise self.fail
            real(fd)
            self.synced.append(path)

        monkeypatch.setattr(os, "fsync", fsync)

    async def reached_or(self, task: asyncio.Task[_T]) -> None:
        """Wait until an fsync is held, or `task` finished without one (the fsync ran on the loop)."""
        held = asyncio.ensure_future(asyncio.to_thread(self.held.wait))
        await asyncio.wait({held, task}, return_when=asyncio.FIRST_COMPLETED)
        if not held.done():
            self.held.set()
            self.release.set()
            await held


async def test_a_transaction_fsyncs_in_threads_and_shows_its_records_only_once_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with started(
        tmp_path / "log", [TopicSpec("out", 1), TopicSpec("other", 1), TopicSpec("in", 1)]
    ) as log:
        out, other = TopicPartition("out", 0), TopicPartition("other", 0)
        producer = log.transactional_producer("router-0")
        await producer.start()
        # Hold the fsync of the second intent written: the `committed` one, the commit point.
        disk = SlowDisk(monkeypatch, lambda path, n: path.endswith("router-0.json.tmp") and n == 2)
        offsets = GroupOffsets("router", {TopicPartition("in", 0): 7})
        records = [PendingRecord(f"r{i}".encode(), partition=0) for i in range(3)]
        commit = asyncio.create_task(producer.commit({"out": records}, offsets))
        await disk.reached_or(commit)
        assert not commit.done(), "the commit's fsyncs ran on the event loop"

        # The loop goes on: an append elsewhere is acknowledged, a reader is answered.
        assert (await log.append("other", b"elsewhere", partition=0)).offset == 0
        assert await log.end_offsets([out, other]) == {out: 0, other: 1}
        # The records are durable but the commit point is not: nobody sees them yet, and an
        # append after them is written but not acknowledged before the transaction is.
        behind = asyncio.create_task(log.append("out", b"after", partition=0))
        reader = log.reader()
        await reader.assign({out: 0})
        assert (await reader.fetch(timeout_ms=0)).records == []
        assert not behind.done()
        assert await log.group_offsets("router") == {}

        disk.release.set()
        results = await commit
        assert [r.offset for r in results] == [0, 1, 2]
        assert (await behind).offset == 3
        assert [r.value for r in (await reader.fetch(timeout_ms=0)).records] == [
            b"r0",
            b"r1",
            b"r2",
            b"after",
        ]
        await reader.close()
        assert await log.group_offsets("router") == {TopicPartition("in", 0): 7}
        assert not list((tmp_path / "log" / "transactions").iterdir())
        assert disk.on_loop == []


async def test_a_new_segment_is_fsynced_in_the_group_fsync_before_its_records_show(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with started(tmp_path / "log", [TopicSpec("t", 1)], segment_bytes=256) as log:
        tp = TopicPartition("t", 0)
        await log.append("t", b"x" * 100, partition=0)
        partition_dir = str(tmp_path / "log" / "topics" / "t" / "0")
        disk = SlowDisk(monkeypatch, lambda path, _: path == partition_dir)
        batch = [PendingRecord(b"y" * 100, partition=0) for _ in range(3)]
        rolling = asyncio.create_task(log.append_many("t", batch))
        await disk.reached_or(rolling)
        assert not rolling.done(), "the new segment's fsyncs ran on the event loop"
        assert len(log.partition(tp).segments) > 1
        assert await log.end_offsets([tp]) == {tp: 1}

        disk.release.set()
        assert [r.offset for r in await rolling] == [1, 2, 3]
        assert await log.end_offsets([tp]) == {tp: 4}
        assert partition_dir in disk.synced
        closed = [str(segment.path) for segment in log.partition(tp).segments[:-1]]
        assert set(closed) <= set(disk.synced)
        assert disk.on_loop == []


async def test_a_failed_directory_fsync_fails_the_roll_and_the_next_sync_does_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with started(tmp_path / "log", [TopicSpec("t", 1)], segment_bytes=256) as log:
        tp = TopicPartition("t", 0)
        partition_dir = str(tmp_path / "log" / "topics" / "t" / "0")
        disk = SlowDisk(monkeypatch, lambda path, n: path == partition_dir and n == 1)
        disk.fail = OSError(5, "Input/output error")
        disk.release.set()
        with pytest.raises(LogError, match="Input/output error"):
            await log.append_many("t", [PendingRecord(b"y" * 100, partition=0) for _ in range(4)])
        assert await log.end_offsets([tp]) == {tp: 0}
        assert partition_dir not in disk.synced

        await log.append("t", b"z", partition=0)
        assert partition_dir in disk.synced
        assert await log.end_offsets([tp]) == {tp: 5}
        assert disk.on_loop == []


async def test_a_retention_pass_rolls_and_deletes_without_an_fsync_on_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with started(tmp_path / "log", [TopicSpec("aged", 1, retention_ms=1, segment_ms=1)]) as log:
        tp = TopicPartition("aged", 0)
        results = await log.append_many("aged", [PendingRecord(b"v", partition=0) for _ in range(3)])
        disk = SlowDisk(monkeypatch, lambda _path, _n: False)
        report = await log.retention_pass(now_ms=results[-1].timestamp_ms + 1000)
        assert (report.deleted_segments, report.deleted_records) == (1, 3)
        assert await log.beginning_offsets([tp]) == {tp: 3}
        assert str(tmp_path / "log" / "topics" / "aged" / "0") in disk.synced
        assert disk.on_loop == []
        assert (await log.append("aged", b"next", partition=0)).offset == 3


async def test_a_cancelled_commit_still_finishes_whole_before_its_caller_sees_the_cancel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with started(tmp_path / "log", [TopicSpec("out", 1), TopicSpec("in", 1)]) as log:
        out = TopicPartition("out", 0)
        producer = log.transactional_producer("router-0")
        await producer.start()
        disk = SlowDisk(monkeypatch, lambda path, n: path.endswith("router-0.json.tmp") and n == 2)
        offsets = GroupOffsets("router", {TopicPartition("in", 0): 2})
        commit = asyncio.create_task(producer.commit({"out": [PendingRecord(b"a", partition=0)]}, offsets))
        await disk.reached_or(commit)
        commit.cancel()
        await asyncio.sleep(0)
        assert not commit.done()
        assert await log.end_offsets([out]) == {out: 0}
        disk.release.set()
        with pytest.raises(asyncio.CancelledError):
            await commit
        assert await log.end_offsets([out]) == {out: 1}
        assert await log.group_offsets("router") == {TopicPartition("in", 0): 2}
        assert not list((tmp_path / "log" / "transactions").iterdir())
