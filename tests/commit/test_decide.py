"""The commit worker's decisions (`pipeline.commit.decide`), without Git or a log.

The tree is a dictionary (`DictTree`), the clock a constant and the object-state book a plain
`StateBook`, so every case states what the branch holds and what the decider answers. A property
test checks windows and "never backwards" against a small model of the documented rules.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Literal, overload

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.codec.branch_work import (
    CommitRequested,
    Removal,
    ResyncChunk,
    ResyncEnd,
    TargetDeleted,
    WorkAuthor,
    WorkItem,
    Write,
)
from pipeline.codec.object_state import ObjectState
from pipeline.commit.decide import SNAPSHOT_AUTHOR, Closed, Decider, Reject, Skip, Staged, rebuild_plan
from pipeline.commit.identity import UNRESOLVED, Identity
from pipeline.commit.inplace import LiveChange
from pipeline.commit.layout import LayoutError
from pipeline.commit.messages import ChangedObject
from pipeline.commit.metrics import SkipReason
from pipeline.commit.plan import Byline, Plan, PlanKind, Retired
from pipeline.commit.position import LogPosition
from pipeline.commit.snapshots import Carried, Complete
from pipeline.commit.statebook import StateBook
from pipeline.commit.window import CloseReason
from pipeline.commit.yamlrender import RenderError, render_object
from pipeline.config import (
    CommitMessageSettings,
    CommitterSettings,
    EncryptionSettings,
    PlacementSettings,
    ProviderSettings,
    Settings,
    TargetSettings,
    WatchRule,
)
from pipeline.intent.homes import FolderIndex
from pipeline.intent.homes import ObjectKey as HomeKey
from pipeline.operation import Operation
from pipeline.placement import PlacedObject
from pipeline.prune import Prune
from pipeline.slices import Steps
from pipeline.slices import finish as run_steps
from tests.commit.helpers import ALICE, BOB, CONFIGURED, NOBODY, Work, cm

WALL_S = 1_767_000_100.0
COMMITTER = Identity("Reverser Pipeline", "noreply@reverser.invalid")
AGE = "age1" + "q" * 58
CIPHER = "ENC[AES256_GCM,data:aGk=,iv:MTIzNDU2Nzg5MDEy,tag:MTIzNDU2Nzg5MDEyMzQ1Ng==,type:str]"
SOPS = {"mac": CIPHER, "age": [{"recipient": AGE, "enc": "x"}]}


class DictTree:
    """A branch's tree as `{path: blob id}`: what the decider reads of a `GitTree`."""

    def __init__(self, *paths: str) -> None:
        self.blobs = {p: b"\x01" * 20 for p in paths}

    def get(self, path: str) -> bytes | None:
        return self.blobs.get(path)

    def files(self, folder: str) -> list[str]:
        prefix = f"{folder}/" if folder else ""
        return sorted(
            {p[len(prefix) :] for p in self.blobs if p.startswith(prefix) and "/" not in p[len(prefix) :]}
        )

    def folders(self, folder: str) -> list[str]:
        prefix = f"{folder}/" if folder else ""
        rest = [p[len(prefix) :] for p in self.blobs if p.startswith(prefix)]
        return sorted({r.split("/", 1)[0] for r in rest if "/" in r})


def target(**kw: Any) -> TargetSettings:
    return TargetSettings(**{"name": "t1", "provider": "git", "path": "live", **kw})


def decider(
    *targets: TargetSettings, window_s: float = 5.0, max_bytes: int = 8 * 1024 * 1024, book: bool = False
) -> Decider:
    provider = ProviderSettings(
        name="git",
        url="https://git.example/r.git",
        commit_window_s=window_s,
        window_max_bytes=max_bytes,
        committer=CommitterSettings(name=COMMITTER.name, email=COMMITTER.email),
    )
    settings = Settings(providers=[provider], targets=list(targets) or [target()])
    made = Decider(settings, provider, "main", lambda: WALL_S)
    if book:
        made.book = StateBook()
    return made


class RecordingBook(StateBook):
    """A state book that keeps every state it was offered."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[ObjectState] = []

    def upsert(self, state: ObjectState) -> Any:
        self.seen.append(state)
        return super().upsert(state)


def secret(name: str = "db", **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": "team-a"},
        "data": {"a": CIPHER},
        "sops": SOPS,
        **extra,
    }


def secret_write(work: Work, doc: dict[str, Any], op: str = "CREATE") -> WorkItem:
    item = work.write(op, doc, resource="secrets")
    assert isinstance(item.body, Write)
    return replace(item, body=replace(item.body, object_json=json.dumps(doc).encode()))


def staged(d: Decider, item: WorkItem) -> Staged:
    assert isinstance(item.body, Write)
    decided = d.write(item, item.body)
    assert isinstance(decided, Staged), decided
    return decided


def apply(d: Decider, item: WorkItem, now: float = 0.0) -> list[Closed]:
    """What the shell does with a write: close before, stage, close after."""
    closed: list[Closed] = []
    decided = staged(d, item)
    if d.closing(decided) is not None and (before := d.close()) is not None:
        closed.append(before)
    if d.stage(decided, now) is not None and (after := d.close()) is not None:
        closed.append(after)
    return closed


@overload
def finish(d: Decider, items: list[WorkItem]) -> Complete: ...
@overload
def finish(d: Decider, items: list[WorkItem], *, carried: Literal[True]) -> Carried: ...
def finish(d: Decider, items: list[WorkItem], *, carried: bool = False) -> Complete | Carried:
    for item in items[:-1]:
        body = item.body
        if isinstance(body, ResyncChunk):
            assert d.snapshots.chunk(item, body) is None
        else:
            assert d.snapshots.begin(item, body) is None  # type: ignore[arg-type]
    end = items[-1]
    assert isinstance(end.body, ResyncEnd)
    done = d.snapshots.end(end, end.body, carried=carried)
    assert isinstance(done, Carried if carried else Complete)
    return done


def snapshot(
    d: Decider, work: Work, objs: list[dict[str, Any]], tree: DictTree | None = None, **kw: Any
) -> tuple[Plan, list[Skip]]:
    items = work.snapshot(1, objs, **kw)
    end = items[-1]
    assert isinstance(end.body, ResyncEnd)
    return run_steps(d.snapshot_steps(finish(d, items), end, end.body, tree or DictTree()))


def state(name: str, mark: tuple[int, int] = (0, 0), rv: str = "1", **kw: Any) -> ObjectState:
    fields: dict[str, Any] = {
        "target": "t1",
        "provider": "git",
        "branch": "main",
        "path": "live",
        "cluster": "default",
        "group": "",
        "version": "v1",
        "resource": "configmaps",
        "namespace": "team-a",
        "name": name,
        "uid": "u",
        "resource_version": rv,
        "object_json": b"{}",
        "sealed": False,
        "document": b"",
        "author": ALICE,
        "partition": mark[0],
        "offset": mark[1],
        "committed_at_ms": 0,
    }
    return ObjectState(**{**fields, **kw})


# writes -----------------------------------------------------------------------------------------


def test_a_write_is_staged_at_its_canonical_path_with_rendered_content() -> None:
    d = decider()
    decided = staged(d, Work().create(cm("app")))
    assert decided.path == "live/team-a/configmaps/app.yaml"
    assert decided.content is not None
    assert decided.content.startswith(b"apiVersion: v1\nkind: ConfigMap\n")
    assert (decided.silence_s, decided.max_age_s, decided.state) == (5.0, 5.0, None)
    assert d.versions.knows(decided.path)
    assert d.versions.uid_of(decided.path) == "uid-app"


def test_a_target_window_overrides_the_providers() -> None:
    decided = staged(decider(target(commit_window_s=2.0)), Work().create(cm("app")))
    assert (decided.silence_s, decided.max_age_s) == (2.0, 2.0), "the maximum age is the silence"


@pytest.mark.parametrize(
    ("item", "error"),
    [
        (Work().create(cm("app", namespace="..")), LayoutError),
        (Work().write("CREATE", None, name="app"), RenderError),
    ],
)
def test_a_write_with_no_safe_path_or_no_object_is_rejected(item: WorkItem, error: type[Exception]) -> None:
    d = decider()
    assert isinstance(item.body, Write)
    decided = d.write(item, item.body)
    assert isinstance(decided, Reject)
    assert isinstance(decided.error, error)
    assert decided.detail.startswith("branch work 0:0 for git/main skipped: ")
    assert len(d.versions) == 0


def test_a_delete_without_content_is_staged_as_a_delete() -> None:
    work = Work()
    d = decider()
    staged(d, work.create(cm("app")))
    decided = staged(d, work.delete("app", rv="2"))
    assert (decided.path, decided.content) == ("live/team-a/configmaps/app.yaml", None)


@pytest.mark.parametrize("targets", [[target(prune="Never")], [target(name="other")]])
def test_deletes_under_prune_never_or_of_an_unconfigured_target_are_skipped(
    targets: list[TargetSettings],
) -> None:
    d = decider(*targets)
    item = Work().delete("app")
    assert isinstance(item.body, Write)
    assert d.write(item, item.body) == Skip(SkipReason.PRUNE_NEVER)
    assert len(d.versions) == 0


def test_an_unconfigured_targets_writes_are_still_written() -> None:
    assert staged(decider(target(name="other")), Work().create(cm("app"))).content is not None


def test_operations_the_rules_keep_from_git_are_skipped() -> None:
    rules = [WatchRule(resources=["configmaps"], namespaces=["team-a"], operations=["CREATE"])]
    d = decider(target(rules=rules))
    work = Work()
    staged(d, work.create(cm("app")))
    update = work.update(cm("app"), rv="2")
    assert isinstance(update.body, Write)
    assert d.write(update, update.body) == Skip(SkipReason.OPERATION_FILTERED)
    assert d.filtered(update, Operation.UPDATE, "team-a")
    assert not d.filtered(update, Operation.CREATE, "team-a")


def test_a_target_whose_rules_cannot_be_read_filters_nothing() -> None:
    rules = [WatchRule(resources=["configmaps"], label_selector="a in (", operations=["CREATE"])]
    d = decider(target(rules=rules))
    assert not d.filtered(Work().update(cm("app")), Operation.UPDATE, "team-a")


def test_changed_rules_apply_from_the_next_record() -> None:
    d = decider()
    item = Work().update(cm("app"))
    assert not d.filtered(item, Operation.UPDATE, "team-a")
    rules = [WatchRule(resources=["configmaps"], namespaces=["team-a"], operations=["CREATE"])]
    provider = d.provider
    d.update_targets(Settings(providers=[provider], targets=[target(rules=rules)]))
    assert d.filtered(item, Operation.UPDATE, "team-a")
    d.update_targets(Settings(providers=[provider], targets=[target(name="t2")]))
    assert d.target_names == {"t2"}
    assert d.target("t1") is None


def test_an_older_version_is_skipped_and_named() -> None:
    work = Work()
    d = decider()
    staged(d, work.create(cm("app"), rv="10"))
    older = work.update(cm("app"), rv="9")
    assert isinstance(older.body, Write)
    assert d.write(older, older.body) == Skip(
        SkipReason.OLDER_VERSION,
        "branch work 0:1: live/team-a/configmaps/app.yaml at resourceVersion 9 is older than the "
        "version already applied; skipped",
    )
    assert staged(d, work.update(cm("app"), rv="10")).path.endswith("app.yaml")


def test_a_sealed_secret_is_written_as_sealed() -> None:
    doc = secret()
    decided = staged(decider(), secret_write(Work(), doc))
    assert decided.path == "live/team-a/secrets/db.sops.yaml"
    assert decided.content == json.dumps(doc).encode()


def test_an_unsealed_secret_is_refused() -> None:
    item = secret_write(Work(), {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"}})
    assert isinstance(item.body, Write)
    decided = decider().write(item, item.body)
    assert isinstance(decided, Skip)
    assert decided.warn
    assert decided.reason is SkipReason.SENSITIVE_UNENCRYPTED
    assert decided.detail.startswith("branch work 0:0: secrets team-a/db not written: sensitive content")
    assert decided.detail.endswith("configure targets[].encryption")


def test_a_sealed_secret_with_plaintext_outside_the_readable_fields_is_refused() -> None:
    item = secret_write(Work(), secret(type="Opaque"))
    assert isinstance(item.body, Write)
    decided = decider().write(item, item.body)
    assert isinstance(decided, Skip)
    assert decided.warn
    assert decided.reason is SkipReason.SEALED_PLAINTEXT
    assert decided.detail.endswith("; see docs/secrets.md")
    assert "type" in decided.detail


def test_extra_sensitive_types_of_an_encrypting_target_are_sealed_too() -> None:
    encryption = EncryptionSettings(age_recipients=[AGE], sensitive_resources=["configmaps"])
    d = decider(target(encryption=encryption))
    item = Work().create(cm("app"))
    assert isinstance(item.body, Write)
    decided = d.write(item, item.body)
    assert isinstance(decided, Skip)
    assert decided.reason is SkipReason.SENSITIVE_UNENCRYPTED
    assert Decider.sensitive(None) == frozenset()
    assert Decider.sensitive(target()) == frozenset()


def test_a_write_implies_its_object_state_record_once() -> None:
    d = decider(book=True)
    work = Work()
    item = work.create(cm("app"))
    decided = staged(d, item)
    assert decided.state is not None
    assert decided.state.key == b"t1//configmaps/team-a/app"
    again = staged(d, replace(item, offset=item.offset))
    assert again.state is None, "the book already has this version at this position"
    gone = staged(d, work.delete("app", rv="2"))
    assert gone.state is not None
    assert gone.state.value is None


def test_a_target_on_another_branch_records_no_state() -> None:
    d = decider(target(branch="other"), book=True)
    assert staged(d, Work().create(cm("app"))).state is None
    assert d.own_targets() == frozenset()


# windows ----------------------------------------------------------------------------------------


def test_a_first_write_opens_a_window_that_closes_on_silence_or_age() -> None:
    d = decider()
    work = Work(step_ms=1000)
    first = staged(d, work.create(cm("a")))
    assert d.closing(first) is None
    assert d.stage(first, now=100.0) is None
    window = d.window
    assert window is not None
    assert (window.opened_at, window.deadline) == (100.0, 105.0)
    near = staged(d, work.create(cm("b")))
    assert d.closing(near) is None
    assert d.stage(near, now=103.0) is None
    assert window.deadline == 105.0, "never past the maximum age"
    work.observed_ms += 5000
    far = staged(d, work.create(cm("c")))
    assert d.closing(far) is CloseReason.SILENCE


def test_a_window_closes_at_its_maximum_age_however_steady_the_writes() -> None:
    d = decider()
    work = Work(step_ms=2000)
    for name in "abc":
        decided = staged(d, work.create(cm(name)))
        assert d.closing(decided) is None
        d.stage(decided, 0.0)
    assert d.closing(staged(d, work.create(cm("d")))) is CloseReason.MAX_AGE


@pytest.mark.parametrize(("author", "other_target"), [(BOB, False), (NOBODY, False), (ALICE, True)])
def test_another_author_or_target_closes_the_window(author: WorkAuthor, other_target: bool) -> None:
    d = decider(target(), target(name="t2", path="two"))
    work = Work()
    d.stage(staged(d, work.create(cm("a"))), 0.0)
    kw = {"target": "t2", "path": "two"} if other_target else {}
    assert d.closing(staged(d, work.create(cm("b"), author, **kw))) is CloseReason.AUTHOR_CHANGE


def test_the_size_cap_and_a_zero_window_close_at_once() -> None:
    d = decider(max_bytes=10)
    assert d.stage(staged(d, Work().create(cm("a"))), 0.0) is CloseReason.SIZE_CAP
    d = decider(window_s=0)
    assert d.stage(staged(d, Work().create(cm("a"))), 0.0) is CloseReason.WINDOW_ZERO


def test_a_window_closes_when_it_reaches_its_size_cap_not_before() -> None:
    size = len(staged(decider(), Work().create(cm("a"))).content or b"")
    d = decider(max_bytes=size + 1)
    assert d.stage(staged(d, Work().create(cm("a"))), 0.0) is None
    d = decider(max_bytes=size)
    assert d.stage(staged(d, Work().create(cm("a"))), 0.0) is CloseReason.SIZE_CAP


def test_closing_a_window_plans_its_commit() -> None:
    template = CommitMessageSettings(subject="${count}")
    d = decider(target(commit_message=template), book=True)
    work = Work(partition=3, start=40)
    for name in "ab":
        d.stage(staged(d, work.create(cm(name))), 0.0)
    closed = d.close()
    assert closed is not None
    assert d.window is None
    assert d.close() is None
    plan = closed.plan
    assert closed.offsets == [(3, 40), (3, 41)]
    assert (plan.kind, plan.target, plan.at) == (PlanKind.WINDOW, "t1", LogPosition("git", "main", 3, 41))
    assert plan.byline == Byline(
        Identity("Alice Example", "alice@example.com"),
        "user",
        "alice@example.com",
        1_767_000_001,
        ("exact alice@example.com",),
    )
    assert plan.observed_at_ms == 1_767_000_000_000
    assert plan.template == template
    assert list(plan.writes) == ["live/team-a/configmaps/a.yaml", "live/team-a/configmaps/b.yaml"]
    assert plan.size == sum(len(c or b"") for c, _ in plan.writes.values()) > 0
    assert [s.key for s in plan.states] == [b"t1//configmaps/team-a/a", b"t1//configmaps/team-a/b"]
    d.stage(staged(d, work.create(cm("c"))), 0.0)
    after = d.close()
    assert after is not None
    assert [s.key for s in after.plan.states] == [b"t1//configmaps/team-a/c"]


@pytest.mark.parametrize(
    ("author", "identity", "kind", "label"),
    [
        (NOBODY, UNRESOLVED, "unresolved", UNRESOLVED.name),
        (CONFIGURED, COMMITTER, "committer", COMMITTER.name),
        (
            WorkAuthor("RESOLVED", "system:serviceaccount:ns:bot", tier="exact"),
            Identity("system:serviceaccount:ns:bot", "systemserviceaccountnsbot@noreply.cluster.local"),
            "serviceaccount",
            "system:serviceaccount:ns:bot",
        ),
    ],
)
def test_a_windows_byline_follows_its_first_author(
    author: WorkAuthor, identity: Identity, kind: str, label: str
) -> None:
    d = decider()
    work = Work()
    work.observed_ms = 0
    d.stage(staged(d, work.create(cm("a"), author)), 0.0)
    closed = d.close()
    assert closed is not None
    byline = closed.plan.byline
    assert (byline.identity, byline.kind, byline.label) == (identity, kind, label)
    assert byline.time_s == int(WALL_S), "no observation time: the wall clock"
    assert closed.plan.template is None


# snapshots --------------------------------------------------------------------------------------


def test_a_snapshot_plans_the_committers_reconcile_commit() -> None:
    d = decider(book=True)
    work = Work(start=7)
    plan, skips = snapshot(d, work, [cm("a"), cm("b")], rv="100")
    assert skips == []
    assert (plan.kind, plan.at, plan.resource, plan.revision) == (
        PlanKind.SNAPSHOT,
        LogPosition("git", "main", 0, 9),
        "configmaps",
        "100",
    )
    assert plan.byline == Byline.committer(COMMITTER, 1_767_000_002)
    assert plan.observed_at_ms == 1_767_000_000_000
    assert list(plan.writes) == ["live/team-a/configmaps/a.yaml", "live/team-a/configmaps/b.yaml"]
    assert all(obj.operation is Operation.UPDATE for _, obj in plan.writes.values())
    assert plan.size == sum(len(c or b"") for c, _ in plan.writes.values())
    sweep = plan.sweep
    assert sweep is not None
    assert not sweep.prune
    assert (sweep.target_path, sweep.group, sweep.resource, sweep.scope) == (
        "live",
        "",
        "configmaps",
        "team-a",
    )
    assert sweep.keep == set(plan.writes)
    assert {s.key for s in plan.states} == {b"t1//configmaps/team-a/a", b"t1//configmaps/team-a/b"}
    assert d.versions.knows("live/team-a/configmaps/a.yaml")


def test_a_snapshots_states_are_authored_as_a_snapshot() -> None:
    d = decider()
    d.book = book = RecordingBook()
    snapshot(d, Work(), [cm("a")])
    assert [(s.author, s.document[:10], s.committed_at_ms) for s in book.seen] == [
        (SNAPSHOT_AUTHOR, b"apiVersion", int(WALL_S * 1000))
    ]


def test_a_snapshot_object_is_created_or_updated_as_its_event_would_be() -> None:
    rules = [WatchRule(resources=["configmaps"], namespaces=["team-a"], operations=["UPDATE"])]
    d = decider(target(rules=rules))
    tree = DictTree("live/team-a/configmaps/known.yaml")
    plan, _ = snapshot(d, Work(), [cm("known"), cm("new")], tree)
    assert list(plan.writes) == ["live/team-a/configmaps/known.yaml"], "CREATE is filtered"
    assert plan.sweep is not None
    assert "live/team-a/configmaps/new.yaml" in plan.sweep.keep


def test_a_snapshot_leaves_out_older_versions_bad_objects_and_unsealed_secrets() -> None:
    d = decider()
    work = Work()
    d.stage(staged(d, work.create(cm("a"), rv="50")), 0.0)
    bad = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x/y", "namespace": "team-a"}}
    plan, skips = snapshot(d, work, [cm("a"), bad, cm("b")], object_rvs={"a": "40"})
    assert list(plan.writes) == ["live/team-a/configmaps/b.yaml"]
    assert [(s.reason, s.warn) for s in skips] == [
        (SkipReason.OLDER_VERSION, False),
        (SkipReason.BAD_RECORD, True),
    ]
    assert skips[1].detail.startswith("branch work 0:4 for git/main skipped: ")
    secrets, secret_skips = snapshot(
        d,
        work,
        [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "team-a"}}],
        resource="secrets",
    )
    assert secrets.writes == {}
    assert [s.reason for s in secret_skips] == [SkipReason.SENSITIVE_UNENCRYPTED]


def test_a_snapshot_object_that_is_not_an_object_is_a_bad_record() -> None:
    d = decider()
    work = Work()
    items = work.snapshot(1, [cm("a")])
    chunk = items[1]
    assert isinstance(chunk.body, ResyncChunk)
    broken = replace(chunk.body, objects=(replace(chunk.body.objects[0], object_json=b"[1]"),))
    items[1] = replace(chunk, body=broken)
    end = items[-1]
    assert isinstance(end.body, ResyncEnd)
    plan, skips = run_steps(d.snapshot_steps(finish(d, items), end, end.body, DictTree()))
    assert plan.writes == {}
    assert [(s.reason, s.warn) for s in skips] == [(SkipReason.BAD_RECORD, True)]
    assert not d.versions.knows("live/team-a/configmaps/a.yaml")


def test_a_sealed_snapshot_object_is_written_as_sealed() -> None:
    d = decider(book=True)
    plan, skips = snapshot(d, Work(), [secret()], resource="secrets")
    assert skips == []
    assert list(plan.writes) == ["live/team-a/secrets/db.sops.yaml"]
    assert [(s.value is not None) for s in plan.states] == [True]


def test_a_snapshot_keeps_what_was_written_after_its_revision() -> None:
    d = decider()
    work = Work()
    d.stage(staged(d, work.create(cm("late"), rv="150")), 0.0)
    d.stage(staged(d, work.create(cm("early"), rv="90")), 0.0)
    plan, _ = snapshot(d, work, [cm("a")], rv="100")
    assert plan.sweep is not None
    assert plan.sweep.keep == {"live/team-a/configmaps/a.yaml", "live/team-a/configmaps/late.yaml"}


def test_a_snapshot_plan_takes_the_collected_objects_over() -> None:
    """The collected list gives each object up to the plan as it is planned (issue 32): a first
    sync never holds a record's object and its planned file and state side by side for all."""
    d = decider(book=True)
    items = Work().snapshot(1, [cm("a"), cm("b"), cm("c")])
    end = items[-1]
    assert isinstance(end.body, ResyncEnd)
    done = finish(d, items)
    steps = d.snapshot_steps(done, end, end.body, DictTree())
    next(steps)
    assert done.snapshot.objects == []
    plan, skips = run_steps(steps)
    assert skips == []
    assert list(plan.writes) == [f"live/team-a/configmaps/{n}.yaml" for n in "abc"]
    assert len(plan.states) == 3


def test_a_snapshot_without_an_end_revision_takes_its_begins() -> None:
    d = decider()
    items = Work().snapshot(1, [cm("a")], rv="77")
    end = items[-1]
    assert isinstance(end.body, ResyncEnd)
    body = replace(end.body, resource_version="")
    plan, _ = run_steps(d.snapshot_steps(finish(d, items), end, body, DictTree()))
    assert plan.revision == "77"


@pytest.mark.parametrize(
    ("prune", "operations", "sweeps"),
    [
        ("Always", [], True),
        ("Always", ["CREATE", "UPDATE"], False),
        ("OnEvent", [], False),
        ("Never", [], False),
    ],
)
def test_only_prune_always_sweeps_and_only_when_deletes_reach_git(
    prune: str, operations: list[str], sweeps: bool
) -> None:
    rules = [WatchRule(resources=["configmaps"], namespaces=["team-a"], operations=operations)]
    d = decider(target(prune=prune, rules=rules), book=True)
    assert d.book is not None
    for name, mark in (("gone", (0, 0)), ("a", (0, 0))):
        d.book.upsert(state(name, mark))
    d.book.upsert(state("elsewhere", namespace="team-b"))
    d.book.upsert(state("x/y"))
    plan, _ = snapshot(d, Work(start=5), [cm("a")])
    assert plan.sweep is not None
    assert plan.sweep.prune is sweeps
    tombstones = [s.key for s in plan.states if s.value is None]
    assert tombstones == ([b"t1//configmaps/team-a/gone"] if sweeps else [])


def test_a_cluster_wide_snapshot_sweeps_every_namespace() -> None:
    d = decider(target(prune="Always"), book=True)
    assert d.book is not None
    d.book.upsert(state("gone", namespace="team-b"))
    plan, _ = snapshot(d, Work(start=5), [cm("a")], scope="")
    assert [s.key for s in plan.states if s.value is None] == [b"t1//configmaps/team-b/gone"]


# deletions inferred from a snapshot ---------------------------------------------------------------


def absent_setup(
    prune: str = "OnEvent", operations: list[str] | None = None
) -> tuple[Decider, Plan, WorkItem]:
    rules = [WatchRule(resources=["configmaps"], namespaces=["team-a"], operations=operations or [])]
    d = decider(target(prune=prune, rules=rules), book=True)
    work = Work()
    items = work.snapshot(1, [cm("a")], rv="100")
    end = items[-1]
    assert isinstance(end.body, ResyncEnd)
    plan, _ = run_steps(d.snapshot_steps(finish(d, items), end, end.body, DictTree()))
    return d, plan, end


TREE = DictTree(
    "live/team-a/configmaps/a.yaml",
    "live/team-a/configmaps/gone.yaml",
    "live/team-a/configmaps/foreign.yaml",
    "live/team-b/configmaps/other.yaml",
)


def test_absent_candidates_are_the_orphans_under_on_event_only() -> None:
    d, plan, end = absent_setup()
    assert d.absent_candidates(plan, end, TREE) == [
        "live/team-a/configmaps/foreign.yaml",
        "live/team-a/configmaps/gone.yaml",
    ]
    for other in (absent_setup("Always"), absent_setup("Never"), absent_setup(operations=["CREATE"])):
        assert other[0].absent_candidates(other[1], other[2], TREE) == []
    d, plan, end = absent_setup()
    assert d.absent_candidates(replace(plan, sweep=None), end, TREE) == []
    assert d.absent_candidates(plan, replace(end, stream=replace(end.stream, target="t9")), TREE) == []


def test_absent_files_are_deleted_under_the_author_the_evidence_names() -> None:
    """uid-keyed evidence matches by the uid last written at the path (never by its name),
    name-keyed evidence by namespace and name; anything else is unknown."""
    d, plan, end = absent_setup()
    assert d.book is not None
    d.versions.applied("live/team-a/configmaps/byuid.yaml", "5", "uid-1")
    d.book.upsert(state("byuid"))
    evidence = (
        Removal("uid-1", "team-a", "plain", BOB),
        Removal("", "team-a", "byname", ALICE),
    )
    body = replace(end.body, removals=evidence)  # type: ignore[type-var]
    written = [f"live/team-a/configmaps/{n}.yaml" for n in ("byuid", "byname", "plain")]
    plans = d.absent_plans(plan, end, body, written)
    by_label = {p.byline.label: p for p in plans}
    assert list(by_label) == ["bob", ALICE.username, UNRESOLVED.name]
    bob = by_label["bob"]
    assert list(bob.writes) == ["live/team-a/configmaps/byuid.yaml"]
    assert [s.key for s in bob.states] == [b"t1//configmaps/team-a/byuid"]
    assert list(by_label[ALICE.username].writes) == ["live/team-a/configmaps/byname.yaml"]
    unknown = by_label[UNRESOLVED.name]
    assert list(unknown.writes) == ["live/team-a/configmaps/plain.yaml"]
    assert unknown.states == []
    assert all(p.kind is PlanKind.WINDOW and p.at == plan.at for p in plans)
    assert all(c is None and o.operation is Operation.DELETE for p in plans for c, o in p.writes.values())
    assert d.versions.is_older("live/team-a/configmaps/plain.yaml", "99"), "the delete is at the revision"


def test_absent_files_without_evidence_are_the_committers() -> None:
    d, plan, end = absent_setup()
    assert isinstance(end.body, ResyncEnd)
    assert end.body.removals is None
    plans = d.absent_plans(plan, end, end.body, ["live/team-a/configmaps/gone.yaml"])
    assert [p.byline.kind for p in plans] == ["committer"]
    assert plans[0].byline.identity == COMMITTER
    assert d.absent_plans(plan, end, end.body, []) == []


# targets ----------------------------------------------------------------------------------------


def test_a_deleted_target_with_remove_files_deletes_its_documents() -> None:
    d = decider(book=True)
    assert d.book is not None
    d.book.upsert(state("a"))
    d.book.upsert(state("other", target="t2"))
    tree = DictTree("live/team-a/configmaps/a.yaml", "live/team-a/apps/deployments/w.yaml", "live/README.md")
    item = Work(start=9).write("CREATE", cm("x"))
    body = TargetDeleted(Prune.ALWAYS, True, 4, "GitTarget t1 deleted")
    plan = d.retire(replace(item, body=body), body, tree)
    assert (plan.kind, plan.at, plan.retired) == (
        PlanKind.RETIRE,
        LogPosition("git", "main", 0, 9),
        Retired("live", Prune.ALWAYS, "GitTarget t1 deleted"),
    )
    assert sorted(plan.writes) == ["live/team-a/apps/deployments/w.yaml", "live/team-a/configmaps/a.yaml"]
    assert [s.key for s in plan.states] == [b"t1//configmaps/team-a/a"]
    assert plan.byline == Byline.committer(COMMITTER, 1_767_000_000)
    assert plan.observed_at_ms == 1_767_000_000_000


def test_a_deleted_target_without_remove_files_keeps_them() -> None:
    d = decider(book=True)
    assert d.book is not None
    d.book.upsert(state("a"))
    item = Work(start=5).write("CREATE", cm("x"))
    body = TargetDeleted(Prune.ON_EVENT, False, 4, "removed")
    plan = d.retire(replace(item, body=body), body, DictTree("live/team-a/configmaps/a.yaml"))
    assert plan.writes == {}
    assert plan.states == []


def test_a_deleted_target_of_an_untracked_branch_removes_files_only() -> None:
    d = decider()
    item = Work(start=5).write("CREATE", cm("x"))
    body = TargetDeleted(Prune.ALWAYS, True, 4, "removed")
    plan = d.retire(replace(item, body=body), body, DictTree("live/team-a/configmaps/a.yaml"))
    assert list(plan.writes) == ["live/team-a/configmaps/a.yaml"]
    assert plan.states == []


def test_unlisted_documents_are_removed_by_a_rebuild_commit() -> None:
    d = decider()
    tree = DictTree("live/team-a/configmaps/a.yaml", "live/team-a/configmaps/b.yaml", "live/x/y")
    assert d.unlisted(target(), tree) is None, "no book: nothing is known"
    d.book = StateBook([state("a"), state("x/y")])
    plan = d.unlisted(target(), tree)
    assert plan is not None
    assert (plan.kind, plan.resource, plan.at) == (
        PlanKind.REBUILD,
        "history",
        LogPosition("git", "main", 0, 0),
    )
    assert list(plan.writes) == ["live/team-a/configmaps/b.yaml"]
    assert plan.byline == Byline.committer(COMMITTER, int(WALL_S))
    d.book.upsert(state("b", (0, 1)))
    assert d.unlisted(target(), tree) is None


def test_a_rebuild_plan_claims_no_record() -> None:
    at = LogPosition("git", "main", 0, 0)
    plan = rebuild_plan(at, "t1", COMMITTER, "reverser.object-state", 12)
    assert (plan.kind, plan.target, plan.resource, plan.writes, plan.size) == (
        PlanKind.REBUILD,
        "t1",
        "reverser.object-state",
        {},
        0,
    )


# recall and redelivery --------------------------------------------------------------------------


def test_recall_seeds_versions_from_the_branchs_own_work_only() -> None:
    d = decider()
    work = Work()
    mine = work.create(cm("a"), rv="10")
    theirs = replace(Work(branch="other").create(cm("b"), rv="10"))
    bad = work.create(cm("c", namespace=".."), rv="10")
    chunk = work.snapshot(1, [cm("d")], object_rvs={"d": "20"})[1]
    run_steps(d.recall([mine, theirs, bad, chunk]))
    assert d.versions.is_older("live/team-a/configmaps/a.yaml", "9")
    assert d.versions.uid_of("live/team-a/configmaps/a.yaml") == "uid-a"
    assert d.versions.is_older("live/team-a/configmaps/d.yaml", "19")
    assert not d.versions.knows("live/team-a/configmaps/b.yaml")
    assert len(d.versions) == 2


def test_redelivered_work_writes_its_state_again_unless_the_topic_has_it() -> None:
    work = Work()
    create = work.create(cm("a"))
    assert decider().redelivered(create) == [], "no book"
    d = decider(book=True)
    found = d.redelivered(create)
    assert [r.key for r in found] == [b"t1//configmaps/team-a/a"]
    assert d.redelivered(create) == []
    items = work.snapshot(1, [cm("b"), cm("c")])
    assert [d.redelivered(item) for item in items] == [[], [], []], "a snapshot is judged at its end"
    assert [r.value for r in d.redelivered(work.delete("a", rv="2"))] == [None]


def test_a_carried_snapshot_writes_its_objects_states_again_unless_the_topic_has_them() -> None:
    d = decider(book=True)
    assert d.book is not None
    d.book.upsert(state("b", (0, 9)))
    items = Work().snapshot(1, [cm("b"), cm("c")])
    done = finish(d, items, carried=True)
    found = d.carried(done, items[-1])
    assert [r.key for r in found] == [b"t1//configmaps/team-a/c"], "b's state is on the topic"
    assert d.carried(done, items[-1]) == [], "written once"
    assert decider().carried(done, items[-1]) == [], "no book"


def test_redelivered_deletes_under_prune_never_write_no_state() -> None:
    d = decider(target(prune="Never"), book=True)
    assert d.book is not None
    d.book.upsert(state("a"))
    assert d.redelivered(Work(start=3).delete("a")) == []
    assert d.redelivered(Work(start=3, target="t9").create(cm("a"))) == []


def test_a_states_document_is_the_committed_file() -> None:
    d = decider()
    d.book = book = RecordingBook()
    seen = book.seen
    work = Work()
    d.redelivered(work.write("CREATE", None, name="null"))
    d.redelivered(secret_write(work, secret()))
    broken = work.create(cm("a"))
    assert isinstance(broken.body, Write)
    d.redelivered(replace(broken, body=replace(broken.body, object_json=b"[1]")))
    assert [(s.name, s.sealed, s.document) for s in seen] == [
        ("null", False, b""),
        ("db", True, b""),
        ("a", False, b""),
    ]
    assert seen[0].object_json == b"null"
    assert (seen[1].resource, seen[1].partition, seen[1].offset) == ("secrets", 0, 1)


# a model of windows and versions ------------------------------------------------------------------

AUTHORS = {"alice": ALICE, "bob": BOB, "nobody": NOBODY}
writes = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),
        st.sampled_from(["CREATE", "UPDATE", "DELETE"]),
        st.integers(min_value=1, max_value=6),
        st.sampled_from(sorted(AUTHORS)),
    ),
    max_size=30,
)


def model(changes: list[tuple[str, str, int, str]], prune: str) -> list[tuple[str, dict[str, bool]]]:
    """The documented rules, spelled out: a delete under `Never` and an older version are skipped;
    a window holds one author's writes in a row, the last write to a path winning."""
    applied: dict[str, int] = {}
    windows: list[tuple[str, dict[str, bool]]] = []
    for name, op, version, author in changes:
        if op == "DELETE" and prune == "Never":
            continue
        if version < applied.get(name, 0):
            continue
        applied[name] = version
        if not windows or windows[-1][0] != author:
            windows.append((author, {}))
        windows[-1][1][name] = op != "DELETE"
    return windows


@settings(max_examples=60, deadline=None)
@given(changes=writes, prune=st.sampled_from(["Never", "OnEvent"]))
def test_windows_and_versions_follow_the_model(changes: list[tuple[str, str, int, str]], prune: str) -> None:
    d = decider(target(prune=prune), window_s=3600)
    work = Work()
    plans: list[Plan] = []
    for name, op, version, author in changes:
        item = work.write(
            op, None if op == "DELETE" else cm(name), AUTHORS[author], name=name, rv=str(version)
        )
        assert isinstance(item.body, Write)
        decided = d.write(item, item.body)
        if isinstance(decided, Skip):
            continue
        assert isinstance(decided, Staged)
        if d.closing(decided) is not None and (closed := d.close()) is not None:
            plans.append(closed.plan)
        assert d.stage(decided, 0.0) is None
    if (last := d.close()) is not None:
        plans.append(last.plan)
    label = {ALICE.username: "alice", BOB.username: "bob", UNRESOLVED.name: "nobody"}
    seen = [
        (
            label[p.byline.label],
            {path.rsplit("/", 1)[1][:-5]: c is not None for path, (c, _) in p.writes.items()},
        )
        for p in plans
    ]
    assert seen == model(changes, prune)


def test_a_due_commit_request_closes_the_window_before_a_later_write() -> None:
    d = decider()
    work = Work()
    d.stage(staged(d, work.create(cm("a"))), 0.0)
    assert d.window is not None
    d.window.close_at_ms = work.observed_ms + 1
    assert d.closing(staged(d, work.create(cm("b")))) is None, "made before the request's close time"
    assert d.closing(staged(d, work.create(cm("c")))) is CloseReason.COMMIT_REQUEST


def test_a_commit_requests_message_names_its_window_and_travels_with_the_plan() -> None:
    d = decider(target(commit_message=CommitMessageSettings(subject="${count}")))
    d.stage(staged(d, Work().create(cm("a"))), 0.0)
    assert d.window is not None
    request = CommitRequested("team-a", "save", "u1", "release 1.2\n\nwhy", 0)
    d.window.requests.append(request)
    closed = d.close()
    assert closed is not None
    assert closed.plan.requests == (request,)
    assert closed.plan.template == CommitMessageSettings(subject="release 1.2", body="why")


def test_a_snapshot_plan_carries_its_targets_template() -> None:
    template = CommitMessageSettings(subject="${count}")
    plan, _ = snapshot(decider(target(commit_message=template)), Work(), [cm("a")])
    assert plan.template == template
    plan, _ = snapshot(decider(target(name="t9")), Work(), [cm("a")])
    assert plan.template is None


# in-place decisions -------------------------------------------------------------------------------

OWN = "live/team-a/configmaps/a.yaml"


class OneFolder:
    """The `Homes` of a branch with one indexed target folder, `live` (built from text, no Git)."""

    def __init__(self, files: dict[str, str]) -> None:
        self.index = FolderIndex("live")
        run_steps(self.index.load({path: text.encode() for path, text in files.items()}))

    def folder(self, target_path: str) -> FolderIndex | None:
        return self.index if target_path == "live" else None


def rendered(*objs: dict[str, Any]) -> str:
    return "---\n".join(render_object(o).decode() for o in objs)


# `a` and `b` share a user's file: both are edited in place
BUNDLE = {"live/all.yaml": rendered(cm("a"), cm("b"))}


def write_with(d: Decider, item: WorkItem, homes: OneFolder) -> Staged:
    assert isinstance(item.body, Write)
    decided = d.write(item, item.body, homes)
    assert isinstance(decided, Staged), decided
    return decided


def test_a_change_in_a_shared_file_is_recorded_and_its_object_kept_for_the_next() -> None:
    d = decider()
    homes = OneFolder(BUNDLE)
    work = Work()
    labelled = {
        **cm("a", key="x"),
        "metadata": {"name": "a", "namespace": "team-a", "labels": {"app": "web"}},
    }
    first = write_with(d, work.update(labelled, rv="2"), homes)
    change = first.change
    assert change is not None
    assert (change.folder, change.key) == ("live", HomeKey("", "ConfigMap", "team-a", "a"))
    assert (change.before, change.after) == (None, labelled)
    assert change.items == (first.item,)
    assert not change.listed
    assert change.placed == PlacedObject("", "v1", "configmaps", "ConfigMap", "team-a", "a", {"app": "web"})
    assert d.seen.get(OWN) == labelled
    second = write_with(d, work.update(cm("a", key="y"), rv="3"), homes)
    assert second.change is not None
    assert (second.change.before, second.change.after) == (labelled, cm("a", key="y"))
    gone = write_with(d, work.delete("a", rv="4"), homes)
    assert gone.change is not None
    assert (gone.change.key.kind, gone.change.before, gone.change.after) == (
        "ConfigMap",
        cm("a", key="y"),
        None,
    )
    assert gone.change.placed.labels == {}
    assert d.seen.get(OWN) is None, "a deleted object is not kept"


def test_a_deletes_kind_and_labels_come_from_the_object_kept() -> None:
    d = decider()
    homes = OneFolder({"live/k/kustomization.yaml": "resources: []\n"})
    labelled = {**cm("a"), "metadata": {"name": "a", "namespace": "team-a", "labels": {"app": "web"}}}
    work = Work()
    assert write_with(d, work.create(labelled), homes).change is not None
    assert d.seen.get(OWN) == labelled, "a kustomization may take a new object: kept"
    gone = write_with(d, work.delete("a", rv="2"), homes).change
    assert gone is not None
    assert (gone.key.kind, gone.placed.labels, gone.after) == ("ConfigMap", {"app": "web"}, None)


def test_a_change_without_an_index_or_a_kind_is_the_canonical_files_alone() -> None:
    d = decider()
    work = Work()
    elsewhere = work.create(cm("a"), path="other")
    assert write_with(d, elsewhere, OneFolder(BUNDLE)).change is None, "the folder is not indexed"
    assert d.seen.get("other/team-a/configmaps/a.yaml") is None
    assert write_with(d, work.delete("c", rv="2"), OneFolder(BUNDLE)).change is None, "kind unknown"
    assert write_with(d, work.create(cm("a")), OneFolder({})).change is not None


def test_a_change_takes_its_kind_from_the_index_when_the_object_names_none() -> None:
    d = decider()
    work = Work()
    nameless = {**cm("a"), "kind": ""}
    change = write_with(d, work.update(nameless, rv="2"), OneFolder(BUNDLE)).change
    assert change is not None
    assert change.key.kind == "ConfigMap"
    odd = {**cm("b"), "kind": 7}
    change = write_with(d, work.update(odd, rv="2"), OneFolder(BUNDLE)).change
    assert change is not None
    assert change.key.kind == "ConfigMap"
    lone = {**cm("c"), "kind": ""}
    assert (
        write_with(
            d, work.update(lone, rv="2"), OneFolder({"live/k/kustomization.yaml": "resources: []\n"})
        ).change
        is None
    )


def test_an_object_in_its_own_canonical_file_is_not_kept() -> None:
    d = decider()
    homes = OneFolder({OWN: rendered(cm("a"))})
    change = write_with(d, Work().update(cm("a", key="x"), rv="2"), homes).change
    assert change is not None
    assert change.after == cm("a", key="x")
    assert d.seen.get(OWN) is None


def test_a_placement_template_keeps_a_new_objects_live_object() -> None:
    placement = PlacementSettings(by_type={"v1/configmaps": "{namespace}/config/{name}.yaml"})
    d = decider(target(placement=placement))
    assert write_with(d, Work().create(cm("a")), OneFolder({})).change is not None
    assert d.seen.get(OWN) == cm("a")
    plain = decider()
    assert write_with(plain, Work().create(cm("a")), OneFolder({})).change is not None
    assert plain.seen.get(OWN) is None, "no template, no kustomization: the canonical file"
    unknown = decider(target(name="t9"))
    assert write_with(unknown, Work().create(cm("a")), OneFolder({})).change is not None
    assert unknown.seen.get(OWN) is None


def test_a_sealed_change_places_its_plaintext_and_keeps_nothing() -> None:
    d = decider()
    doc = secret("a")
    path = "live/team-a/secrets/a.sops.yaml"
    d.seen.note(path, {"kind": "Secret"})
    homes = OneFolder({"live/all.yaml": rendered(secret("a"), cm("b"))})
    change = write_with(d, secret_write(Work(), doc), homes).change
    assert change is not None
    assert change.before is None, "a sealed object is rewritten whole"
    assert change.after == doc
    assert change.placed.sensitive
    assert (change.key.kind, change.placed.labels) == ("Secret", {})
    assert d.seen.get(path) is None


def test_recall_keeps_the_objects_of_files_edited_in_place_one_step_per_object() -> None:
    d = decider()
    work = Work()
    items = [
        work.create(cm("a", key="x"), rv="10"),
        work.delete("b", rv="11"),
        work.create(cm("c"), rv="12", path="other"),
        *work.snapshot(1, [cm("b", key="y"), cm("d")])[1:2],
        Work(branch="other").create(cm("e"), rv="10"),
    ]
    homes = OneFolder({**BUNDLE, "live/team-a/configmaps/d.yaml": rendered(cm("d"))})
    assert len(list(d.recall(items, homes))) == 5, "a write or delete is one step, a chunk one per object"
    assert d.seen.get(OWN) == cm("a", key="x")
    assert d.seen.get("live/team-a/configmaps/b.yaml") == cm("b", key="y")
    assert d.seen.get("live/team-a/configmaps/d.yaml") is None, "in its own canonical file"
    assert d.seen.get("other/team-a/configmaps/c.yaml") is None, "the folder is not indexed"
    plain = decider()
    run_steps(plain.recall(items))
    assert plain.seen.get(OWN) is None, "without homes nothing is kept"


def test_states_remembered_are_those_of_files_edited_in_place() -> None:
    d = decider()
    sealed = replace(
        state("s", resource="secrets", object_json=json.dumps(secret("s")).encode()), sealed=True
    )
    states = [
        state("a", object_json=json.dumps(cm("a")).encode()),
        state("b", object_json=None),
        state("c", object_json=json.dumps(cm("c")).encode(), path="other"),
        state("d", object_json=json.dumps({**cm("d"), "kind": 7}).encode()),
        state("e", object_json=b"[1]"),
        state("x/y", object_json=json.dumps(cm("x/y")).encode()),
        sealed,
    ]
    homes = OneFolder({"live/all.yaml": rendered(cm("a"), cm("b"), cm("c"), cm("d"), cm("e"), secret("s"))})
    assert len(list(d.remember_states(states, homes))) == len(states)
    assert d.seen.get(OWN) == cm("a")
    for name in ("b", "c", "d", "e"):
        assert d.seen.get(f"live/team-a/configmaps/{name}.yaml") is None, name
    assert d.seen.get("live/team-a/secrets/s.sops.yaml") is None
    assert d.seen.get("live/team-a/secrets/s.yaml") is None


def counted(steps: Steps[Any]) -> tuple[int, Any]:
    """How many steps `steps` took, and what it returned."""
    taken = 0
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return taken, done.value
        taken += 1


def snapshot_with(
    d: Decider, work: Work, objs: list[dict[str, Any]], homes: OneFolder, **kw: Any
) -> tuple[int, Plan]:
    items = work.snapshot(1, objs, **kw)
    end = items[-1]
    assert isinstance(end.body, ResyncEnd)
    taken, (plan, _) = counted(d.snapshot_steps(finish(d, items), end, end.body, DictTree(), homes))
    return taken, plan


def test_a_snapshots_object_in_a_users_file_is_recorded_as_listed() -> None:
    d = decider()
    taken, plan = snapshot_with(d, Work(), [cm("a", key="x"), cm("c")], OneFolder(BUNDLE))
    assert taken == 2, "one step per object"
    assert list(plan.changes) == [OWN, "live/team-a/configmaps/c.yaml"]
    change = plan.changes[OWN]
    assert (change.after, change.items, change.listed, change.swept) == (cm("a", key="x"), (), True, False)
    assert d.seen.get(OWN) == cm("a", key="x")
    assert snapshot_with(decider(), Work(), [cm("a")], OneFolder(BUNDLE), path="other")[1].changes == {}


def test_a_sealed_snapshot_object_places_its_plaintext() -> None:
    d = decider()
    homes = OneFolder({"live/all.yaml": rendered(secret("a"), cm("b"))})
    _, plan = snapshot_with(d, Work(), [secret("a")], homes, resource="secrets")
    change = plan.changes["live/team-a/secrets/a.sops.yaml"]
    assert (change.after, change.placed.sensitive, change.listed) == (secret("a"), True, True)


def test_prune_always_sweeps_the_unlisted_objects_of_users_files() -> None:
    d = decider(target(prune="Always"))
    work = Work()
    d.stage(staged(d, work.create(cm("late"), rv="150")), 0.0)
    gone = "live/team-a/configmaps/b.yaml"
    d.seen.note(gone, cm("b"))
    homes = OneFolder(
        {
            "live/all.yaml": rendered(cm("a"), cm("b"), cm("late"), cm("x", namespace="team-b")),
            "live/deploy.yaml": rendered({**cm("w"), "apiVersion": "apps/v1", "kind": "Deployment"}),
        }
    )
    taken, plan = snapshot_with(d, work, [cm("a")], homes, rv="100")
    assert taken == 3, "one step for the listed object, one per unlisted object of the scope"
    assert sorted(plan.writes) == [OWN, gone]
    assert plan.writes[gone] == (None, ChangedObject(Operation.DELETE, "", "v1", "configmaps", "team-a", "b"))
    key = HomeKey("", "ConfigMap", "team-a", "b")
    placed = PlacedObject("", "v1", "configmaps", "ConfigMap", "team-a", "b", {})
    assert plan.changes[gone] == LiveChange("live", key, placed, None, None, swept=True)
    assert d.seen.get(gone) is None


def test_a_sealed_sweep_names_the_sealed_path() -> None:
    d = decider(target(prune="Always"))
    homes = OneFolder({"live/all.yaml": rendered(secret("a"), secret("b"), cm("c"))})
    _, plan = snapshot_with(d, Work(), [secret("a")], homes, resource="secrets")
    gone = "live/team-a/secrets/b.sops.yaml"
    assert sorted(plan.writes) == ["live/team-a/secrets/a.sops.yaml", gone]
    assert plan.changes[gone].swept
    assert plan.changes[gone].placed.sensitive


def test_only_prune_always_sweeps_users_files_and_only_an_indexed_folder() -> None:
    for d, path in ((decider(), "live"), (decider(target(prune="Always", path="other")), "other")):
        _, plan = snapshot_with(d, Work(path=path), [cm("a")], OneFolder(BUNDLE))
        assert [c for c in plan.changes.values() if c.swept] == []
        assert f"{path}/team-a/configmaps/b.yaml" not in plan.writes


def test_a_rebuild_keeps_the_users_files_that_hold_a_held_object() -> None:
    d = decider()
    d.book = StateBook([state("a")])
    bundle, other = "live/team-a/configmaps/all.yaml", "live/team-a/configmaps/b.yaml"
    tree = DictTree(bundle, other)
    homes = OneFolder({bundle: rendered(cm("a"), cm("c")), other: rendered(cm("b"))})
    plan = d.unlisted(target(), tree, homes)
    assert plan is not None
    assert list(plan.writes) == [other]
    plan = d.unlisted(target(), tree)
    assert plan is not None
    assert sorted(plan.writes) == [bundle, other], "without homes"


def test_a_window_shorter_than_a_second_is_not_a_zero_window() -> None:
    d = decider(window_s=0.5)
    assert d.stage(staged(d, Work().create(cm("a"))), 0.0) is None
