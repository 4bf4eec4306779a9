"""Resume cursors on the compacted `watch-cursors` topic.

A restarted process reads the topic once, up to the end offsets it saw at start, and keeps the
newest cursor per stream; afterwards the store is write-through. Cursors are written only after
the records they cover were acknowledged, so resuming never skips an event.
"""

from __future__ import annotations

import logging

from pipeline.codec import SCHEMA_HEADER, DecodeError
from pipeline.codec.watch_cursor import Cursor, decode_cursor, encode_cursor
from pipeline.log.api import Log, PendingRecord, TopicPartition
from pipeline.log.scan import extent_of, read_to_end
from pipeline.watch import metrics
from pipeline.watch.writer import Appender

__all__ = ["CursorStore"]

logger = logging.getLogger(__name__)

_FETCH_TIMEOUT_MS = 500


class CursorStore:
    """The newest cursor of every stream, loaded from and written to one compacted topic."""

    def __init__(self, log_: Log, topic: str) -> None:
        self._log = log_
        self.topic = topic
        self._cursors: dict[str, Cursor] = {}

    def get(self, key: str) -> Cursor | None:
        return self._cursors.get(key)

    def __len__(self) -> int:
        return len(self._cursors)

    async def load(self) -> int:
        """Read the whole topic up to its current end; returns how many cursors were found."""
        extent = await extent_of(self._log, self.topic)
        async for chunk in read_to_end(self._log, extent, timeout_ms=_FETCH_TIMEOUT_MS):
            for record in chunk.records:
                tp = TopicPartition(record.topic, record.partition)
                self._apply(record.key, record.value, record.header(SCHEMA_HEADER), tp, record.offset)
        logger.info("loaded %d watch cursors from %s", len(self._cursors), self.topic)
        return len(self._cursors)

    def _apply(
        self,
        key: bytes | None,
        value: bytes | None,
        schema: bytes | None,
        tp: TopicPartition,
        offset: int,
    ) -> None:
        if value is None:
            if key is not None:
                self._cursors.pop(key.decode("utf-8", "replace"), None)
            return
        try:
            cursor = decode_cursor(key, value, schema)
        except DecodeError as exc:
            metrics.CURSOR_DECODE_ERRORS.inc()
            logger.warning("skipping undecodable cursor at %s offset %d: %s", tp, offset, exc)
            return
        self._cursors[cursor.key] = cursor

    async def delete(self, key: str, appender: Appender | None = None) -> None:
        """Append a tombstone (compaction then drops the key) and forget the cursor."""
        if key not in self._cursors:
            return
        await (appender or self._log).append_many(self.topic, [PendingRecord(None, key=key.encode())])
        self._cursors.pop(key, None)

    async def write(self, cursor: Cursor, appender: Appender | None = None) -> None:
        """Append the cursor (through `appender`, default the log) and wait for the acknowledgement
        before remembering it."""
        await (appender or self._log).append_many(self.topic, [encode_cursor(cursor)])
        self._cursors[cursor.key] = cursor
