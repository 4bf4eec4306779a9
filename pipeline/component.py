"""What `reverser run` needs from a stage: start, stop and say whether it is ready."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, runtime_checkable

from aiohttp import web

from pipeline.config import Settings
from pipeline.gitcredentials import ObjectReader
from pipeline.incarnation import Incarnation
from pipeline.log.api import Log


class Component(Protocol):
    """A long-running stage; `start` returns once it is running, `stop` once it has drained."""

    name: str

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def ready(self) -> bool: ...


@runtime_checkable
class Failing(Protocol):
    """A stage that can lose one of its own tasks to an error it cannot recover from in this process.

    `failure()` names the task and the error once that happened (None before). The service then
    answers `/healthz` with 503 and `reverser run` stops with exit code 1: a restarted process
    resumes from the committed offsets, where a process that stayed up would hold the work forever.
    """

    def failure(self) -> str | None: ...


@runtime_checkable
class Reconfigurable(Protocol):
    """A stage that takes a changed configuration while it runs (custom resources, SIGHUP)."""

    async def apply(self, settings: Settings) -> object: ...


@runtime_checkable
class ConfigRefreshing(Protocol):
    """A stage that may meet work of a configuration this process has not applied yet: it asks the
    service to catch up with the config topic before it treats a name as unknown."""

    def use_config_refresh(self, refresh: Callable[[], Awaitable[None]]) -> None: ...


@runtime_checkable
class ObjectReading(Protocol):
    """A stage that reads Secrets or ConfigMaps from the cluster (Git credentials of a provider):
    the service gives it the reader, so the stage needs no Kubernetes client of its own."""

    def use_object_reader(self, reader: ObjectReader) -> None: ...


class ComponentFactory(Protocol):
    """Builds a stage from configuration; returns None when the stage is disabled or unconfigured."""

    def __call__(self, settings: Settings, log: Log) -> Component | None: ...


class OpsRoutes(Protocol):
    """Adds read-only routes to the ops server; `components` lists the running stages at request time."""

    def __call__(
        self, settings: Settings, components: Callable[[], Sequence[Component]]
    ) -> list[web.RouteDef]: ...


@runtime_checkable
class Succeeding(Protocol):
    """A stage that holds something a crash leaves held until it times out (a Lease): the service
    gives it the replica's incarnation record, to take back what its previous run held."""

    def use_incarnation(self, incarnation: Incarnation) -> None: ...
