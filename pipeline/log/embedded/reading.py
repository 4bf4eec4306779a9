"""Reading the embedded log: readers by manual assignment and the fetch loop shared with group members."""

from __future__ import annotations

import abc
import asyncio
from typing import TYPE_CHECKING

from prometheus_client import Counter

from pipeline.log.api import (
    Fetched,
    Gap,
    LogError,
    Reader,
    Record,
    TopicPartition,
)

if TYPE_CHECKING:
    from pipeline.log.embedded.log import EmbeddedLog


#: Bytes of record frames one fetch returns at most (at least one record, however large): a fetch of
#: `max_records` snapshot chunks of up to `max_message_bytes` each would otherwise hold hundreds
#: of MiB in the fetching stage while it works through them (Kafka's `fetch.max.bytes`). One
#: default-sized chunk per fetch: with 8 MiB, two fetched chunks added to what the busiest moment
#: of a first sync held at once, and that moment sets how far the C heap grows.
FETCH_MAX_BYTES = 4 * 1024 * 1024

GAP_RECORDS = Counter(
    "reverser_log_embedded_gap_records",
    "Records a reader or group member lost because retention deleted them before they were read.",
)


class Fetcher(abc.ABC):
    """What the fetch loop needs from a reader or a group member."""

    closed: bool
    rotation: int
    waiter: asyncio.Future[None] | None

    @abc.abstractmethod
    def positions(self) -> dict[TopicPartition, int]:
        """The live position map the fetch loop reads from and advances."""

    def wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def _log_closing(self) -> None:
        """The log closes: stop, and wake a waiting fetch, with no rebalance of a group left behind."""
        self.closed = True
        self.wake()


class EmbeddedReader(Fetcher, Reader):
    def __init__(self, log: EmbeddedLog) -> None:
        super().__init__(log)
        self._log = log
        self.closed = False
        self.rotation = 0
        self.waiter = None

    def positions(self) -> dict[TopicPartition, int]:
        return self._positions

    def _ensure_usable(self) -> None:
        self._check_open()

    async def _assign(self, positions: dict[TopicPartition, int]) -> None:
        self.wake()

    async def _seek(self, tp: TopicPartition, offset: int) -> None:
        """Nothing to move: the fetch loop reads `_positions`, which `seek` sets."""

    async def fetch(self, timeout_ms: int = 1000, max_records: int = 500) -> Fetched:
        self._check_open()
        return await fetch_records(self._log, self, timeout_ms, max_records)

    async def _close(self) -> None:
        self.closed = True
        self.wake()

    def _check_open(self) -> None:
        if self.closed:
            raise LogError("reader is closed")
        self._log.require_started()


async def fetch_records(log: EmbeddedLog, owner: Fetcher, timeout_ms: int, max_records: int) -> Fetched:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(timeout_ms, 0) / 1000
    while True:
        fetched = collect(log, owner, max(max_records, 1))
        remaining = deadline - loop.time()
        if fetched.records or fetched.gaps or remaining <= 0 or owner.closed:
            return fetched
        waiter: asyncio.Future[None] = loop.create_future()
        found = (log.find_topic(name) for name in {tp.topic for tp in owner.positions()})
        topics = [topic for topic in found if topic is not None]
        for topic in topics:
            topic.waiters.add(waiter)
        owner.waiter = waiter
        try:
            await asyncio.wait({waiter}, timeout=remaining)
        finally:
            owner.waiter = None
            for topic in topics:
                topic.waiters.discard(waiter)


def collect(log: EmbeddedLog, owner: Fetcher, max_records: int) -> Fetched:
    records: list[Record] = []
    gaps: list[Gap] = []
    fetched_bytes = 0
    positions = owner.positions()
    tps = sorted(positions)
    if not tps:
        return Fetched(records, gaps)
    start = owner.rotation % len(tps)
    owner.rotation += 1
    for tp in tps[start:] + tps[:start]:
        if len(records) >= max_records or (records and fetched_bytes >= FETCH_MAX_BYTES):
            break
        topic = log.find_topic(tp.topic)
        if topic is None or tp.partition >= len(topic.partitions):
            continue
        partition = topic.partitions[tp.partition]
        position = positions[tp]
        if position < partition.log_start:
            gap = Gap(tp.topic, tp.partition, position, partition.log_start)
            gaps.append(gap)
            GAP_RECORDS.inc(gap.lost)
            position = partition.log_start
        visible = partition.visible_offset
        if position < visible:
            batch, taken = partition.read(
                position, min(max_records - len(records), visible - position), FETCH_MAX_BYTES - fetched_bytes
            )
            fetched_bytes += taken
            if batch and batch[-1].offset >= visible:  # compaction left gaps below `visible`
                batch = [record for record in batch if record.offset < visible]
            if batch:
                records.extend(batch)
                position = batch[-1].offset + 1
            else:
                position = visible
        positions[tp] = position
    return Fetched(records, gaps)
