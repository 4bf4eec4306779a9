"""`reverser run` wiring for watch ingestion."""

from __future__ import annotations

from pipeline.config import Settings
from pipeline.log.api import Log
from pipeline.watch.kube import open_client
from pipeline.watch.manager import ClientFactory, WatchManager
from pipeline.watch.stream import StreamOptions

__all__ = ["WatchComponent", "build"]


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

    async def start(self) -> None:
        await self.manager.start()

    async def stop(self) -> None:
        await self.manager.stop()

    def ready(self) -> bool:
        return self.manager.started

    async def apply(self, settings: Settings) -> tuple[int, int]:
        """Reconcile with a changed configuration; returns (streams started, streams stopped)."""
        return await self.manager.apply(settings)


def build(settings: Settings, log: Log) -> WatchComponent | None:
    """The watch component, or None when no target has rules on a configured cluster (with custom
    resources it always runs: rules may come at any time)."""
    if settings.custom_resources.enabled:
        return WatchComponent(settings, log)
    clusters = {c.name for c in settings.clusters}
    if not any(t.rules and t.cluster in clusters for t in settings.targets):
        return None
    return WatchComponent(settings, log)
