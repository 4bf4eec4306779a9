"""Consumer-lag monitoring: offset lag, lag in seconds and a Burrow-style status per group.

`LagMonitor` polls the log, `LagEvaluator` holds the windows and histories and applies the rules,
`LagComponent` runs it under `reverser run` with Prometheus metrics, and `reverser lag` prints it.
See docs/lag.md.
"""

from __future__ import annotations

from pipeline.lag.evaluator import Commit, LagEvaluator, offset_lag
from pipeline.lag.monitor import LagMonitor
from pipeline.lag.snapshot import GroupLag, LagSnapshot, PartitionLag
from pipeline.lag.status import Status

__all__ = [
    "Commit",
    "GroupLag",
    "LagEvaluator",
    "LagMonitor",
    "LagSnapshot",
    "PartitionLag",
    "Status",
    "offset_lag",
]
