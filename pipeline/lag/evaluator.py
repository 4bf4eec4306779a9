"""The monitor's state and arithmetic, without I/O: one `observe` per poll turns offsets into statuses.

Kept apart from the polling so the benchmark can time exactly one evaluation and so the state
(commit windows per group partition, end-offset histories per partition) has one owner that
also forgets groups and partitions when they disappear.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from pipeline.config import LagSettings
from pipeline.lag.history import EndOffsetHistory
from pipeline.lag.snapshot import GroupLag, LagSnapshot, PartitionLag
from pipeline.lag.status import CommitWindow, group_status
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
    """

    def __init__(self, settings: LagSettings, *, commits_fed: bool = False) -> None:
        self._window_size = settings.window
        self._history_points = settings.history_points
        self._min_distance_ms = int(settings.poll_interval_s * 1000)
        self._commits_fed = commits_fed
        self._windows: dict[str, dict[TopicPartition, CommitWindow]] = {}
        self._histories: dict[TopicPartition, EndOffsetHistory] = {}

    @property
    def histories(self) -> Mapping[TopicPartition, EndOffsetHistory]:
        return self._histories

    def observe(
        self,
        committed: Mapping[str, Offsets],
        starts: Offsets,
        ends: Offsets,
        now_ms: int,
        commits: Iterable[Commit] = (),
    ) -> LagSnapshot:
        """Evaluate one poll: committed offsets per group and log bounds, read just before `now_ms`.

        Groups absent from `committed` and partitions absent from `ends` are forgotten.
        """
        for tp, end in ends.items():
            self._history(tp).record(end, now_ms)
        self._forget(committed, ends)
        self._apply(commits)
        groups = tuple(
            self._evaluate(group, committed[group], starts, ends, now_ms) for group in sorted(committed)
        )
        return LagSnapshot(taken_ms=now_ms, groups=groups)

    def _history(self, tp: TopicPartition) -> EndOffsetHistory:
        history = self._histories.get(tp)
        if history is None:
            history = self._histories[tp] = EndOffsetHistory(self._history_points)
        return history

    def _forget(self, groups: Mapping[str, Offsets], live: Offsets) -> None:
        for name in [name for name in self._windows if name not in groups]:
            del self._windows[name]
        for tp in [tp for tp in self._histories if tp not in live]:
            del self._histories[tp]

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
            history = self._histories.get(commit.tp)
            if history is None:
                continue
            end = history.end_at(commit.commit_ms)
            lag = max(0, end - commit.offset) if end is not None else 0
            self._window(commit.group, commit.tp).add(
                commit.offset, lag, commit.commit_ms, self._min_distance_ms
            )

    def _evaluate(
        self, group: str, committed: Offsets, starts: Offsets, ends: Offsets, now_ms: int
    ) -> GroupLag:
        windows = self._windows.get(group)
        if windows is None:
            windows = self._windows[group] = {}
        for tp in [tp for tp in windows if tp not in committed]:
            del windows[tp]
        partitions: list[PartitionLag] = []
        for tp, offset in sorted(committed.items()):
            end = ends.get(tp)
            if end is None:
                continue
            start = starts.get(tp, 0)
            lag, lost = offset_lag(offset, start, end)
            window = windows.get(tp)
            if window is None:
                window = windows[tp] = CommitWindow(self._window_size)
            if window.last_offset != offset and (not self._commits_fed or not len(window)):
                window.add(offset, lag, now_ms, self._min_distance_ms)
            lag_seconds = 0.0 if lag == 0 else self._histories[tp].lag_seconds(offset, now_ms)
            partitions.append(
                PartitionLag(
                    tp.topic,
                    tp.partition,
                    offset,
                    start,
                    end,
                    lag,
                    lost,
                    lag_seconds,
                    window.status(lag, now_ms, self._min_distance_ms),
                )
            )
        return GroupLag(
            group=group,
            status=group_status(p.status for p in partitions),
            partitions=tuple(partitions),
        )
