"""Watch shards: which replica watches which resource types of a cluster (pure decisions).

With `watch_shards: 1` (the default) one Lease elects the single replica that watches a whole
cluster. A cluster with many watched types can instead be split into shards by group/resource:
every shard has its own Lease and its own fencing transactional id, so each shard has exactly
the guarantees of today's single leader, and the shards spread over the replicas.

Who *should* hold a shard is decided here, from the live replicas (the roster) alone, so every
replica that sees the same roster computes the same assignment without talking to the others:
the shards are dealt out by rendezvous weight with exact quotas, so no replica holds more than
one shard more than another, and a replica joining or leaving moves few shards. Who *does*
hold a shard is still the Lease's business: a replica takes a vacant shard Lease only when the
assignment gives it the shard (or when the shard has been vacant too long, see `may_take`), and
gives a held one back when the assignment moves it to another live replica.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = [
    "ORPHAN_AFTER_DURATIONS",
    "ShardStanding",
    "assign_shards",
    "may_take",
    "shard_key",
    "shard_lease_name",
    "shard_of",
]

#: A shard Lease vacant for this many lease durations may be taken by any replica, whatever the
#: assignment says: replicas whose rosters disagree must not leave a shard unwatched for good.
ORPHAN_AFTER_DURATIONS = 2.0


def _digest(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def shard_of(group: str, resource: str, shards: int) -> int:
    """The shard that watches `group/resource`: a stable hash, the same in every process.

    All streams of one type land in one shard, so one writer appends every event of a
    (route, group/resource) key and the log keeps their order.
    """
    if shards < 1:
        raise ValueError(f"shards must be at least 1, not {shards}")
    return _digest(f"{group}/{resource}") % shards


def shard_lease_name(base: str, shard: int, shards: int) -> str:
    """One shard keeps the cluster's Lease name (an unsharded cluster is unchanged)."""
    return base if shards == 1 else f"{base}-shard-{shard}"


def shard_key(cluster: str, shard: int, shards: int) -> str:
    """How claims, stream reports and logs name a shard: the cluster's own name when unsharded."""
    return cluster if shards == 1 else f"{cluster}/shard-{shard}"


def assign_shards(lease_base: str, shards: int, members: Collection[str]) -> dict[int, str]:
    """Shard → the replica that should hold it, for the live `members` (empty: no assignment).

    Every member gets `shards // n` shards, and `shards % n` of them one more: exact quotas, so the
    spread is even. The (shard, member) pairs are taken by rendezvous weight, strongest first, and
    a pair whose shard is still free and whose member still has room wins. Which members get the
    extra shard follows the weights too, not the members' order, so a replica leaving moves its own
    shards and few others. The order of `members` does not matter.
    """
    live = sorted(set(members))
    if not live:
        return {}
    quota, extra = divmod(shards, len(live))
    held = dict.fromkeys(live, 0)
    pairs = sorted(
        ((_digest(f"{lease_base}|{shard}|{m}"), m, shard) for shard in range(shards) for m in live),
        reverse=True,
    )
    assignment: dict[int, str] = {}
    for _, member, shard in pairs:
        if shard in assignment or held[member] > quota:
            continue
        if held[member] == quota:
            if extra == 0:
                continue
            extra -= 1
        assignment[shard] = member
        held[member] += 1
    return assignment


def may_take(
    shard: int, identity: str, assignment: Mapping[int, str], *, vacant_s: float, duration_s: float
) -> bool:
    """Whether `identity` may take shard `shard`'s vacant Lease now.

    The assigned replica may at once; any replica may once the Lease has stayed vacant for
    `ORPHAN_AFTER_DURATIONS` lease durations (the assigned one is gone, or sees another roster).
    """
    return assignment.get(shard) == identity or vacant_s >= ORPHAN_AFTER_DURATIONS * duration_s


@dataclass(frozen=True, slots=True)
class ShardStanding:
    """A shard Lease's `Standing` (`pipeline.kube.lease`): the assignment over the live roster.

    Until the roster has been listed once, only this replica is known, so the replica takes only
    orphaned shards (it would otherwise take them all) and gives none up: a replica that cannot
    read the roster at all still watches what nobody else does.
    """

    identity: str
    lease_base: str
    shard: int
    shards: int
    duration_s: float
    members: Callable[[], Collection[str]]
    listed: Callable[[], bool]

    def may_take(self, vacant_s: float) -> bool:
        if not self.listed():
            # no roster (yet, or not readable: its errors are logged): only orphaned shards
            return may_take(self.shard, self.identity, {}, vacant_s=vacant_s, duration_s=self.duration_s)
        assignment = self._assignment()
        return may_take(self.shard, self.identity, assignment, vacant_s=vacant_s, duration_s=self.duration_s)

    def may_keep(self) -> bool:
        if not self.listed():
            return True
        return self._assignment().get(self.shard) == self.identity

    def _assignment(self) -> Mapping[int, str]:
        return _dealt(self.lease_base, self.shards, frozenset(self.members()))


@functools.lru_cache(maxsize=8)
def _dealt(lease_base: str, shards: int, members: frozenset[str]) -> Mapping[int, str]:
    """`assign_shards`, remembered: every shard's Lease asks on every round, and the roster rarely
    changes between them. A read-only view, as the same mapping answers them all."""
    return MappingProxyType(assign_shards(lease_base, shards, members))
