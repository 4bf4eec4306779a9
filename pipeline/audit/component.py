"""The factory `reverser run` calls (listed in `COMPONENT_FACTORIES`)."""

from __future__ import annotations

from pipeline.audit.server import AuditIngress
from pipeline.config import Settings
from pipeline.log.api import Log

__all__ = ["build"]


def build(settings: Settings, log: Log) -> AuditIngress | None:
    """The audit webhook ingress, or None when `audit.enabled` is false.

    Raises ConfigError for an unsafe or incomplete listener configuration (plain HTTP on a
    non-loopback address, unreadable certificates, a bearer-token variable that is not set).
    """
    if not settings.audit.enabled:
        return None
    return AuditIngress(settings, log)
