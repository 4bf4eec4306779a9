"""The embedded log's slow disk work runs in worker threads while the event loop goes on (issue 32).

A compaction reads and rewrites its segments in a thread: appends and fetches on the loop are
answered meanwhile, and the swap at the end keeps every offset, every newest value per key and
every append made during the pass. A worker thread parked on a `threading.Event` stands in for a
large compaction or a slow disk, so the tests decide the order, not timing.
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.log import PendingRecord, Record, TopicPartition, TopicSpec
from pipeline.log.embedded import EmbeddedLog
from pipeline.log.embedded import log as embedded_log_module
from pipeline.log.embedded.segments import CLEANED_SUFFIX, finish_compaction, run_compaction

HOUR_MS = 3_600_000
TP = TopicPartition("state", 0)
_T = TypeVar("_T")


@pytest.fixture
async def log(tmp_path: Path) -> AsyncIterator[EmbeddedLog]:
    embedded = EmbeddedLog(tmp_path / "log", segment_bytes=512)
    await embedded.start()
    await embedded.create_topics([TopicSpec("state", 1, "compact", segment_ms=HOUR_MS)])
    try:
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
