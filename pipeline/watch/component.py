"""`reverser run` wiring for watch ingestion."""

from __future__ import annotations

from pipeline.config import Settings
from pipeline.incarnation import Incarnation
from pipeline.kube.client import open_client
from pipeline.log.api import Log
from pipeline.watch.manager import ClientFactory, WatchManager
from pipeline.watch.stream import StreamOptions

__all__ = ["WatchComponent", "build", "needed"]


class WatchComponent:
    """Runs the stream manager; ready once cursors are loaded and the streams are declared."""

    name = "watch"

    def __init__(
        self,
        settings: Settings,
        log: Log,
        *,
        options: StreamOptions | None = None,
        client_factory: ClientFactory = open_client,
        identity: str | None = None,
    ) -> None:
        self.manager = WatchManager(
            settings, log, options=options, client_factory=client_factory, identity=identity
        )

    def use_incarnation(self, incarnation: Incarnation) -> None:
        self.manager.incarnation = incarnation

    async def start(self) -> None:
        await self.manager.start()

    async def stop(self) -> None:
        await self.manager.stop()

    def ready(self) -> bool:
        return self.manager.started

    async def apply(self, settings: Settings) -> tuple[int, int]:
        """Reconcile with a changed configuration; returns (streams started, streams stopped)."""
        return await self.manager.apply(settings)


def needed(settings: Settings) -> bool:
    """Whether some target has rules on a configured cluster (with custom resources always: rules
    may come at any time)."""
    if settings.custom_resources.enabled:
        return True
    clusters = {c.name for c in settings.clusters}
    return any(t.rules and t.cluster in clusters for t in settings.targets)


def build(settings: Settings, log: Log) -> WatchComponent | None:
    """The watch component when `needed`."""
    return WatchComponent(settings, log) if needed(settings) else None
