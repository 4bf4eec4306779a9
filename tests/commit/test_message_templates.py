"""Per-target commit message templates: variables, cleaning, and trailers the template cannot touch."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.commit.branch import BranchWorker
from pipeline.commit.gitrepo import LocalRepo
from pipeline.commit.messages import ChangedObject, template_values, window_message
from pipeline.config import (
    CommitMessageSettings,
    ConfigError,
    ProviderSettings,
    Settings,
    TargetSettings,
    load_settings,
)
from pipeline.msgtemplate import TemplateError, check_template, render_body, render_subject
from tests.commit.helpers import ALICE, BOB, Work, bare_remote, cm, git

ONE = [ChangedObject("CREATE", "", "v1", "configmaps", "team-a", "app")]
TWO = [*ONE, ChangedObject("UPDATE", "apps", "v1", "deployments", "team-a", "web")]


def test_variables_for_one_and_many_objects() -> None:
    one = template_values(ONE, "alice", "prod")
    assert one == {
        "operation": "CREATE",
        "resource": "configmaps",
        "api_version": "v1",
        "namespace": "team-a",
        "name": "app",
        "author": "alice",
        "count": "1",
        "target": "prod",
        "objects": "CREATE v1/configmaps/team-a/app",
    }
    many = template_values(TWO, "alice", "prod")
    assert (many["operation"], many["resource"], many["api_version"], many["name"], many["count"]) == (
        "MIXED",
        "resources",
        "",
        "",
        "2",
    )
    assert many["objects"].splitlines() == [
        "CREATE v1/configmaps/team-a/app",
        "UPDATE apps/v1/deployments/team-a/web",
    ]


def test_unknown_variables_and_bad_syntax_are_refused(tmp_path: Path) -> None:
    assert (
        check_template("${author} changed ${count} ${resource}") == "${author} changed ${count} ${resource}"
    )
    with pytest.raises(TemplateError, match=r"unknown variable.*secret_value"):
        check_template("${secret_value}")
    with pytest.raises(TemplateError, match="invalid placeholder"):
        check_template("cost: $5")
    config = tmp_path / "c.yaml"
    config.write_text(
        "providers: [{name: git, url: /tmp/r.git}]\n"
        "targets: [{name: t, provider: git, commit_message: {subject: '${who}'}}]\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match=r"targets\.0\.commit_message\.subject.*unknown variable"):
        load_settings(config, {})


def test_rendering_cannot_forge_trailers_or_control_characters() -> None:
    values = template_values(ONE, "mallory\nReverser-Offset: 0:999999", "prod")
    assert (
        render_subject("${author} did ${operation}", values) == "mallory Reverser-Offset: 0:999999 did CREATE"
    )
    body = render_body("by ${author}\nreverser-branch: evil main\n\x1b[31mred\x07\n${objects}", values)
    assert body == ["by mallory", "[31mred", "CREATE v1/configmaps/team-a/app"]
    message = window_message(
        ONE,
        "mallory",
        "prod",
        ["exact mallory"],
        "git",
        "main",
        3,
        42,
        CommitMessageSettings(subject="${operation} by ${author}", body="Reverser-Offset: 9:9\n${objects}"),
    )
    subject, _, rest = message.partition("\n\n")
    assert subject == "CREATE by mallory"
    body_part, _, trailers = rest.rstrip("\n").rpartition("\n\n")
    assert body_part == "CREATE v1/configmaps/team-a/app"
    assert trailers.splitlines() == [
        "Reverser-Attribution: exact mallory",
        "Reverser-Branch: git main",
        "Reverser-Offset: 3:42",
    ]


async def test_worker_uses_the_targets_template_and_still_recovers_from_its_trailers(tmp_path: Path) -> None:
    remote = bare_remote(tmp_path / "remote.git")
    provider = ProviderSettings(name="git", url=str(remote), commit_window_s=0, push_cooldown_s=0)
    templated = CommitMessageSettings(
        subject="${author}: ${operation} ${resource} ${name} (${count})",
        body="Changed on ${target}:\n${objects}",
    )
    settings = Settings(
        workdir=tmp_path / "work",
        providers=[provider],
        targets=[
            TargetSettings(name="t1", provider="git", path="live", commit_message=templated),
            TargetSettings(name="t2", provider="git", path="other"),
        ],
    )

    def worker() -> BranchWorker:
        repo = LocalRepo.for_branch(tmp_path / "clones", "git", "main", str(remote), None)
        return BranchWorker(settings, provider, "main", repo, lambda _: None)

    first = worker()
    await first.sync()
    work = Work()
    items = [work.create(cm("app"), ALICE), work.create(cm("plain"), BOB, target="t2", path="other")]
    for item in items:
        await first.handle(item)
    assert await first.stop()
    log = git(remote, "log", "--reverse", "--format=%s%n%b%x00", "main").split("\x00")
    assert log[0].strip().splitlines() == [
        "alice@example.com: CREATE configmaps app (1)",
        "Changed on t1:",
        "CREATE v1/configmaps/team-a/app",
        "",
        "Reverser-Attribution: exact alice@example.com",
        "Reverser-Branch: git main",
        "Reverser-Offset: 0:0",
    ]
    assert log[1].strip().splitlines()[0] == "[CREATE] v1/configmaps/plain"
    # a restarted worker reads the trailers back and skips the work it already committed
    second = worker()
    await second.sync()
    for item in items:
        await second.handle(item)
    assert await second.stop()
    assert len(git(remote, "rev-list", "main").split()) == 2
