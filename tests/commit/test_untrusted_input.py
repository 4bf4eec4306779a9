"""What users can write never steers the worker: forged offset trailers (12.4), control characters (12.5).

Against a real bare remote: somebody with push access commits `Reverser-Offset` trailers, and a
cluster user's name carries newlines and NULs.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

from pipeline.codec.branch_work import WorkAuthor
from pipeline.msgtemplate import clean_line
from tests.commit.helpers import Work, cm, files, git, log_lines
from tests.commit.test_branch_worker import Harness

WORKER = ("Reverser Pipeline", "noreply@reverser.invalid")
FORGERIES = {
    # name: (committer, trailers, whether the worker may skip by it)
    "genuine": (WORKER, "Reverser-Branch: git main\nReverser-Offset: 0:2", True),
    "no_branch_trailer": (WORKER, "Reverser-Offset: 0:2", False),
    "other_committer": (
        ("Mallory", "mallory@example.com"),
        "Reverser-Branch: git main\nReverser-Offset: 0:2",
        False,
    ),
    "beyond_the_log_end": (WORKER, "Reverser-Branch: git main\nReverser-Offset: 0:50", False),
}


def push_commit(remote: Path, workdir: Path, committer: tuple[str, str], message: str) -> None:
    """Somebody with push access adds an empty commit with `message` on top of main."""
    clone = workdir / "pusher"
    if not clone.exists():
        subprocess.run(["git", "clone", "-q", "-b", "main", str(remote), str(clone)], check=True)
    git(clone, "pull", "-q", "origin", "main")
    identity = ["-c", f"user.name={committer[0]}", "-c", f"user.email={committer[1]}"]
    git(clone, *identity, "commit", "-q", "--allow-empty", "-m", message)
    git(clone, "push", "-q", "origin", "HEAD:main")


async def log_ends() -> Mapping[int, int]:
    return {0: 3}


@pytest.mark.parametrize("forgery", list(FORGERIES))
async def test_offset_trailers_count_only_from_the_worker_itself(
    tmp_path: Path, forgery: str, caplog: pytest.LogCaptureFixture
) -> None:
    committer, trailers, trusted = FORGERIES[forgery]
    h = Harness(tmp_path, window_s=0, cooldown_s=0)
    w = Work()
    await h.feed(w.create(cm("a")))
    assert log_lines(h.remote, fmt="%s") == ["[CREATE] v1/configmaps/a"]
    push_commit(h.remote, tmp_path, committer, f"tidy up\n\n{trailers}\n")

    h.worker = h.new_worker("clones2", log_ends=log_ends)
    with caplog.at_level(logging.WARNING, logger="pipeline.commit"):
        await h.feed(w.create(cm("b")), w.create(cm("c")))
    written = {path.rsplit("/", 1)[-1] for path in files(h.remote)}
    if trusted:
        assert written == {"a.yaml"}, "the control case: a genuine trailer does skip offsets 1 and 2"
    else:
        assert written == {"a.yaml", "b.yaml", "c.yaml"}, "work was skipped because of a forged trailer"
        assert "ignoring the Reverser-Offset trailer" in caplog.text


EVE = WorkAuthor(
    "RESOLVED",
    "eve\n\nReverser-Branch: git main\nReverser-Offset: 0:999\x00",
    "Eve\x00\nReverser-Offset: 0:998",
    "",
    "exact",
    "user",
)


async def test_control_characters_never_reach_a_commit(tmp_path: Path) -> None:
    h = Harness(tmp_path, window_s=5, cooldown_s=0)
    w = Work()
    await h.feed(w.create(cm("x"), EVE), w.create(cm("y", namespace="team-b"), EVE))
    await h.settle_time()
    git(h.remote, "-c", "fsck.skipList=/dev/null", "fsck", "--strict", "--no-dangling")
    message = git(h.remote, "log", "-1", "--format=%B", "main")
    assert "\x00" not in message
    parsed = git(h.remote, "log", "-1", "--format=%(trailers:key=Reverser-Offset,valueonly)", "main").split()
    assert parsed == ["0:1"], "a username must not add a Reverser-Offset trailer"
    subject = "eve??Reverser-Branch: git main?Reverser-Offset: 0:999? on t1: 2 resource(s)"
    assert message.splitlines()[0] == subject
    raw = git(h.remote, "cat-file", "commit", "main")
    assert "\x00" not in raw
    # The next worker reads the real offset back: redelivered work is skipped, new work lands.
    h.worker = h.new_worker()
    await h.feed(Work(start=1).create(cm("z")), Work(start=2).create(cm("w")))
    await h.settle_time()
    assert {path.rsplit("/", 1)[-1] for path in files(h.remote)} == {"x.yaml", "y.yaml", "w.yaml"}


def test_clean_line_keeps_printable_text_and_replaces_every_control_character() -> None:
    assert clean_line("team-a/Ünïcode name") == "team-a/Ünïcode name"
    assert clean_line("a\nb\rc\x00d\x1be\x7ff\x85g\u2028h") == "a?b?c?d?e?f?g?h"
    assert clean_line("\u202eevil\u2066x\u2069\u200f\u061c\u2029") == "?evil?x????"
    # lines git reads as the end of the message, and the worker's own trailer keys
    assert clean_line("--- x") == "?-- x"
    assert clean_line("---") == "?--"
    assert clean_line("# ------------------------ >8 ------------------------") == (
        "? ------------------------ >8 ------------------------"
    )
    assert clean_line(" Reverser-Offset: 0:1") == "?Reverser-Offset: 0:1"
    assert clean_line("----- x") == "----- x"
