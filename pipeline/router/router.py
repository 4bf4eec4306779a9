"""The router loop: consume watch events, attribute concurrently, emit in log order, exactly once.

Each input partition's output and its consumed offset are committed in one transaction of that
partition's own transactional producer, so a crash or a rebalance between the two cannot put a
work item on `branch-work` twice (see docs/router.md).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from pipeline.attribution import FactQuery
from pipeline.backoff import log_retry
from pipeline.codec import DecodeError
from pipeline.codec.branch_work import Removal, WorkAuthor, WorkItem, work_record
from pipeline.codec.dead_letter import letter_record
from pipeline.codec.watch_event import WatchRecord, decode_watch_event
from pipeline.log.api import (
    AppendResult,
    FencedError,
    GroupConsumer,
    GroupOffsets,
    Log,
    LogError,
    PendingRecord,
    RebalanceListener,
    Record,
    TopicPartition,
    TransactionalProducer,
)
from pipeline.log.retrying import until_done
from pipeline.log.scan import Extent, read_to_end
from pipeline.log.topics import TopicNames
from pipeline.router import metrics
from pipeline.router.events import CaughtUp, Destination, work_items
from pipeline.router.late import LateWatch, late_candidates
from pipeline.router.lookup import Needs, needs
from pipeline.slices import Slicer
from pipeline.tasks import cancel_all, logged_failure, task_failure

logger = logging.getLogger(__name__)

#: Records read back before a partition's committed offset when this member takes it: the object
#: versions they carry let the first events after it join scale facts (docs/attribution.md,
#: "Scale facts"). A few seconds' worth of a busy partition; an object last changed earlier waits
#: for its next event.
VERSION_READ_BACK_RECORDS: Final = 10_000


class AuthorLookup(Protocol):
    """Names the author of a live watch event; may wait for evidence up to its grace window."""

    async def wait_ready(self) -> None:
        """Return once the fact index has replayed the log (no resolution before that)."""

    def ready(self) -> bool: ...

    async def author_for(self, watch: WatchRecord) -> WorkAuthor: ...

    def resume_versions(self, partition: int, committed: int) -> None:
        """A partition restarts at `committed`: forget the object versions it admitted if another
        member admitted records past them."""

    def note_version(self, watch: WatchRecord) -> None:
        """A record before the partition's committed offset, read back so the object versions it
        carries are known to the records after it (pipeline/router/versions.py)."""

    async def catch_up(self, watch: WatchRecord) -> list[CaughtUp]:
        """Authors of a snapshot chunk's objects that changed while the watch was down."""

    async def removals_for(self, watch: WatchRecord) -> list[Removal]:
        """Deletion evidence for the objects a finished snapshot shows only as absences."""


@dataclass(slots=True)
class _Pending:
    """A consumed record waiting to be emitted in its partition's log order."""

    watch: WatchRecord | None
    author: asyncio.Future[WorkAuthor] | None
    source: Record
    # why `watch` is None: the record goes to the dead-letter topic with it
    error: DecodeError | None = None
    # A snapshot chunk's objects that changed while the watch was down, with their authors.
    caught_up: asyncio.Future[list[CaughtUp]] | None = None
    # A snapshot end's deletion evidence (who deleted what the snapshot no longer lists).
    removals: asyncio.Future[list[Removal]] | None = None

    def _futures(self) -> tuple[asyncio.Future[Any] | None, ...]:
        return (self.author, self.caught_up, self.removals)

    def resolved(self) -> bool:
        """Every resolution this record waits for is done (it may be emitted in its turn)."""
        return all(f is None or f.done() for f in self._futures())

    def cancel(self) -> None:
        for future in self._futures():
            if future is not None:
                future.cancel()


@dataclass(slots=True)
class RouterStats:
    """Counts since start, for tests and the demo's progress line."""

    consumed: int = 0
    emitted: int = 0
    work_items: int = 0
    dropped: int = 0
    committed: dict[TopicPartition, int] = field(default_factory=dict)


def _now_ms() -> int:
    return int(time.time() * 1000)


def transactional_id(group_id: str, tp: TopicPartition) -> str:
    """The transactional id of one input partition: whoever routes it next fences whoever did before."""
    return f"{group_id}.{tp.topic}.{tp.partition}"


class _Rebalance(RebalanceListener):
    def __init__(self, router: Router) -> None:
        self._router = router

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._router._release(revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        logger.info("router owns %s", ", ".join(sorted(str(tp) for tp in assigned)) or "no partitions")
        await self._router._take_over(assigned)


#: Bytes of consumed records the router holds until their work is emitted (at least one record):
#: `max_in_flight` counts records, and 2,000 snapshot chunks of up to 4 MiB each are a whole
#: first sync's collection, decoded, ahead of the emitter (issue 32's memory budget). Two
#: default-sized chunks: the emitter keeps up with that, and 16 MiB raised a first sync's peak.
MAX_HELD_BYTES = 8 * 1024 * 1024


class Router:
    """Consumer-group member on watch events that appends attributed work to branch partitions.

    Resolutions run concurrently (one task per live event, bounded by `max_in_flight`), but each
    partition's output is emitted strictly in log order, so one object's changes never overtake
    each other. A partition's work items and its next offset are committed in one transaction of
    the partition's transactional producer; taking a partition over starts that producer (which
    fences the previous owner) before reading the committed offset, so no input is routed twice.
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
        late: LateWatch | None = None,
    ) -> None:
        """`late` watches each change emitted as unresolved for a fact that names it after all."""
        self._log = log_
        self._late = late
        self._topics = topics
        self._destinations: dict[str, Destination] = {}
        self._lookup = lookup
        self._group_id = group_id
        self._fetch_max = fetch_max_records
        self._slots = asyncio.Semaphore(max_in_flight)
        # the value bytes of the records holding a slot, bounded by MAX_HELD_BYTES
        self._held_bytes = 0
        self._room = asyncio.Event()
        # Decoding a fetch of snapshot chunks (up to 4 MiB each) or encoding their work is CPU:
        # both give the loop back between records once a slice is used up (pipeline/slices.py).
        self._slicer = Slicer()
        self._pending: dict[int, deque[_Pending]] = {}
        self._progress = asyncio.Event()
        self._consumer: GroupConsumer | None = None
        self._producers: dict[TopicPartition, TransactionalProducer] = {}
        # Records returned before a partition was reset (dropped, re-seeked) are stale: records of
        # a fetch that returned at reset count N are dropped if their partition was reset after N.
        self._resets = 0
        self._reset_at: dict[int, int] = {}
        # Partitions being taken over: their records are dropped (and read again from the committed
        # offset), so no event is attributed while its object's history is still being read back.
        self._taking_over: set[int] = set()
        # Held while a transaction is in flight: a rebalance waits for it before handing over.
        self._publishing = asyncio.Lock()
        # The offset this member last committed per partition (dropped on a reset): where a
        # transaction marker after it may still need committing once the member has seen it.
        self._committed_at: dict[int, int] = {}
        # partitions that returned no record since assignment: the offset committed for them
        self._quiet_at: dict[int, int] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self.stats = RouterStats()
        #: Catches this process up with the newest published configuration (custom-resource
        #: mode): an event of a target this router does not know yet may come from a stream that
        #: a newer configuration started, and dropping it would lose the change.
        self.refresh_config: Callable[[], Awaitable[None]] | None = None
        self._refreshed_for: set[str] = set()
        self.set_destinations(destinations)

    def set_destinations(self, destinations: Mapping[str, Destination]) -> None:
        """Route with a changed configuration from the next event on (no restart, no replay)."""
        for name, old in self._destinations.items():
            metrics.ATTRIBUTION_MODE.remove(name, old.attribution)
        self._destinations = dict(destinations)
        for name, destination in self._destinations.items():
            metrics.ATTRIBUTION_MODE.labels(name, destination.attribution).set(1)
        self._refreshed_for.clear()

    # lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        self._consumer = self._member()
        self._tasks = [
            asyncio.create_task(self._consume(), name="router-consume"),
            asyncio.create_task(self._emit(), name="router-emit"),
        ]
        for task in self._tasks:
            task.add_done_callback(functools.partial(logged_failure, logger=logger, stage="router"))

    async def stop(self) -> None:
        self._stopping = True
        self._progress.set()
        await cancel_all(self._tasks)
        self._tasks.clear()
        for queue in self._pending.values():
            for pending in queue:
                pending.cancel()
        self._pending.clear()
        if self._late is not None:
            await self._late.stop()
        if self._consumer is not None:
            await self._consumer.close()
            self._consumer = None
        await self._close_producers(set(self._producers))

    def ready(self) -> bool:
        return self._lookup is None or self._lookup.ready()

    def failure(self) -> str | None:
        """The loop that died and why: routing has stopped and only a new process resumes it."""
        return task_failure(self._tasks)

    def idle(self) -> bool:
        """Nothing read and not yet emitted (used by `--demo --once` to know it is done)."""
        return not any(self._pending.values())

    # consuming -------------------------------------------------------------------------------
    def _member(self) -> GroupConsumer:
        return self._log.group_consumer(
            self._group_id, [self._topics.watch_events], listener=_Rebalance(self)
        )

    async def _join(self) -> None:
        """Join the group, retrying with backoff while the log is unreachable.

        The router joins only once the fact index is ready, long after `start()` returned; a join
        that gave up would leave a running replica that routes nothing. A failed member is closed
        by its `start()`, so each attempt uses a new one.
        """
        backoff = log_retry()
        while True:
            assert self._consumer is not None
            try:
                await self._consumer.start()
                return
            except LogError as exc:
                delay_s = backoff.next_delay_s()
                logger.warning("router cannot join its group (retry in %.1f s): %s", delay_s, exc)
                await self._consumer.close()
                await asyncio.sleep(delay_s)
                self._consumer = self._member()

    async def _consume(self) -> None:
        if self._lookup is not None:
            await self._lookup.wait_ready()
        await self._join()
        assert self._consumer is not None
        consumer = self._consumer
        backoff = log_retry()
        while not self._stopping:
            fetched = await until_done(
                lambda: consumer.fetch(timeout_ms=500, max_records=self._fetch_max),
                backoff,
                logger,
                "router fetch",
            )
            for gap in fetched.gaps:
                metrics.DROPPED.labels(metrics.DropReason.RETENTION_GAP).inc(gap.lost)
                logger.error(
                    "watch events %s[%d] offsets %d..%d were deleted by retention before routing",
                    gap.topic,
                    gap.partition,
                    gap.position,
                    gap.first_surviving - 1,
                )
            # A seek applies to fetches that return after it; records returned before it are stale
            # once their partition is reset while they wait for a slot.
            fetched_at = self._resets
            for record in fetched.records:
                await self._hold(record)
                if (
                    self._reset_at.get(record.partition, 0) > fetched_at
                    or record.partition in self._taking_over
                ):
                    logger.debug(
                        "dropping %s[%d]@%d: fetched before a reset or during a takeover",
                        record.topic,
                        record.partition,
                        record.offset,
                    )
                    self._let_go(record)
                    continue
                await self._know_target(record)
                metrics.IN_FLIGHT.inc()
                self._pending.setdefault(record.partition, deque()).append(self._admit(record))
                self.stats.consumed += 1
                if self._slicer.due():
                    await self._slicer.pause()
            if fetched.records:
                self._progress.set()
            else:
                await self._commit_markers()
                await self._commit_quiet()

    async def _commit_markers(self) -> None:
        """Commit past the transaction marker after the last routed record, once the member saw it.

        The member learns of a marker on a fetch after the one that returned the record before it;
        work committed in between stops one short, and with nothing more to route the group would
        show a lag of 1 until the partition's next event. Only a partition with nothing pending
        whose commit is exactly where the member's reading ended moves (`committable`).
        """
        consumer = self._consumer
        if consumer is None or not any(not self._pending.get(p) for p in self._committed_at):
            return
        async with self._publishing:
            for partition, offset in list(self._committed_at.items()):
                tp = TopicPartition(self._topics.watch_events, partition)
                owned = tp in self._producers and tp in consumer.assignment()
                if self._pending.get(partition) or not owned:
                    continue
                moved = consumer.committable({tp: offset})[tp]
                if moved > offset and await self._commit_until_done(tp, {}, {tp: moved}) is not None:
                    self._committed_at[partition] = moved

    async def _commit_quiet(self) -> None:
        """Commit past the markers of partitions that gave this member no record at all.

        A previous owner that stopped (or was killed) before it saw the marker after its last
        transaction left the group's offset one short of it; with no record here to route, the
        routed-record path above never moves it, and the group would show a lag of 1 for good.
        """
        consumer = self._consumer
        if consumer is None:
            return
        for tp, position in consumer.quiet_positions().items():
            partition = tp.partition
            if tp.topic != self._topics.watch_events or partition in self._committed_at:
                continue
            if self._pending.get(partition) or tp not in self._producers:
                continue
            read_to = self._quiet_at.get(partition)
            if read_to is None:
                try:
                    read_to = self._quiet_at[partition] = await consumer.committed(tp) or 0
                except LogError as exc:
                    logger.debug("reading the committed offset of %s failed (next round): %s", tp, exc)
                    continue
            if position <= read_to:
                continue
            async with self._publishing:
                if await self._commit_until_done(tp, {}, {tp: position}) is not None:
                    self._quiet_at[partition] = position

    async def _know_target(self, record: Record) -> None:
        """Catch the configuration up once per unknown target before routing its first event."""
        raw = record.header("target")
        if self.refresh_config is None or raw is None:
            return
        target = raw.decode("utf-8", "replace")
        if target in self._destinations or target in self._refreshed_for:
            return
        self._refreshed_for.add(target)
        await self.refresh_config()

    async def _hold(self, record: Record) -> None:
        """Take a slot and room for `record`'s bytes, waiting while the held records fill either
        (a record larger than the bound is taken once nothing else is held)."""
        await self._slots.acquire()
        size = len(record.value or b"")
        while self._held_bytes and self._held_bytes + size > MAX_HELD_BYTES:
            self._progress.set()  # the emitter frees room: it must see what was admitted so far
            self._room.clear()
            await self._room.wait()
        self._held_bytes += size

    def _let_go(self, record: Record) -> None:
        """Give back what `_hold` took for `record`."""
        self._slots.release()
        self._held_bytes -= len(record.value or b"")
        self._room.set()

    def _admit(self, record: Record) -> _Pending:
        try:
            watch = decode_watch_event(record)
        except DecodeError as exc:
            metrics.DECODE_ERRORS.inc()
            logger.error(
                "undecodable watch event %s[%d]@%d parked on %s: %s",
                record.topic,
                record.partition,
                record.offset,
                self._topics.dead_letter,
                exc,
            )
            return _Pending(None, None, record, error=exc)
        metrics.RECORDS.labels(watch.kind.rsplit(".", 1)[-1]).inc()
        pending = _Pending(watch, None, record)
        destination = self._destinations.get(watch.stream.target)
        if self._lookup is None or destination is None:
            return pending
        need = needs(watch, destination.attribution)
        if need is Needs.CONFIGURED:
            # Nothing to wait for: without a future the work names the committer (NOT_ATTEMPTED).
            metrics.NOT_ATTEMPTED.labels(watch.stream.target).inc()
        elif need is Needs.AUTHOR:
            pending.author = asyncio.ensure_future(self._lookup.author_for(watch))
            pending.author.add_done_callback(lambda _f: self._progress.set())
        elif need is Needs.CATCH_UP:
            pending.caught_up = asyncio.ensure_future(self._lookup.catch_up(watch))
            pending.caught_up.add_done_callback(lambda _f: self._progress.set())
        elif need is Needs.REMOVALS:
            pending.removals = asyncio.ensure_future(self._lookup.removals_for(watch))
            pending.removals.add_done_callback(lambda _f: self._progress.set())
        return pending

    def _forget(self, revoked: set[TopicPartition]) -> None:
        """Drop unemitted work of partitions this member lost; the new owner re-reads them."""
        self._resets += 1
        for tp in revoked:
            self._reset_at[tp.partition] = self._resets
            self._committed_at.pop(tp.partition, None)
            self._quiet_at.pop(tp.partition, None)
            for pending in self._pending.pop(tp.partition, deque()):
                pending.cancel()
                self._let_go(pending.source)
                metrics.IN_FLIGHT.dec()

    async def _release(self, revoked: set[TopicPartition]) -> None:
        """Hand partitions over: finish the transaction in flight, drop their pending work."""
        async with self._publishing:
            self._forget(revoked)
            await self._close_producers(revoked)

    async def _take_over(self, assigned: set[TopicPartition]) -> None:
        """Restart every assigned partition at its committed offset, behind its own producer."""
        async with self._publishing:
            # (all at once: the consumer may fetch any of them while the first is taken over)
            self._taking_over.update(tp.partition for tp in assigned)
            for tp in sorted(assigned):
                await self._restart_at_committed(tp)

    async def _restart_at_committed(self, tp: TopicPartition) -> bool:
        """Drop what was read of `tp`, start its producer (fencing its previous owner), seek to the commit.

        Starting the producer waits until the previous owner's last transaction is committed or
        aborted; only then is the committed offset final, so it is read here rather than trusted
        from the group join, which may have raced with that transaction. Returns False (logged)
        when the log did not answer: the partition then has no producer, and its next publish
        tries again, so nothing is committed for it before this succeeded. Until it is done the
        partition's fetched records are dropped (`_taking_over`) and read again after the seek: an
        event attributed while the versions before it are still being read back gets no range.
        """
        assert self._consumer is not None
        self._forget({tp})
        self._taking_over.add(tp.partition)
        try:
            if tp not in self._producers:
                producer = self._log.transactional_producer(transactional_id(self._group_id, tp))
                await producer.start()
                self._producers[tp] = producer
            committed = await self._consumer.committed(tp)
            if committed is None:
                # nothing committed yet: the group's reset policy (earliest), stated explicitly,
                # because the consumer may already have read past it while this ran
                committed = (await self._log.beginning_offsets([tp]))[tp]
            if self._lookup is not None:
                self._lookup.resume_versions(tp.partition, committed)
                await self._read_back_versions(tp, committed)
            await self._consumer.seek(tp, committed)
            self._forget({tp})
            logger.info("router resumes %s at its committed offset %d", tp, committed)
        except LogError as exc:
            await self._close_producers({tp})
            logger.warning("taking %s over failed (%s); trying again with its next records", tp, exc)
            return False
        finally:
            self._taking_over.discard(tp.partition)
        return True

    async def _read_back_versions(self, tp: TopicPartition, committed: int) -> None:
        """Feed the lookup the last `VERSION_READ_BACK_RECORDS` records before `committed`, so an
        object's first event after the partition moved here still knows the version before it."""
        assert self._lookup is not None
        start = (await self._log.beginning_offsets([tp]))[tp]
        extent = Extent({tp: max(start, committed - VERSION_READ_BACK_RECORDS)}, {tp: committed})
        read = 0
        async for chunk in read_to_end(self._log, extent):  # (to its end: the reader closes)
            for record in chunk.records:
                read += 1
                try:
                    watch = decode_watch_event(record)
                except DecodeError:
                    continue  # parked on the dead-letter topic when it was first read
                self._lookup.note_version(watch)
        logger.info("router read %d record(s) of %s back for the versions before %d", read, tp, committed)

    async def _close_producers(self, tps: set[TopicPartition]) -> None:
        for tp in tps:
            producer = self._producers.pop(tp, None)
            if producer is not None:
                try:
                    await producer.close()
                except LogError as exc:
                    logger.warning("closing the transactional producer of %s failed: %s", tp, exc)

    # emitting --------------------------------------------------------------------------------
    async def _emit(self) -> None:
        while not self._stopping:
            await self._progress.wait()
            self._progress.clear()
            popped_at = self._resets
            ready = self._ready_prefixes()
            if ready:
                await self._publish(ready, popped_at)

    def _ready_prefixes(self) -> dict[int, list[_Pending]]:
        ready: dict[int, list[_Pending]] = {}
        for partition, queue in self._pending.items():
            while queue and queue[0].resolved():
                ready.setdefault(partition, []).append(queue.popleft())
        return ready

    async def _publish(self, ready: dict[int, list[_Pending]], popped_at: int) -> None:
        async with self._publishing:
            await asyncio.gather(
                *(self._publish_partition(p, items, popped_at) for p, items in ready.items())
            )

    async def _publish_partition(self, partition: int, items: list[_Pending], popped_at: int) -> None:
        """Commit one partition's ready prefix: its work, dead letters and next offset, atomically.

        Items of a partition reset since they were taken from its queue (a rebalance or a fence
        while they waited for the lock) are dropped: the partition is re-read from its commit.
        """
        tp = TopicPartition(self._topics.watch_events, partition)
        if self._dropped_after_reset(tp, items, popped_at):
            return
        records: list[PendingRecord] = []
        dead: list[PendingRecord] = []
        # (index in records, the unresolved item, its query): watched for a late fact once committed
        unresolved: list[tuple[int, WorkItem, FactQuery]] = []
        for pending in items:
            if pending.error is not None:
                dead.append(letter_record(pending.source, self.name, pending.error, _now_ms()))
                continue
            work, late = self._work_for(pending)
            unresolved.extend((len(records) + i, work[i], query) for i, query in late)
            records.extend(work_record(item) for item in work)
            if self._slicer.due():
                await self._slicer.pause()
        # a pause above let a reset in: its items are re-read from the commit, as at the top
        if self._dropped_after_reset(tp, items, popped_at):
            return
        assert self._consumer is not None
        offsets = self._consumer.committable({tp: items[-1].source.offset + 1})
        committed = await self._commit_until_done(
            tp, {self._topics.dead_letter: dead, self._topics.branch_work: records}, offsets
        )
        if committed is not None:
            if self._late is not None:
                # results follow the order of the appends: the dead letters first, then the work
                for index, item, query in unresolved:
                    self._late.watch(item, query, committed[len(dead) + index])
            now_ms = time.time() * 1000
            for pending in items:
                if pending.watch is not None and pending.watch.is_live and pending.watch.observed_at_ms:
                    metrics.EMIT_DELAY.observe(max(now_ms - pending.watch.observed_at_ms, 0.0) / 1000)
            metrics.DEAD_LETTERED.inc(len(dead))
            self.stats.emitted += len(items)
            self.stats.work_items += len(records)
            self.stats.committed.update(offsets)
            self._committed_at[partition] = offsets[tp]
        for pending in items:
            self._let_go(pending.source)
        metrics.IN_FLIGHT.dec(len(items))

    def _work_for(self, pending: _Pending) -> tuple[list[WorkItem], list[tuple[int, FactQuery]]]:
        """The record's work items, and which of them (by index) are unresolved and await a late fact."""
        watch = pending.watch
        assert watch is not None
        destination = self._destinations.get(watch.stream.target)
        if destination is None:
            metrics.DROPPED.labels(metrics.DropReason.UNKNOWN_TARGET).inc()
            self.stats.dropped += 1
            return [], []
        author: WorkAuthor | None = None
        if pending.author is not None:
            if pending.author.cancelled():
                return [], []
            author = pending.author.result()
        caught_up: list[CaughtUp] = []
        if pending.caught_up is not None:
            if pending.caught_up.cancelled():
                return [], []
            caught_up = pending.caught_up.result()
        removals: list[Removal] | None = None
        if pending.removals is not None:
            if pending.removals.cancelled():
                return [], []
            removals = pending.removals.result()
        items = work_items(watch, destination, author, caught_up, removals)
        metrics.WORK_ITEMS.labels(destination.provider, destination.branch).inc(len(items))
        return items, late_candidates(watch, author, caught_up)

    def _dropped_after_reset(self, tp: TopicPartition, items: list[_Pending], popped_at: int) -> bool:
        """Whether `tp` was reset since `items` were taken from its queue; if so they are dropped."""
        if self._reset_at.get(tp.partition, 0) <= popped_at:
            return False
        logger.debug("dropping %d records of %s read before it was reset", len(items), tp)
        for pending in items:
            self._let_go(pending.source)
        metrics.IN_FLIGHT.dec(len(items))
        return True

    async def _commit_until_done(
        self,
        tp: TopicPartition,
        appends: dict[str, list[PendingRecord]],
        offsets: dict[TopicPartition, int],
    ) -> list[AppendResult] | None:
        """Retry with backoff until committed: dropping work would lose a commit.

        Returns where each record landed (in the order of `appends`), or None when the partition's
        producer was fenced or is gone (the partition moved to another router, or the outcome of a
        transaction is unknown): the work is dropped here, and whoever owns the partition re-reads
        it from the committed offset.
        """
        backoff = log_retry()
        while True:
            producer = self._producers.get(tp)
            if producer is None:
                await self._restart_if_assigned(tp)
                return None
            try:
                return await producer.commit(appends, GroupOffsets(self._group_id, offsets))
            except FencedError as exc:
                metrics.FENCED.inc()
                logger.warning(
                    "router transaction of %s refused (%s); its work is re-read by its owner", tp, exc
                )
                await self._close_producers({tp})
                await self._restart_if_assigned(tp)
                return None
            except LogError as exc:
                metrics.APPEND_ERRORS.inc()
                delay = backoff.next_delay_s()
                logger.warning("committing the work of %s failed (%s); retry in %.1fs", tp, exc, delay)
                await asyncio.sleep(delay)

    async def _restart_if_assigned(self, tp: TopicPartition) -> None:
        """After a fence or a failed take-over: drop `tp`'s work and, if it is still ours, restart it.

        If another member owns it now, it is only dropped. If this member still holds it (a
        producer that was fenced by a zombie, or whose transaction outcome is unknown), starting a
        new producer fences the other one once; the group's next rebalance settles who keeps it.
        Either way the work is re-read from the committed offset, so nothing is routed twice.
        """
        assert self._consumer is not None
        if tp in self._consumer.assignment():
            await self._restart_at_committed(tp)
        else:
            self._forget({tp})
