"""Late facts: name the author of a change the router already emitted as unresolved.

After the router's transaction put an UNRESOLVED `Write` on branch-work, it keeps asking the fact
index for that change's fact (`pipeline.attribution.late`) for the late window. When one comes, it
appends a `LateAuthor` record to the same branch partition; the commit worker, the partition's
single writer, records the author beside the pushed commit (a git note and the object-state
record) when it reaches the record. The pushed history is never rewritten.

Delivery is at least once (a plain append, retried through an outage; a router that loses its
partition keeps watching what it emitted): the commit worker writes each note once however often
the record comes. Watches live in the process that emitted the change; one that dies before the
fact arrives leaves the change unresolved (docs/attribution.md, "Late facts").
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from pipeline.attribution import FactQuery
from pipeline.backoff import log_retry
from pipeline.codec.branch_work import LateAuthor, Outcome, WorkAuthor, WorkItem, Write, work_record
from pipeline.codec.watch_event import WatchRecord
from pipeline.log.api import AppendResult, Log
from pipeline.log.retrying import until_done
from pipeline.router import metrics
from pipeline.router.events import CaughtUp
from pipeline.router.lookup import query_for, snapshot_query
from pipeline.tasks import cancel_all, logged_failure

__all__ = ["MAX_LATE_WATCHES", "FindLate", "LateWatch", "late_candidates", "late_item"]

logger = logging.getLogger(__name__)

#: At most this many unresolved changes are watched at once; more are counted and not watched.
MAX_LATE_WATCHES: Final = 10_000

# The author a late fact names for this query within the window (None: none did).
FindLate = Callable[[FactQuery, float], Awaitable[WorkAuthor | None]]


def _awaits_fact(author: WorkAuthor | None) -> bool:
    """Unresolved because nothing matched (`absent`); a conflict names no one however long one waits."""
    return author is not None and author.outcome == Outcome.UNRESOLVED and author.tier == "absent"


def late_candidates(
    watch: WatchRecord, author: WorkAuthor | None, caught_up: Sequence[CaughtUp]
) -> list[tuple[int, FactQuery]]:
    """Which of a record's work items (by index, in `work_items` order) wait for a late fact.

    The caught-up snapshot objects come first in that order, then the record's own item.
    """
    found = [
        (i, snapshot_query(watch, change.obj))
        for i, change in enumerate(caught_up)
        if _awaits_fact(change.author)
    ]
    if watch.is_live and _awaits_fact(author):
        found.append((len(caught_up), query_for(watch)))
    return found


def late_item(item: WorkItem, author: WorkAuthor, at: AppendResult, resolved_at_ms: int) -> WorkItem:
    """The `LateAuthor` record for the unresolved `Write` of `item`, which landed `at` on branch-work."""
    write = item.body
    if not isinstance(write, Write):
        raise TypeError(f"only a Write is resolved late, not {write.kind}")
    body = LateAuthor(
        write.operation,
        write.namespace,
        write.name,
        write.uid,
        write.resource_version,
        author,
        at.partition,
        at.offset,
        resolved_at_ms,
    )
    return dataclasses.replace(item, body=body)


class LateWatch:
    """One task per change emitted as unresolved, waiting for its fact for `window_s`."""

    def __init__(self, log: Log, topic: str, find: FindLate, window_s: float) -> None:
        self._log = log
        self._topic = topic
        self._find = find
        self._window_s = window_s
        self._tasks: set[asyncio.Task[None]] = set()

    def watch(self, item: WorkItem, query: FactQuery, at: AppendResult) -> None:
        """Start waiting for the fact of the unresolved `item` now on branch-work `at`."""
        if len(self._tasks) >= MAX_LATE_WATCHES:
            metrics.LATE.labels(metrics.LateOutcome.DROPPED).inc()
            return
        task = asyncio.create_task(self._await(item, query, at), name="router-late")
        self._tasks.add(task)
        metrics.LATE_WATCHES.set(len(self._tasks))
        task.add_done_callback(self._done)
        task.add_done_callback(functools.partial(logged_failure, logger=logger, stage="router late facts"))

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        metrics.LATE_WATCHES.set(len(self._tasks))

    @property
    def watching(self) -> int:
        return len(self._tasks)

    async def _await(self, item: WorkItem, query: FactQuery, at: AppendResult) -> None:
        author = await self._find(query, self._window_s)
        if author is None:
            metrics.LATE.labels(metrics.LateOutcome.EXPIRED).inc()
            return
        now_ms = int(time.time() * 1000)
        late = late_item(item, author, at, now_ms)
        record = work_record(late)
        await until_done(
            lambda: self._log.append(self._topic, record.value, key=record.key, headers=record.headers),
            log_retry(),
            logger,
            "appending a late author",
        )
        metrics.LATE.labels(metrics.LateOutcome.RESOLVED).inc()
        if item.observed_at_ms:
            metrics.LATE_DELAY.observe(max(now_ms - item.observed_at_ms, 0) / 1000)
        logger.info(
            "late fact: %s %s/%s@%s (branch-work %d:%d) was made by %s (%s)",
            item.stream.resource,
            query.namespace,
            query.name,
            query.resource_version,
            at.partition,
            at.offset,
            author.username,
            author.tier,
        )

    async def stop(self) -> None:
        await cancel_all(list(self._tasks))
        self._tasks.clear()
        metrics.LATE_WATCHES.set(0)
