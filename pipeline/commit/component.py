"""`reverser run` wiring: the commit worker is built only when providers and targets are configured."""

from __future__ import annotations

from pipeline.commit.consumer import CommitWorker
from pipeline.component import Component
from pipeline.config import Settings
from pipeline.log.api import Log

__all__ = ["build"]


def build(settings: Settings, log: Log) -> Component | None:
    """The commit worker component, or None when there is nothing to commit to (with custom
    resources it always runs: providers and targets may come at any time)."""
    if (not settings.providers or not settings.targets) and not settings.custom_resources.enabled:
        return None
    return CommitWorker(settings, log)
