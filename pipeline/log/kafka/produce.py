"""Producing to Kafka: bounded sends with acknowledgements, and fenced transactional producers."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaProducer
from aiokafka import errors as kafka_errors
from prometheus_client import Counter

from pipeline.log.api import (
    AppendResult,
    FencedError,
    GroupOffsets,
    LogError,
    PendingRecord,
    Placement,
    TransactionalProducer,
)
from pipeline.log.faults import crash_point
from pipeline.log.kafka.clients import bounded, consume_outcome, discard_producer, outcome_error, start_client
from pipeline.log.kafka.convert import kafka_tp
from pipeline.log.kafka.errors import ERRORS, FENCED, translate

if TYPE_CHECKING:
    from pipeline.log.kafka.log import KafkaLog


APPENDED_RECORDS = Counter("reverser_log_kafka_appended_records", "Records acknowledged by Kafka.")
APPENDED_BYTES = Counter(
    "reverser_log_kafka_appended_bytes", "Key, value and header bytes of records acknowledged by Kafka."
)


PRODUCER_RESETS = Counter(
    "reverser_log_kafka_producer_resets",
    "Producers replaced after the broker became unreachable mid-append.",
)


#: Producer batch size: large batches make `append_many` fast; topics whose `max.message.bytes`
#: is below this are appended one record per batch instead.
PRODUCER_BATCH_BYTES = 1024 * 1024
#: Client-side request size cap; the topic's `max.message.bytes` (checked first) is the real limit.
PRODUCER_MAX_REQUEST_BYTES = 64 * 1024 * 1024


async def send_all(
    producer: AIOKafkaProducer,
    topic: str,
    records: Sequence[PendingRecord],
    partitions: Sequence[int | None],
    timeout_ms: int,
) -> tuple[list[Any], BaseException | None]:
    """Send every record, then wait for every acknowledgement within the delivery timeout.

    aiokafka's idempotent producer retries an in-flight batch forever while the broker is
    down, so the wait is bounded here (`request_timeout_ms`); what is still unacknowledged
    then counts as a failure, and the producer is replaced before the next append.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_ms / 1000
    futures: list[asyncio.Future[Any]] = []
    failure: BaseException | None = None
    try:
        async with asyncio.timeout_at(deadline):
            for record, partition in zip(records, partitions, strict=True):
                future = await producer.send(
                    topic, record.value, key=record.key, partition=partition, headers=list(record.headers)
                )
                futures.append(future)
    except TimeoutError:
        failure = kafka_errors.KafkaTimeoutError(
            f"could not hand {len(records) - len(futures)} records to the producer in time"
        )
    except kafka_errors.KafkaError as exc:
        failure = exc
    if not futures:
        return [], failure
    _, pending = await asyncio.wait(futures, timeout=max(deadline - loop.time(), 0))
    for future in pending:
        future.add_done_callback(consume_outcome)
    if failure is None and pending:
        failure = kafka_errors.KafkaTimeoutError(
            f"{len(pending)} records not acknowledged within {timeout_ms} ms"
        )
    done = [f for f in futures if f.done()]
    errors = [error for error in (outcome_error(f) for f in done) if error is not None]
    if failure is None and errors:
        failure = errors[0]
    return ([f.result() for f in futures] if failure is None else []), failure


def acknowledged(outcomes: Sequence[Any], records: Sequence[PendingRecord]) -> list[AppendResult]:
    """The seam's results for acknowledged sends, counted in the append metrics."""
    # aiokafka reports the broker's time on LogAppendTime topics and the record's own otherwise.
    results = [AppendResult(md.topic, md.partition, md.offset, int(md.timestamp)) for md in outcomes]
    APPENDED_RECORDS.inc(len(results))
    APPENDED_BYTES.inc(sum(record.size_bytes for record in records))
    return results


class KafkaTransactionalProducer(TransactionalProducer):
    """One aiokafka producer with a `transactional_id`; one transaction per `commit`.

    aiokafka leaves a fenced producer in a fatal state (its sender task ends with
    `ProducerFenced`), and a producer whose transaction outcome is unknown (the commit or abort did
    not answer in time) cannot be reused either. Both become `FencedError` for good: a new
    producer would take a new epoch and fence whoever legitimately owns the id now, so only the
    owner, once it knows it still owns the work, may start one.
    """

    def __init__(self, owner: KafkaLog, transactional_id: str) -> None:
        super().__init__(owner, transactional_id)
        self._log = owner
        self._producer: AIOKafkaProducer | None = None
        self._fenced: str | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        if self._producer is not None:
            return
        timeout_ms = self._log.settings.transaction_timeout_ms
        self._producer = await self._log.connect(
            f"start transactional producer {self.transactional_id!r}",
            lambda: self._log.new_producer(
                transactional_id=self.transactional_id, transaction_timeout_ms=timeout_ms
            ),
            start_client,
        )

    async def _commit(self, placements: list[Placement], offsets: GroupOffsets | None) -> list[AppendResult]:
        async with self._lock:
            producer = self._usable()
            deadline_s = self._log.settings.request_timeout_ms / 1000
            try:
                await producer.begin_transaction()
                outcomes = await self._send(producer, placements, offsets, deadline_s)
                crash_point("kafka-transaction-sent")
                await bounded(producer.commit_transaction(), deadline_s)
            except BaseException as exc:
                await self._abort(producer, exc, deadline_s)
                raise self._failure(exc) from exc
            return acknowledged(
                outcomes, [record for placement in placements for record in placement.records]
            )

    def _usable(self) -> AIOKafkaProducer:
        if self._fenced is not None:
            raise FencedError(f"transactional producer {self.transactional_id!r}: {self._fenced}")
        if self._producer is None:
            raise LogError(f"transactional producer {self.transactional_id!r} is not started")
        return self._producer

    @staticmethod
    async def _send(
        producer: AIOKafkaProducer,
        placements: list[Placement],
        offsets: GroupOffsets | None,
        deadline_s: float,
    ) -> list[Any]:
        futures: list[asyncio.Future[Any]] = []
        async with asyncio.timeout(deadline_s):
            for placement in placements:
                for record, partition in zip(placement.records, placement.partitions, strict=True):
                    futures.append(
                        await producer.send(
                            placement.topic,
                            record.value,
                            key=record.key,
                            partition=partition,
                            headers=list(record.headers),
                        )
                    )
            if offsets is not None and offsets.offsets:
                await producer.send_offsets_to_transaction(
                    {kafka_tp(tp): offset for tp, offset in offsets.offsets.items()}, offsets.group_id
                )
            for future in futures:
                future.add_done_callback(consume_outcome)
            return list(await asyncio.gather(*futures))

    async def _abort(self, producer: AIOKafkaProducer, cause: BaseException, deadline_s: float) -> None:
        """Abort after a failure; when that is impossible the producer is done for."""
        if isinstance(cause, FENCED) or _fatal(producer):
            self._fenced = "a newer producer with the same transactional id has started"
        else:
            try:
                await bounded(producer.abort_transaction(), deadline_s)
                return
            except BaseException as exc:
                if isinstance(exc, FENCED):
                    self._fenced = "a newer producer with the same transactional id has started"
                else:
                    self._fenced = (
                        f"the outcome of its transaction is unknown ({type(cause).__name__}: {cause})"
                    )
        ERRORS.labels("fenced").inc()
        self._producer = None
        _settle_internal_futures(producer)
        await discard_producer(producer)

    def _failure(self, exc: BaseException) -> BaseException:
        if self._fenced is not None:
            return FencedError(f"transactional producer {self.transactional_id!r}: {self._fenced}")
        if isinstance(exc, asyncio.CancelledError):
            return exc
        if isinstance(exc, TimeoutError):
            exc = kafka_errors.KafkaTimeoutError(
                f"transaction not acknowledged within {self._log.settings.request_timeout_ms} ms"
            )
        return translate(exc, f"transaction of {self.transactional_id!r}")

    async def close(self) -> None:
        producer, self._producer = self._producer, None
        self._fenced = self._fenced or "closed"
        if producer is not None:
            await discard_producer(producer)


def _settle_internal_futures(producer: AIOKafkaProducer) -> None:
    """Retrieve the internal futures a fenced aiokafka producer fails and nobody awaits any more.

    When the fence ends its sender task, aiokafka fails the transaction waiter and each batch's
    drain waiter; unretrieved, asyncio logs them from a finalizer, at an arbitrary later moment.
    """
    manager = getattr(producer, "_txn_manager", None)
    accumulator = getattr(producer, "_message_accumulator", None)
    futures = [getattr(manager, "_transaction_waiter", None)]
    batches = [b for queue in getattr(accumulator, "_batches", {}).values() for b in queue]
    batches += list(getattr(accumulator, "_pending_batches", ()))
    futures += [getattr(batch, "_drain_waiter", None) for batch in batches]
    for future in futures:
        if isinstance(future, asyncio.Future):
            future.add_done_callback(consume_outcome)


def _fatal(producer: AIOKafkaProducer) -> bool:
    """Whether aiokafka's transaction manager is in its fatal state (fenced, or its sender died)."""
    manager = getattr(producer, "_txn_manager", None)
    return bool(manager is not None and manager.is_fatal_error())
