"""What one poll of the lag monitor found: per group, per partition, and whether it is current."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.lag.status import Status

__all__ = ["GroupLag", "LagSnapshot", "PartitionLag"]


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """One partition as consumed by one group.

    `lag` is log-end minus committed, never negative; `lost` counts records the group had not
    consumed when retention deleted them (committed below log-start); `lag_seconds` is None while
    the history is too short to tell. `committed` is None for a partition of one of the group's
    topics that the group never committed: its lag is every record still on the log.
    """

    topic: str
    partition: int
    committed: int | None
    start: int
    end: int
    lag: int
    lost: int
    lag_seconds: float | None
    status: Status


@dataclass(frozen=True, slots=True)
class GroupLag:
    """One consumer group: its worst-partition status and its partitions in (topic, partition) order.

    `threshold_s` is the group's configured lag-seconds limit, if any.
    """

    group: str
    status: Status
    partitions: tuple[PartitionLag, ...]
    threshold_s: float | None = None

    @property
    def over_threshold(self) -> bool:
        """True when the group has a limit and its largest known lag in seconds exceeds it."""
        worst = self.max_lag_seconds
        return self.threshold_s is not None and worst is not None and worst > self.threshold_s

    @property
    def total_lag(self) -> int:
        return sum(p.lag for p in self.partitions)

    @property
    def total_lost(self) -> int:
        return sum(p.lost for p in self.partitions)

    @property
    def max_lag_seconds(self) -> float | None:
        known = [p.lag_seconds for p in self.partitions if p.lag_seconds is not None]
        return max(known) if known else None


@dataclass(frozen=True, slots=True)
class LagSnapshot:
    """The groups of the last successful poll; `stale` with `error` when the latest poll failed."""

    taken_ms: int
    groups: tuple[GroupLag, ...]
    stale: bool = False
    error: str | None = None

    @property
    def any_error(self) -> bool:
        return any(group.status is Status.ERR for group in self.groups)

    @property
    def any_over_threshold(self) -> bool:
        return any(group.over_threshold for group in self.groups)

    def group(self, name: str) -> GroupLag | None:
        for group in self.groups:
            if group.group == name:
                return group
        return None
