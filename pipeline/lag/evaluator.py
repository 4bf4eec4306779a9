"""The monitor's state and arithmetic, without I/O: one `observe` per poll turns offsets into statuses.

Kept apart from the polling so the benchmark can time exactly one evaluation and so the state
(commit windows per group partition, end-offset histories per partition) has one owner that
also forgets groups and partitions when they disappear.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from operator import attrgetter
from typing import NamedTuple

from pipeline.config import LagSettings
from pipeline.lag.history import EndOffsetHistories
from pipeline.lag.snapshot import GroupLag, LagSnapshot, PartitionLag
from pipeline.lag.status import CommitWindow, Status, group_status
from pipeline.lag.thresholds import LagThresholds
from pipeline.log.api import TopicPartition

__all__ = ["Commit", "LagEvaluator", "offset_lag"]

Offsets = Mapping[TopicPartition, int]


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


class LagEvaluator:
    """Commit windows and end-offset histories, updated and evaluated once per poll.

    With `commits_fed` the windows are filled from individual commits (`apply` via `observe`);
    otherwise a commit is inferred whenever a group's committed offset changed since the last
    poll, which cannot tell a consumer re-committing one offset (STALL) from one that stopped
    committing: both show as STOP.

    A group is reported on every partition of every topic it has committed offsets for:
    partitions it never committed are listed with committed None and lag = every record still
    on the log (what it has not read), as Burrow lists them.
    """

    def __init__(self, settings: LagSettings, *, commits_fed: bool = False) -> None:
        self._window_size = settings.window
        self._min_distance_ms = int(settings.poll_interval_s * 1000)
        self._commits_fed = commits_fed
        self._windows: dict[str, dict[TopicPartition, CommitWindow]] = {}
        self.histories = EndOffsetHistories(settings.history_points)
        self._thresholds = LagThresholds(settings.thresholds)

    @property
    def window_size(self) -> int:
        return self._window_size

    def window(self, group: str, tp: TopicPartition) -> CommitWindow | None:
        """The commit window of one group partition (None when it has none), for Burrow's API."""
        return self._windows.get(group, {}).get(tp)

    def observe(
        self,
        committed: Mapping[str, Offsets],
        starts: Offsets,
        ends: Offsets,
        now_ms: int,
        commits: Iterable[Commit] = (),
    ) -> LagSnapshot:
        """Evaluate one poll: committed offsets per group and log bounds, read just before `now_ms`.

        `ends` holds every live partition of the groups' topics. Groups absent from `committed`
        and partitions absent from `ends` are forgotten.
        """
        self.histories.record(ends, now_ms)
        for name in [name for name in self._windows if name not in committed]:
            del self._windows[name]
        self._apply(commits)
        by_topic: dict[str, list[TopicPartition]] = {}
        for tp in ends:
            by_topic.setdefault(tp.topic, []).append(tp)
        for partitions in by_topic.values():
            partitions.sort(key=attrgetter("partition"))
        groups = tuple(
            self._evaluate(group, committed[group], by_topic, starts, ends, now_ms)
            for group in sorted(committed)
        )
        return LagSnapshot(taken_ms=now_ms, groups=groups)

    def _window(self, group: str, tp: TopicPartition) -> CommitWindow:
        windows = self._windows.get(group)
        if windows is None:
            windows = self._windows[group] = {}
        window = windows.get(tp)
        if window is None:
            window = windows[tp] = CommitWindow(self._window_size)
        return window

    def _apply(self, commits: Iterable[Commit]) -> None:
        for commit in commits:
            end = self.histories.end_at(commit.tp, commit.commit_ms)
            if end is None:
                continue
            self._window(commit.group, commit.tp).add(
                commit.offset, max(0, end - commit.offset), commit.commit_ms, self._min_distance_ms
            )

    def _evaluate(
        self,
        group: str,
        committed: Offsets,
        by_topic: Mapping[str, list[TopicPartition]],
        starts: Offsets,
        ends: Offsets,
        now_ms: int,
    ) -> GroupLag:
        windows = self._windows.get(group)
        if windows is None:
            windows = self._windows[group] = {}
        for tp in [tp for tp in windows if tp not in committed]:
            del windows[tp]
        partitions: list[PartitionLag] = []
        for topic in sorted({tp.topic for tp in committed}):
            for tp in by_topic.get(topic, ()):
                partitions.append(self._partition(windows, tp, committed.get(tp), starts, ends[tp], now_ms))
        return GroupLag(
            group=group,
            status=group_status(p.status for p in partitions),
            partitions=tuple(partitions),
            threshold_s=self._thresholds.limit_for(group),
        )

    def _partition(
        self,
        windows: dict[TopicPartition, CommitWindow],
        tp: TopicPartition,
        offset: int | None,
        starts: Offsets,
        end: int,
        now_ms: int,
    ) -> PartitionLag:
        start = starts.get(tp, 0)
        if offset is None:
            lag = max(0, end - start)
            seconds = 0.0 if lag == 0 else self.histories.lag_seconds(tp, start, now_ms)
            return PartitionLag(tp.topic, tp.partition, None, start, end, lag, 0, seconds, Status.OK)
        lag, lost = offset_lag(offset, start, end)
        window = windows.get(tp)
        if window is None:
            window = windows[tp] = CommitWindow(self._window_size)
        if window.last_offset != offset and (not self._commits_fed or not len(window)):
            window.add(offset, lag, now_ms, self._min_distance_ms)
        seconds = 0.0 if lag == 0 else self.histories.lag_seconds(tp, offset, now_ms)
        status = window.status(lag, now_ms, self._min_distance_ms)
        return PartitionLag(tp.topic, tp.partition, offset, start, end, lag, lost, seconds, status)
