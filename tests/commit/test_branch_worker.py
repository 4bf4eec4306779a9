"""The per-branch FIFO against a real local bare remote, with an injected clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from pipeline.codec.branch_work import TargetDeleted, WorkAuthor
from pipeline.commit.branch import BranchWorker
from pipeline.commit.git.repo import LocalRepo
from pipeline.commit.ports import BranchPorts
from pipeline.commit.window import CloseReason
from pipeline.commit.yamlrender import render_object
from pipeline.config import ProviderSettings, Settings, TargetSettings
from tests.commit.helpers import (
    ALICE,
    BOB,
    CONFIGURED,
    NOBODY,
    Work,
    bare_remote,
    cm,
    files,
    foreign_push,
    git,
    log_lines,
)
from tests.support.wait import wait_for

ALICE_SA = WorkAuthor("RESOLVED", "system:serviceaccount:flux:kc", "", "", "exact", "serviceaccount")


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Harness:
    def __init__(
        self,
        tmp_path: Path,
        prune: str = "OnEvent",
        window_s: float = 5.0,
        cooldown_s: float = 5.0,
        size_cap: int = 8 * 1024 * 1024,
        targets: list[TargetSettings] | None = None,
        max_age_s: float | None = None,
        part_objects: int = 2_500,
    ) -> None:
        self.tmp_path = tmp_path
        self.remote = bare_remote(tmp_path / "remote.git")
        self.provider = ProviderSettings(
            name="git",
            url=str(self.remote),
            commit_window_s=window_s,
            commit_window_max_s=max_age_s,
            push_cooldown_s=cooldown_s,
            window_max_bytes=size_cap,
            snapshot_part_objects=part_objects,
        )
        self.settings = Settings(
            workdir=tmp_path / "work",
            providers=[self.provider],
            targets=targets or [TargetSettings(name="t1", provider="git", path="live", prune=prune)],
        )
        self.clock = Clock()
        self.settled: list[tuple[int, int]] = []
        self.size_cap = size_cap
        self.worker = self.new_worker()

    def new_worker(self, clones: str = "clones", **ports: Any) -> BranchWorker:
        """A worker of the harness's branch with its clone under `tmp_path/clones` (another name: a
        new owner beside the current one); `ports` adds to or overrides its `BranchPorts`, whose
        clocks are the harness's."""
        repo = LocalRepo.for_branch(self.tmp_path / clones, "git", "main", str(self.remote), None)
        wired = BranchPorts(**{"clock": self.clock, "wall": lambda: 1_767_000_000.0, **ports})
        return BranchWorker(self.settings, self.provider, "main", repo, self.settled.extend, wired)

    async def feed(self, *items: Any) -> None:
        if not self.worker.synced:
            await self.worker.sync()
        for item in items:
            await self.worker.handle(item)
            await self.worker.tick()

    async def settle_time(self, seconds: float = 5.0) -> None:
        self.clock.advance(seconds)
        await self.worker.tick()


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    return Harness(tmp_path)


def pushes(result: str) -> float:
    """Push attempts of the harness branch with this result so far (the counter is process-wide)."""
    from prometheus_client import REGISTRY

    value = REGISTRY.get_sample_value(
        "reverser_commit_pushes_total", {"provider": "git", "branch": "main", "result": result}
    )
    return value or 0.0


async def test_silence_closes_window_and_first_push_is_immediate(h: Harness) -> None:
    w = Work()
    await h.feed(w.create(cm("c")))
    assert git(h.remote, "branch").strip() == "", "nothing is pushed while the window is open"
    assert h.worker.window is not None
    h.clock.advance(4.9)
    await h.worker.tick()
    assert h.worker.window is not None, "the window must stay open before 5 s of silence"
    await h.settle_time(0.2)
    assert log_lines(h.remote) == [
        "Alice Example <alice@example.com>|Reverser Pipeline|[CREATE] v1/configmaps/c"
    ]
    assert files(h.remote)["live/team-a/configmaps/c.yaml"].startswith("apiVersion: v1\nkind: ConfigMap\n")
    assert h.settled == [(0, 0)]


async def test_rolling_window_resets_on_each_append(tmp_path: Path) -> None:
    """With a maximum age above the silence, each write keeps the window open for another silence."""
    h = Harness(tmp_path, max_age_s=60)
    w = Work()
    await h.feed(w.create(cm("a")))
    h.clock.advance(4)
    await h.feed(w.create(cm("b")))
    h.clock.advance(4)
    await h.worker.tick()
    assert h.worker.window is not None
    await h.settle_time(1.1)
    assert log_lines(h.remote, fmt="%s") == ["alice@example.com on t1: 2 resource(s)"]


async def test_interleaved_authors_split_windows(h: Harness) -> None:
    """Scenario 5: alice x1 x2, bob y1, alice x3 → three commits with the right authors."""
    w = Work()
    await h.feed(w.create(cm("x1")), w.create(cm("x2")), w.create(cm("y1"), BOB), w.create(cm("x3")))
    await h.settle_time(5)
    await h.settle_time(5)
    assert log_lines(h.remote) == [
        "Alice Example <alice@example.com>|Reverser Pipeline|alice@example.com on t1: 2 resource(s)",
        "Bob <bob@noreply.cluster.local>|Reverser Pipeline|[CREATE] v1/configmaps/y1",
        "Alice Example <alice@example.com>|Reverser Pipeline|[CREATE] v1/configmaps/x3",
    ]


async def test_unresolved_and_configured_authors(h: Harness) -> None:
    w = Work()
    await h.feed(w.create(cm("u"), NOBODY), w.create(cm("c"), CONFIGURED))
    await h.settle_time(5)
    assert log_lines(h.remote) == [
        "unknown (attribution unresolved) <attribution-unresolved@gitops-reverser.invalid>"
        "|Reverser Pipeline|[CREATE] v1/configmaps/u",
        "Reverser Pipeline <noreply@reverser.invalid>|Reverser Pipeline|[CREATE] v1/configmaps/c",
    ]


async def test_trailers_name_offset_branch_and_tiers(h: Harness) -> None:
    w = Work(start=41)
    await h.feed(w.create(cm("a")), w.update(cm("a", key="2")))
    await h.settle_time(5)
    body = git(h.remote, "log", "-1", "--format=%B", "main")
    assert "Reverser-Offset: 0:42" in body
    assert "Reverser-Branch: git main" in body
    assert "Reverser-Attribution: exact alice@example.com" in body


async def test_window_zero_commits_each_event_and_cooldown_batches_pushes(tmp_path: Path) -> None:
    """Scenario 8/31: W=0 → one commit per event; pushes at most once per cooldown."""
    h = Harness(tmp_path, window_s=0)
    w = Work()
    await h.feed(w.create(cm("a")))
    await h.worker.tick()
    assert len(log_lines(h.remote)) == 1
    h.clock.advance(1)
    await h.feed(w.create(cm("b")))
    await h.worker.tick()
    h.clock.advance(2)
    await h.feed(w.create(cm("c")))
    await h.worker.tick()
    assert len(log_lines(h.remote)) == 1, "commits 2 and 3 wait for the cooldown"
    assert h.worker.pending_commits == 2
    assert h.settled == [(0, 0)]
    await h.settle_time(2)
    assert len(log_lines(h.remote)) == 3
    assert sorted(h.settled) == [(0, 0), (0, 1), (0, 2)]


async def test_size_cap_closes_window(tmp_path: Path) -> None:
    h = Harness(tmp_path, size_cap=400)
    w = Work()
    await h.feed(w.create(cm("a", key="x" * 150)))
    assert h.worker.window is not None
    await h.feed(w.create(cm("b", key="y" * 150)))
    assert h.worker.window is None
    await h.worker.tick()
    assert log_lines(h.remote, fmt="%s") == ["alice@example.com on t1: 2 resource(s)"]


async def test_delete_on_event_removes_file_and_never_keeps_it(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    w = Work()
    await h.feed(w.create(cm("c")))
    await h.settle_time(5)
    await h.feed(w.delete("c", BOB))
    await h.settle_time(5)
    assert log_lines(h.remote, fmt="%an|%s")[-1] == "Bob|[DELETE] v1/configmaps/c"
    assert "live/team-a/configmaps/c.yaml" not in files(h.remote)

    never = Harness(tmp_path / "never", prune="Never")
    w2 = Work()
    await never.feed(w2.create(cm("c")))
    await never.settle_time(5)
    await never.feed(w2.delete("c", BOB))
    await never.settle_time(5)
    assert len(log_lines(never.remote)) == 1
    assert "live/team-a/configmaps/c.yaml" in files(never.remote)
    assert (0, 1) in never.settled


async def test_create_then_delete_in_one_window_makes_no_commit(h: Harness) -> None:
    """Scenario 24: only the DELETE survives and the file never existed → no commit, offsets settle."""
    w = Work()
    await h.feed(w.create(cm("a")), w.delete("a"))
    await h.settle_time(5)
    assert git(h.remote, "branch").strip() == ""
    assert h.settled == [(0, 0), (0, 1)]


async def test_update_with_same_content_makes_no_commit(h: Harness) -> None:
    w = Work()
    await h.feed(w.create(cm("a")))
    await h.settle_time(5)
    await h.feed(w.update(cm("a"), BOB))
    await h.settle_time(5)
    assert len(log_lines(h.remote)) == 1


async def test_snapshot_then_sweep_per_prune_mode(tmp_path: Path) -> None:
    """Scenarios 1, 17, 18: reconcile commit by the operator; orphans swept only under Always.

    Under OnEvent an orphan the pipeline wrote is deleted as its object's delete (see
    test_absent_deletes.py); a foreign orphan is kept. Under Never both are kept.
    """
    foreign = "live/team-a/configmaps/hand-written.yaml"
    for mode, expect_orphan, expect_foreign in (
        ("OnEvent", False, True),
        ("Always", False, False),
        ("Never", True, True),
    ):
        h = Harness(tmp_path / mode, prune=mode)
        w = Work()
        await h.feed(*w.snapshot(1, [cm("a"), cm("b"), cm("c")], rv="10"))
        assert log_lines(h.remote) == [
            "Reverser Pipeline <noreply@reverser.invalid>|Reverser Pipeline|"
            "reconciled 3 configmaps (last resourceVersion: 10)"
        ]
        foreign_push(h.remote, tmp_path / mode, foreign, render_object(cm("hand-written")).decode())
        await h.feed(*w.snapshot(2, [cm("a"), cm("b")], rv="20"))
        h.clock.advance(5)
        await h.worker.tick()
        tree = files(h.remote)
        assert ("live/team-a/configmaps/c.yaml" in tree) is expect_orphan, mode
        assert (foreign in tree) is expect_foreign, mode
        subjects = log_lines(h.remote, fmt="%s")
        if mode == "Always":
            assert subjects[-1] == "reconciled 2 configmaps (last resourceVersion: 20)"
        elif mode == "OnEvent":
            assert subjects[-1] == "[DELETE] v1/configmaps/c"
        else:
            assert len(subjects) == 2
        assert sorted(h.settled) == [(0, i) for i in range(w.offset)]


async def test_a_sweep_keeps_user_files_that_are_not_the_object_their_path_names(tmp_path: Path) -> None:
    """Issue 29: prune Always deletes the object documents the cluster no longer has, never a user's
    file it merely cannot read as that object: broken YAML, several documents, another object's
    name, a bare fragment. Each is kept, logged and counted."""
    h = Harness(tmp_path, prune="Always")
    w = Work()
    await h.feed(*w.snapshot(1, [cm("a")], rv="10"))
    folder = "live/team-a/configmaps"
    theirs = {
        f"{folder}/broken.yaml": "data: [not, closed\n",
        f"{folder}/two.yaml": render_object(cm("two")).decode() + "---\n" + render_object(cm("x")).decode(),
        f"{folder}/renamed.yaml": render_object(cm("other-name")).decode(),
        f"{folder}/fragment.yaml": "kind: ConfigMap\n",
        f"{folder}/tabs.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n\tname: tabs\n",
    }
    gone = f"{folder}/gone.yaml"
    for path, content in {**theirs, gone: render_object(cm("gone")).decode()}.items():
        foreign_push(h.remote, tmp_path, path, content)
    before = REGISTRY.get_sample_value("reverser_commit_not_ours_kept_total", {"target": "t1"}) or 0.0
    # b is new, so the snapshot commits; its push is refused and it is made again on the remote's tip
    await h.feed(*w.snapshot(2, [cm("b")], rv="20"))
    await h.settle_time(5)
    tree = files(h.remote)
    assert f"{folder}/a.yaml" not in tree
    assert gone not in tree, "a whole object document the cluster no longer has is swept"
    assert sorted(p for p in tree if p in theirs) == sorted(theirs)
    after = REGISTRY.get_sample_value("reverser_commit_not_ours_kept_total", {"target": "t1"}) or 0.0
    assert after - before == len(theirs)


async def test_namespace_scoped_sweep_spares_other_namespaces(tmp_path: Path) -> None:
    """Scenario 21 / T26: a team-a sweep never touches team-b documents of the same type."""
    h = Harness(tmp_path, prune="Always")
    w = Work()
    await h.feed(*w.snapshot(1, [cm("x", "team-b")], scope="team-b"))
    await h.feed(*w.snapshot(2, [cm("a")], scope="team-a"))
    await h.feed(*w.snapshot(3, [], scope="team-a"))
    h.clock.advance(5)
    await h.worker.tick()
    assert sorted(files(h.remote)) == ["live/team-b/configmaps/x.yaml"]


async def test_newer_epoch_discards_unfinished_older_snapshot(h: Harness) -> None:
    w = Work()
    old = w.snapshot(1, [cm("old1"), cm("old2"), cm("old3")])
    await h.feed(*old[:2])
    await h.feed(*w.snapshot(2, [cm("new")]))
    await h.feed(*old[2:])
    assert sorted(files(h.remote)) == ["live/team-a/configmaps/new.yaml"]
    assert len(log_lines(h.remote)) == 1
    assert sorted(h.settled) == [(0, i) for i in range(w.offset)]


async def test_snapshot_closes_open_window_first(h: Harness) -> None:
    w = Work()
    await h.feed(w.create(cm("live")))
    await h.feed(*w.snapshot(1, [cm("live"), cm("snap")]))
    h.clock.advance(5)
    await h.worker.tick()
    assert log_lines(h.remote, fmt="%an|%s") == [
        "Alice Example|[CREATE] v1/configmaps/live",
        "Reverser Pipeline|reconciled 1 configmaps (last resourceVersion: 100)",
    ]


async def test_a_snapshot_larger_than_a_part_is_pushed_in_parts_and_swept_by_its_last(tmp_path: Path) -> None:
    """Issue 32: with `snapshot_part_objects: 3`, seven objects in chunks of two become a part of
    four (the chunk that filled it), a part of three, and the end's commit, which only sweeps.
    Each part is on the remote before the snapshot ends, claims no offset and settles nothing; the
    end settles every record of the snapshot."""
    h = Harness(tmp_path, prune="Always", part_objects=3)
    w = Work()
    await h.feed(*w.snapshot(1, [cm("gone")], rv="10"))
    names = [f"o{i}" for i in range(7)]
    begin, *chunks, end = w.snapshot(2, [cm(n) for n in names], rv="20", chunk_size=2)
    await h.feed(begin, *chunks[:2])
    assert sorted(files(h.remote)) == sorted(
        f"live/team-a/configmaps/{n}.yaml" for n in ["gone", "o0", "o1", "o2", "o3"]
    ), "the first part is pushed as soon as it is full"
    settled = len(h.settled)
    await h.feed(*chunks[2:])
    assert len(h.settled) == settled, "a part settles no offset"
    await h.feed(end)
    await h.settle_time()
    assert log_lines(h.remote, fmt="%s") == [
        "reconciled 1 configmaps (last resourceVersion: 10)",
        "reconciled 4 configmaps (last resourceVersion: 20)",
        "reconciled 3 configmaps (last resourceVersion: 20)",
        "reconciled 1 configmaps (last resourceVersion: 20)",  # gone swept
    ]
    offsets = git(h.remote, "log", "--format=%(trailers:key=Reverser-Offset,valueonly)%x00", "main")
    assert [t.strip() for t in offsets.split("\0")][:4] == [
        f"0:{end.offset}",
        "",
        "",
        f"0:{begin.offset - 1}",
    ]
    assert sorted(files(h.remote)) == sorted(f"live/team-a/configmaps/{n}.yaml" for n in names)
    assert sorted(h.settled) == [(0, i) for i in range(w.offset)]


async def test_the_end_of_a_snapshot_in_parts_is_pushed_at_once_a_snapshot_of_one_part_waits(
    tmp_path: Path,
) -> None:
    """Issue 32: the last commit of a first sync in parts waited out the push cooldown behind its
    own parts (3.8 s of a 10.7 s first sync of 20,000 objects). It goes out at once, like the
    parts; a snapshot that fits one part is still pushed with the cooldown, batched with the rest."""
    h = Harness(tmp_path, prune="Always", part_objects=3)
    w = Work()
    names = [f"o{i}" for i in range(5)]
    await h.feed(*w.snapshot(1, [cm(n) for n in names], rv="10", chunk_size=2))
    assert sorted(files(h.remote)) == sorted(f"live/team-a/configmaps/{n}.yaml" for n in names), (
        "the end is on the remote with no time passed"
    )
    await h.feed(*w.snapshot(2, [cm("o0"), cm("new")], rv="20"))
    assert "live/team-a/configmaps/new.yaml" not in files(h.remote), "one part waits for the cooldown"
    await h.settle_time()
    assert "live/team-a/configmaps/new.yaml" in files(h.remote)


async def test_a_snapshot_part_commits_the_open_window_first(tmp_path: Path) -> None:
    h = Harness(tmp_path, part_objects=1)
    w = Work()
    await h.feed(w.create(cm("live")))
    await h.feed(*w.snapshot(1, [cm("live"), cm("snap")], chunk_size=1))
    assert log_lines(h.remote, fmt="%an|%s") == [
        "Alice Example|[CREATE] v1/configmaps/live",
        "Reverser Pipeline|reconciled 1 configmaps (last resourceVersion: 100)",
    ]
    assert "live/team-a/configmaps/snap.yaml" in files(h.remote)


async def test_two_targets_on_one_branch_split_windows(tmp_path: Path) -> None:
    """Scenario 30: windows split on every target change; each commit touches one subtree."""
    targets = [
        TargetSettings(name="ta", provider="git", path="a"),
        TargetSettings(name="tb", provider="git", path="b"),
    ]
    h = Harness(tmp_path, targets=targets)
    wa, wb = Work(target="ta", path="a"), Work(target="tb", path="b")
    wb.offset = 100
    await h.feed(wa.create(cm("1")), wb.create(cm("2")), wa.create(cm("3")))
    await h.settle_time(5)
    for sha in git(h.remote, "rev-list", "main").split():
        touched = {p.split("/")[0] for p in git(h.remote, "show", "--name-only", "--format=", sha).split()}
        assert len(touched) == 1


def window_closes(reason: str) -> float:
    from prometheus_client import REGISTRY

    value = REGISTRY.get_sample_value(
        "reverser_commit_window_closes_total", {"provider": "git", "branch": "main", "reason": reason}
    )
    return value or 0.0


async def test_steady_writes_close_the_window_at_its_maximum_age(h: Harness) -> None:
    """One person writing every second never leaves 5 s of silence; the window still closes 5 s
    after its first write (the default maximum age is the window), and the next write opens a new one."""
    w = Work()
    aged = window_closes(CloseReason.MAX_AGE)
    for name in ("a", "b", "c", "d", "e"):
        await h.feed(w.create(cm(name)))
        h.clock.advance(1)
        await h.worker.tick()
    assert h.worker.window is None, "closed at 5 s after its first write although writes kept coming"
    assert window_closes(CloseReason.MAX_AGE) == aged + 1
    assert log_lines(h.remote, fmt="%s") == ["alice@example.com on t1: 5 resource(s)"]
    await h.feed(w.create(cm("f")))
    assert h.worker.window is not None
    assert list(h.worker.window.writes) == ["live/team-a/configmaps/f.yaml"]


async def test_a_backlog_is_cut_at_the_maximum_age_in_event_time(h: Harness) -> None:
    """Twelve writes made 1 s apart and read at once (a replay): windows of 5 s of event time each,
    exactly as the live run, where the clock would have closed them, cut them."""
    w = Work(step_ms=1000)
    await h.feed(*(w.create(cm(f"c{i:02}")) for i in range(12)))
    await h.settle_time(5)
    assert log_lines(h.remote, fmt="%s") == [
        "alice@example.com on t1: 5 resource(s)",
        "alice@example.com on t1: 5 resource(s)",
        "alice@example.com on t1: 2 resource(s)",
    ]


async def test_a_backlog_is_pushed_in_one_push_once_drained(tmp_path: Path) -> None:
    """After a restart the redelivered backlog goes out in one push once the queue is drained,
    not its first window at once and the rest a full cooldown later."""
    h = Harness(tmp_path, window_s=2, cooldown_s=5)
    await h.worker.sync()
    w = Work(step_ms=10)
    backlog = [w.create(cm(f"b{i}"), ALICE if i % 2 == 0 else BOB) for i in range(4)]
    ok = pushes("ok")
    for index, item in enumerate(backlog):
        await h.worker.handle(item)
        await h.worker.tick(idle=index == len(backlog) - 1)
        if index < len(backlog) - 1:
            assert pushes("ok") == ok, "nothing is pushed while the backlog is still queued"
    assert pushes("ok") == ok + 1, "the three closed windows go out in one push once the queue is drained"
    assert len(log_lines(h.remote)) == 3
    assert h.worker.pending_commits == 0


async def test_a_due_push_waits_for_a_queue_at_most_one_cooldown(tmp_path: Path) -> None:
    """Under a queue that never drains, a due push still goes out one cooldown later."""
    h = Harness(tmp_path, window_s=0, cooldown_s=5)
    await h.worker.sync()
    w = Work(step_ms=10)
    ok = pushes("ok")
    await h.worker.handle(w.create(cm("a")))
    await h.worker.tick(idle=False)
    assert pushes("ok") == ok
    assert h.worker.pending_commits == 1
    h.clock.advance(4.9)
    await h.worker.tick(idle=False)
    assert pushes("ok") == ok
    h.clock.advance(0.2)
    await h.worker.tick(idle=False)
    assert pushes("ok") == ok + 1
    assert h.worker.pending_commits == 0


async def test_restart_skips_work_already_on_the_branch(h: Harness) -> None:
    """Invariant 2: a redelivery after a crash never commits twice."""
    w = Work()
    items = [w.create(cm("a")), w.create(cm("b"), BOB)]
    await h.feed(*items)
    await h.settle_time(5)
    assert len(log_lines(h.remote)) == 2
    h.worker = h.new_worker()
    await h.feed(*items, w.create(cm("c")))
    await h.settle_time(5)
    assert len(log_lines(h.remote)) == 3
    assert [o for o in h.settled if o == (0, 0)] == [(0, 0), (0, 0)]


async def test_a_snapshot_redelivered_whole_below_the_trailer_is_not_committed_again(h: Harness) -> None:
    """Its end is at the branch tip's trailer: its records are collected again and settle at the
    end without a second `reconciled` commit."""
    items = Work().snapshot(1, [cm("a"), cm("b"), cm("c")])
    await h.feed(*items)
    await h.settle_time(5)
    assert log_lines(h.remote, fmt="%s") == ["reconciled 3 configmaps (last resourceVersion: 100)"]
    h.worker = h.new_worker()
    await h.feed(*items)
    await h.settle_time(5)
    assert log_lines(h.remote, fmt="%s") == ["reconciled 3 configmaps (last resourceVersion: 100)"]
    assert sorted(h.settled) == sorted([(i.partition, i.offset) for i in items] * 2)
    assert h.worker.unsettled == 0


async def test_a_redelivered_target_deletion_drops_the_snapshot_it_cut_short(tmp_path: Path) -> None:
    """A target deleted while its snapshot was open: on redelivery below the trailer the snapshot's
    records are collected again, so the deletion must drop them again or they never settle."""
    targets = [
        TargetSettings(name="t1", provider="git", path="live"),
        TargetSettings(name="gone", provider="git", path="gone", prune="Always"),
    ]
    h = Harness(tmp_path, targets=targets)
    w = Work(target="gone", path="gone")
    await h.feed(w.create(cm("old")))
    await h.settle_time(5)
    begin, chunk, _ = w.snapshot(1, [cm("a")])
    deleted = w._item(
        TargetDeleted("Always", True, 2, "GitTarget gone was deleted"),
        group="",
        version="",
        resource="",
        scope="",
    )
    items = [begin, chunk, deleted]
    await h.feed(*items)
    await h.settle_time(5)
    assert log_lines(h.remote, fmt="%s")[-1] == "removed gone/ of deleted target gone (prune Always)"
    assert h.worker.unsettled == 0
    h.worker = h.new_worker()
    settled_before = len(h.settled)
    await h.feed(*items)
    await h.settle_time(5)
    assert h.worker.unsettled == 0
    assert sorted(h.settled[settled_before:]) == sorted((i.partition, i.offset) for i in items)
    assert files(h.remote) == {}


async def test_crash_between_commit_and_push_loses_nothing(h: Harness) -> None:
    """The local commit dies with the process; the unsettled work is redelivered and pushed once."""
    w = Work()
    items = [w.create(cm("a")), w.create(cm("b"))]
    h.provider = h.provider.model_copy(update={"push_cooldown_s": 5.0})
    await h.feed(*items[:1])
    await h.settle_time(5)
    await h.feed(*items[1:])
    h.clock.advance(4.9)
    await h.worker.tick()
    h.clock.advance(0.2)
    await h.worker._finalize(CloseReason.SILENCE)
    assert h.worker.pending_commits in (0, 1)
    # the process "dies" here: a fresh worker redelivers from the first unsettled offset
    unsettled = [i for i in items if (i.partition, i.offset) not in h.settled]
    h.worker = h.new_worker()
    await h.feed(*unsettled)
    await h.settle_time(5)
    names = log_lines(h.remote, fmt="%s")
    assert names == ["[CREATE] v1/configmaps/a", "[CREATE] v1/configmaps/b"]


async def test_foreign_push_is_rebased_without_losing_writes(h: Harness) -> None:
    """Scenario 32: the CAS push is rejected; our commit is replayed on top of theirs."""
    w = Work()
    await h.feed(w.create(cm("a")))
    await h.settle_time(5)
    foreign_push(h.remote, h.tmp_path, "README.md", "hello\n")
    await h.feed(w.create(cm("b")))
    await h.settle_time(5)
    assert log_lines(h.remote, fmt="%an|%s") == [
        "Alice Example|[CREATE] v1/configmaps/a",
        "Human|human edit README.md",
        "Alice Example|[CREATE] v1/configmaps/b",
    ]
    assert set(files(h.remote)) == {
        "README.md",
        "live/team-a/configmaps/a.yaml",
        "live/team-a/configmaps/b.yaml",
    }
    assert git(h.remote, "rev-list", "--merges", "main").strip() == ""
    git(h.remote, "fsck", "--strict", "--no-dangling")


async def test_remote_already_has_our_content(h: Harness) -> None:
    """Scenario 33: the replayed write is a no-op → no replacement commit, offsets still settle."""
    w = Work()
    await h.feed(w.create(cm("a")))
    await h.settle_time(5)
    item = w.create(cm("b"))
    await h.feed(item)
    h.clock.advance(5)
    # somebody pushes exactly the file we are about to push
    from pipeline.commit.yamlrender import render_object

    foreign_push(h.remote, h.tmp_path, "live/team-a/configmaps/b.yaml", render_object(cm("b")).decode())
    await h.worker.tick()
    assert log_lines(h.remote, fmt="%an|%s")[-1] == "Human|human edit live/team-a/configmaps/b.yaml"
    assert (item.partition, item.offset) in h.settled


async def test_new_branch_is_based_on_default_branch(tmp_path: Path) -> None:
    """Scenario 35: an absent target branch starts from the default branch tip."""
    targets = [TargetSettings(name="t1", provider="git", path="live", branch="feature")]
    h = Harness(tmp_path, targets=targets)
    foreign_push(h.remote, tmp_path, "README.md", "base\n")
    repo = LocalRepo.for_branch(tmp_path / "clones", "git", "feature", str(h.remote), None)
    ports = BranchPorts(clock=h.clock)
    worker = BranchWorker(h.settings, h.provider, "feature", repo, h.settled.extend, ports)
    await worker.sync()
    await worker.handle(Work(branch="feature").create(cm("a")))
    h.clock.advance(5)
    await worker.tick()
    assert log_lines(h.remote, "feature", fmt="%s") == ["human edit README.md", "[CREATE] v1/configmaps/a"]


async def test_shutdown_closes_window_and_pushes_immediately(h: Harness) -> None:
    """Scenario 36."""
    w = Work()
    await h.feed(w.create(cm("a")))
    await h.settle_time(5)
    await h.feed(w.create(cm("b")))
    assert await h.worker.stop()
    assert len(log_lines(h.remote)) == 2


async def test_bad_record_is_skipped_and_settled(h: Harness) -> None:
    w = Work()
    bad = w.write("CREATE", None, name="broken")
    await h.feed(bad, w.create(cm("ok")))
    await h.settle_time(5)
    assert log_lines(h.remote, fmt="%s") == ["[CREATE] v1/configmaps/ok"]
    assert (0, 0) in h.settled


async def test_transient_push_failure_retries_on_its_own(h: Harness) -> None:
    """T7 divergence: a failed push re-arms itself with backoff; no new commit is needed."""
    w = Work()
    await h.feed(w.create(cm("a")))
    await h.settle_time(5)
    failed_before, ok_before = pushes("error"), pushes("ok")
    hidden = h.remote.with_name("hidden.git")
    h.remote.rename(hidden)
    await h.feed(w.create(cm("b")))
    await h.settle_time(5)
    assert pushes("error") == failed_before + 1
    assert h.worker.pending_commits == 1
    assert (0, 1) not in h.settled, "nothing is settled while the commit is not on the remote"
    hidden.rename(h.remote)
    await h.settle_time(0.5)
    assert h.worker.pending_commits == 1, "the retry waits for its backoff"
    await h.settle_time(1)
    assert h.worker.pending_commits == 0
    assert pushes("ok") == ok_before + 1
    assert (0, 1) in h.settled
    assert log_lines(h.remote, fmt="%s")[-1] == "[CREATE] v1/configmaps/b"


async def test_metrics_count_commits_by_author_kind_and_window_reasons(h: Harness) -> None:
    from prometheus_client import REGISTRY

    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, {"provider": "git", "branch": "main", **labels}) or 0.0

    before = {
        kind: sample("reverser_commit_commits_total", author_kind=kind)
        for kind in ("user", "serviceaccount", "unresolved", "committer")
    }
    change_before = sample("reverser_commit_window_closes_total", reason="author_or_target_change")
    silence_before = sample("reverser_commit_window_closes_total", reason="silence")
    sa = ALICE_SA
    w = Work()
    await h.feed(w.create(cm("u")), w.create(cm("s"), sa), w.create(cm("n"), NOBODY))
    await h.settle_time(5)
    await h.feed(*w.snapshot(1, [cm("u"), cm("s"), cm("n"), cm("new")]))
    after = {k: sample("reverser_commit_commits_total", author_kind=k) - v for k, v in before.items()}
    assert after == {"user": 1, "serviceaccount": 1, "unresolved": 1, "committer": 1}
    assert (
        sample("reverser_commit_window_closes_total", reason="author_or_target_change") == change_before + 2
    )
    assert sample("reverser_commit_window_closes_total", reason="silence") == silence_before + 1
    assert sample("reverser_commit_pending_work") == 4, "the snapshot waits for the push cooldown"
    await h.settle_time(5)
    assert sample("reverser_commit_pending_work") == 0
    assert (
        REGISTRY.get_sample_value(
            "reverser_commit_end_to_end_seconds_count", {"provider": "git", "branch": "main"}
        )
        or 0
    ) > 0


async def test_per_target_commit_window_overrides_the_provider(tmp_path: Path) -> None:
    targets = [TargetSettings(name="t1", provider="git", path="live", commit_window_s=0)]
    h = Harness(tmp_path, window_s=5, cooldown_s=0, targets=targets)
    w = Work(step_ms=10)
    await h.feed(w.create(cm("a")), w.create(cm("b")))
    assert h.worker.window is None
    assert log_lines(h.remote, fmt="%s") == ["[CREATE] v1/configmaps/a", "[CREATE] v1/configmaps/b"]


async def test_event_time_silence_splits_a_backlog_like_live(h: Harness) -> None:
    """Records that were 5 s apart when observed land in separate commits even when read at once."""
    w = Work(step_ms=6000)
    await h.feed(w.create(cm("a")), w.create(cm("b")))
    await h.settle_time(5)
    assert log_lines(h.remote, fmt="%s") == ["[CREATE] v1/configmaps/a", "[CREATE] v1/configmaps/b"]


async def test_unpushable_backlog_stops_reading_the_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Invariant 5: while pushes fail, unpushed work is bounded and the queue applies back-pressure."""
    import asyncio

    from pipeline.commit import branch as branch_module

    monkeypatch.setattr(branch_module, "MAX_PENDING_COMMITS", 2)
    h = Harness(tmp_path, window_s=0)
    await h.worker.sync()
    h.remote.rename(h.remote.with_name("gone.git"))
    queue: asyncio.Queue[Any] = asyncio.Queue()
    w = Work()
    for i in range(5):
        queue.put_nowait(w.create(cm(f"q{i}")))
    failed_before = pushes("error")
    task = asyncio.create_task(h.worker.run(queue, asyncio.Lock()))
    try:
        await wait_for(
            lambda: h.worker.pending_commits == 2 and pushes("error") > failed_before,
            "two unpushed commits and a failed push",
        )
        failed = pushes("error")
        h.clock.advance(60)
        # the positive signal: the loop came round again (a retried push) without taking more work
        await wait_for(lambda: pushes("error") > failed, "a retried push while backlogged")
        assert h.worker.pending_commits == 2
        assert queue.qsize() == 3
        assert h.settled == []
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_burst_in_configured_mode_is_one_commit(h: Harness) -> None:
    """Scenario 4: four creates within the window → one commit by the operator, files in first-seen order."""
    w = Work()
    await h.feed(*(w.create(cm(n), CONFIGURED) for n in ("d", "b", "c", "a")))
    await h.settle_time(5)
    assert log_lines(h.remote) == [
        "Reverser Pipeline <noreply@reverser.invalid>|Reverser Pipeline|"
        "Reverser Pipeline on t1: 4 resource(s)"
    ]
    body = git(h.remote, "log", "-1", "--format=%b", "main").splitlines()
    assert body[:4] == [f"CREATE v1/configmaps/team-a/{n}" for n in ("d", "b", "c", "a")]
    assert "Reverser-Attribution: none" in body


async def test_rename_by_recreate_and_same_content_recreate(h: Harness) -> None:
    """Scenarios 22 and 23."""
    w = Work()
    await h.feed(w.create(cm("old")), w.create(cm("same")))
    await h.settle_time(5)
    await h.feed(w.delete("old"), w.create(cm("new")), w.delete("same"), w.create(cm("same")))
    await h.settle_time(5)
    assert log_lines(h.remote, fmt="%s")[-1] == "alice@example.com on t1: 2 resource(s)"
    body = git(h.remote, "log", "-1", "--format=%b", "main")
    assert "DELETE v1/configmaps/team-a/old" in body
    assert "CREATE v1/configmaps/team-a/new" in body
    assert "same" not in body


async def test_secrets_are_never_written_in_plaintext(tmp_path: Path) -> None:
    """Without encryption no Secret content reaches Git; a ConfigMap in the same window still does."""
    h = Harness(tmp_path, prune="Always")
    w = Work(step_ms=10)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "db", "namespace": "team-a"},
        "data": {"password": "c2VjcmV0"},
    }
    await h.feed(w.create(secret, resource="secrets"), w.create(cm("plain")))
    await h.feed(*w.snapshot(1, [secret], resource="secrets"))
    await h.settle_time(5)
    tree = files(h.remote)
    assert sorted(tree) == ["live/team-a/configmaps/plain.yaml"]
    assert all("c2VjcmV0" not in content for content in tree.values())
    assert (0, 0) in h.settled


async def test_changes_made_apart_but_delivered_together_after_a_restart_are_not_merged(h: Harness) -> None:
    """A restart delivers two of alice's changes together (observed 10 ms apart); the audit facts
    say they were made 6 s apart, more than the 5 s window, so they are two commits."""
    from dataclasses import replace

    from tests.commit.helpers import ALICE

    w = Work(step_ms=10)
    made = 1_700_000_000_000
    first = w.create(cm("a"), replace(ALICE, event_time_ms=made))
    second = w.create(cm("b"), replace(ALICE, event_time_ms=made + 6000))
    third = w.create(cm("c"), replace(ALICE, event_time_ms=made + 6000 + 4000))
    await h.feed(first, second, third)
    await h.settle_time(5)
    subjects = log_lines(h.remote, fmt="%s")
    assert len(subjects) == 2, f"b and c (4 s apart) share a commit, a (6 s earlier) does not: {subjects}"
    assert subjects[0] == "[CREATE] v1/configmaps/a"


async def test_a_change_delivered_after_newer_ones_but_made_a_window_earlier_is_not_merged(
    h: Harness,
) -> None:
    """Found by `make chaos`: a held watch stream delivered alice's change after newer changes of
    hers from another stream; made 6 s before them (window 5 s), it is a commit of its own."""
    from dataclasses import replace

    from tests.commit.helpers import ALICE

    w = Work(step_ms=10)
    made = 1_700_000_000_000
    newer = w.create(cm("b"), replace(ALICE, event_time_ms=made + 6000))
    newest = w.create(cm("c"), replace(ALICE, event_time_ms=made + 8000))
    held = w.create(cm("a"), replace(ALICE, event_time_ms=made))
    await h.feed(newer, newest, held)
    await h.settle_time(5)
    subjects = log_lines(h.remote, fmt="%s")
    assert len(subjects) == 2, f"b and c share a commit, a (made 6 s before them) does not: {subjects}"
    assert subjects[1] == "[CREATE] v1/configmaps/a"
