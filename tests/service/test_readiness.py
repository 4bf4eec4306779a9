"""`/readyz`: 503 while the log is unreachable, while a stage replays, and until every stage started.

The broker case runs `reverser run` as its own process against a private broker (not the shared
one), SIGKILLs the broker and starts it again on the same port and data: readiness must fall and
come back by itself, with the process never restarted.
"""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from pipeline.config import LogSettings, MetricsSettings, Settings
from pipeline.log.api import Log
from pipeline.service.app import Service
from pipeline.service.readiness import READY, Readiness, verdict
from tests.commit.helpers import bare_remote
from tests.conftest import unique_prefix
from tests.e2e.service_process import ServiceProcess
from tests.integration.kafka.broker import KafkaBroker
from tests.support.net import free_port
from tests.support.wait import wait_for


def test_verdict_names_every_unmet_condition() -> None:
    assert verdict(READY, [], [("router", READY)]) == (True, [])
    ready, problems = verdict(
        Readiness(False, "unreachable for 3 s (no answer in time)"),
        ["commit-worker", "watch"],
        [("lag-monitor", READY), ("router", Readiness(False, "fact index replaying: 40%"))],
    )
    assert not ready
    assert problems == [
        "log: unreachable for 3 s (no answer in time)",
        "starting: commit-worker, watch",
        "router: fact index replaying: 40%",
    ]


class Stage:
    """A stage whose start and readiness the test controls."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.may_start = asyncio.Event()
        self.state = READY

    async def start(self) -> None:
        await self.may_start.wait()

    async def stop(self) -> None:
        return None

    def ready(self) -> bool:
        return self.state.ready

    def readiness(self) -> Readiness:
        return self.state


async def readyz(http: aiohttp.ClientSession, service: Service) -> tuple[int, str]:
    async with http.get(f"http://127.0.0.1:{service.metrics_port}/readyz") as response:
        return response.status, await response.text()


async def answers(http: aiohttp.ClientSession, service: Service, expected: tuple[int, str]) -> None:
    """Wait until /readyz answers `expected`: the ops thread serves what the loop last published."""

    async def matches() -> bool:
        return await readyz(http, service) == expected

    await wait_for(matches, what=f"/readyz answering {expected}")


async def test_not_ready_until_every_stage_started_and_while_one_is_not_ready(tmp_path: Path) -> None:
    settings = Settings(
        workdir=tmp_path,
        log=LogSettings(backend="embedded", topic_prefix=unique_prefix()),
        metrics=MetricsSettings(addr="127.0.0.1:0"),
    )
    first, second = Stage("first"), Stage("second")

    def build_first(_s: Settings, _l: Log) -> Stage:
        return first

    def build_second(_s: Settings, _l: Log) -> Stage:
        return second

    service = Service(settings, factories=[build_first, build_second])
    starting = asyncio.create_task(service.start())
    try:
        async with aiohttp.ClientSession() as http:
            await wait_for(lambda: service.metrics_port is not None, what="the ops server")
            await answers(http, service, (503, "not ready\nstarting: first, second\n"))
            first.may_start.set()
            await wait_for(lambda: service.components == [first], what="the first stage")
            await answers(http, service, (503, "not ready\nstarting: second\n"))
            second.may_start.set()
            await starting
            await answers(http, service, (200, "ready\n"))

            first.state = Readiness(False, "fact index replaying: 1200 of 5000 records")
            replaying = (503, "not ready\nfirst: fact index replaying: 1200 of 5000 records\n")
            await answers(http, service, replaying)
            first.state = READY
            await answers(http, service, (200, "ready\n"))
    finally:
        first.may_start.set()
        second.may_start.set()
        await starting
        await service.stop()


def readyz_of(process: ServiceProcess) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://{process.metrics_addr}/readyz", timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.kafka
async def test_readiness_follows_the_broker_down_and_back_up(own_broker: KafkaBroker, tmp_path: Path) -> None:
    remote = bare_remote(tmp_path / "remote.git")
    config: dict[str, Any] = {
        "workdir": str(tmp_path / "work"),
        "log": {
            "bootstrap_servers": own_broker.bootstrap,
            "topic_prefix": unique_prefix(),
            "request_timeout_ms": 3000,
            "connect_retries": 1,
            "retry_backoff_ms": 100,
        },
        "metrics": {
            "addr": f"127.0.0.1:{free_port()}",
            "log_probe_interval_s": 0.5,
            "log_probe_timeout_s": 3.0,
        },
        "audit": {"addr": "127.0.0.1:0"},
        "lag": {"poll_interval_s": 1.0},
        "providers": [{"name": "git", "url": str(remote)}],
        "targets": [{"name": "t", "provider": "git"}],
    }
    (tmp_path / "work").mkdir()
    service = ServiceProcess(tmp_path / "work", config)
    await asyncio.to_thread(service.start)  # returns once /readyz answered 200
    try:
        assert service.metric_sum("reverser_log_reachable") == 1.0
        await asyncio.to_thread(own_broker.kill)

        async def down() -> bool:
            status, body = await asyncio.to_thread(readyz_of, service)
            return status == 503 and "log: unreachable" in body

        await wait_for(down, what="/readyz to fail while the broker is down", timeout_s=60)
        assert service.metric_sum("reverser_ready") == 0.0
        assert service.metric_sum("reverser_log_reachable") == 0.0

        await asyncio.to_thread(own_broker.start)

        async def up() -> bool:
            # Both at once: a probe may still fail once right after the restart (a loaded broker
            # answering late), which flips the gauge and /readyz together.
            status = (await asyncio.to_thread(readyz_of, service))[0]
            return (
                status == 200 and await asyncio.to_thread(service.metric_sum, "reverser_log_reachable") == 1.0
            )

        await wait_for(up, what="/readyz and reverser_log_reachable to recover by themselves", timeout_s=120)
    finally:
        await asyncio.to_thread(service.stop)
