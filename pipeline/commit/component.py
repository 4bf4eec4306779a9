"""`reverser run` wiring: the commit worker is built only when providers and targets are configured."""

from __future__ import annotations

from pipeline.commit.consumer import CommitWorker
from pipeline.component import Component
from pipeline.config import Settings
from pipeline.log.api import Log

__all__ = ["build", "needed"]


def needed(settings: Settings) -> bool:
    """Whether there is something to commit to (with custom resources always: providers and
    targets may come at any time)."""
    return bool(settings.providers and settings.targets) or settings.custom_resources.enabled


def build(settings: Settings, log: Log) -> Component | None:
    """The commit worker component when `needed`."""
    return CommitWorker(settings, log) if needed(settings) else None
