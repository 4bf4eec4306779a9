"""A deleted target on its branch: the commit worker reads `TargetDeleted` from the log and, under
prune Always, removes the target's folder in one committer commit; otherwise it keeps the files.

Real log (embedded and Kafka), real bare Git remote; the work is what the controller appends
(`pipeline/customresources/retire.py`), appended here directly.
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client import REGISTRY

from pipeline.codec.branch_work import ResyncBegin, TargetDeleted, WorkItem
from pipeline.commit.consumer import CommitWorker
from pipeline.config import ProviderSettings, Settings, TargetSettings
from pipeline.log.api import Log
from tests.commit.helpers import Work, bare_remote, cm, files, git, log_lines
from tests.commit.logwork import append_work, commit_all, wait_settled


def _settings(settings: Settings, remote: Path, targets: list[TargetSettings]) -> Settings:
    return settings.model_copy(
        update={
            "providers": [
                ProviderSettings(name="git", url=str(remote), commit_window_s=0.2, push_cooldown_s=0.2)
            ],
            "targets": targets,
        }
    )


def _deleted(work: Work, target: str, path: str, prune: str, remove: bool) -> WorkItem:
    reason = f"GitTarget {target} was deleted (configuration version 2)"
    return work._item(
        TargetDeleted(prune, remove, 2, reason),
        target=target,
        path=path,
        group="",
        version="",
        resource="",
        scope="",
    )


def _skipped(reason: str) -> float:
    return REGISTRY.get_sample_value("reverser_commit_skipped_total", {"reason": reason}) or 0.0


async def test_prune_always_removes_the_folder_in_one_commit_and_never_keeps_it(
    settings: Settings, any_log: Log, tmp_path: Path
) -> None:
    remote = bare_remote(tmp_path / "remote.git")
    gone = TargetSettings(name="gone", provider="git", path="gone", prune="Always")
    kept = TargetSettings(name="kept", provider="git", path="kept", prune="Never")
    stays = TargetSettings(name="stays", provider="git", path="stays", prune="Always")
    before = _settings(settings, remote, [gone, kept, stays])
    after = _settings(settings, remote, [stays])
    w = Work(step_ms=10)
    await append_work(
        any_log,
        before,
        [
            *w.snapshot(1, [cm("a"), cm("b")], rv="7", target="gone", path="gone"),
            w.create(cm("c"), target="kept", path="kept"),
            w.create(cm("d"), target="stays", path="stays"),
        ],
    )
    worker = CommitWorker(before, any_log)
    await worker.start()
    try:
        await wait_settled(any_log, before)
        assert sorted(files(remote)) == [
            "gone/team-a/configmaps/a.yaml",
            "gone/team-a/configmaps/b.yaml",
            "kept/team-a/configmaps/c.yaml",
            "stays/team-a/configmaps/d.yaml",
        ]
        commits_before = len(log_lines(remote))
        late_before = _skipped("deleted_target")
        # the configuration without them reaches this process; then their records arrive: an
        # unfinished snapshot of the removed target (its stream stopped mid-list), the
        # deletions, and a write its stream still routed before it stopped
        await worker.apply(after)
        await append_work(
            any_log,
            after,
            [
                w._item(ResyncBegin(2, "9"), target="gone", path="gone"),
                _deleted(w, "gone", "gone", "Always", True),
                _deleted(w, "kept", "kept", "Never", False),
                w.create(cm("late"), target="gone", path="gone"),
            ],
        )
        await wait_settled(any_log, after)
    finally:
        await worker.stop()
    assert sorted(files(remote)) == ["kept/team-a/configmaps/c.yaml", "stays/team-a/configmaps/d.yaml"]
    lines = log_lines(remote, fmt="%an <%ae>|%cn <%ce>|%s")
    assert len(lines) == commits_before + 1
    committer = before.providers[0].committer
    identity = f"{committer.name} <{committer.email}>"
    assert lines[-1] == f"{identity}|{identity}|removed gone/ of deleted target gone (prune Always)"
    message = git(remote, "log", "-1", "--format=%B", "main")
    assert "GitTarget gone was deleted (configuration version 2)" in message
    assert "delete gone/team-a/configmaps/a.yaml" in message
    assert "Reverser-Offset: " in message
    changed = git(remote, "show", "--name-status", "--format=", "main").split("\n")
    assert sorted(line for line in changed if line) == [
        "D\tgone/team-a/configmaps/a.yaml",
        "D\tgone/team-a/configmaps/b.yaml",
    ]
    # the late write of the deleted target: skipped, not written back
    assert _skipped("deleted_target") >= late_before + 2  # the dropped snapshot begin and the write


async def test_a_target_added_again_writes_again(settings: Settings, any_log: Log, tmp_path: Path) -> None:
    """After its deletion, a target of the same name that is configured again is written as usual."""
    remote = bare_remote(tmp_path / "remote.git")
    target = TargetSettings(name="t", provider="git", path="t", prune="Always")
    cfg = _settings(settings, remote, [target])
    w = Work(step_ms=10, target="t", path="t")
    await append_work(
        any_log, cfg, [w.create(cm("a")), _deleted(w, "t", "t", "Always", True), w.create(cm("b"))]
    )
    await commit_all(any_log, cfg)
    assert sorted(files(remote)) == ["t/team-a/configmaps/b.yaml"]
    assert [line.split("|")[-1] for line in log_lines(remote)] == [
        "[CREATE] v1/configmaps/a",
        "removed t/ of deleted target t (prune Always)",
        "[CREATE] v1/configmaps/b",
    ]


async def test_a_restarted_worker_skips_late_records_of_a_target_deleted_before_it_stopped(
    settings: Settings, any_log: Log, tmp_path: Path
) -> None:
    """The deletion is behind the committed offset when the worker starts again: nothing in its
    memory says the target was deleted; the configuration lacks it and no `TargetDeleted` of it
    follows the late record on the log, so the record is skipped, not written back."""
    remote = bare_remote(tmp_path / "remote.git")
    gone = TargetSettings(name="gone", provider="git", path="gone", prune="Always")
    stays = TargetSettings(name="stays", provider="git", path="stays", prune="Always")
    before = _settings(settings, remote, [gone, stays])
    after = _settings(settings, remote, [stays])
    w = Work(step_ms=10)
    await append_work(any_log, before, [w.create(cm("a"), target="gone", path="gone")])
    await commit_all(any_log, before)
    await append_work(any_log, after, [_deleted(w, "gone", "gone", "Always", True)])
    # this worker applies the deletion, commits its offset and stops (its memory goes with it)
    await commit_all(any_log, after)
    assert not files(remote)
    commits = len(log_lines(remote))
    late_before = _skipped("deleted_target")
    await append_work(
        any_log,
        after,
        [w.create(cm("late"), target="gone", path="gone"), w.create(cm("b"), target="stays", path="stays")],
    )
    await commit_all(any_log, after)
    # the record after it (the positive signal that the late one was passed) is committed
    assert sorted(files(remote)) == ["stays/team-a/configmaps/b.yaml"]
    assert len(log_lines(remote)) == commits + 1
    assert _skipped("deleted_target") == late_before + 1


async def test_a_restarted_worker_writes_records_that_precede_the_deletion(
    settings: Settings, any_log: Log, tmp_path: Path
) -> None:
    """A worker that starts with the configuration without the target, before its `TargetDeleted`
    was applied, still writes the records routed while the target existed: the deletion follows
    them on the log. Under prune Never the files then stay."""
    remote = bare_remote(tmp_path / "remote.git")
    stays = TargetSettings(name="stays", provider="git", path="stays", prune="Never")
    after = _settings(settings, remote, [stays])
    w = Work(step_ms=10)
    await append_work(
        any_log,
        after,
        [
            w.create(cm("a"), target="kept", path="kept"),
            _deleted(w, "kept", "kept", "Never", False),
            w.create(cm("late"), target="kept", path="kept"),
            w.create(cm("b"), target="stays", path="stays"),
        ],
    )
    late_before = _skipped("deleted_target")
    await commit_all(any_log, after)
    assert sorted(files(remote)) == ["kept/team-a/configmaps/a.yaml", "stays/team-a/configmaps/b.yaml"]
    assert _skipped("deleted_target") == late_before + 1
