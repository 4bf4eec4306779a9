"""What a watch leader writes goes through its cluster's transactional producer: zombie fencing.

A leader paused past its lease (GC pause, SIGSTOP, network stall) may resume with events still in
hand. Leader election alone cannot stop it from appending them after its successor took over; the
log can. Every replica that becomes the leader of a cluster starts the producer of the cluster's
transactional id (`<prefix>.watch.<cluster>`) before it reads the cursors and starts streaming.
That fences every older producer of the id: the broker (or the embedded log) refuses their writes
from then on, and they get `FencedError` and step down.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Protocol

from pipeline.log.api import Log, PendingRecord, TransactionalProducer

__all__ = ["WRITER_HEADER", "Appender", "FencedWriter", "watch_transactional_id"]

#: Header naming the replica that wrote a record (the leader's identity), for operators and tests.
WRITER_HEADER = "writer"


class Appender(Protocol):
    """Where a stream appends: the log itself, or a cluster leader's `FencedWriter`."""

    async def append_many(self, topic: str, records: Sequence[PendingRecord]) -> object: ...


def watch_transactional_id(topic_prefix: str, shard: str) -> str:
    """One transactional id per watch shard (`pipeline.watch.shards.shard_key`: the cluster's name
    when it is not sharded): the shard's leaders fence each other through it."""
    return f"{topic_prefix}.watch.{shard}"


class FencedWriter:
    """Appends as one transaction each, under the cluster's transactional id, tagged with the writer."""

    def __init__(self, log: Log, transactional_id: str, identity: str) -> None:
        self._producer: TransactionalProducer = log.transactional_producer(transactional_id)
        self._header = (WRITER_HEADER, identity.encode())

    async def start(self) -> None:
        """Take the id over: from here on, earlier leaders' writes are refused."""
        await self._producer.start()

    async def append_many(self, topic: str, records: Sequence[PendingRecord]) -> object:
        """Append `records` atomically; raises `FencedError` once a newer leader started."""
        return await self.append_topics({topic: records})

    async def append_topics(self, appends: Mapping[str, Sequence[PendingRecord]]) -> object:
        """Append to several topics as one transaction (all or nothing); `FencedError` as above.

        A stream stopped while its transaction is in flight (leadership lost, reconfiguration)
        lets it finish first: cancelling would abort it, and an aborted cursor costs the next
        leader a full snapshot. A successor that already fenced this writer refuses it anyway.
        """
        tagged = {
            topic: [dataclasses.replace(r, headers=(*r.headers, self._header)) for r in records]
            for topic, records in appends.items()
        }
        commit = asyncio.ensure_future(self._producer.commit(tagged))
        try:
            return await asyncio.shield(commit)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await commit
            raise

    async def close(self) -> None:
        await self._producer.close()
