"""The fact follower: every process reads every partition of `<prefix>.audit-facts` into its index.

Manual assignment, no consumer group: facts are fanned out to every replica, not shared out. On
start it seeks each partition to the first record younger than the TTL (`offsets_for_times`), so a
restart rebuilds exactly the facts that are still alive, and it is ready once it has read up to
the end offsets it saw at start. It never gives up: a failed round is counted and retried after a
second, an undecodable record is counted, logged with its position and skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Final

from pipeline.attribution import metrics
from pipeline.attribution.index import FactIndex
from pipeline.backoff import LOG_RETRY_MAX_S, Backoff
from pipeline.codec import FACT_BATCH, DecodeError, codec
from pipeline.codec.fact_batch import DecodedBatch, decode_fact_batch
from pipeline.config import Settings
from pipeline.log.api import Fetched, Log, Reader, Record, TopicPartition
from pipeline.log.topics import TopicNames
from pipeline.models import Readiness

__all__ = ["FactFollower"]

logger = logging.getLogger(__name__)

FETCH_TIMEOUT_MS: Final = 1000
#: Records per fetch. Turning one fetch into records is a synchronous step of ~5-8 µs per record on
#: either backend (~10-16 ms here); smaller fetches cost the Kafka client round trips (measured).
FETCH_MAX_RECORDS: Final = 2000
#: The longest the follower holds the event loop while applying records before it yields, so the
#: ops endpoints and the audit webhook on the same loop keep answering during a replay. The clock
#: is read after every record (a record of a few dozen facts takes ~0.2 ms to decode and file).
APPLY_SLICE_S: Final = 0.005
MAX_STREAM_LABELS: Final = 1024  # per partition, bounds the gap metric's label set
# Bounds the cache of stream keys: anyone who can write the facts topic picks its group/resources.
MAX_CACHED_STREAMS: Final = 4096
ERROR_BACKOFF_S: Final = 1.0
PROGRESS_INTERVAL_S: Final = 5.0


class FactFollower:
    """Keeps a FactIndex filled from the fact topic; a Component (`start`, `stop`, `ready`).

    The owner (the router, `reverser resolve`) creates the index, hands it here and resolves against
    it; `wait_ready()` returns once the start-up replay has caught up.
    """

    name = "fact-follower"

    def __init__(
        self,
        log: Log,
        topics: TopicNames,
        index: FactIndex,
        settings: Settings,
        *,
        fetch_timeout_ms: int = FETCH_TIMEOUT_MS,
        error_backoff_s: float = ERROR_BACKOFF_S,
        progress_interval_s: float = PROGRESS_INTERVAL_S,
    ) -> None:
        self._log = log
        self.topic = topics.audit_facts
        self.index = index
        self._ttl_ms = int(settings.attribution.ttl_s * 1000)
        self._sweep_interval_s = settings.attribution.sweep_interval_s
        self._fetch_timeout_ms = fetch_timeout_ms
        # Retries after a failed read: `error_backoff_s` first, doubling (jittered) to the log's cap.
        self._backoff = Backoff(error_backoff_s, max(error_backoff_s, LOG_RETRY_MAX_S))
        self._progress_interval_s = progress_interval_s
        self._transport = getattr(log, "kind", "unknown")
        self._codec = codec(FACT_BATCH)
        self._reader: Reader | None = None
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._targets: dict[TopicPartition, int] = {}
        self._streams: dict[int, set[str]] = {}
        self._gr_keys: dict[tuple[int, str, str, str], str] = {}
        self.records_applied = 0
        self.records_refused = 0
        self.errors = 0
        self.gaps = 0
        self._started_at = 0.0
        self._last_progress = 0.0
        self._last_sweep = 0.0

    # -- Component ---------------------------------------------------------------------------------
    async def start(self) -> None:
        """Assign the partitions, then follow in the background (see `wait_ready`).

        If the first assignment fails (log down, topic missing) the failure is counted and the
        background loop keeps retrying; start never raises for it.
        """
        if self._task is not None:
            return
        metrics.TRANSPORT_INFO.labels(self._transport).set(1)
        metrics.INDEX_READY.set(0)
        self._started_at = self._last_progress = self._last_sweep = time.monotonic()
        delay = 0.0
        try:
            await self._open()
            self._check_ready()
        except Exception as exc:
            delay = self._count_error(exc)
        self._task = asyncio.create_task(self._run(delay), name=self.name)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        reader, self._reader = self._reader, None
        if reader is not None:
            with contextlib.suppress(Exception):
                await reader.close()

    def ready(self) -> bool:
        """True once the start-up replay reached the end offsets seen at start (stays true)."""
        return self._ready.is_set()

    def readiness(self) -> Readiness:
        """Ready, or how far the start-up replay has got (for `/readyz`)."""
        if self._ready.is_set():
            return Readiness(True)
        if self._reader is None:
            return Readiness(False, f"fact index: cannot read {self.topic} yet ({self.errors} failed rounds)")
        remaining = self._remaining()
        applied = self.records_applied
        done = applied / (applied + remaining) if applied + remaining else 1.0
        elapsed = max(time.monotonic() - self._started_at, 1e-9)
        rate = applied / elapsed
        eta = f"{remaining / rate:.0f} s" if rate > 0 else "unknown"
        return Readiness(
            False,
            f"fact index replaying {self.topic}: {applied} records applied, {remaining} remaining "
            f"({done:.0%}), ETA {eta}",
        )

    async def wait_ready(self) -> None:
        await self._ready.wait()

    # -- loop --------------------------------------------------------------------------------------
    def _count_error(self, exc: Exception) -> float:
        """Count and log a failed round; returns how long to wait before the next one."""
        self.errors += 1
        metrics.FOLLOWER_ERRORS.labels(self._transport).inc()
        delay_s = self._backoff.next_delay_s()
        logger.warning(
            "fact follower: reading %s failed (%s: %s); retrying in %.1f s",
            self.topic,
            type(exc).__name__,
            exc,
            delay_s,
        )
        return delay_s

    async def _run(self, delay: float) -> None:
        if delay > 0:
            await asyncio.sleep(delay)
        while True:
            try:
                if self._reader is None:
                    await self._open()
                    self._check_ready()
                fetched = await self._reader_or_raise().fetch(self._fetch_timeout_ms, FETCH_MAX_RECORDS)
                metrics.LAST_SUCCESS.set(time.time())
                self._report_gaps(fetched)
                await self._apply(fetched)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                await asyncio.sleep(self._count_error(exc))
                continue
            self._backoff.reset()
            if not self._ready.is_set():
                self._check_ready()
            now = time.monotonic()
            if now - self._last_sweep >= self._sweep_interval_s:
                self._last_sweep = now
                self.index.sweep()

    def _reader_or_raise(self) -> Reader:
        if self._reader is None:
            raise RuntimeError("fact follower has no reader")
        return self._reader

    async def _open(self) -> None:
        """Assign every partition at the first offset younger than the TTL (None: the end)."""
        count = await self._log.partitions_for(self.topic)
        tps = [TopicPartition(self.topic, p) for p in range(count)]
        horizon_ms = int(time.time() * 1000) - self._ttl_ms
        starts = await self._log.offsets_for_times({tp: horizon_ms for tp in tps})
        ends = await self._log.end_offsets(tps)
        positions = {tp: (starts.get(tp) if starts.get(tp) is not None else ends[tp]) for tp in tps}
        reader = self._log.reader()
        try:
            await reader.assign({tp: int(offset) for tp, offset in positions.items() if offset is not None})
        except BaseException:
            with contextlib.suppress(Exception):
                await reader.close()
            raise
        self._reader = reader
        self._targets = dict(ends)
        remaining = sum(max(0, ends[tp] - int(positions[tp] or 0)) for tp in tps)
        logger.info(
            "fact follower: replaying %d record(s) of %s (%d partitions) from now - %.0f s",
            remaining,
            self.topic,
            count,
            self._ttl_ms / 1000,
        )

    def _remaining(self) -> int:
        reader = self._reader
        if reader is None:
            return 0
        return sum(max(0, end - reader.position(tp)) for tp, end in self._targets.items())

    def _check_ready(self) -> None:
        remaining = self._remaining()
        now = time.monotonic()
        elapsed = max(now - self._started_at, 1e-9)
        rate = self.records_applied / elapsed
        metrics.REPLAY_APPLIED.set(self.records_applied)
        metrics.REPLAY_REMAINING.set(remaining)
        metrics.REPLAY_RATE.set(rate)
        if remaining == 0:
            metrics.REPLAY_ETA.set(0)
            self._ready.set()
            metrics.INDEX_READY.set(1)
            metrics.INDEX_ENTRIES.set(len(self.index))
            logger.info(
                "fact follower: caught up after %d record(s) in %.1f s; %d index entries",
                self.records_applied,
                elapsed,
                len(self.index),
            )
            return
        eta = remaining / rate if rate > 0 else float("inf")
        metrics.REPLAY_ETA.set(eta if eta != float("inf") else -1)
        if now - self._last_progress >= self._progress_interval_s:
            self._last_progress = now
            logger.info(
                "fact follower: replay applied %d record(s), %d remaining, %.0f records/s, ETA %s",
                self.records_applied,
                remaining,
                rate,
                f"{eta:.0f} s" if eta != float("inf") else "unknown",
            )

    # -- records -----------------------------------------------------------------------------------
    def _decode(self, record: Record) -> DecodedBatch:
        """A record's stream and fact rows; `DecodeError` if it is undecodable or a fact has no author."""
        decoded = decode_fact_batch(record, self._codec)
        for row in decoded[3]:
            if not row[0]:
                raise DecodeError("a fact has no author; the whole record is refused")
        return decoded

    async def _apply(self, fetched: Fetched) -> None:
        """File the records in log order, yielding to the event loop every `APPLY_SLICE_S`.

        A fetch from a log that already holds the records (every replay) returns without
        suspending, so without these yields a replay would hold the loop from start to ready.
        """
        decode = self._decode
        apply_records = self.index.apply_records
        gr_keys = self._gr_keys
        clock = time.monotonic
        slice_end = clock() + APPLY_SLICE_S
        for record in fetched.records:
            if clock() >= slice_end:
                await asyncio.sleep(0)
                slice_end = clock() + APPLY_SLICE_S
            try:
                route, group, resource, rows = decode(record)
            except DecodeError as exc:
                self.records_refused += 1
                metrics.DECODE_ERRORS.labels(self._transport).inc()
                logger.warning(
                    "fact follower: skipping record %s[%d]@%d: %s",
                    record.topic,
                    record.partition,
                    record.offset,
                    exc,
                )
                continue
            stream = (record.partition, route, group, resource)
            gr_key = gr_keys.get(stream)
            if gr_key is None:
                if len(gr_keys) >= MAX_CACHED_STREAMS:
                    gr_keys.clear()
                gr_key = gr_keys[stream] = f"{group}/{resource}" if group else resource
                seen = self._streams.setdefault(record.partition, set())
                if len(seen) < MAX_STREAM_LABELS:
                    seen.add(f"{route}/{gr_key}")
            apply_records(route, gr_key, rows, record.timestamp_ms)
            self.records_applied += 1

    def _report_gaps(self, fetched: Fetched) -> None:
        for gap in fetched.gaps:
            self.gaps += 1
            streams = sorted(self._streams.get(gap.partition, ())) or [f"{gap.topic}[{gap.partition}]"]
            for stream in streams:
                metrics.STREAM_GAPS.labels(stream).inc()
            logger.warning(
                "fact follower: gap on %s[%d]: records [%d, %d) (%d) were deleted by retention before "
                "this process read them; attributions for %s may be missing",
                gap.topic,
                gap.partition,
                gap.position,
                gap.first_surviving,
                gap.lost,
                ", ".join(streams),
            )
