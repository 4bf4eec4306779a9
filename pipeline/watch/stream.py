"""One watch stream: a (target, group/resource, namespace scope) mirrored onto the log.

The session order is what lets the commit worker trust the log: a snapshot (begin marker, chunks,
end marker) before any live event of its scope, live events in server order, and a cursor that
only ever names a resourceVersion whose events the log has acknowledged. A restarted stream
resumes from that cursor and snapshots again only when the server says the cursor is too old.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from pipeline.backoff import Backoff, Sleep
from pipeline.codec.watch_cursor import Cursor
from pipeline.config import CLUSTER_DEFAULTS, ClusterSettings, Settings
from pipeline.content import fastjson
from pipeline.content.sanitize import (
    content_hash,
    is_terminating,
    metadata_terminating,
    sanitize,
    sanitized_json,
)
from pipeline.content.watchline import decode_watch_line
from pipeline.kube.client import KubeClient, KubeError, WatchConnection, collection_path
from pipeline.log.api import FencedError, LogError, PendingRecord
from pipeline.sealing import Sealer, SealingError
from pipeline.slices import Slicer
from pipeline.watch import metrics
from pipeline.watch.assembly import SnapshotAssembly, next_epoch
from pipeline.watch.cursors import CursorStore
from pipeline.watch.digests import DigestTable, short_digest
from pipeline.watch.metrics import DropReason, StreamState
from pipeline.watch.records import RecordBuilder, snapshot_object
from pipeline.watch.resolve import StreamSpec
from pipeline.watch.writer import Appender

__all__ = ["ClusterCapabilities", "StreamOptions", "WatchStream"]

logger = logging.getLogger(__name__)

INITIAL_EVENTS_END = "k8s.io/initial-events-end"
_APPEND_GROUP = 500


@dataclass(slots=True)
class ClusterCapabilities:
    """What one API server turned out to support; shared by the streams of that cluster."""

    watchlist: bool = True


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """Tuning shared by every stream; the clock, sleep and random source are injectable for tests."""

    max_record_bytes: int
    backoff_initial_s: float = CLUSTER_DEFAULTS.watch_backoff_initial_s
    backoff_max_s: float = CLUSTER_DEFAULTS.watch_backoff_max_s
    healthy_after_s: float = CLUSTER_DEFAULTS.watch_backoff_max_s
    watch_timeout_s: int = CLUSTER_DEFAULTS.watch_timeout_s
    # parts of network reads waiting for the writer, each at most `BATCH_LINES` (100) events:
    # with the writer's batch, memory holds about as many as the 1,024 single events before
    queue_reads: int = 8
    batch_max: int = 500
    list_page_size: int = CLUSTER_DEFAULTS.watch_list_page_size
    slice_ms: float = CLUSTER_DEFAULTS.watch_slice_ms
    clock: Callable[[], float] = time.time
    sleep: Sleep = asyncio.sleep
    rng: random.Random = field(default_factory=random.Random)

    @classmethod
    def of(cls, settings: Settings, cluster: ClusterSettings) -> StreamOptions:
        """The tuning a cluster's settings ask for: the one reading of them, for every watcher."""
        return cls(
            max_record_bytes=settings.log.topics.max_message_bytes,
            backoff_initial_s=cluster.watch_backoff_initial_s,
            backoff_max_s=cluster.watch_backoff_max_s,
            healthy_after_s=cluster.watch_backoff_max_s,
            watch_timeout_s=cluster.watch_timeout_s,
            list_page_size=cluster.watch_list_page_size,
            slice_ms=cluster.watch_slice_ms,
        )


class StreamStopped(Exception):
    """The stream's source is gone for good (its namespace was deleted)."""


class _End:
    """The server ended the watch response cleanly."""


_END = _End()
_QueueItem = list[dict[str, Any]] | BaseException | _End


def _count_undecodable() -> None:
    """The client skips an undecodable watch event; the stage counts it among its dropped events."""
    metrics.DROPPED.labels(DropReason.UNDECODABLE).inc()


class _WriteBehind:
    """At most one batch's append in flight, awaited before the next is started or the stream
    blocks: appends and cursors stay in order, and a failure surfaces at the next batch."""

    __slots__ = ("_task",)

    def __init__(self) -> None:
        self._task: asyncio.Task[None] | None = None

    def start(self, write: Coroutine[Any, Any, None]) -> None:
        assert self._task is None, "settle the write in flight first"
        self._task = asyncio.ensure_future(write)

    async def next(self, queue: asyncio.Queue[_QueueItem]) -> _QueueItem:
        """The next queued item. A write in flight that ends first is seen through meanwhile, so a
        failure (a fenced producer, a lost partition leader) ends the session without waiting for
        another event, and an idle stream's cursor moves at once."""
        if self._task is None or not queue.empty():
            return await queue.get()
        getter = asyncio.ensure_future(queue.get())
        try:
            await asyncio.wait((getter, self._task), return_when=asyncio.FIRST_COMPLETED)
            if not getter.done():
                await self.settle()
                return await getter
        finally:
            if not getter.done():
                getter.cancel()
        return getter.result()

    async def settle(self) -> None:
        """Wait for the write in flight; its failure is raised here."""
        task, self._task = self._task, None
        if task is not None:
            await task

    async def cancel(self) -> None:
        """The stream ends: a write still in flight is cancelled (its batch is written again by the
        next session, from the cursor, like any unacknowledged batch)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()  # a no-op once it is done
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _count_types(events: list[dict[str, Any]]) -> None:
    """Count a part's events by type: one counter update per type, not per event (counted as
    received, so events after an `ERROR` in the same part are counted though not handled)."""
    for event_type, count in collections.Counter([event.get("type") for event in events]).items():
        metrics.event_counter(str(event_type or "unknown")).inc(count)


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _rv_floor(rv: str) -> int | None:
    """RVs are opaque, but etcd's are integers; the LIST floor is applied only when both parse."""
    try:
        return int(rv)
    except ValueError:
        return None


def _removes(event_type: str, obj: dict[str, Any]) -> bool:
    """Whether an event removes its object from Git (DELETED, or a deletionTimestamp).

    The LIST floor must not swallow these: the snapshot shows a removal only as an absence, which
    under the default `OnEvent` deletes only files the pipeline wrote, with the author the router's
    deletion evidence names; the event itself carries the deletion at intent time. Written after
    the snapshot, an old one is harmless: the commit worker's version ledger skips it when the
    listed object (recreated under the same name) is newer, or the absence already deleted it.
    """
    return event_type == "DELETED" or is_terminating(obj)


class WatchStream:
    """Runs the session loop of one stream until stopped or until its namespace is gone."""

    def __init__(
        self,
        spec: StreamSpec,
        client: KubeClient,
        log_: Appender,
        topic: str,
        cursors: CursorStore,
        options: StreamOptions,
        capabilities: ClusterCapabilities,
        *,
        fresh: bool = False,
        sealer: Sealer | None = None,
        on_fenced: Callable[[], None] | None = None,
        payload: Callable[[dict[str, Any]], bytes] | None = None,
    ) -> None:
        """`log_` is where records go: the log, or the cluster leader's `FencedWriter`, whose
        `FencedError` ends the stream for good and calls `on_fenced` (the leader steps down).

        `payload` replaces the sanitized object as what is written (the configuration controller
        needs `metadata.generation`); unchanged-event detection still compares sanitized content.
        """
        self.spec = spec
        self._payload_of = payload
        self._on_fenced = on_fenced
        self._sealer = sealer
        # the payload is the canonical JSON itself: no coroutine to await per event
        self._plain = sealer is None and payload is None
        # what the stream reads of a line, unless `payload` is handed the whole object
        self._decode = fastjson.loads if payload is not None else decode_watch_line
        self._client = client
        self._log = log_
        self._topic = topic
        self._cursors = cursors
        self._options = options
        self._capabilities = capabilities
        self._builder = RecordBuilder(spec, options.max_record_bytes, self._now_ms)
        self._slicer = Slicer(options.slice_ms)
        self._path = collection_path(spec.api(), spec.stream.scope)
        # Content digests (`short_digest`) by uid of what the log acknowledged, and of what this
        # session handled but has not yet seen acknowledged (None: deleted). A failed append ends
        # the session and the resume delivers the same events again: were they compared with what
        # was only handled, they would be dropped as unchanged and never reach the log.
        self._hashes = DigestTable()
        self._staged: dict[str, int | None] = {}
        # the staged digests of the live batch whose append is in flight (`_WriteBehind`)
        self._flying: dict[str, int | None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._snapshot: SnapshotAssembly | None = None
        self._completing: SnapshotAssembly | None = None
        self._last_epoch = 0
        self._namespace_seen = False
        self._force_snapshot = fresh
        # this process marked the stream's baseline and has not begun its first snapshot yet
        self._own_baseline = False
        self.resource_version = ""
        self._floor: int | None = None
        self.state = StreamState.REPLAYING
        self.reason = "InitialReplay"
        self.message = ""
        self.sessions = 0
        self.snapshots_begun = 0
        self.snapshots_completed = 0

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"watch {self.spec.describe()}")

    async def stop(self) -> None:
        """Cancel the stream and wait until its connection is closed."""
        await self._cancel()
        if self.state != StreamState.STOPPED:
            self._set_state(StreamState.STOPPED, "Removed")

    async def resnapshot(self) -> None:
        """Restart with a fresh snapshot instead of a cursor resume (prune mode widened to Always)."""
        if self.state == StreamState.STOPPED:
            return
        await self._cancel()
        self._abandon_snapshot()
        self._force_snapshot = True
        self.start()

    async def _cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    @property
    def labels(self) -> tuple[str, str, str]:
        return (self.spec.stream.target, self.spec.group_resource.key, self.spec.stream.scope)

    @property
    def cursor_updated_at_ms(self) -> int | None:
        cursor = self._cursors.get(self.spec.cursor_key)
        return cursor.updated_at_ms if cursor is not None else None

    def _now_ms(self) -> int:
        return int(self._options.clock() * 1000)

    def _set_state(self, state: StreamState, reason: str, message: str = "") -> None:
        self.state, self.reason, self.message = state, reason, message

    # -- session loop ---------------------------------------------------------------------
    async def _run(self) -> None:
        options = self._options
        backoff = Backoff(
            options.backoff_initial_s, options.backoff_max_s, sleep=options.sleep, rng=options.rng
        )
        while True:
            if self.sessions:
                metrics.RECONNECTS.inc()
            self.sessions += 1
            started = options.clock()
            try:
                await self._check_namespace()
                await self._session()
                self.message = "the server ended the watch"
            except StreamStopped as exc:
                self._set_state(StreamState.STOPPED, "NamespaceGone", str(exc))
                logger.warning("watch %s stopped for good: %s", self.spec.describe(), exc)
                return
            except FencedError as exc:
                self._set_state(StreamState.STOPPED, "Fenced", str(exc))
                logger.warning(
                    "watch %s stopped: a newer leader took the cluster over (%s)", self.spec.describe(), exc
                )
                if self._on_fenced is not None:
                    self._on_fenced()
                return
            except (KubeError, LogError, SealingError, aiohttp.ClientError, OSError, TimeoutError) as exc:
                self.message = str(exc) or type(exc).__name__
                logger.warning("watch %s failed: %s", self.spec.describe(), self.message)
            except Exception as exc:
                # Unexpected input must not end the stream for good: log it, back off, retry.
                self.message = f"unexpected {type(exc).__name__}: {exc}"
                logger.exception("watch %s failed unexpectedly", self.spec.describe())
            self._abandon_snapshot()
            if options.clock() - started >= options.healthy_after_s:
                backoff.reset()
            self._set_state(StreamState.BACKOFF, "WatchError", self.message)
            await backoff.wait()

    async def _check_namespace(self) -> None:
        if not (self.spec.namespaced and self.spec.stream.scope):
            return
        try:
            phase = await self._client.namespace_phase(self.spec.stream.scope)
        except KubeError as exc:
            if exc.status == 403:
                return  # not allowed to read namespaces: the watch itself will tell
            raise
        if phase is not None:
            self._namespace_seen = True
            return
        if self._namespace_seen:
            raise StreamStopped(f"namespace {self.spec.stream.scope} no longer exists")
        raise KubeError(404, "NamespaceNotFound", f"namespace {self.spec.stream.scope} does not exist (yet)")

    async def _session(self) -> None:
        cursor = self._cursors.get(self.spec.cursor_key)
        if cursor is not None and cursor.resource_version and not self._force_snapshot:
            self._set_state(StreamState.REPLAYING, "ResumeReplay")
            try:
                await self._resume(cursor.resource_version)
                return
            except KubeError as exc:
                if not exc.gone:
                    raise
                metrics.GONE.inc()
                logger.info(
                    "watch %s: cursor %s expired, taking a snapshot",
                    self.spec.describe(),
                    cursor.resource_version,
                )
                self._abandon_snapshot()
                self._set_state(StreamState.REPLAYING, "ExpiredResourceVersion")
        else:
            self._set_state(StreamState.REPLAYING, "InitialReplay")
        if self._capabilities.watchlist:
            try:
                await self._watchlist_session()
                return
            except KubeError as exc:
                if not exc.watchlist_rejected:
                    raise
                # nothing of a refused baseline is applied: the LIST that replaces it is the baseline
                refused = self._snapshot
                self._own_baseline = self._own_baseline or (refused is not None and not refused.since)
                logger.warning(
                    "cluster %s rejects streaming lists (%s); using LIST then WATCH",
                    self.spec.stream.cluster,
                    exc.message,
                )
                self._abandon_snapshot()
                self._capabilities.watchlist = False
        await self._list_session()

    def _query(self, **extra: str) -> list[tuple[str, str]]:
        query = [("allowWatchBookmarks", "true"), ("timeoutSeconds", str(self._options.watch_timeout_s))]
        if self.spec.label_selector:
            query.append(("labelSelector", self.spec.label_selector))
        query.extend(extra.items())
        return query

    async def _open(self, query: list[tuple[str, str]]) -> WatchConnection:
        return await self._client.watch(
            self._path, query, self._options.watch_timeout_s + 30.0, _count_undecodable, self._decode
        )

    async def _resume(self, resource_version: str) -> None:
        connection = await self._open(self._query(resourceVersion=resource_version))
        self.resource_version = resource_version
        self._floor = None
        self._set_state(StreamState.STREAMING, "CursorResume")
        await self._pump_and_consume(connection)

    async def _watchlist_session(self) -> None:
        if self._cursors.get(self.spec.cursor_key) is None:
            # the snapshot's own version comes only with its end: mark the collection's version now
            await self._mark_baseline(await self._client.collection_version(self._path))
        connection = await self._open(
            self._query(sendInitialEvents="true", resourceVersionMatch="NotOlderThan")
        )
        self._floor = None
        snapshot = self._begin_snapshot("watchlist")
        await self._pump_and_consume(connection, [self._builder.begin(snapshot.epoch)])

    async def _list_session(self) -> None:
        """Watch first (buffered), then LIST, write the snapshot, then release newer buffered events.

        The LIST is read a page at a time and each page's chunks are appended before the next page
        is asked for, so memory holds one page and one chunk whatever the collection's size.
        """
        connection = await self._open(self._query())
        async with self._pumped(connection) as queue:
            query = [("labelSelector", self.spec.label_selector)] if self.spec.label_selector else []
            snapshot: SnapshotAssembly | None = None
            list_rv = ""
            pages = self._client.list_pages(self._path, query, self._options.list_page_size)
            async for items, list_rv in pages:
                records: list[PendingRecord] = []
                if snapshot is None:
                    await self._mark_baseline(list_rv)
                    snapshot = self._begin_snapshot("list")
                    records.append(self._builder.begin(snapshot.epoch, list_rv))
                for item in items:
                    records.extend(await self._add_to_snapshot(item))
                    if self._slicer.due():
                        await self._slicer.pause()
                await self._write(records, "")
            records = self._end_snapshot(list_rv)
            self._floor = _rv_floor(list_rv)
            await self._write(records, list_rv)
            self._set_state(StreamState.STREAMING, "AllStreamsReady")
            await self._consume(queue)

    # -- reading --------------------------------------------------------------------------
    async def _pump(self, connection: WatchConnection, queue: asyncio.Queue[_QueueItem]) -> None:
        """Move the events of each part of a network read into the bounded queue; a full queue
        blocks the reader. One queue item per part, not per event: per event, the queue was a
        tenth of the watch path's CPU."""
        try:
            async for events in connection.batches():
                await queue.put(events)
                # a network read can hold hundreds of lines: parsing them is CPU too
                if self._slicer.due():
                    await self._slicer.pause()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await queue.put(exc)
            return
        await queue.put(_END)

    @contextlib.asynccontextmanager
    async def _pumped(self, connection: WatchConnection) -> AsyncIterator[asyncio.Queue[_QueueItem]]:
        """The connection's events in a bounded queue, filled by a task until the block ends."""
        queue: asyncio.Queue[_QueueItem] = asyncio.Queue(self._options.queue_reads)
        pump = asyncio.create_task(self._pump(connection, queue))
        try:
            yield queue
        finally:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump
            connection.close()

    async def _pump_and_consume(
        self, connection: WatchConnection, first: list[PendingRecord] | None = None
    ) -> None:
        async with self._pumped(connection) as queue:
            if first:
                await self._write(first, "")
            await self._consume(queue)

    async def _consume(self, queue: asyncio.Queue[_QueueItem]) -> None:
        """Handle the queued parts of reads together, until they hold `batch_max` events or the
        queue is empty: one append per batch, then the cursor. A batch of live events is written
        behind (`_WriteBehind`): the next is handled while the log acknowledges it."""
        behind = _WriteBehind()
        try:
            await self._consume_batches(queue, behind)
        finally:
            await behind.cancel()

    async def _consume_batches(self, queue: asyncio.Queue[_QueueItem], behind: _WriteBehind) -> None:
        slicer = self._slicer
        while True:
            batch = [await behind.next(queue)]
            size = len(batch[0]) if isinstance(batch[0], list) else 0
            while size < self._options.batch_max and not queue.empty():
                item = queue.get_nowait()
                batch.append(item)
                size += len(item) if isinstance(item, list) else 0
            records: list[PendingRecord] = []
            new_rv = ""
            # taken off the batch as it goes, so a read's decoded events are freed once handled:
            # held to the batch's end they outlived collections and a full one walked them all
            batch.reverse()
            while batch:
                item = batch.pop()
                if isinstance(item, _End):
                    await behind.settle()
                    await self._write(records, new_rv)
                    return
                if isinstance(item, BaseException):
                    await behind.settle()
                    await self._write(records, new_rv)
                    raise item
                _count_types(item)
                for event in item:
                    try:
                        rv = self._handle(event, records)
                        if not isinstance(rv, str):
                            rv = await rv
                    except KubeError:
                        await behind.settle()
                        await self._write(records, new_rv)
                        raise
                    if rv:
                        new_rv = rv
                    if slicer.due():
                        await slicer.pause()
            await behind.settle()
            if self._snapshot is not None or self._completing is not None or not records:
                # a snapshot's records and its end keep `_write`'s order of state changes
                await self._write(records, new_rv)
            else:
                staged, self._staged = self._staged, {}
                self._flying = staged
                behind.start(self._write_live(records, staged, new_rv))

    def _handle(self, event: dict[str, Any], records: list[PendingRecord]) -> str | Coroutine[Any, Any, str]:
        """Turn one event into records (appended to `records`); returns the RV the cursor may take,
        or a coroutine that does once awaited, for what waits (a WatchList snapshot's object, a
        sealed or custom payload). A plain stream's live event awaits nothing, so it is handled
        without a coroutine (creating and running one cost about 0.3 CPU-µs per event)."""
        event_type = str(event.get("type") or "")
        obj: dict[str, Any] = event["object"]
        meta = _meta(obj)
        rv = str(meta.get("resourceVersion") or "")
        if event_type == "ERROR":
            raise KubeError(
                int(obj.get("code") or 0), str(obj.get("reason") or ""), str(obj.get("message") or "")
            )
        if event_type == "BOOKMARK":
            if self._snapshot is None:
                return rv
            annotations = meta.get("annotations") or {}
            if annotations.get(INITIAL_EVENTS_END) != "true":
                self._ignored_watchlist()
            records.extend(self._end_snapshot(rv))
            return rv
        if event_type not in ("ADDED", "MODIFIED", "DELETED"):
            metrics.DROPPED.labels(DropReason.UNKNOWN_TYPE).inc()
            return ""
        if self._snapshot is not None:
            if event_type != "ADDED":
                self._ignored_watchlist()
            return self._snapshot_event(obj, records)
        if self._floor is not None and not _removes(event_type, obj):
            event_rv = _rv_floor(rv)
            if event_rv is not None and event_rv <= self._floor:
                metrics.DROPPED.labels(DropReason.COVERED_BY_LIST).inc()
                return ""
        deleting = metadata_terminating(meta)
        clean = sanitize(obj)
        canonical = sanitized_json(clean, held=False)  # hashed, and copied into the record
        if self._unchanged(event_type, meta, canonical, deleting):
            return rv
        if not self._plain:
            return self._append_payload(event_type, obj, clean, canonical, records)
        self._append_live(event_type, meta, deleting, canonical, records)
        return rv

    async def _snapshot_event(self, obj: dict[str, Any], records: list[PendingRecord]) -> str:
        """`_handle` of a WatchList snapshot's object."""
        records.extend(await self._add_to_snapshot(obj))
        return ""

    async def _append_payload(
        self,
        event_type: str,
        obj: dict[str, Any],
        clean: dict[str, Any],
        canonical: bytes,
        records: list[PendingRecord],
    ) -> str:
        """The end of `_handle` for a live event whose payload is sealed or custom (awaited)."""
        meta = _meta(obj)
        payload = await self._payload(obj, clean, canonical)
        self._append_live(event_type, meta, metadata_terminating(meta), payload, records)
        return str(meta.get("resourceVersion") or "")

    def _ignored_watchlist(self) -> None:
        """Initial events are only ADDEDs closed by the end bookmark; anything else means the
        server ignored `sendInitialEvents` (it predates WatchList), so fall back to LIST."""
        raise KubeError(0, "WatchListIgnored", "the server ignored sendInitialEvents")

    async def _payload(self, obj: dict[str, Any], clean: dict[str, Any], canonical: bytes) -> bytes:
        """What goes on the log for `obj` (sanitized as `clean`, serialised as `canonical`): the
        canonical JSON, or the SOPS document for a sensitive stream.

        The canonical JSON of a sensitive object stays in this process (only its digest is kept).
        """
        if self._payload_of is not None:
            return self._payload_of(obj)
        if self._sealer is None:
            return canonical
        return await self._sealer.seal(clean, canonical, self.spec.group_resource)

    def _unchanged(self, event_type: str, meta: dict[str, Any], canonical: bytes, deleting: bool) -> bool:
        """Stage the event's content digest; True (counted) when it equals what the log holds."""
        uid = str(meta.get("uid") or "")
        if event_type == "DELETED":
            self._staged[uid] = None
            return False
        digest = short_digest(content_hash(canonical, deleting))
        if self._written_hash(uid) == digest:
            metrics.DROPPED.labels(DropReason.UNCHANGED).inc()
            return True
        self._staged[uid] = digest
        return False

    def _append_live(
        self,
        event_type: str,
        meta: dict[str, Any],
        deleting: bool,
        payload: bytes,
        records: list[PendingRecord],
    ) -> None:
        """Append the live event's record to `records`, unless it is over the topic's limit."""
        record = self._builder.live(event_type, meta, deleting, payload)
        if not self._builder.fits(record):
            metrics.DROPPED.labels(DropReason.TOO_LARGE).inc()
            logger.error(
                "watch %s: %s/%s is larger than the topic's message limit; not written",
                self.spec.describe(),
                meta.get("namespace", ""),
                meta.get("name", ""),
            )
            return
        records.append(record)

    # -- snapshots ------------------------------------------------------------------------
    async def _mark_baseline(self, version: str) -> None:
        """Record where mirroring of this stream begins (`version`), before its first snapshot;
        a stream with a cursor already has its mark.

        Until that snapshot completes the stream has no cursor to resume from. A replica that
        takes the stream over meanwhile (a shard handover, a crash) snapshots it again; without
        this mark, every change made in between would land in a committer-authored baseline.
        """
        if not version or self._cursors.get(self.spec.cursor_key) is not None:
            return
        await self._write_cursor("", self._last_epoch, baseline_version=version)
        self._own_baseline = True

    def _begin_snapshot(self, mode: str) -> SnapshotAssembly:
        """A new epoch, newer than any this stream (or an earlier process) has used.

        The snapshot's `since` is the cursor it replaces; for a first snapshot that another
        attempt began (another replica, or this one before a failure), the version that attempt
        began at, so the router attributes what changed after it. The attempt that marked the
        baseline itself is the baseline.
        """
        cursor = self._cursors.get(self.spec.cursor_key)
        epoch = next_epoch(cursor.epoch if cursor is not None else None, self._last_epoch, self._now_ms())
        self._last_epoch = epoch
        since = ""
        if cursor is not None:
            since = cursor.resource_version or ("" if self._own_baseline else cursor.baseline_version)
        self._own_baseline = False
        self._snapshot = SnapshotAssembly(epoch, mode, since, self._builder)
        self._hashes.clear()
        self._staged = {}
        self.snapshots_begun += 1
        return self._snapshot

    async def _add_to_snapshot(self, obj: dict[str, Any]) -> list[PendingRecord]:
        snapshot = self._snapshot
        assert snapshot is not None
        if is_terminating(obj):
            metrics.DROPPED.labels(DropReason.TERMINATING_IN_SNAPSHOT).inc()
            return []
        meta = _meta(obj)
        clean = sanitize(obj)
        canonical = sanitized_json(clean)
        payload = canonical if self._plain else await self._payload(obj, clean, canonical)
        uid = str(meta.get("uid") or "")
        item = snapshot_object(meta, payload)
        if not snapshot.fits(item):
            metrics.DROPPED.labels(DropReason.TOO_LARGE).inc()
            logger.error(
                "watch %s: %s/%s is larger than the topic's message limit; left out of the snapshot",
                self.spec.describe(),
                item.namespace,
                item.name,
            )
            return []
        self._staged[uid] = short_digest(content_hash(canonical, False))
        return snapshot.add(item)

    def _end_snapshot(self, resource_version: str) -> list[PendingRecord]:
        snapshot = self._snapshot
        assert snapshot is not None
        records = snapshot.end(resource_version)
        self._snapshot = None
        self._completing = snapshot
        return records

    def _abandon_snapshot(self) -> None:
        """A session ended before its snapshot's end marker was acknowledged; a newer epoch will follow.

        What it handled but did not see acknowledged is forgotten. An unfinished snapshot's digests
        go too, though its chunks reached the log: nothing downstream applies a snapshot without
        its end, so a resume from the older cursor must write those versions again.
        """
        self._staged.clear()
        self._flying = None
        for snapshot in (self._snapshot, self._completing):
            if snapshot is not None:
                metrics.SNAPSHOTS.labels(snapshot.mode, "abandoned").inc()
                self._hashes.clear()
        self._snapshot = self._completing = None

    def _written_hash(self, uid: str) -> int | None:
        """The digest of `uid`'s newest version on the log, or handled in this batch before it."""
        if uid in self._staged:
            return self._staged[uid]
        flying = self._flying
        if flying is not None and uid in flying:
            return flying[uid]
        return self._hashes.get(uid)

    def _acknowledged(self, staged: dict[str, int | None]) -> None:
        """A batch's appends are acknowledged: its digests (`staged`) now describe the log."""
        for uid, digest in staged.items():
            if digest is None:
                self._hashes.discard(uid)
            else:
                self._hashes.put(uid, digest)
        staged.clear()

    # -- writing --------------------------------------------------------------------------
    async def _append(self, records: list[PendingRecord]) -> None:
        """Append `records` in groups and wait for every acknowledgement."""
        for start in range(0, len(records), _APPEND_GROUP):
            group = records[start : start + _APPEND_GROUP]
            await self._log.append_many(self._topic, group)
            metrics.RECORDS.inc(len(group))

    async def _write(self, records: list[PendingRecord], resource_version: str) -> None:
        """Append, wait for the acknowledgements, then advance the cursor."""
        await self._append(records)
        self._acknowledged(self._staged)
        completed, self._completing = self._completing, None
        if completed is not None:
            metrics.SNAPSHOTS.labels(completed.mode, "completed").inc()
            self.snapshots_completed += 1
            self._force_snapshot = False
            self._set_state(StreamState.STREAMING, "AllStreamsReady")
            await self._advance(resource_version, completed.epoch)
        elif self._snapshot is None:
            await self._advance(resource_version, None)

    async def _write_live(
        self, records: list[PendingRecord], staged: dict[str, int | None], resource_version: str
    ) -> None:
        """`_write` of a batch of live events handled before the current one (`staged`: its
        digests, consulted until the log acknowledged it)."""
        await self._append(records)
        self._acknowledged(staged)
        if self._flying is staged:
            self._flying = None
        await self._advance(resource_version, None)

    async def _advance(self, resource_version: str, epoch: int | None) -> None:
        if not resource_version:
            return
        previous = self._cursors.get(self.spec.cursor_key)
        if epoch is None:
            epoch = previous.epoch if previous is not None else 0
        if previous is not None and previous.resource_version == resource_version and previous.epoch == epoch:
            self.resource_version = resource_version
            return
        await self._write_cursor(resource_version, epoch)
        self.resource_version = resource_version

    async def _write_cursor(self, resource_version: str, epoch: int, baseline_version: str = "") -> None:
        """Write this stream's cursor through the stream's appender (the shard's fencing producer)."""
        spec = self.spec
        now_ms = self._now_ms()
        cursor = Cursor(spec.cursor_key, spec.stream, resource_version, epoch, now_ms, baseline_version)
        await self._cursors.write(cursor, self._log)
