"""Crash tests: SIGKILL the worker after a commit, after a push, and after the object-state append.

After the restart every change is on the remote exactly once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from pipeline.config import ProviderSettings, Settings, TargetSettings
from pipeline.log import open_log
from tests.commit.helpers import ALICE, BOB, Work, bare_remote, cm, files, log_lines
from tests.commit.logwork import append_work
from tests.commit.objstate import as_files, first_read, raw_keys
from tests.support.process import KILLED_MEMBER_SESSION_TIMEOUT_MS

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


@pytest.mark.parametrize("crash_at", ["committed", "pushed", "state-written"])
async def test_sigkill_then_restart_has_no_duplicate_and_no_loss(
    settings: Settings, tmp_path: Path, crash_at: str
) -> None:
    remote = bare_remote(tmp_path / "remote.git")
    cfg = settings.model_copy(
        update={
            # the killed worker's partitions reach its successor after the broker's minimum
            "log": settings.log.model_copy(update={"session_timeout_ms": KILLED_MEMBER_SESSION_TIMEOUT_MS}),
            "providers": [
                ProviderSettings(name="git", url=str(remote), commit_window_s=1, push_cooldown_s=0)
            ],
            "targets": [TargetSettings(name="t1", provider="git", path="live")],
        }
    )
    w = Work(step_ms=10_000)
    items = [w.create(cm(f"o{i}"), BOB if i % 2 else ALICE) for i in range(6)]
    log = open_log(cfg)
    await log.start()
    try:
        await append_work(log, cfg, items)
    finally:
        await log.close()
    settings_file = tmp_path / "settings.json"
    settings_file.write_text(cfg.model_dump_json())

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
    log = open_log(cfg)
    await log.start()
    try:
        raw = await raw_keys(log, cfg)
        states = await first_read(log, cfg)
    finally:
        await log.close()
    assert raw == Counter({(f"t1//configmaps/team-a/o{i}".encode(), "1"): 1 for i in range(6)})
    assert as_files(states) == files(remote)
