"""Per-target commit message templates: variables, cleaning, and trailers the template cannot touch."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.codec.branch_work import WorkAuthor
from pipeline.commit.branch import BranchWorker
from pipeline.commit.commits import CommitInfo
from pipeline.commit.git.repo import LocalRepo
from pipeline.commit.messages import ChangedObject, template_values, window_message
from pipeline.commit.position import LogPosition
from pipeline.config import (
    CommitMessageSettings,
    ConfigError,
    ProviderSettings,
    Settings,
    TargetSettings,
    load_settings,
)
from pipeline.msgtemplate import TemplateError, check_template, clean_line, render_body, render_subject
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
        "objects": ("CREATE v1/configmaps/team-a/app",),
    }
    many = template_values(TWO, "alice", "prod")
    assert (many["operation"], many["resource"], many["api_version"], many["name"], many["count"]) == (
        "MIXED",
        "resources",
        "",
        "",
        "2",
    )
    assert many["objects"] == (
        "CREATE v1/configmaps/team-a/app",
        "UPDATE apps/v1/deployments/team-a/web",
    )


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
        render_subject("${author} did ${operation}", values) == "mallory?Reverser-Offset: 0:999999 did CREATE"
    )
    body = render_body("by ${author}\nreverser-branch: evil main\n\x1b[31mred\x07\n${objects}", values)
    assert body == ["by mallory?Reverser-Offset: 0:999999", "[31mred", "CREATE v1/configmaps/team-a/app"]
    alone = template_values(ONE, "Reverser-Offset: 0:999999", "prod")
    assert render_body("${author}", alone) == ["?everser-Offset: 0:999999"]
    message = window_message(
        ONE,
        "mallory",
        "prod",
        ["exact mallory"],
        LogPosition("git", "main", 3, 42),
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


# What a cluster user can put into a username, a namespace or a name to add lines or trailers:
# line breaks of every kind, git's patch divider and scissors line (which end the message for
# `git interpret-trailers`), trailers, C0/C1 controls and bidi overrides.
HOSTILE_PIECES = (
    "\n",
    "\r\n",
    "\n\n",
    "\r",
    "\x0b",
    "\x0c",
    "\x1c",
    "\x85",
    "\u2028",
    "\u2029",
    "---",
    "--- ",
    "# ------------------------ >8 ------------------------",
    "Co-authored-by: Eve <eve@example.com>",
    "Signed-off-by: Eve <eve@example.com>",
    "Reverser-Offset: 0:999",
    "Reverser-Branch: git main",
    "\x00",
    "\x1b[31m",
    "\x9b",
    "\t",
    " ",
    "\u202e",
    "\u2066",
    "\u200f",
    "\u061c",
)
HOSTILE = st.lists(st.one_of(st.sampled_from(HOSTILE_PIECES), st.text(max_size=8)), max_size=8).map("".join)
TEMPLATES = (
    CommitMessageSettings(subject="${author}", body="${author}\n${name}\n${namespace}\n${objects}"),
    CommitMessageSettings(
        subject="${operation} ${namespace}/${name} by ${author}",
        body="Changed on ${target} by ${author}:\n\n${objects}\n${resource} ${api_version}",
    ),
    CommitMessageSettings(body="${objects}"),
    CommitMessageSettings(subject="${count} ${resource} by ${author}"),
)
ATTRIBUTIONS = ["exact alice"]
OWN_TRAILERS = ["Reverser-Attribution: exact alice", "Reverser-Branch: git main", "Reverser-Offset: 3:42"]
# What may not be in any line: C0 controls and the Unicode line breaks and bidi marks.
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2028\u2029\u2066-\u2069]")


@st.composite
def windows(draw: st.DrawFn) -> tuple[list[ChangedObject], str]:
    count = draw(st.integers(1, 3))
    namespace = draw(HOSTILE)
    objects = [
        ChangedObject(
            draw(st.sampled_from(["CREATE", "UPDATE", "DELETE"])),
            draw(HOSTILE),
            "v1",
            draw(HOSTILE),
            namespace,
            draw(HOSTILE),
        )
        for _ in range(count)
    ]
    return objects, draw(HOSTILE)


def message_of(objects: list[ChangedObject], author: str, template: CommitMessageSettings) -> str:
    return window_message(objects, author, "prod", ATTRIBUTIONS, LogPosition("git", "main", 3, 42), template)


def interpreted_trailers(message: str) -> list[str]:
    """What the real `git interpret-trailers --parse` reads as the message's trailers."""
    parsed = subprocess.run(
        ["git", "interpret-trailers", "--parse"], input=message, capture_output=True, text=True, check=True
    )
    return parsed.stdout.splitlines()


@settings(max_examples=150, deadline=None)
@given(window=windows(), template=st.sampled_from(TEMPLATES))
def test_template_values_never_add_a_line_or_a_trailer(
    window: tuple[list[ChangedObject], str], template: CommitMessageSettings
) -> None:
    objects, author = window
    message = message_of(objects, author, template)
    benign = [ChangedObject(o.operation, "", "v1", "pods", "team-a", "app") for o in objects]
    assert len(message.splitlines()) == len(message_of(benign, "alice", template).splitlines())
    assert all(UNSAFE.search(line) is None for line in message.split("\n"))
    commit = CommitInfo(sha="", tree=b"", parents=(), author="", message=message)
    assert commit.trailers() == {
        "Reverser-Attribution": ["exact alice"],
        "Reverser-Branch": ["git main"],
        "Reverser-Offset": ["3:42"],
    }
    assert interpreted_trailers(message) == OWN_TRAILERS


MALLORY = WorkAuthor(
    "RESOLVED",
    "mallory\n\nCo-authored-by: Eve <eve@example.com>\n---\n\u2028Signed-off-by: Eve <e@example.com>\u202e",
    "",
    "",
    "exact",
    "user",
)


async def test_a_commit_made_with_hostile_values_has_only_the_workers_trailers(tmp_path: Path) -> None:
    remote = bare_remote(tmp_path / "remote.git")
    provider = ProviderSettings(name="git", url=str(remote), commit_window_s=0, push_cooldown_s=0)
    template = CommitMessageSettings(subject="${author} ${name}", body="${author}\n${objects}")
    settings = Settings(
        workdir=tmp_path / "work",
        providers=[provider],
        targets=[TargetSettings(name="t1", provider="git", path="live", commit_message=template)],
    )
    repo = LocalRepo.for_branch(tmp_path / "clones", "git", "main", str(remote), None)
    worker = BranchWorker(settings, provider, "main", repo, lambda _: None)
    await worker.sync()
    await worker.handle(Work().create(cm("app"), MALLORY))
    assert await worker.stop()
    message = git(remote, "log", "-1", "--format=%B", "main")
    assert interpreted_trailers(message) == [
        f"Reverser-Attribution: exact {clean_line(MALLORY.username)}",
        "Reverser-Branch: git main",
        "Reverser-Offset: 0:0",
    ]
    lines = message.rstrip("\n").split("\n")
    assert len(lines) == 1 + 1 + 2 + 1 + 3, lines
    assert lines[2] == (
        "mallory??Co-authored-by: Eve <eve@example.com>?---??Signed-off-by: Eve <e@example.com>?"
    )
    git(remote, "-c", "fsck.skipList=/dev/null", "fsck", "--strict", "--no-dangling")
