"""Runs the configured stages in one process, with `/metrics`, `/healthz` and `/readyz`."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import signal

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from pipeline.config import Settings
from pipeline.log import Log, open_log
from pipeline.log.topics import topic_specs
from pipeline.service.component import Component, ComponentFactory

log = logging.getLogger(__name__)

# "module:function" of every stage factory, in start order (stopped in reverse).
COMPONENT_FACTORIES: tuple[str, ...] = (
    "pipeline.lag.component:build",
    "pipeline.audit.component:build",
    "pipeline.router.component:build",
    "pipeline.commit.component:build",
    "pipeline.watch.component:build",
)


def split_addr(addr: str) -> tuple[str, int]:
    """`HOST:PORT` (or `[v6]:PORT`) into its parts; raises ValueError naming the problem."""
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"address {addr!r} is not HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


def load_factories(names: tuple[str, ...] = COMPONENT_FACTORIES) -> list[ComponentFactory]:
    factories: list[ComponentFactory] = []
    for name in names:
        module_name, _, attr = name.partition(":")
        factories.append(getattr(importlib.import_module(module_name), attr))
    return factories


class Service:
    """The process: one log, the stages built from configuration, and the ops endpoints."""

    def __init__(
        self,
        settings: Settings,
        log_: Log | None = None,
        factories: list[ComponentFactory] | None = None,
    ) -> None:
        self.settings = settings
        self.log = log_ if log_ is not None else open_log(settings)
        self._factories = factories if factories is not None else load_factories()
        self.components: list[Component] = []
        self._runner: web.AppRunner | None = None
        self.metrics_port: int | None = None

    async def start(self) -> None:
        """Start everything, or nothing: a stage that fails to start stops the ones before it."""
        await self.log.start()
        try:
            created = await self.log.create_topics(topic_specs(self.settings))
            if created:
                log.info("created topics: %s", ", ".join(created))
            await self._start_ops_server()
            for factory in self._factories:
                component = factory(self.settings, self.log)
                if component is None:
                    continue
                await component.start()
                self.components.append(component)
                log.info("started %s", component.name)
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        for component in reversed(self.components):
            try:
                await component.stop()
            except Exception:
                log.exception("stopping %s failed", component.name)
        self.components.clear()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.log.close()

    def ready(self) -> bool:
        return all(component.ready() for component in self.components)

    async def _start_ops_server(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        host, port = split_addr(self.settings.metrics.addr)
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        addresses = self._runner.addresses
        self.metrics_port = int(addresses[0][1]) if addresses else port
        log.info("metrics on http://%s:%s/metrics", host, self.metrics_port)

    async def _metrics(self, _request: web.Request) -> web.Response:
        response = web.Response(body=generate_latest(REGISTRY))
        response.content_type = CONTENT_TYPE_LATEST.split(";")[0]
        return response

    async def _healthz(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, _request: web.Request) -> web.Response:
        waiting = [c.name for c in self.components if not c.ready()]
        if waiting:
            return web.Response(status=503, text="not ready: " + ", ".join(waiting) + "\n")
        return web.Response(text="ready\n")


async def run_until_signalled(service: Service, *, started: bool = False) -> None:
    """Start the service (unless already started), run until SIGINT/SIGTERM, then stop it cleanly."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(signum, stop.set)
    if not started:
        await service.start()
    try:
        await stop.wait()
    finally:
        log.info("shutting down")
        await service.stop()
