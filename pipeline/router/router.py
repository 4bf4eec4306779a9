"""The router loop: consume watch events, attribute concurrently, emit in log order, commit after acks."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from pipeline.codec import BRANCH_WORK, DEAD_LETTER, SCHEMA_HEADER, DecodeError, codec
from pipeline.log.api import (
    GroupConsumer,
    Log,
    LogError,
    PendingRecord,
    RebalanceListener,
    Record,
    TopicPartition,
)
from pipeline.log.topics import TopicNames
from pipeline.models import branch_key
from pipeline.router import metrics
from pipeline.router.events import Destination, WatchRecord, decode_watch_record, work_item
from pipeline.work import WorkAuthor

log = logging.getLogger(__name__)

APPEND_RETRY_BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0)


class AuthorLookup(Protocol):
    """Names the author of a live watch event; may wait for evidence up to its grace window."""

    async def wait_ready(self) -> None:
        """Return once the fact index has replayed the log (no resolution before that)."""

    def ready(self) -> bool: ...

    async def author_for(self, watch: WatchRecord) -> WorkAuthor: ...


@dataclass(slots=True)
class _Pending:
    """A consumed record waiting to be emitted in its partition's log order."""

    watch: WatchRecord | None
    author: asyncio.Future[WorkAuthor] | None
    source: Record


@dataclass(slots=True)
class RouterStats:
    """Counts since start, for tests and the demo's progress line."""

    consumed: int = 0
    emitted: int = 0
    work_items: int = 0
    dropped: int = 0
    committed: dict[TopicPartition, int] = field(default_factory=dict)


class _Rebalance(RebalanceListener):
    def __init__(self, router: Router) -> None:
        self._router = router

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self._router._forget(revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        log.info("router owns %s", ", ".join(sorted(str(tp) for tp in assigned)) or "no partitions")


class Router:
    """Consumer-group member on watch events that appends attributed work to branch partitions.

    Resolutions run concurrently (one task per live event, bounded by `max_in_flight`), but each
    partition's output is emitted strictly in log order, so one object's changes never overtake
    each other. Offsets are committed only after the work items were acknowledged by the log.
    """

    name = "router"

    def __init__(
        self,
        log_: Log,
        topics: TopicNames,
        destinations: Mapping[str, Destination],
        lookup: AuthorLookup | None,
        *,
        group_id: str,
        max_in_flight: int = 2000,
        fetch_max_records: int = 500,
    ) -> None:
        self._log = log_
        self._topics = topics
        self._destinations = dict(destinations)
        self._lookup = lookup
        self._group_id = group_id
        self._fetch_max = fetch_max_records
        self._slots = asyncio.Semaphore(max_in_flight)
        self._pending: dict[int, deque[_Pending]] = {}
        self._progress = asyncio.Event()
        self._consumer: GroupConsumer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self.stats = RouterStats()

    # lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        self._consumer = self._log.group_consumer(
            self._group_id, [self._topics.watch_events], listener=_Rebalance(self)
        )
        self._tasks = [
            asyncio.create_task(self._consume(), name="router-consume"),
            asyncio.create_task(self._emit(), name="router-emit"),
        ]

    async def stop(self) -> None:
        self._stopping = True
        self._progress.set()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        for queue in self._pending.values():
            for pending in queue:
                if pending.author is not None:
                    pending.author.cancel()
        self._pending.clear()
        if self._consumer is not None:
            await self._consumer.close()
            self._consumer = None

    def ready(self) -> bool:
        return self._lookup is None or self._lookup.ready()

    def idle(self) -> bool:
        """Nothing read and not yet emitted (used by `--demo --once` to know it is done)."""
        return not any(self._pending.values())

    # consuming -------------------------------------------------------------------------------
    async def _consume(self) -> None:
        if self._lookup is not None:
            await self._lookup.wait_ready()
        assert self._consumer is not None
        await self._consumer.start()
        while not self._stopping:
            try:
                fetched = await self._consumer.fetch(timeout_ms=500, max_records=self._fetch_max)
            except LogError as exc:
                log.warning("router fetch failed, retrying: %s", exc)
                await asyncio.sleep(1.0)
                continue
            for gap in fetched.gaps:
                metrics.DROPPED.labels("retention_gap").inc(gap.lost)
                log.error(
                    "watch events %s[%d] offsets %d..%d were deleted by retention before routing",
                    gap.topic,
                    gap.partition,
                    gap.position,
                    gap.first_surviving - 1,
                )
            for record in fetched.records:
                await self._slots.acquire()
                metrics.IN_FLIGHT.inc()
                self._pending.setdefault(record.partition, deque()).append(self._admit(record))
                self.stats.consumed += 1
            if fetched.records:
                self._progress.set()

    def _admit(self, record: Record) -> _Pending:
        try:
            watch = decode_watch_record(record)
        except DecodeError as exc:
            metrics.DECODE_ERRORS.inc()
            log.error(
                "undecodable watch event %s[%d]@%d parked on %s: %s",
                record.topic,
                record.partition,
                record.offset,
                self._topics.dead_letter,
                exc,
            )
            return _Pending(None, None, record)
        metrics.RECORDS.labels(watch.kind.rsplit(".", 1)[-1]).inc()
        author: asyncio.Future[WorkAuthor] | None = None
        if watch.is_live and self._lookup is not None and watch.target in self._destinations:
            author = asyncio.ensure_future(self._lookup.author_for(watch))
            author.add_done_callback(lambda _f: self._progress.set())
        return _Pending(watch, author, record)

    def _forget(self, revoked: set[TopicPartition]) -> None:
        """Drop unemitted work of partitions this member lost; the new owner re-reads them."""
        for tp in revoked:
            for pending in self._pending.pop(tp.partition, deque()):
                if pending.author is not None:
                    pending.author.cancel()
                self._slots.release()
                metrics.IN_FLIGHT.dec()

    # emitting --------------------------------------------------------------------------------
    async def _emit(self) -> None:
        while not self._stopping:
            await self._progress.wait()
            self._progress.clear()
            ready = self._ready_prefixes()
            if ready:
                await self._publish(ready)

    def _ready_prefixes(self) -> dict[int, list[_Pending]]:
        ready: dict[int, list[_Pending]] = {}
        for partition, queue in self._pending.items():
            while queue and (queue[0].author is None or queue[0].author.done()):
                ready.setdefault(partition, []).append(queue.popleft())
        return ready

    async def _publish(self, ready: dict[int, list[_Pending]]) -> None:
        records: list[PendingRecord] = []
        dead: list[PendingRecord] = []
        for items in ready.values():
            for pending in items:
                if pending.watch is None:
                    dead.append(self._dead_letter(pending.source))
                    continue
                records.extend(self._work_for(pending))
        await self._append_until_acknowledged(self._topics.dead_letter, dead)
        metrics.DEAD_LETTERED.inc(len(dead))
        await self._append_until_acknowledged(self._topics.branch_work, records)
        offsets = {
            TopicPartition(self._topics.watch_events, partition): items[-1].source.offset + 1
            for partition, items in ready.items()
        }
        await self._commit(offsets)
        count = sum(len(items) for items in ready.values())
        self.stats.emitted += count
        self.stats.work_items += len(records)
        for _ in range(count):
            self._slots.release()
        metrics.IN_FLIGHT.dec(count)

    def _work_for(self, pending: _Pending) -> list[PendingRecord]:
        watch = pending.watch
        assert watch is not None
        destination = self._destinations.get(watch.target)
        if destination is None:
            metrics.DROPPED.labels("unknown_target").inc()
            self.stats.dropped += 1
            return []
        author: WorkAuthor | None = None
        if pending.author is not None:
            if pending.author.cancelled():
                return []
            author = pending.author.result()
        item = work_item(watch, destination, author)
        metrics.WORK_ITEMS.labels(destination.provider, destination.branch).inc()
        work = codec(BRANCH_WORK)
        return [
            PendingRecord(
                work.encode(item),
                key=branch_key(destination.provider, destination.branch),
                headers=(work.header, ("target", watch.target.encode())),
            )
        ]

    def _dead_letter(self, record: Record) -> PendingRecord:
        letter = codec(DEAD_LETTER)
        payload = letter.encode(
            {
                "topic": record.topic,
                "partition": record.partition,
                "offset": record.offset,
                "stage": "router",
                "reason": f"undecodable {record.header(SCHEMA_HEADER)!r}",
                "key": record.key,
                "value": record.value,
            }
        )
        return PendingRecord(payload, key=record.key, headers=(letter.header,))

    async def _append_until_acknowledged(self, topic: str, records: list[PendingRecord]) -> None:
        """Retry with backoff until acknowledged: dropping work would lose a commit."""
        attempt = 0
        while records:
            try:
                await self._log.append_many(topic, records)
                return
            except LogError as exc:
                metrics.APPEND_ERRORS.inc()
                delay = APPEND_RETRY_BACKOFF_S[min(attempt, len(APPEND_RETRY_BACKOFF_S) - 1)]
                log.warning(
                    "appending %d records to %s failed (%s); retry in %.1fs", len(records), topic, exc, delay
                )
                attempt += 1
                await asyncio.sleep(delay)

    async def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        assert self._consumer is not None
        try:
            await self._consumer.commit(offsets)
            self.stats.committed.update(offsets)
        except LogError as exc:
            log.warning("committing router offsets failed (work is appended; will be re-read): %s", exc)
