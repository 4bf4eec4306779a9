"""gitops-reverser's Go message templates on real commits: which template writes which commit.

A window of one object is written by `event_template`, a window of several by `group_template`,
a snapshot's commit by `reconcile_template` (GR's eventTemplate, groupTemplate and
reconcileTemplate); the worker's trailers always follow, so recovery still works. A template
that fails on a window's data falls back to GR's default, counted. Real bare remote, real git.
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client import REGISTRY

from pipeline.commit.branch import BranchWorker
from pipeline.commit.git.repo import LocalRepo
from pipeline.config import CommitMessageSettings, ProviderSettings, Settings, TargetSettings
from tests.commit.helpers import ALICE, CONFIGURED, NOBODY, Work, bare_remote, cm, git

GR = CommitMessageSettings(
    event_template="{{.Operation}} {{.Resource}}/{{.Name}} by {{.Username}} on {{.GitTarget}}",
    group_template=(
        "{{.Author}}: {{.Count}} change(s){{range $op, $n := .Operations}} {{$op}}={{$n}}{{end}}\n\n"
        "{{range .Resources}}- {{.}}\n{{end}}"
    ),
    reconcile_template="sync {{.Count}} {{.APIVersion}}/{{.Resource}} at {{.Revision}}",
)


def _settings(
    tmp_path: Path, remote: Path, message: CommitMessageSettings
) -> tuple[Settings, ProviderSettings]:
    provider = ProviderSettings(name="git", url=str(remote), commit_window_s=0, push_cooldown_s=0)
    settings = Settings(
        workdir=tmp_path / "work",
        providers=[provider],
        targets=[
            TargetSettings(name="team-a/apps", provider="git", path="live", commit_message=message),
            TargetSettings(
                name="batch", provider="git", path="batch", commit_message=message, commit_window_s=60
            ),
        ],
    )
    return settings, provider


def _messages(remote: Path) -> list[str]:
    return [
        m.strip()
        for m in git(remote, "log", "--reverse", "--format=%B%x00", "main").split("\x00")
        if m.strip()
    ]


async def test_each_template_writes_its_commit_and_trailers_follow(tmp_path: Path) -> None:
    remote = bare_remote(tmp_path / "remote.git")
    settings, provider = _settings(tmp_path, remote, GR)

    def worker() -> BranchWorker:
        repo = LocalRepo.for_branch(tmp_path / "clones", "git", "main", str(remote), None)
        return BranchWorker(settings, provider, "main", repo, lambda _: None)

    first = worker()
    await first.sync()
    work = Work(target="team-a/apps")
    batch = Work(target="batch", path="batch", start=100)
    items = [
        *work.snapshot(1, [cm("a"), cm("b")], rv="4711"),
        work.create(cm("app"), ALICE),
        work.update(cm("app", x="1"), CONFIGURED),
        batch.create(cm("one"), NOBODY),
        batch.create(cm("two"), NOBODY),
    ]
    for item in items:
        await first.handle(item)
    assert await first.stop()
    messages = _messages(remote)
    assert [m.splitlines()[0] for m in messages] == [
        "sync 2 v1/configmaps at 4711",
        "CREATE configmaps/app by alice@example.com on apps",
        # configured-author mode: GR's Username is empty, never the committer or a placeholder
        "UPDATE configmaps/app by  on apps",
        # an unresolved author is empty in GR's templates too
        ": 2 change(s) CREATE=2",
    ]
    assert messages[3].splitlines()[2:4] == ["- v1/configmaps/team-a/one", "- v1/configmaps/team-a/two"]
    assert messages[1].splitlines()[-2:] == ["Reverser-Branch: git main", "Reverser-Offset: 0:3"]
    # a restarted worker recovers from the trailers and commits nothing twice
    second = worker()
    await second.sync()
    for item in items:
        await second.handle(item)
    assert await second.stop()
    assert len(_messages(remote)) == 4


async def test_a_template_failing_on_a_window_falls_back_to_grs_default(tmp_path: Path) -> None:
    remote = bare_remote(tmp_path / "remote.git")
    # checks (the samples have a DELETE) but fails on a window without one: missingkey=error
    failing = CommitMessageSettings(group_template="{{.Operations.DELETE}} deleted")
    settings, provider = _settings(tmp_path, remote, failing)
    before = (
        REGISTRY.get_sample_value(
            "reverser_commit_message_template_fallbacks_total", {"target": "batch", "kind": "group"}
        )
        or 0.0
    )
    repo = LocalRepo.for_branch(tmp_path / "clones", "git", "main", str(remote), None)
    worker = BranchWorker(settings, provider, "main", repo, lambda _: None)
    await worker.sync()
    batch = Work(target="batch", path="batch")
    for item in (batch.create(cm("one"), ALICE), batch.create(cm("two"), ALICE)):
        await worker.handle(item)
    assert await worker.stop()
    assert _messages(remote)[0].splitlines()[0] == "alice@example.com on batch: 2 resource(s)"
    after = REGISTRY.get_sample_value(
        "reverser_commit_message_template_fallbacks_total", {"target": "batch", "kind": "group"}
    )
    assert after == before + 1
