"""A stage that loses a task for good: `/healthz` says so and `reverser run` stops with exit code 1.

The in-process test drives a stand-in stage through the real Service and ops server. The process
test is the real failure: a `reverser run` on the real Kafka broker whose commit signing key is
damaged while it runs (ssh-keygen then fails inside a branch's commit), so its branch FIFO dies;
the process exits 1 naming it, and a restarted process with the key repaired commits the held
change exactly once, signed.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import aiohttp
import pytest

from pipeline.config import LogSettings, MetricsSettings, Settings
from pipeline.exitcodes import CommandError, ExitCode
from pipeline.log.api import Log
from pipeline.service import app
from pipeline.service.app import Service, run_until_signalled
from tests.commit.helpers import ALICE, Work, bare_remote, cm, log_lines
from tests.commit.logwork import append_work, wait_settled
from tests.conftest import started_log, unique_prefix
from tests.e2e.service_process import ServiceProcess
from tests.support.gitsign import COMMITTER, keygen, verify_all
from tests.support.net import free_port
from tests.support.wait import wait_for


class BreakingStage:
    """A stage whose failure the test sets."""

    name = "breaking"

    def __init__(self) -> None:
        self.broken: str | None = None
        self.stopped = False

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        self.stopped = True

    def ready(self) -> bool:
        return True

    def failure(self) -> str | None:
        return self.broken


async def healthz(http: aiohttp.ClientSession, service: Service) -> tuple[int, str]:
    async with http.get(f"http://127.0.0.1:{service.metrics_port}/healthz") as response:
        return response.status, await response.text()


async def test_a_failed_stage_fails_healthz_and_stops_the_service_with_exit_code_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(app, "FAILURE_CHECK_S", 2.0)  # after the health publish (0.25 s)
    settings = Settings(
        workdir=tmp_path,
        log=LogSettings(backend="embedded", topic_prefix=unique_prefix()),
        metrics=MetricsSettings(addr="127.0.0.1:0"),
    )
    stage = BreakingStage()

    def build(_s: Settings, _l: Log) -> BreakingStage:
        return stage

    service = Service(settings, factories=[build])
    await service.start()
    running = asyncio.create_task(run_until_signalled(service, started=True))
    async with aiohttp.ClientSession() as http:
        assert await healthz(http, service) == (200, "ok\n")
        assert service.failures() == []
        stage.broken = "commit-git-main: SigningError('ssh-keygen failed (exit 255)')"
        failed = (503, "failed\nbreaking: commit-git-main: SigningError('ssh-keygen failed (exit 255)')\n")

        async def fails() -> bool:
            return await healthz(http, service) == failed

        # the ops thread serves the health the event loop publishes every PUBLISH_INTERVAL_S
        await wait_for(fails, what="/healthz naming the failed stage")
    with pytest.raises(CommandError) as stopped:
        await asyncio.wait_for(running, timeout=30)
    assert stopped.value.code == ExitCode.FINDINGS
    assert "a stage failed, restart the process: breaking: commit-git-main" in str(stopped.value)
    assert stage.stopped, "the service stopped its stages before exiting"


@pytest.mark.kafka
async def test_a_commit_that_cannot_be_signed_stops_the_process_and_a_restart_commits_it_once(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    log_settings = LogSettings(
        backend="kafka", bootstrap_servers=kafka_bootstrap, topic_prefix=unique_prefix()
    )
    writer = Settings(workdir=tmp_path / "writer", log=log_settings)
    remote = bare_remote(tmp_path / "remote.git")
    key = keygen(tmp_path / "signing")
    good_key = tmp_path / "good-key"
    shutil.copy(key, good_key)
    config = {
        "workdir": str(tmp_path / "work"),
        "log": {"bootstrap_servers": kafka_bootstrap, "topic_prefix": log_settings.topic_prefix},
        "metrics": {"addr": f"127.0.0.1:{free_port()}"},
        "audit": {"enabled": False},
        "lag": {"enabled": False},
        "providers": [
            {
                "name": "git",
                "url": str(remote),
                "commit_window_s": 0,
                "push_cooldown_s": 0.2,
                "committer": COMMITTER.model_dump(),
                "signing": {"format": "ssh", "key_file": str(key)},
            }
        ],
        "targets": [{"name": "t", "provider": "git", "path": "live"}],
    }
    work = Work(target="t")
    (tmp_path / "service").mkdir()
    service = ServiceProcess(tmp_path / "service", config, log_level="INFO")
    service.start()
    try:
        async with started_log(writer) as log:
            await append_work(log, writer, [work.create(cm("first"), ALICE)])
            await wait_settled(log, writer, timeout_s=60)
        key.write_text("not a key\n")  # ssh-keygen -Y sign now fails on every commit
        async with started_log(writer) as log:
            await append_work(log, writer, [work.create(cm("second"), ALICE)])
        await wait_for(lambda: service.pid is None, what="reverser run to stop", timeout_s=60)
        assert service.exit_code() == ExitCode.FINDINGS, service.log_tail()
        assert "a stage failed, restart the process: commit-worker: commit-git-main" in service.log_tail()
        assert "SigningError" in service.log_tail()
    finally:
        service.stop()
    assert log_lines(remote, "main", fmt="%s") == ["[CREATE] v1/configmaps/first"]

    shutil.copy(good_key, key)
    service = ServiceProcess(tmp_path / "service", config, log_level="INFO")
    service.start()
    try:
        async with started_log(writer) as log:
            await wait_settled(log, writer, timeout_s=60)
    finally:
        assert service.stop() == 0, service.log_tail()
    # the held change exactly once, after the one committed before the failure (oldest first)
    assert log_lines(remote, "main", fmt="%s") == [
        "[CREATE] v1/configmaps/first",
        "[CREATE] v1/configmaps/second",
    ]
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f"{COMMITTER.email} {key.with_suffix('.pub').read_text()}", encoding="ascii")
    lines = verify_all(remote, None, "-c", "gpg.format=ssh", "-c", f"gpg.ssh.allowedSignersFile={allowed}")
    assert lines == [f"G|{COMMITTER.email}|{COMMITTER.name} <{COMMITTER.email}>"] * 2
