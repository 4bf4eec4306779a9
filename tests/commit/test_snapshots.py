"""The commit worker's snapshot and push decisions, without Git or a log (pipeline/commit/snapshots.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.codec.branch_work import Body, ResyncBegin, ResyncChunk, ResyncEnd, ResyncObject, WorkItem
from pipeline.codec.stream_id import StreamId
from pipeline.commit.snapshots import Carried, Complete, Skipped, SnapshotBook, push_due_at


class Stream:
    """Work items of one watch stream at increasing offsets of partition 0."""

    def __init__(self, resource: str = "configmaps") -> None:
        self.resource = resource
        self.offset = 0

    def item(self, body: Body) -> WorkItem:
        self.offset += 1
        return WorkItem(
            0, self.offset, "git", "main", "live", StreamId("t", "c", "", "v1", self.resource, ""), 0, body
        )


def objects(n: int) -> tuple[ResyncObject, ...]:
    return tuple(ResyncObject("ns", f"o{i}", f"u{i}", str(i), b"{}") for i in range(n))


def test_a_complete_snapshot_is_committed_with_every_offset() -> None:
    book, s = SnapshotBook(), Stream()
    assert book.begin(s.item(ResyncBegin(7, "1")), ResyncBegin(7, "1")) is None
    for seq in range(2):
        body = ResyncChunk(7, seq, objects(3))
        assert book.chunk(s.item(body), body) is None
    assert book.offsets == 3
    end = ResyncEnd(7, 2, 6, "9")
    outcome = book.end(s.item(end), end)
    assert isinstance(outcome, Complete)
    assert outcome.offsets == [(0, 1), (0, 2), (0, 3), (0, 4)]
    assert [o.name for o in outcome.snapshot.objects] == [f"o{i}" for i in range(3)] * 2
    assert book.offsets == 0


def test_a_newer_epoch_supersedes_an_unfinished_snapshot() -> None:
    book, s = SnapshotBook(), Stream()
    book.begin(s.item(ResyncBegin(1, "")), ResyncBegin(1, ""))
    chunk = ResyncChunk(1, 0, objects(1))
    book.chunk(s.item(chunk), chunk)
    skipped = book.begin(s.item(ResyncBegin(2, "")), ResyncBegin(2, ""))
    assert skipped is not None
    assert (skipped.reason, skipped.offsets) == ("superseded_snapshot", [(0, 1), (0, 2)])
    assert "epoch 1" in skipped.detail
    assert "epoch 2" in skipped.detail
    late = ResyncChunk(1, 1, objects(1))
    assert book.chunk(s.item(late), late) == Skipped("stale_snapshot", [(0, 4)])
    old_end = ResyncEnd(1, 2, 2, "")
    assert book.end(s.item(old_end), old_end) == Skipped("stale_snapshot", [(0, 5)])
    assert book.offsets == 1, "epoch 2 is still open"


def test_streams_are_collected_apart() -> None:
    book, cms, secrets = SnapshotBook(), Stream("configmaps"), Stream("secrets")
    book.begin(cms.item(ResyncBegin(1, "")), ResyncBegin(1, ""))
    assert book.begin(secrets.item(ResyncBegin(1, "")), ResyncBegin(1, "")) is None
    end = ResyncEnd(1, 0, 0, "")
    assert isinstance(book.end(secrets.item(end), end), Complete)
    assert isinstance(book.end(cms.item(end), end), Complete)


def test_an_end_marker_that_does_not_match_what_arrived_sweeps_nothing() -> None:
    book, s = SnapshotBook(), Stream()
    book.begin(s.item(ResyncBegin(3, "")), ResyncBegin(3, ""))
    chunk = ResyncChunk(3, 0, objects(2))
    book.chunk(s.item(chunk), chunk)
    end = ResyncEnd(3, 2, 4, "")
    outcome = book.end(s.item(end), end)
    assert isinstance(outcome, Skipped)
    assert (outcome.reason, outcome.offsets) == ("incomplete_snapshot", [(0, 1), (0, 2), (0, 3)])
    assert "1/2 chunks, 2/4 objects" in outcome.detail
    book.begin(s.item(ResyncBegin(4, "")), ResyncBegin(4, ""))
    book.clear()
    assert book.offsets == 0


def test_pushes_wait_for_the_cooldown_after_the_last_one() -> None:
    assert push_due_at(100.0, None, 5.0) == 100.0
    assert push_due_at(100.0, 90.0, 5.0) == 100.0
    assert push_due_at(100.0, 97.0, 5.0) == 102.0
    assert push_due_at(100.0, 95.0, 5.0) == 100.0, "exactly at the cooldown"


def test_a_deleted_targets_unfinished_snapshots_are_dropped_and_others_kept() -> None:
    book, mine = SnapshotBook(), Stream()
    book.begin(mine.item(ResyncBegin(1, "")), ResyncBegin(1, ""))
    chunk = ResyncChunk(1, 0, objects(1))
    book.chunk(mine.item(chunk), chunk)
    elsewhere = WorkItem(
        0, 50, "git", "main", "other", StreamId("u", "c", "", "v1", "configmaps", ""), 0, ResyncBegin(3, "")
    )
    book.begin(elsewhere, ResyncBegin(3, ""))
    assert book.drop_target("nobody") is None
    skipped = book.drop_target("t")
    assert skipped is not None
    assert (skipped.reason, skipped.offsets) == ("deleted_target", [(0, 1), (0, 2)])
    assert "deleted target t" in skipped.detail
    assert book.offsets == 1  # the other target's snapshot stays open
    assert book.drop_target("t") is None


def test_a_snapshot_is_judged_at_its_end_whatever_a_trailer_says_of_its_first_records() -> None:
    """The branch tip's trailer may claim a snapshot's begin and chunks (another stream's window
    was committed while it was open) without its end: they are collected again, and only an end
    the trailer claims makes the snapshot `Carried` (already on the branch) instead of `Complete`."""
    book, s = SnapshotBook(), Stream()
    book.begin(s.item(ResyncBegin(5, "")), ResyncBegin(5, ""))
    chunk = ResyncChunk(5, 0, objects(2))
    book.chunk(s.item(chunk), chunk)
    end = ResyncEnd(5, 1, 2, "")
    done = book.end(s.item(end), end, carried=True)
    assert isinstance(done, Carried)
    assert done.offsets == [(0, 1), (0, 2), (0, 3)]
    assert [o.name for o in done.snapshot.objects] == ["o0", "o1"]
    assert book.offsets == 0
    short = ResyncEnd(6, 2, 2, "")
    book.begin(s.item(ResyncBegin(6, "")), ResyncBegin(6, ""))
    book.chunk(s.item(ResyncChunk(6, 0, objects(2))), ResyncChunk(6, 0, objects(2)))
    skipped = book.end(s.item(short), short, carried=True)
    assert isinstance(skipped, Skipped)
    assert skipped.reason == "incomplete_snapshot", "a carried end of an incomplete snapshot is no commit"


def test_a_snapshot_in_parts_hands_each_full_part_over_and_counts_every_object_at_its_end() -> None:
    book, s = SnapshotBook(), Stream()
    book.begin(s.item(ResyncBegin(3, "1")), ResyncBegin(3, "1"))
    first = s.item(ResyncChunk(3, 0, objects(2)))
    book.chunk(first, ResyncChunk(3, 0, objects(2)))
    assert book.part_due(first, 3) is None, "two objects are not a part of three"
    second = s.item(ResyncChunk(3, 1, objects(2)))
    book.chunk(second, ResyncChunk(3, 1, objects(2)))
    part = book.part_due(second, 3)
    assert part is not None
    assert len(part.objects) == 4
    part.objects = []  # the part's plan takes them
    assert book.part_due(second, 3) is None
    end = ResyncEnd(3, 2, 4, "9")
    done = book.end(s.item(end), end)
    assert isinstance(done, Complete), "objects given to parts still count for the end marker"
    assert [o for _, o in done.offsets] == [1, 2, 3, 4], "every offset settles with the last part"


def test_a_snapshot_begun_at_or_below_the_tip_trailer_is_collected_whole() -> None:
    """The tip may then hold the snapshot, or its parts under a later commit: only its end says."""
    book, s = SnapshotBook(), Stream()
    book.begin(s.item(ResyncBegin(3, "1")), ResyncBegin(3, "1"), carried=True)
    chunk = s.item(ResyncChunk(3, 0, objects(5)))
    book.chunk(chunk, ResyncChunk(3, 0, objects(5)))
    assert book.part_due(chunk, 1) is None


# a restart in the middle of interleaved streams -------------------------------------------------

# One record of a branch's log: a snapshot record of stream "a" or "b", or a write of another
# stream that its window commits at once (so its commit's trailer is its own offset).
Step = tuple[str, str, bool]  # (kind, stream, end marker short of what arrived)
steps = st.lists(
    st.tuples(
        st.sampled_from(["begin", "chunk", "end", "write"]), st.sampled_from(["a", "b"]), st.booleans()
    ),
    max_size=25,
)


def records(plan: list[Step]) -> list[WorkItem | None]:
    """The log the steps make (None for another stream's write), offsets 0, 1, ... of partition 0.
    Each chunk carries one object named after its stream, epoch and place."""
    epoch = {"a": 0, "b": 0}
    chunks = {"a": 0, "b": 0}
    found: list[WorkItem | None] = []
    for offset, (kind, stream, short) in enumerate(plan):
        body: Body
        if kind == "write":
            found.append(None)
            continue
        if kind == "begin":
            epoch[stream] += 1
            chunks[stream] = 0
            body = ResyncBegin(epoch[stream], "")
        elif kind == "chunk":
            chunks[stream] += 1
            name = f"{stream}{epoch[stream]}-{chunks[stream]}"
            body = ResyncChunk(
                epoch[stream], chunks[stream] - 1, (ResyncObject("ns", name, name, "1", b"{}"),)
            )
        else:
            body = ResyncEnd(epoch[stream], chunks[stream] + short, chunks[stream] + short, "")
        found.append(
            WorkItem(0, offset, "git", "main", "live", StreamId("t", "c", "", "v1", stream, ""), 0, body)
        )
    return found


@dataclass
class Run:
    """What one owner of the branch did: its commits (by the offset their trailer claims), the
    snapshots it found already on the branch, the offsets it settled and the objects of the
    snapshots it committed complete (a part claims no offset, so it is no commit here)."""

    commits: list[int] = field(default_factory=list)
    carried: list[int] = field(default_factory=list)
    settled: set[int] = field(default_factory=set)
    complete: set[str] = field(default_factory=set)


def run(
    log: list[WorkItem | None], start: int, stop: int, trailer: int, tree: set[str], part_objects: int
) -> Run:
    """The worker's rule: records at or below the tip's trailer are skipped, except a snapshot's,
    which the book collects again and judges at its end. A snapshot begun past the trailer is
    committed in parts of `part_objects` (`tree` is the branch's files: a part that writes only
    what it has makes no commit); the rest of it, and a snapshot collected whole, at its end."""
    book, done = SnapshotBook(), Run()
    for offset in range(start, stop):
        item = log[offset]
        if item is None:
            if offset > trailer:
                done.commits.append(offset)
            done.settled.add(offset)
            continue
        body = item.body
        if isinstance(body, ResyncBegin):
            outcome: Skipped | Complete | Carried | None = book.begin(item, body, carried=offset <= trailer)
        elif isinstance(body, ResyncChunk):
            outcome = book.chunk(item, body)
            part = book.part_due(item, part_objects)
            if part is not None:
                names = {o.name for o in part.objects}
                part.objects = []
                part.listed.setdefault("ns", set()).update(names)
                tree |= names
        else:
            assert isinstance(body, ResyncEnd)
            outcome = book.end(item, body, carried=offset <= trailer)
            if isinstance(outcome, Complete):
                done.commits.append(offset)
                names = {o.name for o in outcome.snapshot.objects}
                done.complete |= names.union(*outcome.snapshot.listed.values())
                tree |= names
            elif isinstance(outcome, Carried):
                done.carried.append(offset)
        if outcome is not None:
            done.settled.update(o for _, o in outcome.offsets)
    return done


@settings(max_examples=500, deadline=None)
@given(plan=steps, data=st.data())
def test_a_restart_anywhere_commits_every_snapshot_once(plan: list[Step], data: st.DataObject) -> None:
    """Kill the worker after any record, between two parts of a snapshot too: the next owner starts
    at the oldest unsettled offset with the trailer of the last commit pushed (a part claims
    none); together they commit exactly the snapshot ends and writes one uninterrupted run
    commits, each once, however the snapshots interleave with other streams' commits, and every
    object of a complete snapshot is on the branch. A part given again after the restart writes
    what the branch has, so it makes no second commit."""
    part_objects = data.draw(st.sampled_from([1, 2, 3, 1_000]))
    log = records(plan)
    whole_tree: set[str] = set()
    whole = run(log, 0, len(log), -1, whole_tree, part_objects)
    unparted = run(log, 0, len(log), -1, set(), 1_000)
    assert (whole.commits, whole.complete) == (unparted.commits, unparted.complete), "parts change no outcome"
    crash = data.draw(st.integers(min_value=0, max_value=len(log)))
    tree: set[str] = set()
    before = run(log, 0, crash, -1, tree, part_objects)
    trailer = max(before.commits, default=-1)
    restart = min(set(range(crash)) - before.settled, default=crash)
    after = run(log, restart, len(log), trailer, tree, part_objects)
    assert before.commits + after.commits == whole.commits
    assert set(after.carried) <= set(before.commits)
    assert before.settled | after.settled == whole.settled
    assert whole.complete <= tree, "an object of a complete snapshot is lost"
    assert tree <= whole_tree, "a restart wrote what one run never writes"
