"""The lag monitor: one poll reads groups, committed offsets and log bounds, and evaluates them.

Kept separate from the service loop and the metrics so that `reverser lag`, the component run by
`reverser run` and the tests drive the same code, and so that time is injectable (`clock`): the
STOP rule compares commit times with "now", which tests move forward instead of sleeping.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from pipeline.config import LagSettings
from pipeline.lag.evaluator import Commit, LagEvaluator
from pipeline.lag.selection import GroupSelector
from pipeline.lag.snapshot import LagSnapshot
from pipeline.lag.status import CommitWindow
from pipeline.log.api import Log, LogError, TopicPartition

__all__ = ["Clock", "CommitFeed", "LagMonitor", "wall_clock_ms"]

logger = logging.getLogger(__name__)

Clock = Callable[[], int]

# Group offset look-ups in flight at once: enough to hide round trips, few enough to be polite.
GROUP_FETCH_CONCURRENCY = 8


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class CommitFeed(Protocol):
    """A source of individual commits (Kafka's `__consumer_offsets`), so STALL differs from STOP."""

    async def drain(self, selected: Callable[[str], bool]) -> list[Commit]:
        """Commits of selected groups appended since the last call, in log order."""

    async def close(self) -> None: ...


class LagMonitor:
    """Reads every selected group on each `poll()` and hands the offsets to a `LagEvaluator`."""

    def __init__(
        self,
        log: Log,
        settings: LagSettings,
        *,
        selector: GroupSelector | None = None,
        clock: Clock = wall_clock_ms,
        commit_feed: CommitFeed | None = None,
    ) -> None:
        self._log = log
        self._select = selector if selector is not None else GroupSelector(settings.allow, settings.deny)
        self._clock = clock
        self._feed = commit_feed
        self.evaluator = LagEvaluator(settings, commits_fed=commit_feed is not None)
        self.last: LagSnapshot | None = None

    @property
    def window_size(self) -> int:
        return self.evaluator.window_size

    def window(self, group: str, tp: TopicPartition) -> CommitWindow | None:
        return self.evaluator.window(group, tp)

    async def close(self) -> None:
        if self._feed is not None:
            await self._feed.close()

    async def poll(self) -> LagSnapshot:
        """Read and evaluate once; on failure return the previous result marked stale.

        Raises nothing for log failures: they are reported in the snapshot (`stale`, `error`) so
        the caller keeps serving the last known values.
        """
        try:
            snapshot = await self._poll()
        except (LogError, OSError, TimeoutError) as exc:
            reason = f"{type(exc).__name__}: {exc}"
            logger.warning("lag poll failed: %s", reason)
            snapshot = self._stale(reason)
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
            logger.exception("lag poll failed unexpectedly")
            snapshot = self._stale(reason)
        self.last = snapshot
        return snapshot

    def _stale(self, reason: str) -> LagSnapshot:
        previous = self.last
        return LagSnapshot(
            taken_ms=previous.taken_ms if previous else self._clock(),
            groups=previous.groups if previous else (),
            stale=True,
            error=reason,
        )

    async def _poll(self) -> LagSnapshot:
        groups = sorted(g for g in await self._log.list_groups() if self._select(g))
        committed = await self._committed_offsets(groups)
        tps = sorted({tp for offsets in committed.values() for tp in offsets})
        starts, ends = await self._bounds(tps)
        now_ms = self._clock()
        commits = await self._feed.drain(self._select) if self._feed is not None else []
        return self.evaluator.observe(committed, starts, ends, now_ms, commits)

    async def _committed_offsets(self, groups: Sequence[str]) -> dict[str, dict[TopicPartition, int]]:
        limit = asyncio.Semaphore(GROUP_FETCH_CONCURRENCY)

        async def one(group: str) -> dict[TopicPartition, int]:
            async with limit:
                return await self._log.group_offsets(group)

        fetched = await asyncio.gather(*(one(group) for group in groups))
        return dict(zip(groups, fetched, strict=True))

    async def _bounds(
        self, tps: Sequence[TopicPartition]
    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        """Log-start and log-end offsets of every partition of the topics the groups committed for.

        Every partition of those topics is read, so partitions a group never committed are
        listed too. Groups keep committed offsets of deleted topics for a while; asking the broker
        for their offsets would fail the whole poll, so missing topics are left out first.
        """
        if not tps:
            return {}, {}
        described = await self._log.describe_topics(sorted({tp.topic for tp in tps}))
        live = [
            TopicPartition(topic, partition)
            for topic, description in sorted(described.items())
            for partition in range(description.partitions)
        ]
        if not live:
            return {}, {}
        return await self._log.beginning_offsets(live), await self._log.end_offsets(live)
