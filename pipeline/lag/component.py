"""The lag monitor as a `reverser run` component: poll every interval, export metrics."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence

from aiohttp import web

from pipeline.component import Component
from pipeline.config import LagSettings, Settings
from pipeline.lag.burrow import burrow_routes
from pipeline.lag.metrics import LagMetrics
from pipeline.lag.monitor import Clock, LagMonitor, wall_clock_ms
from pipeline.lag.offsets_topic import commit_feed_for
from pipeline.lag.selection import GroupSelector
from pipeline.log.api import Log

__all__ = ["LagComponent", "build", "ops_routes"]

logger = logging.getLogger(__name__)


class LagComponent:
    """Runs `LagMonitor.poll` every `poll_interval_s` until stopped; ready after one good poll."""

    name = "lag-monitor"

    def __init__(
        self,
        log: Log,
        settings: LagSettings,
        *,
        clock: Clock = wall_clock_ms,
        selector: GroupSelector | None = None,
    ) -> None:
        self._settings = settings
        self.monitor = LagMonitor(
            log, settings, selector=selector, clock=clock, commit_feed=commit_feed_for(log, settings)
        )
        self.metrics = LagMetrics(kafka_lag_exporter_names=settings.kafka_lag_exporter_names)
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._ready = False

    async def start(self) -> None:
        self._stop.clear()
        self._task = asyncio.create_task(self._run(), name="lag-monitor")

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.monitor.close()
        self.metrics.clear()

    def ready(self) -> bool:
        return self._ready

    async def _run(self) -> None:
        while not self._stop.is_set():
            snapshot = await self.monitor.poll()
            self.metrics.export(snapshot)
            if not snapshot.stale:
                self._ready = True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self._settings.poll_interval_s)


def build(settings: Settings, log: Log) -> Component | None:
    """The component factory named in `COMPONENT_FACTORIES`; None when `lag.enabled` is false."""
    if not settings.lag.enabled:
        return None
    return LagComponent(log, settings.lag)


def ops_routes(settings: Settings, components: Callable[[], Sequence[Component]]) -> list[web.RouteDef]:
    """Burrow's read API on the metrics port (the hook named in `OPS_ROUTES`), unless turned off.

    The routes look the running lag monitor up at request time, so they answer "no cluster"
    until the monitor has started rather than holding a reference from before.
    """
    if not (settings.lag.enabled and settings.lag.burrow_api):
        return []

    def monitor() -> LagMonitor | None:
        for component in components():
            if isinstance(component, LagComponent):
                return component.monitor
        return None

    return burrow_routes(monitor, settings.lag.cluster_name)
