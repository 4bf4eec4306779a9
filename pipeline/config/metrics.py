"""The `metrics` section: the metrics and health server."""

from __future__ import annotations

from pydantic import Field

from pipeline.config.addresses import HostPort
from pipeline.config.section import Section


class MetricsSettings(Section):
    """The metrics and health server; `/readyz` probes the log every `log_probe_interval_s`."""

    addr: HostPort = "127.0.0.1:9464"
    """Listen address HOST:PORT of /metrics, /healthz and /readyz (`--metrics-addr`); port 0 picks a free
    port."""
    log_probe_interval_s: float = Field(default=5.0, gt=0)
    """How often /readyz probes the log, in seconds."""
    log_probe_timeout_s: float = Field(default=5.0, gt=0)
    """How long one log probe may take before the replica counts as not ready, in seconds."""
    loop_stall_fail_s: float = Field(default=30.0, gt=0)
    """How long the event loop may go without running before /healthz and /readyz fail, in seconds.
    They are served from a thread of their own and answer during any stall; past this one the
    process counts as wedged and a liveness probe restarts it."""
