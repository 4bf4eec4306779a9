"""What a branch worker reaches beyond its clone: the log, the clocks, the status and test hooks.

The consumer wires each port to its log and tasks; a replay wires only the object-state ones,
and tests wire what they observe. Every port is optional (a missing one means the branch does
without: no object state, no dead letters, no push results), so one value carries them all.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from pipeline.codec.branch_work import WorkItem
from pipeline.codec.commit_request_result import RequestResult
from pipeline.codec.object_state import ObjectState
from pipeline.codec.target_result import TargetResult
from pipeline.log.api import PendingRecord
from pipeline.slices import DEFAULT_SLICE_MS

__all__ = [
    "BranchPorts",
    "DeletionAhead",
    "History",
    "Hook",
    "LoadState",
    "LogEnds",
    "Park",
    "ResultSink",
    "StateSink",
]

#: Hears `committed` and `pushed` (the crash tests stop the process there).
Hook = Callable[[str], Awaitable[None]]
#: (partition, offset) -> the branch-work records shortly before and up to that offset, in log order.
History = Callable[[int, int], Awaitable[list[WorkItem]]]
#: The log-end offset of every branch-work partition: bounds the offsets a trailer may claim.
LogEnds = Callable[[], Awaitable[Mapping[int, int]]]
#: The object-state records of these targets (the first read of `<prefix>.object-state`).
LoadState = Callable[[frozenset[str]], Awaitable[list[ObjectState]]]
#: Takes object-state records of settled work; they must be on the log before its offsets commit.
StateSink = Callable[[list[PendingRecord]], None]
#: Parks a work record the branch cannot apply (on the dead-letter topic) before it is settled.
Park = Callable[[WorkItem, Exception], Awaitable[None]]
#: Whether a `TargetDeleted` of the item's target follows the item on its partition (read from the log).
DeletionAhead = Callable[[WorkItem], Awaitable[bool]]
#: Hears each target's last commit and push outcome, and what became of each CommitRequest
#: (custom-resource status).
ResultSink = Callable[[TargetResult | RequestResult], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class BranchPorts:
    """The optional ports of one `BranchWorker`.

    `clock` (monotonic seconds) times windows and pushes; `wall` (epoch seconds) stamps commits
    and records. Object state is tracked only with both `load_state` and `on_state`.
    `slice_ms` is the longest the worker plans, applies or indexes a commit before it gives the
    event loop back (`pipeline.slices`; 0 yields between every two steps).
    """

    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    slice_ms: float = DEFAULT_SLICE_MS
    hook: Hook | None = None
    history: History | None = None
    log_ends: LogEnds | None = None
    load_state: LoadState | None = None
    on_state: StateSink | None = None
    on_result: ResultSink | None = None
    reject: Park | None = None
    deletion_ahead: DeletionAhead | None = None
