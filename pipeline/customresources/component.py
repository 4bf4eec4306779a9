"""`reverser run` wiring: the configuration controller runs when custom resources are enabled."""

from __future__ import annotations

import os
import socket
import uuid

from pipeline.config import Settings
from pipeline.customresources.controller import ConfigController
from pipeline.log.api import Log

__all__ = ["build"]


def build(settings: Settings, log: Log) -> ConfigController | None:
    """Every replica runs one; the Lease decides which one works."""
    if not settings.custom_resources.enabled:
        return None
    identity = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    return ConfigController(settings, log, identity=identity)
