"""`/readyz`: what must hold before a replica takes traffic, decided in one place.

A replica is ready when (1) the log answered a request that needs the brokers within the last
probe, (2) every configured stage has started, and (3) every started stage says it is ready (the
fact index has replayed, the commit worker's tasks run, ...). Stages report through `ready()` or,
to say why not, through `readiness()`; the aggregation below is the only place that combines them.
Readiness is re-evaluated on every request, so it returns to 200 by itself once the cause is gone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from prometheus_client import Gauge

from pipeline.component import Component
from pipeline.log.api import Log
from pipeline.models import Readiness

__all__ = ["READY", "LogProbe", "Readiness", "ReportsReadiness", "readiness_of", "verdict"]

logger = logging.getLogger(__name__)

LOG_REACHABLE = Gauge(
    "reverser_log_reachable", "1 while the log answered the readiness probe's last request, else 0"
)
READY_GAUGE = Gauge("reverser_ready", "1 while /readyz answers 200, else 0")


READY = Readiness(True)


class ReportsReadiness(Protocol):
    """A stage that can say why it is not ready (e.g. how far a replay has got)."""

    def readiness(self) -> Readiness: ...


def readiness_of(component: Component) -> Readiness:
    """The stage's own report when it has one, else its `ready()` flag."""
    report = getattr(component, "readiness", None)
    if callable(report):
        result = report()
        if isinstance(result, Readiness):
            return result
    return READY if component.ready() else Readiness(False, "not ready")


def verdict(
    log_state: Readiness, starting: Sequence[str], stages: Iterable[tuple[str, Readiness]]
) -> tuple[bool, list[str]]:
    """(ready, one line per unmet condition) from the log, the stages not started yet, and the stages."""
    problems: list[str] = []
    if not log_state.ready:
        problems.append(f"log: {log_state.detail}")
    if starting:
        problems.append("starting: " + ", ".join(starting))
    problems.extend(f"{name}: {state.detail}" for name, state in stages if not state.ready)
    return not problems, problems


class LogProbe:
    """Asks the log something only the brokers can answer, every `interval_s`.

    The question is the description of the pipeline's topics (a metadata and a config request on
    Kafka; cached metadata would not notice a dead broker). No answer within `timeout_s`, or an
    error, makes the log unreachable until a later probe succeeds.
    """

    def __init__(
        self,
        log_: Log,
        topics: Sequence[str],
        *,
        interval_s: float,
        timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = log_
        self._topics = list(topics)
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._clock = clock
        self._failing_since: float | None = None
        self._reason = ""
        self.state = READY

    async def check(self) -> Readiness:
        """Probe once and remember the outcome."""
        try:
            async with asyncio.timeout(self.timeout_s):
                await self._log.describe_topics(self._topics)
        except Exception as exc:  # any failure to answer means "not reachable", whatever its type
            now = self._clock()
            if self._failing_since is None:
                self._failing_since = now
                logger.warning("readiness: the log does not answer: %s", _describe(exc))
            self._reason = _describe(exc)
            self.state = Readiness(
                False, f"unreachable for {now - self._failing_since:.0f} s ({self._reason})"
            )
        else:
            if self._failing_since is not None:
                logger.info("readiness: the log answers again")
            self._failing_since = None
            self.state = READY
        LOG_REACHABLE.set(1.0 if self.state.ready else 0.0)
        return self.state

    async def run(self, on_checked: Callable[[], None]) -> None:
        """Probe forever; `on_checked` runs after each probe (to refresh the readiness gauge)."""
        while True:
            await asyncio.sleep(self.interval_s)
            await self.check()
            on_checked()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
