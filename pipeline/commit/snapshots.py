"""The commit worker's snapshot and push decisions, without I/O.

A watch stream's snapshot reaches a branch as `ResyncBegin`, chunks and `ResyncEnd`. Which
snapshot a record belongs to, when a newer epoch supersedes an unfinished one, when a record is
stale and when a finished snapshot is complete enough to sweep the branch are decisions about
the records only; `SnapshotBook` makes them and says what to settle without a commit and why.
Whether a snapshot is already on the branch is judged at its end, never by its first records: a
window of another stream committed while it was open claims offsets past its `ResyncBegin`.
`push_due_at` decides when the next push may run. `BranchWorker` applies the outcomes (metrics,
logs, Git) and is tested with a real repository; these are tested without one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.codec.branch_work import ResyncBegin, ResyncChunk, ResyncEnd, ResyncObject, WorkItem
from pipeline.commit.metrics import SkipReason

__all__ = ["Carried", "Collected", "Complete", "Skipped", "SnapshotBook", "push_due_at"]

Offset = tuple[int, int]
Stream = tuple[str, str, str, str]


@dataclass(slots=True)
class Collected:
    """A snapshot being collected between ResyncBegin and ResyncEnd.

    `in_parts` snapshots are committed part by part as their chunks arrive (`part_due`): `objects`
    then holds only the part being filled, `received` counts every object the chunks carried, and
    `listed`/`keep` remember what the committed parts listed, for the sweep of the last part.
    """

    epoch: int
    begin: WorkItem
    objects: list[ResyncObject] = field(default_factory=list)
    chunks: int = 0
    offsets: list[Offset] = field(default_factory=list)
    in_parts: bool = False
    received: int = 0
    # how many parts were committed before the end (the end then pushes at once, as they did)
    parts: int = 0
    # the names of the objects the committed parts listed, per namespace (not a (namespace, name)
    # tuple per object: held for every object until the snapshot's end), and their canonical paths
    listed: dict[str, set[str]] = field(default_factory=dict)
    keep: set[str] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class Skipped:
    """Records that end without a commit: settle their offsets, count them under `reason`."""

    reason: SkipReason
    offsets: list[Offset]
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Complete:
    """A snapshot whose end marker matched what arrived: commit it (and sweep) with `offsets`."""

    snapshot: Collected
    offsets: list[Offset]


@dataclass(frozen=True, slots=True)
class Carried:
    """A complete snapshot whose end the branch tip's trailer claims: its commit is on the branch,
    so settle `offsets` without a commit (and write its objects' states again)."""

    snapshot: Collected
    offsets: list[Offset]


class SnapshotBook:
    """The snapshots of one branch in progress, one per watch stream, newest epoch wins."""

    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open: dict[Stream, Collected] = {}

    @property
    def offsets(self) -> int:
        """Offsets held by unfinished snapshots (settled once they finish or are superseded)."""
        return sum(len(s.offsets) for s in self._open.values())

    def clear(self) -> None:
        """Forget every unfinished snapshot; its offsets stay unsettled (the next owner re-reads them)."""
        self._open.clear()

    def drop_target(self, target: str) -> Skipped | None:
        """Forget the unfinished snapshots of a deleted target: its streams stopped, no end will come."""
        gone = [stream for stream in self._open if stream[0] == target]
        offsets = [offset for stream in gone for offset in self._open.pop(stream).offsets]
        if not offsets:
            return None
        return Skipped(
            SkipReason.DELETED_TARGET,
            offsets,
            f"{len(gone)} unfinished snapshot(s) of deleted target {target} dropped",
        )

    def begin(self, item: WorkItem, body: ResyncBegin, *, carried: bool = False) -> Skipped | None:
        """Open a snapshot; an unfinished older one of the same stream is superseded.

        A snapshot is committed in parts unless the branch tip's `Reverser-Offset` is at or past its
        `ResyncBegin` (`carried`): the tip may then hold the whole snapshot, or parts of it with a
        later commit on top, and only its end can say which, so it is collected whole as before. A
        part claims no offset, so a snapshot begun after the tip's claim stays after it until its
        last part, and a restart reads it again from its begin.
        """
        older = self._open.pop(item.snapshot_key, None)
        self._open[item.snapshot_key] = Collected(
            body.epoch, item, offsets=[(item.partition, item.offset)], in_parts=not carried
        )
        if older is None:
            return None
        return Skipped(
            SkipReason.SUPERSEDED_SNAPSHOT,
            older.offsets,
            f"snapshot epoch {older.epoch} of {'/'.join(item.snapshot_key)} superseded by epoch {body.epoch} "
            "before it finished",
        )

    def chunk(self, item: WorkItem, body: ResyncChunk) -> Skipped | None:
        """Add a chunk to its snapshot; a chunk of no open snapshot (or another epoch) is stale."""
        snapshot = self._open.get(item.snapshot_key)
        if snapshot is None or snapshot.epoch != body.epoch:
            return Skipped(SkipReason.STALE_SNAPSHOT, [(item.partition, item.offset)])
        snapshot.objects.extend(body.objects)
        snapshot.received += len(body.objects)
        snapshot.chunks += 1
        snapshot.offsets.append((item.partition, item.offset))
        return None

    def part_due(self, item: WorkItem, part_objects: int) -> Collected | None:
        """The snapshot of `item`'s stream when it is committed in parts and holds a full part
        (`part_objects` objects or more): its held objects are to be committed now, without a sweep
        and without settling an offset (its offsets settle with the last part)."""
        snapshot = self._open.get(item.snapshot_key)
        if snapshot is None or not snapshot.in_parts or len(snapshot.objects) < part_objects:
            return None
        return snapshot

    def end(self, item: WorkItem, body: ResyncEnd, *, carried: bool = False) -> Skipped | Complete | Carried:
        """Close a snapshot: complete when the chunk and object counts match the end marker.

        `carried` says the branch tip's `Reverser-Offset` is at or past this end marker: a complete
        snapshot was then committed by the previous owner (its commit claims this offset) and is
        `Carried`, not committed again. Its begin and chunks were collected here like any others,
        because a trailer past them proves nothing about a snapshot whose end it does not reach.
        """
        here = (item.partition, item.offset)
        snapshot = self._open.get(item.snapshot_key)
        if snapshot is None or snapshot.epoch != body.epoch:
            return Skipped(SkipReason.STALE_SNAPSHOT, [here])
        del self._open[item.snapshot_key]
        offsets = [*snapshot.offsets, here]
        if snapshot.chunks != body.chunks or snapshot.received != body.objects:
            return Skipped(
                SkipReason.INCOMPLETE_SNAPSHOT,
                offsets,
                f"snapshot epoch {body.epoch} of {'/'.join(item.snapshot_key)} is incomplete "
                f"({snapshot.chunks}/{body.chunks} chunks, {snapshot.received}/{body.objects} "
                "objects); no sweep",
            )
        return Carried(snapshot, offsets) if carried else Complete(snapshot, offsets)


def push_due_at(now: float, last_push: float | None, cooldown_s: float) -> float:
    """When the next push may run: now, or `cooldown_s` after the last one (pushes are batched)."""
    if last_push is None or now - last_push >= cooldown_s:
        return now
    return last_push + cooldown_s
