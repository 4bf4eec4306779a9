"""Group fsync: an append is acknowledged only after a sync that began after its write returned.

`GroupSync` is driven with real threads (its `sync` runs in `asyncio.to_thread`) and a recording
`sync` that may be slow or fail; the property test generates interleavings of writes and waits.
The embedded log's own use of it is checked with real files and a real SIGKILL of a writer.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.log import PendingRecord, TopicPartition, TopicSpec
from pipeline.log.api import LogError
from pipeline.log.embedded import EmbeddedLog
from pipeline.log.embedded.syncing import GroupSync

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Job:
    number: int
    keys: frozenset[str]
    began_at_write: int  # how many writes had happened when the flush began
    ok: bool | None = None


@dataclass
class Disk:
    """Records every flush; `fail` names flush numbers whose sync raises OSError."""

    fail: set[int] = field(default_factory=set)
    delay_s: float = 0.0
    jobs: list[Job] = field(default_factory=list)
    writes: int = 0
    threads: set[int] = field(default_factory=set)

    def begin(self, keys: Collection[str]) -> Job:
        job = Job(len(self.jobs), frozenset(keys), self.writes)
        self.jobs.append(job)
        return job

    def sync(self, job: Job) -> None:
        self.threads.add(threading.get_ident())
        time.sleep(self.delay_s)
        if job.number in self.fail:
            raise OSError(5, "Input/output error")

    def end(self, job: Job, ok: bool) -> None:
        job.ok = ok

    def group(self) -> GroupSync[str, Job]:
        return GroupSync(self.begin, self.sync, self.end)


ops = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(min_value=0, max_value=3)),
    min_size=1,
    max_size=25,
)


@settings(max_examples=40, deadline=None)
@given(ops, st.sets(st.integers(min_value=0, max_value=8), max_size=3))
def test_an_acknowledged_write_was_covered_by_a_later_successful_sync(
    schedule: list[tuple[str, int]], fail: set[int]
) -> None:
    """Writers write a key, maybe yield a few times (so writes interleave with flushes), then wait."""
    disk = Disk(fail=fail, delay_s=0.001)

    async def run() -> list[tuple[str, int, bool, int]]:
        group = disk.group()

        async def writer(key: str, pause: int) -> tuple[str, int, bool, int]:
            for _ in range(pause):
                await asyncio.sleep(0)
            disk.writes += 1
            ticket = group.written(key)
            try:
                await group.durable(ticket)
            except OSError:
                return key, ticket, False, len(disk.jobs)
            return key, ticket, True, len(disk.jobs)

        results = await asyncio.gather(*(writer(key, pause) for key, pause in schedule))
        await group.drain()
        return results

    for key, ticket, ok, jobs_seen in asyncio.run(run()):
        covering = [job for job in disk.jobs[:jobs_seen] if job.began_at_write >= ticket and key in job.keys]
        assert covering, "answered before any flush that began after the write"
        # durable: a covering flush succeeded; refused: a covering flush failed
        assert any(job.ok is ok for job in covering)
    assert disk.threads
    assert threading.get_ident() not in disk.threads, "the sync ran on the loop"


async def test_concurrent_writers_share_a_few_syncs() -> None:
    disk = Disk(delay_s=0.05)
    group = disk.group()

    async def writer(n: int) -> None:
        disk.writes += 1
        await group.durable(group.written(f"p{n % 4}"))

    await asyncio.gather(*(writer(n) for n in range(50)))
    # the first flush starts with the first waiter; the 49 after it share the second
    assert len(disk.jobs) <= 2
    assert disk.jobs[-1].keys == {"p0", "p1", "p2", "p3"}


async def test_a_failed_sync_fails_its_writers_and_the_next_one_retries_their_keys() -> None:
    disk = Disk(fail={0})
    group = disk.group()
    first = group.written("a")
    with pytest.raises(OSError, match="Input/output"):
        await group.durable(first)
    await group.durable(group.written("b"))
    assert disk.jobs[1].keys == {"a", "b"}
    assert disk.jobs[1].ok


async def test_appends_wait_for_their_fsync_and_readers_see_only_durable_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embedded log acknowledges an append only after the thread's fsync returned, and a reader
    never gets a record whose fsync has not returned yet."""
    release = threading.Event()
    real = os.fsync
    synced: list[int] = []

    def slow_fsync(fd: int) -> None:
        release.wait(5)
        real(fd)
        synced.append(fd)

    log = EmbeddedLog(tmp_path / "log")
    await log.start()
    try:
        await log.create_topics([TopicSpec("t", 1)])
        monkeypatch.setattr(os, "fsync", slow_fsync)
        append = asyncio.create_task(log.append_many("t", [PendingRecord(b"v", key=b"k")]))
        await asyncio.sleep(0.1)
        assert not append.done()
        async with log.reader() as reader:
            await reader.assign({TopicPartition("t", 0): 0})
            assert (await reader.fetch(timeout_ms=50)).records == []
            assert (await log.end_offsets([TopicPartition("t", 0)]))[TopicPartition("t", 0)] == 0
            release.set()
            (result,) = await append
            assert synced
            assert [r.value for r in (await reader.fetch(timeout_ms=1000)).records] == [b"v"]
            assert result.offset == 0
    finally:
        release.set()
        await log.close()


async def test_an_append_whose_fsync_fails_is_a_log_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(fd: int) -> None:
        raise OSError(28, "No space left on device")

    log = EmbeddedLog(tmp_path / "log")
    await log.start()
    try:
        await log.create_topics([TopicSpec("t", 1)])
        monkeypatch.setattr(os, "fsync", broken)
        with pytest.raises(LogError, match="No space left"):
            await log.append_many("t", [PendingRecord(b"v", key=b"k")])
    finally:
        monkeypatch.undo()
        await log.close()


_WRITER = """
import asyncio, sys
from pathlib import Path
from pipeline.log import PendingRecord, TopicSpec
from pipeline.log.embedded import EmbeddedLog

async def main() -> None:
    log = EmbeddedLog(Path(sys.argv[1]))
    await log.start()
    await log.create_topics([TopicSpec("t", 3)])

    async def writer(n: int) -> None:
        for i in range(10**6):
            value = f"{n}-{i}".encode()
            (result,) = await log.append_many("t", [PendingRecord(value, key=value)])
            print(result.partition, result.offset, value.decode(), flush=True)

    await asyncio.gather(*(writer(n) for n in range(16)))

asyncio.run(main())
"""


def test_every_acknowledged_append_survives_a_sigkill(tmp_path: Path) -> None:
    """16 concurrent writers on a real child process; SIGKILL after 300 acknowledgements.

    A kill cannot undo what reached the page cache, so this checks the other half of the rule: a
    record is written before the acknowledgement, and a group's offsets are the ones it reported
    (the power-loss half, fsync before the acknowledgement, is the tests above)."""
    directory = tmp_path / "log"
    child = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(directory)],
        stdout=subprocess.PIPE,
        cwd=REPO_ROOT,
        text=True,
    )
    acknowledged: list[tuple[int, int, str]] = []
    try:
        assert child.stdout is not None
        for line in child.stdout:
            partition, offset, value = line.split()
            acknowledged.append((int(partition), int(offset), value))
            if len(acknowledged) == 300:
                child.send_signal(signal.SIGKILL)
                break
    finally:
        child.kill()
        child.wait()
    assert len(acknowledged) == 300
    found = asyncio.run(_read_back(directory))
    for at_partition, at_offset, written in acknowledged:
        assert found.get((at_partition, at_offset)) == written.encode()


async def _read_back(directory: Path) -> dict[tuple[int, int], bytes | None]:
    """Every record of the killed writer's topic, by (partition, offset), as a restart reads it."""
    log = EmbeddedLog(directory)
    await log.start()
    found: dict[tuple[int, int], bytes | None] = {}
    try:
        async with log.reader() as reader:
            tps = [TopicPartition("t", p) for p in range(3)]
            await reader.assign(dict.fromkeys(tps, 0))
            ends = await log.end_offsets(tps)
            while any(reader.position(tp) < ends[tp] for tp in tps):
                for record in (await reader.fetch(timeout_ms=1000, max_records=1000)).records:
                    found[(record.partition, record.offset)] = record.value
    finally:
        await log.close()
    return found


async def test_a_cancelled_append_is_visible_once_its_cancellation_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream stopped while its cursor append waits for the fsync: the next reader sees it."""
    release = threading.Event()
    real = os.fsync

    def slow_fsync(fd: int) -> None:
        release.wait(5)
        real(fd)

    log = EmbeddedLog(tmp_path / "log")
    await log.start()
    try:
        await log.create_topics([TopicSpec("t", 1)])
        monkeypatch.setattr(os, "fsync", slow_fsync)
        append = asyncio.create_task(log.append_many("t", [PendingRecord(b"v", key=b"k")]))
        await asyncio.sleep(0.05)
        append.cancel()
        await asyncio.sleep(0.05)
        assert not append.done(), "the cancellation returned before the fsync"
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await append
        assert (await log.end_offsets([TopicPartition("t", 0)]))[TopicPartition("t", 0)] == 1
    finally:
        release.set()
        await log.close()


# --- the embedded log's append path, through an os.fsync seam ---------------------------------------


class GatedFsync:
    """`os.fsync` for these tests: each call waits for the test to open the gate, then runs the real
    fsync (or raises for the call numbers in `fail`), recording when it started and returned.

    The gate stands for a slow disk without timing anything: the test decides when the fsync ends,
    and the loop learns that a call has started through `started` (set thread-safely).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, fail: Collection[int] = ()) -> None:
        self.loop = loop
        self.fail = set(fail)
        self.gate = threading.Event()
        self.started = asyncio.Event()
        self.calls = 0
        self.returned = 0
        self.order: list[tuple[str, int]] = []  # ("start" | "end", call) and ("ack" | "error", append)
        self.lock = threading.Lock()
        self.real = os.fsync
        self.loop_thread = threading.get_ident()

    def __call__(self, fd: int) -> None:
        if threading.get_ident() == self.loop_thread:
            # Waiting for the gate here would block the loop that has to open it.
            raise AssertionError("fsync called on the event loop")
        with self.lock:
            self.calls += 1
            call = self.calls
            self.order.append(("start", call))
        self.loop.call_soon_threadsafe(self.started.set)
        self.gate.wait()
        try:
            if call in self.fail:
                raise OSError(5, "Input/output error")
            self.real(fd)
        finally:
            with self.lock:
                self.returned += 1
                self.order.append(("end", call))

    def note(self, what: str, append: int) -> None:
        with self.lock:
            self.order.append((what, append))

    def at(self, event: tuple[str, int]) -> int:
        return self.order.index(event)


TP = TopicPartition("t", 0)


async def _gated_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail: Collection[int] = ()
) -> tuple[EmbeddedLog, GatedFsync]:
    log = EmbeddedLog(tmp_path / "log")
    await log.start()
    await log.create_topics([TopicSpec("t", 1)])
    seam = GatedFsync(asyncio.get_running_loop(), fail)
    monkeypatch.setattr(os, "fsync", seam)  # after create_topics: only appends fsync from here on
    return log, seam


async def _append(log: EmbeddedLog, seam: GatedFsync, n: int) -> int:
    """One single-record append; notes on the seam's timeline when it was acknowledged or failed."""
    try:
        (result,) = await log.append_many("t", [PendingRecord(f"v{n}".encode(), key=b"k")])
    except LogError:
        seam.note("error", n)
        raise
    seam.note("ack", n)
    return result.offset


async def _written(log: EmbeddedLog, records: int) -> None:
    """Let the loop run until `records` records are written (bounded by steps, not by time)."""
    for _ in range(1000):
        if log.partition(TP).next_offset >= records:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"only {log.partition(TP).next_offset} of {records} records were written")


async def _first_group_blocked(
    log: EmbeddedLog, seam: GatedFsync, more: int
) -> tuple[asyncio.Task[int], list[asyncio.Task[int]]]:
    """Append 0 starts the first fsync, which the gate holds; then `more` appends are written."""
    first = asyncio.create_task(_append(log, seam, 0))
    started = asyncio.create_task(seam.started.wait())
    await asyncio.wait([first, started], return_when=asyncio.FIRST_COMPLETED)
    started.cancel()
    assert not first.done(), "append 0 returned before its fsync began"
    rest = [asyncio.create_task(_append(log, seam, n)) for n in range(1, more + 1)]
    await _written(log, more + 1)
    return first, rest


async def test_concurrent_appends_share_one_fsync_that_began_after_their_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(a) 1 + 20 appends pay 2 fsyncs; (b) none is acknowledged before a covering fsync returned."""
    log, seam = await _gated_log(tmp_path, monkeypatch)
    try:
        first, rest = await _first_group_blocked(log, seam, 20)
        assert seam.calls == 1
        assert not first.done()
        assert not any(task.done() for task in rest)
        assert await log.end_offsets([TP]) == {TP: 0}, "readers saw records not yet durable"
        seam.gate.set()
        offsets = [await first, *await asyncio.gather(*rest)]
        assert offsets == list(range(21))
        assert seam.calls == 2 < 21
        # append 0 after the fsync that was running when it asked; the 20 written while that one
        # ran were not covered by it: after the second, which began once they were written
        assert seam.at(("end", 1)) < seam.at(("ack", 0))
        for n in range(1, 21):
            assert seam.at(("start", 2)) < seam.at(("end", 2)) < seam.at(("ack", n))
        assert await log.end_offsets([TP]) == {TP: 21}
    finally:
        seam.gate.set()
        monkeypatch.undo()  # close() fsyncs on the loop, as it should: not the seam's business
        await log.close()


async def test_the_loop_runs_while_an_fsync_is_blocked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(d) a probe task ticks, and another append is written, while the fsync has not returned."""
    log, seam = await _gated_log(tmp_path, monkeypatch)
    ticks = 0

    async def probe() -> None:
        nonlocal ticks
        for _ in range(100):
            ticks += 1
            await asyncio.sleep(0)

    try:
        first, rest = await _first_group_blocked(log, seam, 1)
        await probe()
        assert ticks == 100
        assert seam.returned == 0, "the fsync returned while the probe ran: nothing was shown"
        assert not first.done()
        assert not rest[0].done()
        seam.gate.set()
        assert [await first, await rest[0]] == [0, 1]
    finally:
        seam.gate.set()
        monkeypatch.undo()  # close() fsyncs on the loop, as it should: not the seam's business
        await log.close()


async def test_a_failed_fsync_fails_its_whole_group_and_the_log_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(c) the second fsync fails: its 10 appends all raise, the first group is unaffected, and the
    log stays consistent: later appends are acknowledged after them, in order, and a restart reads
    the same records (the refused ones appear too: at least once, as docs/log.md says)."""
    log, seam = await _gated_log(tmp_path, monkeypatch, fail={2})
    try:
        first, rest = await _first_group_blocked(log, seam, 10)
        seam.gate.set()
        assert await first == 0
        outcomes = await asyncio.gather(*rest, return_exceptions=True)
        assert all(isinstance(outcome, LogError) for outcome in outcomes), outcomes
        assert all("Input/output error" in str(outcome) for outcome in outcomes)
        assert seam.calls == 2
        for n in range(1, 11):
            assert seam.at(("end", 2)) < seam.at(("error", n))
        assert await _append(log, seam, 11) == 11
        assert seam.calls == 3
        assert await log.end_offsets([TP]) == {TP: 12}
    finally:
        seam.gate.set()
        monkeypatch.undo()
        await log.close()
    found = await _read_back_one(tmp_path / "log")
    assert found == [f"v{n}".encode() for n in range(12)]


async def _read_back_one(directory: Path) -> list[bytes | None]:
    log = EmbeddedLog(directory)
    await log.start()
    try:
        async with log.reader() as reader:
            await reader.assign({TP: 0})
            end = (await log.end_offsets([TP]))[TP]
            values: list[bytes | None] = []
            while reader.position(TP) < end:
                values += [record.value for record in (await reader.fetch(timeout_ms=1000)).records]
    finally:
        await log.close()
    return values
