"""The ops endpoints answer while the event loop is held, and fail once it stops running.

The server runs on its own thread (pipeline/service/ops.py). The tests hold the real Service's
event loop with a blocking wait (as a long snapshot decode would) and read the endpoints from
another thread through real HTTP.
"""

from __future__ import annotations

import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from pipeline.config import LogSettings, MetricsSettings, Settings
from pipeline.service.app import Service
from pipeline.service.ops import SWITCH_INTERVAL_S, HealthSnapshot, OpsServer, health_answer, readiness_answer
from tests.conftest import unique_prefix
from tests.support.wait import wait_for

HOLD_LIMIT_S = 30.0  # how long a test holds the loop at most before it gives up


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _settings(tmp_path: Path, **metrics: float) -> Settings:
    return Settings(
        workdir=tmp_path,
        log=LogSettings(backend="embedded", topic_prefix=unique_prefix()),
        metrics=MetricsSettings(addr="127.0.0.1:0", **metrics),
    )


def test_health_names_a_stalled_loop_before_a_failed_stage() -> None:
    snapshot = HealthSnapshot(at_s=100.0, failures=("router: lost",), ready=True, problems=())
    assert health_answer(snapshot, 101.0, stall_fail_s=5.0).status == 503
    assert health_answer(snapshot, 101.0, stall_fail_s=5.0).text == "failed\nrouter: lost\n"
    stalled = health_answer(snapshot, 106.5, stall_fail_s=5.0)
    assert (stalled.status, stalled.text) == (503, "failed\nevent loop: has not run for 6.5 s\n")
    assert health_answer(HealthSnapshot(at_s=100.0), 104.0, stall_fail_s=5.0).status == 200


def test_readiness_follows_the_snapshot_while_the_loop_runs() -> None:
    starting = HealthSnapshot(at_s=10.0)
    assert readiness_answer(starting, 10.1, 5.0).text == "not ready\nstarting\n"
    ready = HealthSnapshot(at_s=10.0, ready=True, problems=())
    assert readiness_answer(ready, 14.9, 5.0).status == 200
    assert readiness_answer(ready, 15.1, 5.0).text == "not ready\nevent loop: has not run for 5.1 s\n"


async def test_healthz_and_metrics_answer_while_the_event_loop_is_held(tmp_path: Path) -> None:
    service = Service(_settings(tmp_path), factories=[])
    await service.start()
    base = f"http://127.0.0.1:{service.metrics_port}"
    answers: dict[str, tuple[int, str]] = {}
    done = threading.Event()

    def read_all() -> None:
        for path in ("/healthz", "/readyz", "/metrics"):
            answers[path] = _get(base + path)
        done.set()

    try:
        await wait_for(lambda: _get(base + "/readyz")[0] == 200, what="ready")
        reader = threading.Thread(target=read_all)
        reader.start()
        # Hold the loop until the reader has every answer: only the ops thread can give them.
        answered = done.wait(timeout=HOLD_LIMIT_S)
        reader.join()
    finally:
        await service.stop()
    assert answered, "the ops endpoints did not answer while the event loop was held"
    assert answers["/healthz"] == (200, "ok\n")
    assert answers["/readyz"] == (200, "ready\n")
    status, text = answers["/metrics"]
    assert status == 200
    assert "reverser_event_loop_lag_seconds" in text


async def test_a_loop_held_past_the_stall_limit_fails_healthz_until_it_runs_again(tmp_path: Path) -> None:
    service = Service(_settings(tmp_path, loop_stall_fail_s=0.5), factories=[])
    await service.start()
    url = f"http://127.0.0.1:{service.metrics_port}/healthz"
    seen: list[tuple[int, str]] = []
    failed = threading.Event()

    def poll_until_failed() -> None:
        while not failed.is_set():
            answer = _get(url)
            seen.append(answer)
            if answer[0] == 503:
                failed.set()
            else:
                threading.Event().wait(0.1)

    try:
        await wait_for(lambda: _get(url)[0] == 200, what="alive")
        poller = threading.Thread(target=poll_until_failed, daemon=True)
        poller.start()
        held_until_failed = failed.wait(timeout=HOLD_LIMIT_S)
        failed.set()
        poller.join()
        await wait_for(lambda: _get(url) == (200, "ok\n"), what="alive again once the loop runs")
    finally:
        await service.stop()
    assert held_until_failed, seen[-3:]
    status, text = seen[-1]
    assert status == 503
    assert text.startswith("failed\nevent loop: has not run for ")


async def test_a_taken_metrics_port_is_an_error_at_start(tmp_path: Path) -> None:
    first = Service(_settings(tmp_path / "a"), factories=[])
    await first.start()
    try:
        taken = Settings(
            workdir=tmp_path / "b",
            log=LogSettings(backend="embedded", topic_prefix=unique_prefix()),
            metrics=MetricsSettings(addr=f"127.0.0.1:{first.metrics_port}"),
        )
        second = Service(taken, factories=[])
        with pytest.raises(OSError, match="address already in use"):
            await second.start()
    finally:
        await first.stop()


async def test_the_switch_interval_is_short_while_the_server_runs_and_restored_after() -> None:
    # the ops thread takes the GIL from a busy main thread only after the switch interval
    before = sys.getswitchinterval()
    assert before > SWITCH_INTERVAL_S  # the interpreter's default (5 ms): else this proves nothing
    server = OpsServer("127.0.0.1", 0, stall_fail_s=5.0)
    await server.start()
    try:
        during = sys.getswitchinterval()
        status, _ = _get(f"http://127.0.0.1:{server.port}/healthz")
    finally:
        await server.stop()
    assert (during, status) == (SWITCH_INTERVAL_S, 200)
    assert sys.getswitchinterval() == before


async def test_a_failed_start_restores_the_switch_interval(tmp_path: Path) -> None:
    before = sys.getswitchinterval()
    first = OpsServer("127.0.0.1", 0, stall_fail_s=5.0)
    await first.start()
    try:
        taken = OpsServer("127.0.0.1", first.port or 0, stall_fail_s=5.0)
        with pytest.raises(OSError, match="address already in use"):
            await taken.start()
        assert sys.getswitchinterval() == SWITCH_INTERVAL_S  # the first still runs
    finally:
        await first.stop()
    assert sys.getswitchinterval() == before
