"""The watch manager's decisions, without I/O: which streams to stop, start, restart or re-snapshot.

`WatchManager.apply` discovers the clusters, resolves the rules and then has to turn "these
streams run, those are wanted" into actions. Those decisions depend only on sets of stream
specs and the target settings, so they live here as pure functions, tested without a cluster:
`desired_streams` (what each target wants, keeping streams of types discovery stopped
serving) and `plan_streams` (the changes that get there).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from pipeline.config import TargetSettings
from pipeline.prune import Prune
from pipeline.watch.resolve import StreamSpec

__all__ = ["StreamPlan", "desired_streams", "plan_streams"]


@dataclass(frozen=True, slots=True)
class StreamPlan:
    """What `WatchManager.apply` does to the running streams, in this order.

    `stop` streams are no longer wanted; `restart` streams are wanted but their cluster's
    connection settings changed, so they stop and start again on the new client and resume from
    their cursors. `start` are the wanted streams not running once those stopped (restarted ones
    included) that this replica may write for (it leads their shard); `fresh` are the cursor
    keys among them that replace a stopped stream (a new selector or version under the same
    key) and must snapshot instead of resuming. `forget` are the cursor keys of stopped streams
    nothing runs under any more (tombstoned, so re-adding one later starts with a snapshot).
    `resnapshot` are the running streams (after the changes) of targets whose `prune` became
    `Always`: only a fresh snapshot sweeps what they left behind.
    """

    stop: list[StreamSpec]
    restart: list[StreamSpec]
    start: list[StreamSpec]
    fresh: frozenset[str]
    forget: frozenset[str]
    resnapshot: list[StreamSpec]

    def stop_reason(self, spec: StreamSpec) -> str:
        """Why a stream of `stop` or `restart` stops: `cluster_changed`, `replaced` or `removed`."""
        if spec in self.restart:
            return "cluster_changed"
        return "replaced" if spec.cursor_key in self.fresh else "removed"


def desired_streams(
    target: TargetSettings,
    previous: TargetSettings | None,
    running: Collection[StreamSpec],
    resolved: Iterable[StreamSpec] | None,
) -> set[StreamSpec]:
    """The streams `target` wants, given what its rules resolve to now (None: discovery failed).

    A target whose settings did not change keeps its running streams of types discovery no
    longer serves (or cannot be asked about): a type that vanishes for a moment must not stop its
    stream. A resolved type with a changed version still replaces its stream.
    """
    unchanged = previous == target
    mine = {s for s in running if s.stream.target == target.name and s.stream.cluster == target.cluster}
    if resolved is None:
        return set(mine) if unchanged else set()
    wanted = set(resolved)
    if unchanged:
        covered = {(s.stream.group, s.stream.resource, s.stream.scope) for s in wanted}
        wanted |= {s for s in mine if (s.stream.group, s.stream.resource, s.stream.scope) not in covered}
    return wanted


def plan_streams(
    running: Collection[StreamSpec],
    desired: Collection[StreamSpec],
    *,
    retired_clusters: Collection[str],
    writable: Callable[[StreamSpec], bool],
    previous_targets: Mapping[str, TargetSettings],
    targets: Sequence[TargetSettings],
) -> StreamPlan:
    """The changes that take `running` to `desired` (see `StreamPlan` for what each list means)."""
    stop = [spec for spec in running if spec not in desired]
    restart = [spec for spec in running if spec in desired and spec.stream.cluster in retired_clusters]
    left = {spec for spec in running if spec not in stop and spec not in restart}
    start = [spec for spec in desired if spec not in left and writable(spec)]
    stopped_keys = {spec.cursor_key for spec in stop}
    after = left | set(start)
    widened = {
        name
        for name, before in previous_targets.items()
        if before.prune != Prune.ALWAYS and any(t.name == name and t.prune == Prune.ALWAYS for t in targets)
    }
    return StreamPlan(
        stop=stop,
        restart=restart,
        start=start,
        fresh=frozenset(spec.cursor_key for spec in start if spec.cursor_key in stopped_keys),
        forget=frozenset(stopped_keys - {spec.cursor_key for spec in after}),
        resnapshot=[spec for spec in running if spec in left and spec.stream.target in widened]
        + [spec for spec in start if spec.stream.target in widened],
    )
