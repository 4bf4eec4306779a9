"""Individual offset commits read from Kafka's `__consumer_offsets`, as Burrow does.

Polling committed offsets cannot tell a consumer that keeps committing the same offset (STALL)
from one that stopped committing (STOP). The broker writes every commit, with its time, to the
internal `__consumer_offsets` topic; reading it gives Burrow's window of real commits. Only the
offset-commit records (key versions 0 and 1) are decoded; group metadata and tombstones are
skipped, and undecodable records are counted rather than fatal.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from typing import NamedTuple

from prometheus_client import Counter

from pipeline.config import LagSettings, LogBackend
from pipeline.lag.evaluator import Commit
from pipeline.lag.monitor import CommitFeed
from pipeline.log.api import Log, Reader, Record, TopicNotFoundError, TopicPartition

__all__ = [
    "OFFSETS_TOPIC",
    "ConsumerOffsetsFeed",
    "OffsetCommitValue",
    "commit_feed_for",
    "decode_key",
    "decode_value",
]

logger = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
FETCH_TIMEOUT_MS = 500
FETCH_MAX_RECORDS = 5000
# A slow broker can answer a fetch with nothing before the end it reported is reached; giving up
# on the first empty answer would leave the first drain short and put older commits after newer.
EMPTY_FETCHES_BEFORE_GIVING_UP = 4

UNDECODABLE = Counter(
    "reverser_lag_undecodable_offset_records_total",
    "Records of __consumer_offsets that look like offset commits but could not be decoded.",
)

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class OffsetCommitValue(NamedTuple):
    """The part of an offset-commit value the monitor needs."""

    offset: int
    commit_ms: int


class _Cursor:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def unpack(self, fmt: struct.Struct) -> int:
        (value,) = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        result: int = value
        return result

    def string(self) -> str:
        length = self.unpack(_I16)
        return "" if length < 0 else self._take(length)

    def compact_string(self) -> str:
        length = self.uvarint() - 1
        return "" if length < 0 else self._take(length)

    def uvarint(self) -> int:
        shift = 0
        value = 0
        while True:
            if self.pos >= len(self.data):
                raise ValueError("truncated varint")
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 35:
                raise ValueError("varint too long")

    def _take(self, length: int) -> str:
        end = self.pos + length
        if end > len(self.data):
            raise ValueError("truncated string")
        text = self.data[self.pos : end].decode("utf-8")
        self.pos = end
        return text


def decode_key(key: bytes) -> tuple[str, TopicPartition] | None:
    """(group, partition) of an offset-commit key; None for other record kinds."""
    cursor = _Cursor(key)
    version = cursor.unpack(_I16)
    if version not in (0, 1):
        return None
    group = cursor.string()
    topic = cursor.string()
    partition = cursor.unpack(_I32)
    return group, TopicPartition(topic, partition)


def decode_value(value: bytes) -> OffsetCommitValue:
    """Offset and commit time of an offset-commit value, versions 0 to 4."""
    cursor = _Cursor(value)
    version = cursor.unpack(_I16)
    offset = cursor.unpack(_I64)
    if version in (0, 1, 2):
        cursor.string()
    elif version == 3:
        cursor.unpack(_I32)
        cursor.string()
    elif version == 4:
        cursor.unpack(_I32)
        cursor.compact_string()
    else:
        raise ValueError(f"unknown offset commit value version {version}")
    return OffsetCommitValue(offset, cursor.unpack(_I64))


def decode_commit(record: Record) -> Commit | None:
    """The commit a record carries, or None for group metadata, tombstones and bad records."""
    if record.key is None or record.value is None:
        return None
    try:
        decoded = decode_key(record.key)
        if decoded is None:
            return None
        value = decode_value(record.value)
    except (struct.error, ValueError, UnicodeDecodeError) as exc:
        UNDECODABLE.inc()
        logger.warning(
            "undecodable %s record at %d:%d: %s", OFFSETS_TOPIC, record.partition, record.offset, exc
        )
        return None
    group, tp = decoded
    return Commit(group, tp, value.offset, value.commit_ms)


class ConsumerOffsetsFeed:
    """Follows `__consumer_offsets` from its start; each `drain` returns the commits since the last.

    The first drain can read millions of commits, so each drain thins them the way the commit
    window will: commits less than `min_distance_ms` after the first of their slot replace each
    other, and only the newest `keep` slots per group partition are returned.
    """

    def __init__(self, log: Log, *, min_distance_ms: int = 0, keep: int = 0) -> None:
        self._log = log
        self._min_distance_ms = min_distance_ms
        self._keep = keep
        self._reader: Reader | None = None
        self._tps: list[TopicPartition] = []

    async def drain(self, selected: Callable[[str], bool]) -> list[Commit]:
        reader = await self._open()
        if reader is None:
            return []
        targets = await self._log.end_offsets(self._tps)
        slots: dict[tuple[str, TopicPartition], list[Commit]] = {}
        opened_ms: dict[tuple[str, TopicPartition], int] = {}
        empty = 0
        while any(reader.position(tp) < targets.get(tp, 0) for tp in self._tps):
            fetched = await reader.fetch(timeout_ms=FETCH_TIMEOUT_MS, max_records=FETCH_MAX_RECORDS)
            if not fetched.records and not fetched.gaps:
                empty += 1
                if empty >= EMPTY_FETCHES_BEFORE_GIVING_UP:
                    break
                continue
            empty = 0
            for record in fetched.records:
                commit = decode_commit(record)
                if commit is None or not selected(commit.group):
                    continue
                key = (commit.group, commit.tp)
                kept = slots.setdefault(key, [])
                if kept and commit.commit_ms - opened_ms[key] < self._min_distance_ms:
                    kept[-1] = commit
                    continue
                kept.append(commit)
                opened_ms[key] = commit.commit_ms
                if self._keep and len(kept) > self._keep:
                    del kept[0]
        return [commit for kept in slots.values() for commit in kept]

    async def close(self) -> None:
        if self._reader is not None:
            await self._reader.close()
            self._reader = None

    async def _open(self) -> Reader | None:
        if self._reader is not None:
            return self._reader
        try:
            count = await self._log.partitions_for(OFFSETS_TOPIC)
        except TopicNotFoundError:
            return None
        self._tps = [TopicPartition(OFFSETS_TOPIC, p) for p in range(count)]
        starts = await self._log.beginning_offsets(self._tps)
        reader = self._log.reader()
        await reader.assign(starts)
        self._reader = reader
        return reader


def commit_feed_for(log: Log, settings: LagSettings) -> CommitFeed | None:
    """The commit feed a backend offers: Kafka has `__consumer_offsets`, the embedded log none."""
    if log.kind != LogBackend.KAFKA:
        return None
    return ConsumerOffsetsFeed(
        log, min_distance_ms=int(settings.poll_interval_s * 1000), keep=settings.window
    )
