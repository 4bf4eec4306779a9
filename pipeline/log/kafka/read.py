"""Reading Kafka by manual assignment, and the fetch round shared with group members (gaps, resets)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Literal

from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as KafkaTopicPartition
from aiokafka import errors as kafka_errors
from prometheus_client import Counter

from pipeline.log.api import (
    Fetched,
    Gap,
    LogError,
    Reader,
    Record,
    TopicPartition,
)
from pipeline.log.kafka.clients import start_client, stop_client
from pipeline.log.kafka.convert import kafka_tp, our_tp, to_record
from pipeline.log.kafka.errors import translate

if TYPE_CHECKING:
    from pipeline.log.kafka.log import KafkaLog

logger = logging.getLogger(__name__)


GAP_RECORDS = Counter(
    "reverser_log_kafka_gap_records",
    "Records deleted by retention before a reader reached them (reported as gaps).",
)


class KafkaReader(Reader):
    """Manual assignment without a group; positions are tracked here so `position()` is synchronous."""

    def __init__(self, owner: KafkaLog) -> None:
        super().__init__(owner)
        self._log = owner
        self._consumer: AIOKafkaConsumer | None = None
        self._closed = False

    def _ensure_usable(self) -> None:
        if self._closed:
            raise LogError("reader is closed")

    async def _client(self) -> AIOKafkaConsumer:
        if self._closed:
            raise LogError("reader is closed")
        if self._consumer is None:
            self._consumer = await self._log.connect(
                "connect reader", self._log.new_manual_consumer, start_client
            )
        return self._consumer

    async def _assign(self, positions: dict[TopicPartition, int]) -> None:
        consumer = await self._client()
        consumer.assign([kafka_tp(tp) for tp in positions])
        for tp, offset in positions.items():
            consumer.seek(kafka_tp(tp), offset)

    async def _seek(self, tp: TopicPartition, offset: int) -> None:
        consumer = await self._client()
        consumer.seek(kafka_tp(tp), offset)

    async def fetch(self, timeout_ms: int = 1000, max_records: int = 500) -> Fetched:
        consumer = await self._client()
        if not self._positions:
            await asyncio.sleep(max(timeout_ms, 0) / 1000)
            return Fetched()
        fetched, next_offsets = await fetch_round(self._log, consumer, timeout_ms, max_records, None)
        for ktp, offset in next_offsets.items():
            self._positions[our_tp(ktp)] = offset
        for gap in fetched.gaps:
            self._positions[TopicPartition(gap.topic, gap.partition)] = gap.first_surviving
        for tp in self._positions:
            # The client may have moved past compacted-away offsets or control records.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(0.1):
                    self._positions[tp] = max(self._positions[tp], await consumer.position(kafka_tp(tp)))
        return fetched

    async def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            with contextlib.suppress(Exception):
                await stop_client(consumer)


async def fetch_round(
    owner: KafkaLog,
    consumer: AIOKafkaConsumer,
    timeout_ms: int,
    max_records: int,
    reset: Literal["earliest", "latest"] | None,
) -> tuple[Fetched, dict[KafkaTopicPartition, int]]:
    """One fetch round: records, plus a Gap for every partition whose position retention passed.

    The consumer runs with `auto_offset_reset="none"`, so aiokafka raises instead of resetting;
    here a position below log-start becomes a Gap and moves to log-start, and a group partition
    without a committed offset starts at the group's reset policy. Also returns, per partition
    that yielded records, the offset after its last record (a reader's next position).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(timeout_ms, 0) / 1000
    gaps: list[Gap] = []
    records: list[Record] = []
    next_offsets: dict[KafkaTopicPartition, int] = {}
    for _round in range(len(consumer.assignment()) + 2):
        remaining_ms = 0 if gaps else max(int((deadline - loop.time()) * 1000), 0)
        try:
            batches = await consumer.getmany(timeout_ms=remaining_ms, max_records=max(max_records, 1))
        except kafka_errors.OffsetOutOfRangeError as exc:
            beyond_end = await _handle_out_of_range(owner, consumer, exc, gaps)
            if beyond_end and not gaps:
                await asyncio.sleep(min(owner.retrier.poll_s, max(deadline - loop.time(), 0)))
                return Fetched(records, gaps), next_offsets
            continue
        except kafka_errors.NoOffsetForPartitionError as exc:
            tp = exc.args[0] if exc.args else None
            if reset is None or not isinstance(tp, KafkaTopicPartition):
                raise translate(exc, "fetch") from exc
            await _reset_position(owner, consumer, tp, reset)
            continue
        except kafka_errors.ConsumerStoppedError as exc:
            raise LogError("the consumer was closed") from exc
        except kafka_errors.KafkaError as exc:
            raise translate(exc, "fetch") from exc
        for tp in sorted(batches, key=lambda t: (t.topic, t.partition)):
            messages = batches[tp]
            if messages:
                records.extend(map(to_record, messages))
                next_offsets[tp] = messages[-1].offset + 1
        break
    return Fetched(records, gaps), next_offsets


async def _reset_position(
    owner: KafkaLog,
    consumer: AIOKafkaConsumer,
    tp: KafkaTopicPartition,
    reset: Literal["earliest", "latest"],
) -> None:
    """Start a group partition without a committed offset at the reset policy, if it is still ours.

    The fetcher reports a missing offset on a later fetch than the one that found it, and a
    rebalance may have revoked the partition in between (or revokes it while the reset waits):
    the new owner resets it then, so a partition no longer assigned is left alone.

    Log-start is looked up through the log's own client (bounded retries) and set with a plain
    seek, not with the member's `seek_to_beginning`: after a broker restart that one was seen
    (`make chaos`) retrying "not leader" answers for minutes with the member's stale leader, and
    since a fetch round waits for it, every other partition of the member stalled with it.
    """
    if tp not in consumer.assignment():
        return
    try:
        if reset == "earliest":
            start = (await owner.beginning_offsets([our_tp(tp)]))[our_tp(tp)]
            consumer.seek(tp, start)
        else:
            await consumer.seek_to_end(tp)
    except kafka_errors.IllegalStateError:
        return  # revoked while the reset was being looked up
    except kafka_errors.KafkaError as exc:
        raise translate(exc, "fetch") from exc


async def _handle_out_of_range(
    owner: KafkaLog, consumer: AIOKafkaConsumer, exc: kafka_errors.OffsetOutOfRangeError, gaps: list[Gap]
) -> bool:
    """Turn out-of-range positions into Gaps (below log-start) or waits (beyond log-end).

    Returns True when some position was beyond the log end: it stays where it is, as on the
    embedded log, and the reader sees records once the log grows past it.
    """
    positions = exc.args[0] if exc.args and isinstance(exc.args[0], dict) else {}
    beyond_end = False
    for ktp, position in positions.items():
        tp = our_tp(ktp)
        start = (await owner.beginning_offsets([tp]))[tp]
        if ktp not in consumer.assignment():
            continue  # revoked by a rebalance while log-start was looked up: the new owner handles it
        if position < start:
            gap = Gap(tp.topic, tp.partition, int(position), start)
            gaps.append(gap)
            GAP_RECORDS.inc(gap.lost)
            logger.warning("%s: records %d..%d were deleted before they were read", tp, position, start - 1)
            consumer.seek(ktp, start)
        else:
            beyond_end = True
            consumer.seek(ktp, position)
    return beyond_end
