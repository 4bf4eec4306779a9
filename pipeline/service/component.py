"""What `reverser run` needs from a stage: start, stop and say whether it is ready."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from aiohttp import web

from pipeline.config import Settings
from pipeline.log.api import Log


class Component(Protocol):
    """A long-running stage; `start` returns once it is running, `stop` once it has drained."""

    name: str

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def ready(self) -> bool: ...


class ComponentFactory(Protocol):
    """Builds a stage from configuration; returns None when the stage is disabled or unconfigured."""

    def __call__(self, settings: Settings, log: Log) -> Component | None: ...


class OpsRoutes(Protocol):
    """Adds read-only routes to the ops server; `components` lists the running stages at request time."""

    def __call__(
        self, settings: Settings, components: Callable[[], Sequence[Component]]
    ) -> list[web.RouteDef]: ...
