"""Crash tests: SIGKILL the worker after a commit, after a push, and after the object-state append.

After the restart every change is on the remote exactly once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pipeline.codec.branch_work import CommitRequested, TargetDeleted, WorkItem
from pipeline.commit.consumer import CommitWorker
from pipeline.config import ProviderSettings, Settings, TargetSettings
from pipeline.log import open_log
from tests.commit.helpers import ALICE, BOB, Work, bare_remote, cm, files, git, log_lines
from tests.commit.logwork import append_work
from tests.commit.objstate import as_files, first_read, read_back
from tests.support.process import KILLED_MEMBER_SESSION_TIMEOUT_MS
from tests.support.wait import wait_for

ROOT = Path(__file__).resolve().parents[2]


def run_worker(settings_file: Path, crash_at: str | None) -> int:
    env = dict(os.environ)
    env.pop("REVERSER_TEST_CRASH_AT", None)
    if crash_at:
        env["REVERSER_TEST_CRASH_AT"] = crash_at
    done = subprocess.run(
        [sys.executable, "-m", "tests.commit.crash_worker", str(settings_file)],
        cwd=ROOT,
        env=env,
        timeout=180,
        capture_output=True,
        text=True,
    )
    if done.returncode not in (0, -9):
        raise AssertionError(done.stderr[-3000:])
    return done.returncode


async def _append(cfg: Settings, items: list[WorkItem]) -> list[tuple[int, int]]:
    """Append work from the test process (its own log client, closed before a worker runs);
    returns where each item landed."""
    log = open_log(cfg)
    await log.start()
    try:
        return await append_work(log, cfg, items)
    finally:
        await log.close()


def crash_settings(settings: Settings, remote: Path, prune: str = "", **provider: Any) -> Settings:
    """A crash test's settings: the killed member's partitions reach its successor after the
    broker's minimum session; one provider on `remote` with no push cooldown; one target `t1`."""
    target = TargetSettings(name="t1", provider="git", path="live", **({"prune": prune} if prune else {}))
    return settings.model_copy(
        update={
            "log": settings.log.model_copy(update={"session_timeout_ms": KILLED_MEMBER_SESSION_TIMEOUT_MS}),
            "providers": [ProviderSettings(name="git", url=str(remote), push_cooldown_s=0, **provider)],
            "targets": [target],
        }
    )


def written(tmp_path: Path, cfg: Settings) -> Path:
    """`cfg` as the settings file a worker process reads."""
    path = tmp_path / "settings.json"
    path.write_text(cfg.model_dump_json())
    return path


@pytest.mark.parametrize("crash_at", ["committed", "pushed", "state-written"])
async def test_sigkill_then_restart_has_no_duplicate_and_no_loss(
    settings: Settings, tmp_path: Path, crash_at: str
) -> None:
    remote = bare_remote(tmp_path / "remote.git")
    cfg = crash_settings(settings, remote, commit_window_s=1)
    w = Work(step_ms=10_000)
    items = [w.create(cm(f"o{i}"), BOB if i % 2 else ALICE) for i in range(6)]
    await _append(cfg, items)
    settings_file = written(tmp_path, cfg)

    assert run_worker(settings_file, crash_at) == -9
    pushed_before = log_lines(remote, fmt="%s") if crash_at != "committed" else []
    if crash_at != "committed":
        assert pushed_before, "the kill came after a successful push"
    assert run_worker(settings_file, None) == 0

    subjects = log_lines(remote, fmt="%s")
    assert Counter(subjects) == Counter(f"[CREATE] v1/configmaps/o{i}" for i in range(6))
    assert subjects[: len(pushed_before)] == pushed_before
    assert sorted(files(remote)) == [f"live/team-a/configmaps/o{i}.yaml" for i in range(6)]
    # object-state: every version exactly once, whichever side of its append the kill came
    raw, states = await read_back(cfg)
    assert raw == Counter({(f"t1//configmaps/team-a/o{i}".encode(), "1"): 1 for i in range(6)})
    assert as_files(states) == files(remote)


async def test_sigkill_after_a_target_deletion_then_a_late_record_is_not_written_back(
    settings: Settings, tmp_path: Path
) -> None:
    """The worker process applies a `TargetDeleted` (prune Always), commits its offset and is
    killed; a late record of the deleted target then arrives for a new process, which knows
    nothing of the deletion but the log: the record is skipped, the folder stays removed."""
    remote = bare_remote(tmp_path / "remote.git")
    provider = ProviderSettings(name="git", url=str(remote), commit_window_s=0.2, push_cooldown_s=0)
    gone = TargetSettings(name="gone", provider="git", path="gone", prune="Always")
    stays = TargetSettings(name="stays", provider="git", path="stays")
    log_settings = settings.log.model_copy(update={"session_timeout_ms": KILLED_MEMBER_SESSION_TIMEOUT_MS})
    before = settings.model_copy(
        update={"log": log_settings, "providers": [provider], "targets": [gone, stays]}
    )
    after = before.model_copy(update={"targets": [stays]})
    settings_file = tmp_path / "settings.json"
    w = Work(step_ms=10)

    await _append(
        before,
        [w.create(cm("a"), target="gone", path="gone"), w.create(cm("s"), target="stays", path="stays")],
    )
    settings_file.write_text(before.model_dump_json())
    assert run_worker(settings_file, None) == 0
    assert sorted(files(remote)) == ["gone/team-a/configmaps/a.yaml", "stays/team-a/configmaps/s.yaml"]

    deleted = TargetDeleted("Always", True, 2, "GitTarget gone was deleted (configuration version 2)")
    await _append(
        after, [w._item(deleted, target="gone", path="gone", group="", version="", resource="", scope="")]
    )
    settings_file.write_text(after.model_dump_json())
    assert run_worker(settings_file, "offsets-committed") == -9
    assert sorted(files(remote)) == ["stays/team-a/configmaps/s.yaml"]

    await _append(
        after,
        [w.create(cm("late"), target="gone", path="gone"), w.create(cm("b"), target="stays", path="stays")],
    )
    assert run_worker(settings_file, None) == 0
    assert sorted(files(remote)) == ["stays/team-a/configmaps/b.yaml", "stays/team-a/configmaps/s.yaml"]
    subjects = log_lines(remote, fmt="%s")
    assert subjects.count("removed gone/ of deleted target gone (prune Always)") == 1
    assert subjects[-1] == "[CREATE] v1/configmaps/b"


@pytest.mark.parametrize("crash_at", ["committed", "pushed"])
async def test_sigkill_around_a_commit_request_then_restart_commits_it_once(
    settings: Settings, tmp_path: Path, crash_at: str
) -> None:
    """A CommitRequest closes a five-minute window; the worker process is killed after the commit
    (before the push) or after the push (before the offsets): the restarted one, given the same
    records again, leaves exactly one commit under the request's message."""
    remote = bare_remote(tmp_path / "remote.git")
    cfg = crash_settings(settings, remote, commit_window_s=300)
    w = Work(step_ms=10)
    request = CommitRequested("team-a", "save-1", "uid-1", "save both", 0)
    items = [
        w.create(cm("a")),
        w.create(cm("b")),
        w._item(request, group="", version="", resource="", scope=""),
    ]
    await _append(cfg, items)
    settings_file = written(tmp_path, cfg)
    assert run_worker(settings_file, crash_at) == -9
    assert run_worker(settings_file, None) == 0
    assert log_lines(remote, fmt="%s") == ["save both"]
    assert sorted(files(remote)) == ["live/team-a/configmaps/a.yaml", "live/team-a/configmaps/b.yaml"]


async def _run_until_pushed(cfg: Settings, remote: Path, subject: str) -> None:
    """A worker in this process, stopped cleanly once `subject` is on the remote."""
    log = open_log(cfg)
    await log.start()
    worker = CommitWorker(cfg, log)
    await worker.start()
    try:
        await wait_for(lambda: subject in log_lines(remote, fmt="%s"), f"{subject!r} pushed", timeout_s=60)
    finally:
        await worker.stop()
        await log.close()


@pytest.mark.parametrize("restart", ["pushed", "state-written", "stop"])
async def test_a_snapshot_interleaved_with_another_streams_commit_survives_a_restart(
    settings: Settings, tmp_path: Path, restart: str
) -> None:
    """Stream S (configmaps of team-a) begins a snapshot; a write of stream T (team-b) on the same
    branch is committed and pushed, its `Reverser-Offset` claiming an offset past S's ResyncBegin
    and first chunk; the worker goes (SIGKILL after that push or after its object-state append,
    or a clean stop) before S's second chunk and end. The restarted worker is handed S's begin and
    first chunk again, below the branch tip's trailer: the snapshot still lands whole (every listed
    object written, the unlisted one swept under prune Always), T's change stays, no commit twice,
    and object-state matches the tree."""
    remote = bare_remote(tmp_path / "remote.git")
    # a window of zero commits every write at once: T's commit lands between S's chunks
    cfg = crash_settings(settings, remote, commit_window_s=0, prune="Always")
    settings_file = written(tmp_path, cfg)
    w = Work(step_ms=10)
    await _append(cfg, [w.create(cm("stale"))])
    assert run_worker(settings_file, None) == 0

    begin, first, second, end = w.snapshot(1, [cm("a"), cm("b"), cm("c")], rv="100")
    other = w.create(cm("t", namespace="team-b"), BOB, scope="team-b")
    landed = await _append(cfg, [begin, first, other])
    if restart == "stop":
        await _run_until_pushed(cfg, remote, "[CREATE] v1/configmaps/t")
    else:
        assert run_worker(settings_file, restart) == -9
    assert log_lines(remote, fmt="%s") == ["[CREATE] v1/configmaps/stale", "[CREATE] v1/configmaps/t"]
    trailer = git(remote, "log", "-1", "--format=%(trailers:key=Reverser-Offset,valueonly)", "main")
    assert trailer.strip() == f"{landed[2][0]}:{landed[2][1]}", "T's commit claims past S's begin"
    assert landed[0][1] < landed[1][1] < landed[2][1]

    await _append(cfg, [second, end])
    assert run_worker(settings_file, None) == 0

    subjects = log_lines(remote, fmt="%s")
    assert subjects == [
        "[CREATE] v1/configmaps/stale",
        "[CREATE] v1/configmaps/t",
        "reconciled 4 configmaps (last resourceVersion: 100)",  # a, b, c written; stale swept
    ]
    assert sorted(files(remote)) == [
        "live/team-a/configmaps/a.yaml",
        "live/team-a/configmaps/b.yaml",
        "live/team-a/configmaps/c.yaml",
        "live/team-b/configmaps/t.yaml",
    ]
    log = open_log(cfg)
    await log.start()
    try:
        states = await first_read(log, cfg)
    finally:
        await log.close()
    assert as_files(states) == files(remote)


@pytest.mark.parametrize("crash_at", ["committed", "pushed", "state-written"])
async def test_sigkill_between_the_parts_of_a_snapshot_then_restart_commits_each_part_once(
    settings: Settings, tmp_path: Path, crash_at: str
) -> None:
    """A snapshot of seven objects in chunks of one, committed in parts of one object
    (`snapshot_part_objects`); the worker is killed after its first part's commit, after its push,
    or after the first object-state append (which the consumer makes when it gets to it: after the
    first part's push, before the snapshot's end). A part claims no offset, so the restarted
    worker reads the snapshot again from its begin: the parts it already pushed write what the
    branch has and make no second commit, the rest land once, the snapshot's last commit sweeps
    the object it no longer lists, and object-state matches the tree."""
    remote = bare_remote(tmp_path / "remote.git")
    cfg = crash_settings(settings, remote, commit_window_s=0, snapshot_part_objects=1, prune="Always")
    settings_file = written(tmp_path, cfg)
    w = Work(step_ms=10)
    await _append(cfg, [w.create(cm("stale"))])
    assert run_worker(settings_file, None) == 0

    names = [f"o{i}" for i in range(7)]
    await _append(cfg, w.snapshot(1, [cm(n) for n in names], rv="100", chunk_size=1))
    assert run_worker(settings_file, crash_at) == -9
    pushed_before = log_lines(remote, fmt="%s")
    if crash_at == "committed":
        assert len(pushed_before) == 1, "the first part was committed, not pushed"
    elif crash_at == "pushed":
        assert len(pushed_before) == 2, "the first part was pushed"
    else:
        assert 2 <= len(pushed_before) < 1 + len(names) + 1, "the kill came between two parts"
    assert run_worker(settings_file, None) == 0

    part = "reconciled 1 configmaps (last resourceVersion: 100)"
    # a part per object, then the snapshot's last commit, which only sweeps stale
    subjects = log_lines(remote, fmt="%s")
    assert subjects == ["[CREATE] v1/configmaps/stale", *[part] * (len(names) + 1)]
    assert subjects[: len(pushed_before)] == pushed_before
    trailers = git(remote, "log", "--format=%(trailers:key=Reverser-Offset,valueonly)%x00", "main")
    claimed = [t.strip() for t in trailers.split("\0") if t.strip()]
    assert len(claimed) == 2, "only the stale write and the snapshot's last commit claim an offset"
    assert sorted(files(remote)) == [f"live/team-a/configmaps/{n}.yaml" for n in names]
    raw, states = await read_back(cfg)
    assert as_files(states) == files(remote)
    assert all(count == 1 for (key, _), count in raw.items() if not key.endswith(b"/stale")), raw
