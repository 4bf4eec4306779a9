"""Each status and each transition between statuses, on the real Kafka broker.

A scenario drives one consumer group through steps (append records, commit an offset) and polls
the monitor around every commit, so the lag at each commit is the exact log end at that time
(the commit falls between two polls that saw the same end). The poll interval is 2 s, longer
than a commit through a fresh Kafka client takes under load (a single commit older than one
poll interval with lag is a STOP, rightly), and commits are spaced a little more than that so
each opens its own window entry; "no commit for ten minutes" moves the
monitor's clock (`SkewedClock`) instead of waiting. The window is 3 entries so statuses turn over
in a few steps.
"""

from __future__ import annotations

import asyncio
from types import TracebackType

import pytest

from pipeline.config import Settings
from pipeline.lag.monitor import LagMonitor
from pipeline.lag.snapshot import GroupLag
from pipeline.lag.status import Status
from pipeline.log.api import Log, TopicPartition
from tests.lag.helpers import (
    SLOW_COMMIT_SPACING_S,
    SLOW_POLL_INTERVAL_S,
    SkewedClock,
    make_topic,
    monitor_for,
    produce,
)

pytestmark = pytest.mark.kafka


class Scenario:
    """One group on one fresh topic, with the monitor polled before and after every commit."""

    def __init__(self, log: Log, settings: Settings, what: str, partitions: int = 1) -> None:
        self.log = log
        self.settings = settings
        self.what = what
        self.partitions = partitions
        self.group = f"{settings.log.topic_prefix}-{what}"
        self.clock = SkewedClock()
        self.end = 0
        self.tp = TopicPartition("", 0)
        self._monitor: LagMonitor | None = None

    async def __aenter__(self) -> Scenario:
        self.tp = await make_topic(self.log, self.settings, self.what, self.partitions)
        self._monitor = monitor_for(
            self.log, [self.group], self.clock, window=3, poll_interval_s=SLOW_POLL_INTERVAL_S
        )
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._monitor is not None:
            await self._monitor.close()

    async def poll(self) -> GroupLag:
        assert self._monitor is not None
        snapshot = await self._monitor.poll()
        assert not snapshot.stale, snapshot.error
        found = snapshot.group(self.group)
        assert found is not None, f"{self.group} missing"
        return found

    async def step(self, *, append: int = 0, commit: int) -> GroupLag:
        """Append records, poll, commit `commit` (an offset), poll, and wait out the poll interval."""
        if append:
            await produce(self.log, self.tp, append)
            self.end += append
        assert self._monitor is not None
        assert not (await self._monitor.poll()).stale
        await self.log.commit_group_offsets(self.group, {self.tp: commit})
        result = await self.poll()
        await asyncio.sleep(SLOW_COMMIT_SPACING_S)
        return result


def statuses(results: list[GroupLag]) -> list[str]:
    return [r.partitions[0].status.value for r in results]


async def test_rewind_then_recover(kafka_log: Log, kafka_settings: Settings) -> None:
    """OK -> REWIND (back from 80 to 48) -> still REWIND below 80 -> OK once back at 80."""
    async with Scenario(kafka_log, kafka_settings, "rewind-recover") as s:
        seen = [
            await s.step(append=100, commit=70),
            await s.step(commit=80),
            await s.step(commit=48),
            await s.step(commit=79),
            await s.step(commit=80),
        ]
    assert statuses(seen) == ["OK", "OK", "REWIND", "REWIND", "OK"]
    assert [r.status for r in seen] == [Status.OK, Status.OK, Status.ERR, Status.ERR, Status.OK]
    assert seen[-1].partitions[0].lag == 20


async def test_ok_to_warn_and_back_to_ok(kafka_log: Log, kafka_settings: Settings) -> None:
    """Caught up -> falls behind for a full window (WARN) -> catches up (OK)."""
    async with Scenario(kafka_log, kafka_settings, "warn") as s:
        seen = [await s.step(append=10, commit=10)]
        for commit in (12, 14, 16):
            seen.append(await s.step(append=10, commit=commit))
        seen.append(await s.step(commit=50))
    assert statuses(seen) == ["OK", "OK", "OK", "WARN", "OK"]
    assert seen[3].status is Status.WARN
    assert seen[3].partitions[0].lag == 24
    assert seen[-1].partitions[0].lag == 0


async def test_warn_to_stop_to_ok(kafka_log: Log, kafka_settings: Settings) -> None:
    """A lagging consumer stops committing (STOP, group ERR), then comes back and catches up."""
    async with Scenario(kafka_log, kafka_settings, "stop") as s:
        for commit in (2, 4, 6):
            lagging = await s.step(append=10, commit=commit)
        assert lagging.partitions[0].status is Status.WARN
        await produce(kafka_log, s.tp, 10)
        not_yet = await s.poll()
        s.clock.advance(600)
        stopped = await s.poll()
        s.clock.skew_ms = 0
        back = await s.step(commit=40)
    assert not_yet.partitions[0].status is Status.WARN
    assert stopped.partitions[0].status is Status.STOP
    assert stopped.status is Status.ERR
    assert back.partitions[0].status is Status.OK
    assert back.status is Status.OK


async def test_stall_then_stop_then_moving_again(kafka_log: Log, kafka_settings: Settings) -> None:
    """Committing one offset while records arrive is STALL (from the second entry); when even those
    commits stop it is STOP; moving on again (lag shrinking) is OK."""
    async with Scenario(kafka_log, kafka_settings, "stall") as s:
        seen = [await s.step(append=10, commit=3) for _ in range(3)]
        s.clock.advance(600)
        seen.append(await s.poll())
        s.clock.skew_ms = 0
        seen.append(await s.step(commit=20))
        seen.append(await s.step(commit=29))
    assert statuses(seen) == ["OK", "STALL", "STALL", "STOP", "OK", "OK"]
    assert [r.status for r in seen] == [Status.OK, Status.ERR, Status.ERR, Status.ERR, Status.OK, Status.OK]
    assert seen[-1].partitions[0].lag == 1


async def test_partitions_never_committed_are_listed_with_what_is_unread(
    kafka_log: Log, kafka_settings: Settings
) -> None:
    async with Scenario(kafka_log, kafka_settings, "uncommitted", partitions=3) as s:
        for partition, count in enumerate((5, 7, 9)):
            await produce(kafka_log, TopicPartition(s.tp.topic, partition), count)
        await kafka_log.commit_group_offsets(s.group, {s.tp: 5})
        result = await s.poll()
    rows = [(p.partition, p.committed, p.lag, p.lost, p.status) for p in result.partitions]
    assert rows == [(0, 5, 0, 0, Status.OK), (1, None, 7, 0, Status.OK), (2, None, 9, 0, Status.OK)]
    assert result.total_lag == 16
    assert result.status is Status.OK
