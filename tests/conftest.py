"""Shared fixtures: the real Kafka broker and a started log of either backend.

The broker is started once per session by `tests/integration/kafka/broker.py` (Apache Kafka jars
from Maven Central, KRaft, loopback) unless `KAFKA_BOOTSTRAP_SERVERS` names an existing broker.
Under pytest-xdist (`make test` runs two workers) every worker is a session of its own: its own
broker on kernel-chosen ports, its own temporary directories, its own metrics registry; tests on
one broker stay apart by topic prefix (`unique_prefix`).

With `REVERSER_NO_SKIPS=1` (set by `.ci/run`) a skipped test fails instead: locally a suite may
skip when a tool is not built yet, saying why, but CI must never go green by skipping one.

Hypothesis runs under the suite's profile (`tests/support/hypothesis_profile.py`): no timing checks.

No test binds a fixed port (`tests/support/fixed_ports.py`): the suite must pass while `make run`
serves on the default ports.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pipeline.config import LogSettings, Settings
from pipeline.log.api import Log
from tests.support import hypothesis_profile
from tests.support.fixed_ports import forbid_fixed_ports

if TYPE_CHECKING:
    from tests.integration.kafka.broker import KafkaBroker

BACKENDS = ("embedded", "kafka")
NO_SKIPS_ENV = "REVERSER_NO_SKIPS"

hypothesis_profile.load()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Under `REVERSER_NO_SKIPS=1`, turn every skip into a failure that keeps the skip's reason."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if report.skipped and not hasattr(report, "wasxfail") and os.environ.get(NO_SKIPS_ENV) == "1":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped while {NO_SKIPS_ENV}=1 (CI forbids skips): {reason}"


@pytest.fixture(autouse=True)
def _no_fixed_ports() -> Iterator[None]:
    """Every test listens only on ports of its own (see tests/support/fixed_ports.py)."""
    with forbid_fixed_ports():
        yield


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Bootstrap servers of a real broker for this test session."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:
        yield external
        return
    from tests.integration.kafka.broker import KafkaBroker

    broker = KafkaBroker(tmp_path_factory.mktemp("kafka"))
    broker.start()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[KafkaBroker]:
    """A private broker the test may stop or kill (the shared one must stay up for everybody else)."""
    from tests.integration.kafka.broker import KafkaBroker

    broker = KafkaBroker(tmp_path / "broker")
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def unique_prefix() -> str:
    """A topic prefix no other test uses, so tests share one broker without interfering."""
    return f"t{uuid.uuid4().hex[:12]}"


def outage_settings(bootstrap: str, tmp_path: Path) -> Settings:
    """Settings on a private broker the test stops: short requests and one retry, so an outage
    shows within seconds instead of after the production budget."""
    log_settings = LogSettings(
        backend="kafka",
        bootstrap_servers=bootstrap,
        topic_prefix=unique_prefix(),
        request_timeout_ms=3000,
        connect_retries=1,
        retry_backoff_ms=100,
    )
    return Settings(workdir=tmp_path / "work", log=log_settings)


def make_settings(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Settings:
    """Settings for one test on one backend (Kafka only when the test asks for it)."""
    if backend == "kafka":
        bootstrap = request.getfixturevalue("kafka_bootstrap")
        log_settings = LogSettings(backend="kafka", bootstrap_servers=bootstrap, topic_prefix=unique_prefix())
    else:
        log_settings = LogSettings(backend="embedded", topic_prefix=unique_prefix())
    return Settings(workdir=tmp_path / "work", log=log_settings)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Parametrises a test over both log backends; Kafka cases carry the `kafka` mark."""
    name: str = request.param
    return name


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the Kafka cases, so `-m "not kafka"` deselects them; deselect e2e tests anywhere under
    `tests/` unless the `-m` expression names `e2e` (`make e2e`), so a plain `pytest`/`make test`
    never waits for a control plane."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("backend") == "kafka":
            item.add_marker(pytest.mark.kafka)
    if "e2e" in (config.getoption("markexpr") or ""):
        return
    e2e = [item for item in items if item.get_closest_marker("e2e") is not None]
    if e2e:
        config.hook.pytest_deselected(items=e2e)
        items[:] = [item for item in items if item.get_closest_marker("e2e") is None]


@pytest.fixture
def settings(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Settings:
    return make_settings(backend, tmp_path, request)


@contextlib.asynccontextmanager
async def started_log(settings: Settings) -> AsyncIterator[Log]:
    """A started log for `settings`, closed on exit: the body of every log fixture."""
    from pipeline.log import open_log

    log = open_log(settings)
    await log.start()
    try:
        yield log
    finally:
        await log.close()


@pytest.fixture
async def any_log(settings: Settings) -> AsyncIterator[Log]:
    """A started log of the parametrised backend, closed after the test."""
    async with started_log(settings) as log:
        yield log
