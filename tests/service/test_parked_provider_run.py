"""`reverser run` with a provider whose signing key variable is unset: it starts, keeps starting,
commits for every other provider, and commits the waiting work once a reload fixes the provider.

Once such a provider made the start exit 2, on every restart. The real CLI in its own process on
the embedded log, real bare remotes, a real ssh-keygen key: the work is on the log before the
service starts (the embedded log has one owner), the good provider's change reaches its remote, the
parked one's waits (`reverser_commit_provider_parked` says so), a restart is ready again, and a
SIGHUP whose file names a variable that holds the key lets the waiting change go on, signed. At the
end every branch-work record is settled, and none was dead-lettered.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.config import Settings
from pipeline.log.api import TopicPartition
from pipeline.log.topics import TopicNames
from tests.commit.helpers import Work, bare_remote, cm, log_lines
from tests.commit.logwork import append_work, wait_settled
from tests.conftest import started_log
from tests.e2e.service_process import ServiceProcess
from tests.support.gitsign import COMMITTER, keygen, verify_all
from tests.support.net import free_port

UNSET_ENV = "PARKED_TEST_UNSET_SIGNING_KEY"
KEY_ENV = "PARKED_TEST_SIGNING_KEY"
WAIT_S = 60.0
PARKED = "reverser_commit_provider_parked"


def _config(tmp_path: Path, good: Path, bad: Path, key_env: str) -> dict[str, Any]:
    return {
        "workdir": str(tmp_path / "work"),
        "log": {"backend": "embedded", "fsync": False},
        "metrics": {"addr": f"127.0.0.1:{free_port()}"},
        "audit": {"enabled": False},
        "lag": {"enabled": False},
        "providers": [
            {"name": "good", "url": str(good), "commit_window_s": 0},
            {
                "name": "bad",
                "url": str(bad),
                "commit_window_s": 0,
                "committer": COMMITTER.model_dump(),
                "signing": {"format": "ssh", "key_env": key_env},
            },
        ],
        "targets": [
            {"name": "t-good", "provider": "good", "path": "good"},
            {"name": "t-bad", "provider": "bad", "path": "bad"},
        ],
    }


def _wait_for_commits(remote: Path, count: int, service: ServiceProcess) -> None:
    deadline = time.monotonic() + WAIT_S
    while not ((remote / "refs" / "heads" / "main").exists() and len(log_lines(remote)) >= count):
        assert service.pid is not None, f"reverser run exited:\n{service.log_tail()}"
        assert time.monotonic() < deadline, f"no {count} commit(s) on {remote}:\n{service.log_tail()}"
        time.sleep(0.2)


def test_a_parked_provider_neither_stops_the_service_nor_its_restart_and_a_reload_unparks_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = keygen(tmp_path / "signing")
    monkeypatch.delenv(UNSET_ENV, raising=False)
    monkeypatch.setenv(KEY_ENV, key.read_text(encoding="ascii"))  # inherited by reverser run
    good, bad = bare_remote(tmp_path / "good.git"), bare_remote(tmp_path / "bad.git")
    config = _config(tmp_path, good, bad, UNSET_ENV)
    settings = Settings.model_validate(config)
    bad_work = Work(provider="bad", target="t-bad", path="bad")
    good_work = Work(provider="good", target="t-good", path="good")

    async def append() -> None:
        async with started_log(settings) as log:
            await append_work(log, settings, [bad_work.create(cm("held")), good_work.create(cm("a"))])

    asyncio.run(append())
    (tmp_path / "run").mkdir()
    service = ServiceProcess(tmp_path / "run", config, log_level="INFO")
    service.start()  # once: exit 2, "providers[bad].signing: environment variable ... is not set"
    try:
        _wait_for_commits(good, 1, service)
        service.wait_for_metric(PARKED, 1, WAIT_S, provider="bad", reason="missing_key")
        assert not (bad / "refs" / "heads" / "main").exists()
        assert f"environment variable {UNSET_ENV} is not set" in service.log_tail()
    finally:
        assert service.stop() == 0, service.log_tail()

    service = ServiceProcess(tmp_path / "run", config, log_level="INFO")
    service.start()  # the restart with the provider still parked
    try:
        service.wait_for_metric(PARKED, 1, WAIT_S, provider="bad")
        service.config_path.write_text(yaml.safe_dump(_config(tmp_path, good, bad, KEY_ENV)))
        assert service.pid is not None
        os.kill(service.pid, signal.SIGHUP)
        _wait_for_commits(bad, 1, service)
        assert service.metric_sum(PARKED, provider="bad") == 0
        assert service.metric_sum("reverser_commit_dead_lettered_total") == 0
    finally:
        assert service.stop() == 0, service.log_tail()

    async def settled() -> int:
        async with started_log(settings) as log:
            await wait_settled(log, settings, timeout_s=WAIT_S)
            topic = TopicNames.for_prefix(settings.log.topic_prefix).dead_letter
            partitions = [TopicPartition(topic, p) for p in range(await log.partitions_for(topic))]
            return sum((await log.end_offsets(partitions)).values())

    assert asyncio.run(settled()) == 0, "nothing was dead-lettered"
    assert log_lines(good, fmt="%s") == ["[CREATE] v1/configmaps/a"]
    assert log_lines(bad, fmt="%s") == ["[CREATE] v1/configmaps/held"]
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f"{COMMITTER.email} {key.with_suffix('.pub').read_text()}", encoding="ascii")
    signed = verify_all(bad, None, "-c", "gpg.format=ssh", "-c", f"gpg.ssh.allowedSignersFile={allowed}")
    assert signed == [f"G|{COMMITTER.email}|{COMMITTER.name} <{COMMITTER.email}>"]
