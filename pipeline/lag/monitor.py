"""The lag monitor: one poll reads groups, committed offsets and log bounds, and evaluates them.

Kept separate from the service loop and the metrics so that `reverser lag`, the component run by
`reverser run` and the tests drive the same code, and so that time is injectable (`clock`): the
STOP rule compares commit times with "now", which tests move forward instead of sleeping.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple, Protocol

from pipeline.config import LagSettings
from pipeline.lag.history import EndOffsetHistory
from pipeline.lag.selection import GroupSelector
from pipeline.lag.snapshot import GroupLag, LagSnapshot, PartitionLag
from pipeline.lag.status import CommitWindow, group_status
from pipeline.log.api import Log, LogError, TopicNotFoundError, TopicPartition

__all__ = ["Clock", "Commit", "CommitFeed", "LagMonitor", "offset_lag", "wall_clock_ms"]

logger = logging.getLogger(__name__)

Clock = Callable[[], int]

# Group offset look-ups in flight at once: enough to hide round trips, few enough to be polite.
GROUP_FETCH_CONCURRENCY = 8


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def offset_lag(committed: int, start: int, end: int) -> tuple[int, int]:
    """(records not yet consumed, records lost to retention) for one partition; neither negative.

    A committed offset beyond log-end (the topic was recreated, or a tool committed ahead) is
    caught up, not negative lag; one below log-start lost the records retention deleted.
    """
    return max(0, end - committed), max(0, min(start, end) - committed)


class Commit(NamedTuple):
    """One offset commit seen on the log, with the broker's commit time."""

    group: str
    tp: TopicPartition
    offset: int
    commit_ms: int


class CommitFeed(Protocol):
    """A source of individual commits (Kafka's `__consumer_offsets`), so STALL differs from STOP."""

    async def drain(self, selected: Callable[[str], bool]) -> list[Commit]:
        """Commits of selected groups appended since the last call, in log order."""

    async def close(self) -> None: ...


class _GroupState:
    __slots__ = ("windows",)

    def __init__(self) -> None:
        self.windows: dict[TopicPartition, CommitWindow] = {}


class LagMonitor:
    """Evaluates every selected group on each `poll()`; keeps windows and histories in between.

    Without a commit feed a commit is inferred when a group's committed offset changes between
    polls, which cannot tell a consumer re-committing the same offset (STALL) from one that
    stopped committing (STOP); both then show as STOP.
    """

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
        self._settings = settings
        self._select = selector if selector is not None else GroupSelector(settings.allow, settings.deny)
        self._clock = clock
        self._feed = commit_feed
        self._min_distance_ms = int(settings.poll_interval_s * 1000)
        self._groups: dict[str, _GroupState] = {}
        self._histories: dict[TopicPartition, EndOffsetHistory] = {}
        self.last: LagSnapshot | None = None

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
        for tp in tps:
            if tp in ends:
                self._history(tp).record(ends[tp], now_ms)
        self._forget(groups, ends)
        if self._feed is not None:
            self._apply_commits(await self._feed.drain(self._select))
        results = tuple(
            self._evaluate(group, committed[group], starts, ends, now_ms) for group in groups
        )
        return LagSnapshot(taken_ms=now_ms, groups=results)

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
        """Log-start and log-end offsets; a deleted topic drops its partitions instead of failing."""
        if not tps:
            return {}, {}
        try:
            return await self._log.beginning_offsets(tps), await self._log.end_offsets(tps)
        except TopicNotFoundError:
            pass
        starts: dict[TopicPartition, int] = {}
        ends: dict[TopicPartition, int] = {}
        for topic in sorted({tp.topic for tp in tps}):
            members = [tp for tp in tps if tp.topic == topic]
            try:
                topic_starts = await self._log.beginning_offsets(members)
                topic_ends = await self._log.end_offsets(members)
            except TopicNotFoundError:
                logger.info("topic %s no longer exists; its committed offsets are skipped", topic)
                continue
            starts.update(topic_starts)
            ends.update(topic_ends)
        return starts, ends

    def _history(self, tp: TopicPartition) -> EndOffsetHistory:
        history = self._histories.get(tp)
        if history is None:
            history = self._histories[tp] = EndOffsetHistory(self._settings.history_points)
        return history

    def _forget(self, groups: Iterable[str], live_tps: Iterable[TopicPartition]) -> None:
        """Drop state of groups and partitions that went away, so memory follows the cluster."""
        keep = set(groups)
        for name in [name for name in self._groups if name not in keep]:
            del self._groups[name]
        live = set(live_tps)
        for tp in [tp for tp in self._histories if tp not in live]:
            del self._histories[tp]

    def _window(self, group: str, tp: TopicPartition) -> CommitWindow:
        state = self._groups.get(group)
        if state is None:
            state = self._groups[group] = _GroupState()
        window = state.windows.get(tp)
        if window is None:
            window = state.windows[tp] = CommitWindow(self._settings.window)
        return window

    def _apply_commits(self, commits: Iterable[Commit]) -> None:
        for commit in commits:
            history = self._histories.get(commit.tp)
            if history is None:
                continue
            end = history.end_seen_after(commit.commit_ms)
            lag = max(0, end - commit.offset) if end is not None else 0
            self._window(commit.group, commit.tp).add(
                commit.offset, lag, commit.commit_ms, self._min_distance_ms
            )

    def _evaluate(
        self,
        group: str,
        committed: dict[TopicPartition, int],
        starts: dict[TopicPartition, int],
        ends: dict[TopicPartition, int],
        now_ms: int,
    ) -> GroupLag:
        partitions: list[PartitionLag] = []
        for tp in sorted(committed):
            end = ends.get(tp)
            if end is None:
                continue
            offset = committed[tp]
            start = starts.get(tp, 0)
            lag, lost = offset_lag(offset, start, end)
            window = self._window(group, tp)
            if window.last_offset != offset and (self._feed is None or not len(window)):
                window.add(offset, lag, now_ms, self._min_distance_ms)
            lag_seconds = 0.0 if lag == 0 else self._history(tp).lag_seconds(offset, now_ms)
            partitions.append(
                PartitionLag(
                    topic=tp.topic,
                    partition=tp.partition,
                    committed=offset,
                    start=start,
                    end=end,
                    lag=lag,
                    lost=lost,
                    lag_seconds=lag_seconds,
                    status=window.status(lag, now_ms, self._min_distance_ms),
                )
            )
        state = self._groups.get(group)
        if state is not None:
            for tp in [tp for tp in state.windows if tp not in committed]:
                del state.windows[tp]
        return GroupLag(
            group=group,
            status=group_status(p.status for p in partitions),
            partitions=tuple(partitions),
        )
