"""A delete no watch event carried: files this pipeline wrote that a fresh snapshot no longer lists.

Under the default prune mode `OnEvent` such a file is deleted like a watch DELETE would delete it,
in its own commit before the snapshot's, authored by whoever the router's deletion evidence names
for that object (matched by uid, or by name for a name-keyed delete), else unknown. Files the
pipeline did not write (foreign files) are still kept. On a real bare remote.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from prometheus_client import REGISTRY

from pipeline.codec.branch_work import Removal, ResyncEnd, WorkItem
from tests.commit.helpers import ALICE, BOB, NOBODY, Work, cm, files, foreign_push, log_lines
from tests.commit.test_branch_worker import Harness

A = "live/team-a/configmaps/a.yaml"
B = "live/team-a/configmaps/b.yaml"
C = "live/team-a/configmaps/c.yaml"
D = "live/team-a/configmaps/d.yaml"
FOREIGN = "live/team-a/configmaps/hand-written.yaml"
# a whole object document at its own path: what prune Always may sweep (pipeline/commit/ownership.py)
HAND_WRITTEN = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: hand-written\n  namespace: team-a\n"


def with_removals(items: list[WorkItem], removals: tuple[Removal, ...] | None) -> list[WorkItem]:
    """The snapshot's items with deletion evidence on its end marker, as the router attaches it."""
    end = items[-1]
    assert isinstance(end.body, ResyncEnd)
    return [*items[:-1], replace(end, body=replace(end.body, removals=removals))]


def deletes(kind: str) -> float:
    return (
        REGISTRY.get_sample_value(
            "reverser_commit_snapshot_deletes_total", {"target": "t1", "author_kind": kind}
        )
        or 0.0
    )


async def test_absent_files_the_pipeline_wrote_are_deleted_under_their_deleters(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    w = Work()
    await h.feed(
        w.create(cm("a"), rv="10"),
        w.create(cm("b"), rv="11"),
        w.create(cm("c"), rv="12"),
        w.create(cm("d"), rv="13"),
    )
    await h.settle_time(5)
    foreign_push(h.remote, tmp_path, FOREIGN, "kind: ConfigMap\n")
    user, unknown = deletes("user"), deletes("unresolved")
    # listed at 30: b deleted by bob (uid evidence), d by a name-keyed delete, c by nobody we know
    evidence = (
        Removal("uid-b", "team-a", "b", BOB),
        Removal("", "team-a", "d", BOB),
        Removal("uid-other", "team-a", "c", ALICE),  # another object that was called c once
    )
    await h.feed(*with_removals(w.snapshot(1, [cm("a")], rv="30", object_rvs={"a": "10"}), evidence))
    await h.settle_time(5)
    tree = files(h.remote)
    assert A in tree
    assert FOREIGN in tree, "a file the pipeline did not write is kept under OnEvent"
    assert not {B, C, D} & set(tree)
    history = log_lines(h.remote, fmt="%an|%s")
    assert history[-2:] == [
        "Bob|bob on t1: 2 resource(s)",
        "unknown (attribution unresolved)|[DELETE] v1/configmaps/c",
    ], "the snapshot changes nothing else: no reconciled commit"
    assert deletes("user") == user + 2
    assert deletes("unresolved") == unknown + 1
    assert sorted(h.settled) == [(0, i) for i in range(w.offset)]


async def test_a_late_watch_delete_after_the_absence_does_not_bring_the_file_back(tmp_path: Path) -> None:
    """The LIST fallback releases the delete buffered during its LIST after the snapshot."""
    h = Harness(tmp_path)
    w = Work()
    await h.feed(w.create(cm("a"), rv="10"))
    await h.settle_time(5)
    items = w.snapshot(1, [], rv="20")
    await h.feed(*with_removals(items, (Removal("uid-a", "team-a", "a", BOB),)), w.delete("a", BOB, rv="15"))
    await h.settle_time(5)
    assert A not in files(h.remote)
    assert log_lines(h.remote, fmt="%an|%s")[1:] == ["Bob|[DELETE] v1/configmaps/a"]


async def test_without_a_fact_index_the_deletion_is_the_committers(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    w = Work()
    await h.feed(w.create(cm("a"), NOBODY, rv="10"))
    await h.settle_time(5)
    await h.feed(*w.snapshot(1, [], rv="20"))  # removals None: attribution not attempted
    await h.settle_time(5)
    assert A not in files(h.remote)
    assert log_lines(h.remote, fmt="%an|%s")[-1] == "Reverser Pipeline|[DELETE] v1/configmaps/a"


async def test_a_new_worker_proves_from_the_history_which_files_the_pipeline_wrote(tmp_path: Path) -> None:
    """After a restart or a failover the ledger may not know an old file; the branch history does."""
    h = Harness(tmp_path)
    w = Work()
    await h.feed(w.create(cm("a"), rv="10"), w.create(cm("b"), rv="11"))
    await h.settle_time(5)
    foreign_push(h.remote, tmp_path, B, "kind: ConfigMap\nmetadata: {name: b}\n")  # a human edited b last
    h.worker = h.new_worker()  # no history reader: an empty ledger
    items = with_removals(w.snapshot(1, [], rv="20"), (Removal("uid-a", "team-a", "a", BOB),))
    await h.feed(*items)
    await h.settle_time(5)
    tree = files(h.remote)
    assert A not in tree, "written by the pipeline's own commit"
    assert B in tree, "last changed by somebody else: kept"
    # the ledger is empty, so a's uid is unknown: only name-keyed evidence could name the deleter
    last = log_lines(h.remote, fmt="%an|%s")[-1]
    assert last == "unknown (attribution unresolved)|[DELETE] v1/configmaps/a"


async def test_prune_always_is_unchanged_and_never_keeps_nothing(tmp_path: Path) -> None:
    h = Harness(tmp_path, prune="Always")
    w = Work()
    await h.feed(w.create(cm("a"), rv="10"))
    await h.settle_time(5)
    foreign_push(h.remote, tmp_path, FOREIGN, HAND_WRITTEN)
    items = with_removals(w.snapshot(1, [], rv="20"), (Removal("uid-a", "team-a", "a", BOB),))
    await h.feed(*items)
    await h.settle_time(5)
    tree = files(h.remote)
    assert A not in tree
    assert FOREIGN not in tree
    last = log_lines(h.remote, fmt="%an|%s")[-1]
    assert last == "Reverser Pipeline|reconciled 2 configmaps (last resourceVersion: 20)"

    never = Harness(tmp_path / "never", prune="Never")
    w = Work()
    await never.feed(w.create(cm("a"), rv="10"))
    await never.settle_time(5)
    await never.feed(*with_removals(w.snapshot(1, [], rv="20"), (Removal("uid-a", "team-a", "a", BOB),)))
    await never.settle_time(5)
    assert A in files(never.remote)
