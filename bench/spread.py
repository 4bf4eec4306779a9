"""The pure parts of `make bench spread`: which types to watch, and how evenly CPU was spread.

Kept apart from the bench's driver so they are unit tested (tests/unit/test_bench_spread.py)
without an apiserver or a broker.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pipeline.watch.shards import shard_of

__all__ = ["Spread", "dealt_out", "holder_replica", "spread_of", "types_per_shard"]


def types_per_shard(candidates: Sequence[str], shards: int) -> dict[int, str]:
    """One type (`group/resource`, or `resource` for the core group) per shard, for `shards`
    shards: the first candidate that `shard_of` deals into each shard.

    Raises ValueError when the candidates leave a shard empty: the bench would then measure fewer
    busy shards than it says.
    """
    chosen: dict[int, str] = {}
    for candidate in candidates:
        group, _, resource = candidate.rpartition("/")
        chosen.setdefault(shard_of(group, resource, shards), candidate)
    missing = sorted(set(range(shards)) - set(chosen))
    if missing:
        raise ValueError(f"no candidate type lands in shard(s) {missing} of {shards}")
    return dict(sorted(chosen.items()))


def holder_replica(holder: str, pids: Sequence[int | None]) -> int | None:
    """The index of the replica whose pid names a Lease holder (`<host>-<pid>-<suffix>`, the
    watch's default identity), or None for no holder or a process not among `pids`."""
    parts = holder.rsplit("-", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    pid = int(parts[1])
    return next((index for index, p in enumerate(pids) if p == pid), None)


def dealt_out(leaders: Mapping[int, int | None], replicas: int) -> bool:
    """Whether every shard is held and by as many replicas as there can be (shard to holder
    replica, None for a vacant or unknown holder): the spread `assign_shards` aims at."""
    held = list(leaders.values())
    if not held or None in held:
        return False
    return len(set(held)) == min(len(held), replicas)


@dataclass(frozen=True, slots=True)
class Spread:
    """How CPU-seconds fell over the replicas in one phase."""

    cpu_s: tuple[float, ...]

    @property
    def total_s(self) -> float:
        return sum(self.cpu_s)

    @property
    def busiest_share(self) -> float:
        """The busiest replica's part of the total (1/n is a perfect spread, 1.0 one replica)."""
        return max(self.cpu_s) / self.total_s if self.total_s > 0 else float("nan")

    @property
    def max_over_min(self) -> float:
        """The busiest replica's CPU over the idlest's (inf when one did nothing at all)."""
        low = min(self.cpu_s)
        if low <= 0:
            return float("inf") if max(self.cpu_s) > 0 else float("nan")
        return max(self.cpu_s) / low


def spread_of(before: Mapping[int, float], after: Mapping[int, float]) -> Spread:
    """The CPU-seconds each replica spent between two readings (replica index to seconds).

    Raises ValueError when the readings name different replicas, or a reading went down (the
    replica restarted in between: its counters are not comparable).
    """
    if set(before) != set(after):
        raise ValueError(f"readings of different replicas: {sorted(before)} and {sorted(after)}")
    deltas = []
    for index in sorted(before):
        delta = after[index] - before[index]
        if delta < 0:
            raise ValueError(f"replica {index}'s CPU went down ({before[index]} to {after[index]} s)")
        deltas.append(delta)
    return Spread(tuple(deltas))
