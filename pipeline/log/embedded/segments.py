"""On-disk partitions of the embedded log: segment files of framed records plus in-memory indexes.

A partition is a directory of segment files named by their base offset. Each record is one frame:
`<u32 body length><u32 crc32(body)>` then the body `<i64 offset><i64 timestamp><i32 key length>
<i32 value length><u16 header count>`, key, value and headers (`<u16 name length>` name
`<u32 value length>` value); a length of -1 means null. Offsets, file positions and timestamps of
every record are kept in `array('q')` indexes, so a read is one `pread` of the exact byte range and
`offsets_for_times` is a bisection, never a re-parse of the file.
"""

from __future__ import annotations

import contextlib
import functools
import os
import struct
import zlib
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from pipeline.log.api import Headers, LogError, Record

__all__ = [
    "CLEANED_SUFFIX",
    "INDEX_SUFFIX",
    "SEGMENT_SUFFIX",
    "Compacted",
    "CompactionPlan",
    "PartitionLog",
    "RetentionOutcome",
    "Segment",
    "encode_frame",
    "finish_compaction",
    "fsync_directory",
    "run_compaction",
]

SEGMENT_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
CLEANED_SUFFIX = ".cleaned"
# Sidecar index of a closed segment: magic, base offset and byte size of the segment it covers,
# record count, crc32 of the arrays, then the offsets, positions and timestamps (native int64).
# An index that does not match its segment exactly is ignored and rebuilt by scanning.
_INDEX_HEAD = struct.Struct("<8sqqqI")
_INDEX_MAGIC = b"RVRIDX02"
_PREFIX = struct.Struct("<II")
_BODY = struct.Struct("<qqiiH")
_HEADER_NAME = struct.Struct("<H")
_HEADER_VALUE = struct.Struct("<I")
_FIXED_BYTES = _PREFIX.size + _BODY.size


def fsync_directory(path: Path) -> None:
    """Make a directory's entries (created, renamed or removed files) survive a power loss."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def encode_frame(
    offset: int, timestamp_ms: int, key: bytes | None, value: bytes | None, headers: Headers
) -> bytes:
    """One record as stored on disk (see the module docstring for the layout)."""
    body = bytearray(
        _BODY.pack(
            offset,
            timestamp_ms,
            -1 if key is None else len(key),
            -1 if value is None else len(value),
            len(headers),
        )
    )
    if key:
        body += key
    if value:
        body += value
    if headers:
        body += _encoded_headers(headers) if isinstance(headers, tuple) else _headers_bytes(headers)
    return _PREFIX.pack(len(body), zlib.crc32(body)) + body


@functools.lru_cache(maxsize=1024)
def _encoded_headers(headers: Headers) -> bytes:
    """`_headers_bytes`, remembered: a writer sends the same headers with many records."""
    return _headers_bytes(headers)


def _headers_bytes(headers: Headers) -> bytes:
    """The frame bytes of `headers`."""
    out = bytearray()
    for name, header_value in headers:
        encoded = name.encode()
        out += _HEADER_NAME.pack(len(encoded))
        out += encoded
        out += _HEADER_VALUE.pack(len(header_value))
        out += header_value
    return bytes(out)


def _decode_frames(topic: str, partition: int, data: bytes, count: int) -> list[Record]:
    records: list[Record] = []
    view = memoryview(data)
    pos = 0
    unpack_body = _BODY.unpack_from
    for _ in range(count):
        length = _PREFIX.unpack_from(data, pos)[0]
        start = pos + _PREFIX.size
        offset, timestamp, key_len, value_len, header_count = unpack_body(data, start)
        cursor = start + _BODY.size
        key: bytes | None = None
        if key_len >= 0:
            key = bytes(view[cursor : cursor + key_len])
            cursor += key_len
        value: bytes | None = None
        if value_len >= 0:
            value = bytes(view[cursor : cursor + value_len])
            cursor += value_len
        headers: Headers = ()
        if header_count:
            items = []
            for _h in range(header_count):
                name_len = _HEADER_NAME.unpack_from(data, cursor)[0]
                cursor += _HEADER_NAME.size
                name = bytes(view[cursor : cursor + name_len]).decode()
                cursor += name_len
                header_len = _HEADER_VALUE.unpack_from(data, cursor)[0]
                cursor += _HEADER_VALUE.size
                items.append((name, bytes(view[cursor : cursor + header_len])))
                cursor += header_len
            headers = tuple(items)
        records.append(Record(topic, partition, offset, timestamp, key, value, headers))
        pos = start + length
    return records


class Segment:
    """One segment file and its index; only the newest segment of a partition is appended to."""

    __slots__ = ("_fd", "base", "offsets", "path", "positions", "size", "timestamps")

    def __init__(self, path: Path, base: int) -> None:
        self.path = path
        self.base = base
        self.offsets = array("q")
        self.positions = array("q")
        self.timestamps = array("q")
        self.size = 0
        self._fd: int | None = None

    @classmethod
    def create(cls, directory: Path, base: int, fsync: bool) -> Segment:
        segment = cls(directory / f"{base:020d}{SEGMENT_SUFFIX}", base)
        segment.path.touch()
        if fsync:
            fsync_directory(directory)
        return segment

    @classmethod
    def load(cls, path: Path, verify: bool) -> tuple[Segment, int]:
        """Index an existing file; with `verify`, cut a torn or corrupt tail and return its size."""
        segment = cls(path, int(path.name.removesuffix(SEGMENT_SUFFIX)))
        data = path.read_bytes()
        pos = 0
        total = len(data)
        while pos + _FIXED_BYTES <= total:
            length, crc = _PREFIX.unpack_from(data, pos)
            end = pos + _PREFIX.size + length
            if end > total:
                break
            if verify and zlib.crc32(data[pos + _PREFIX.size : end]) != crc:
                break
            offset, timestamp = struct.unpack_from("<qq", data, pos + _PREFIX.size)
            segment.offsets.append(offset)
            segment.positions.append(pos)
            segment.timestamps.append(timestamp)
            pos = end
        torn = total - pos
        if torn:
            os.truncate(path, pos)
        segment.size = pos
        return segment, torn

    @classmethod
    def load_indexed(cls, path: Path) -> Segment | None:
        """A closed segment from its sidecar index, or None when that is missing or stale."""
        try:
            data = path.with_suffix(INDEX_SUFFIX).read_bytes()
            size = path.stat().st_size
        except FileNotFoundError:
            return None
        if len(data) < _INDEX_HEAD.size:
            return None
        magic, base, covered, count, crc = _INDEX_HEAD.unpack_from(data)
        width = count * 8
        arrays = data[_INDEX_HEAD.size :]
        expected_base = int(path.name.removesuffix(SEGMENT_SUFFIX))
        if (
            magic != _INDEX_MAGIC
            or (base, covered) != (expected_base, size)
            or len(arrays) != 3 * width
            or zlib.crc32(arrays) != crc
        ):
            return None
        segment = cls(path, base)
        segment.offsets.frombytes(arrays[:width])
        segment.positions.frombytes(arrays[width : 2 * width])
        segment.timestamps.frombytes(arrays[2 * width :])
        segment.size = size
        return segment

    def write_index(self) -> None:
        """Persist this (closed) segment's index so a restart does not have to scan the file."""
        target = self.path.with_suffix(INDEX_SUFFIX)
        tmp = target.with_name(target.name + ".tmp")
        arrays = self.offsets.tobytes() + self.positions.tobytes() + self.timestamps.tobytes()
        head = _INDEX_HEAD.pack(_INDEX_MAGIC, self.base, self.size, len(self.offsets), zlib.crc32(arrays))
        with tmp.open("wb") as out:
            out.write(head + arrays)
        os.replace(tmp, target)

    def __len__(self) -> int:
        return len(self.offsets)

    def truncate(self, index: int) -> int:
        """Cut this segment back to its first `index` records; returns how many records were cut."""
        cut = len(self.offsets) - index
        if cut <= 0:
            return 0
        position = self.positions[index]
        self.close()
        os.truncate(self.path, position)
        self.path.with_suffix(INDEX_SUFFIX).unlink(missing_ok=True)
        del self.offsets[index:]
        del self.positions[index:]
        del self.timestamps[index:]
        self.size = position
        return cut

    @property
    def last_timestamp(self) -> int | None:
        return self.timestamps[-1] if self.offsets else None

    def fd(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND)
        return self._fd

    def write(self, frames: Sequence[tuple[int, int, bytes]], fsync: bool) -> None:
        """Append already-encoded frames `(offset, timestamp, frame)` in one write."""
        data = b"".join(frame for _, _, frame in frames)
        fd = self.fd()
        written = 0
        try:
            while written < len(data):
                written += os.write(fd, data[written:])
            if fsync:
                os.fsync(fd)
        except OSError as exc:
            # Cut what a partial write left behind, so the file and the index stay in step.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, self.size)
            raise LogError(f"cannot append to {self.path}: {exc.strerror or exc}") from exc
        pos = self.size
        for offset, timestamp, frame in frames:
            self.offsets.append(offset)
            self.positions.append(pos)
            self.timestamps.append(timestamp)
            pos += len(frame)
        self.size = pos

    def end_of(self, index: int) -> int:
        """The file position where the `index`-th record's frame ends."""
        return self.positions[index + 1] if index + 1 < len(self.positions) else self.size

    def fitting(self, index: int, count: int, max_bytes: int) -> int:
        """How many of the `count` records from the `index`-th fit in `max_bytes` of frames."""
        start = self.positions[index]
        if self.end_of(index + count - 1) - start <= max_bytes:
            return count
        # positions[j] is where record j-1 ends: the first past the budget bounds the batch
        return bisect_right(self.positions, start + max_bytes, index + 1, index + count) - index - 1

    def read(self, topic: str, partition: int, index: int, count: int) -> list[Record]:
        """`count` records starting at the `index`-th record of this segment."""
        end_index = index + count
        start = self.positions[index]
        end = self.positions[end_index] if end_index < len(self.positions) else self.size
        data = os.pread(self.fd(), end - start, start)
        return _decode_frames(topic, partition, data, count)

    def iter_all(self, topic: str, partition: int) -> Iterator[Record]:
        if self.offsets:
            yield from self.read(topic, partition, 0, len(self.offsets))

    def sync(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
        self.path.with_suffix(INDEX_SUFFIX).unlink(missing_ok=True)


class RetentionOutcome(NamedTuple):
    """What one retention pass did to one partition."""

    deleted_segments: int
    deleted_records: int
    compacted_records: int


class PartitionLog:
    """The segments of one partition; the last one is active. Not thread-safe, one event loop."""

    __slots__ = (
        "_bases",
        "compacting",
        "directory",
        "directory_dirty",
        "durable_offset",
        "fsync",
        "hold_from",
        "last_timestamp",
        "next_offset",
        "partition",
        "segments",
        "topic",
        "unsynced",
    )

    def __init__(self, topic: str, partition: int, directory: Path, fsync: bool) -> None:
        self.topic = topic
        self.partition = partition
        self.directory = directory
        self.fsync = fsync
        self.segments: list[Segment] = []
        self._bases: list[int] = []
        self.next_offset = 0
        # With fsync, records below this offset are on disk, and only they are visible to readers:
        # an append waiting for its group fsync is not acknowledged yet, so nobody may act on it.
        self.durable_offset = 0
        self.last_timestamp = 0
        # A compaction runs in a thread for this partition: no second one may plan meanwhile.
        self.compacting = False
        # An unfinished transaction wrote from this offset: nothing from it on is visible yet.
        self.hold_from: int | None = None
        # Rolled while the group fsync does the syncing: descriptors (duplicates) of closed
        # segments it has yet to fsync, and whether the directory (a new segment) needs one.
        self.unsynced: list[int] = []
        self.directory_dirty = False

    @classmethod
    def open(cls, topic: str, partition: int, directory: Path, fsync: bool) -> tuple[PartitionLog, int]:
        """Load (or create) a partition directory; returns it and the torn bytes cut from its tail."""
        log = cls(topic, partition, directory, fsync)
        directory.mkdir(parents=True, exist_ok=True)
        for leftover in [*directory.glob(f"*{CLEANED_SUFFIX}"), *directory.glob("*.tmp")]:
            leftover.unlink()
        paths = sorted(directory.glob(f"*{SEGMENT_SUFFIX}"))
        for orphan in directory.glob(f"*{INDEX_SUFFIX}"):
            if orphan.with_suffix(SEGMENT_SUFFIX) not in paths:
                orphan.unlink()
        torn = 0
        for i, path in enumerate(paths):
            newest = i == len(paths) - 1
            segment = None if newest else Segment.load_indexed(path)
            if segment is None:
                segment, cut = Segment.load(path, verify=newest)
                torn += cut
                if not newest:
                    segment.write_index()
            log.segments.append(segment)
        if not log.segments:
            log.segments.append(Segment.create(directory, 0, fsync))
        log._bases = [s.base for s in log.segments]
        active = log.segments[-1]
        log.next_offset = log.durable_offset = active.offsets[-1] + 1 if active.offsets else active.base
        log.last_timestamp = max((s.last_timestamp or 0) for s in log.segments)
        return log, torn

    @property
    def log_start(self) -> int:
        return self.segments[0].base

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def visible_offset(self) -> int:
        """The end readers see: every record with fsync off, the durable ones with it on, and
        none from an unfinished transaction's first record on."""
        end = min(self.durable_offset, self.next_offset) if self.fsync else self.next_offset
        return end if self.hold_from is None else min(end, self.hold_from)

    def synced(self, offset: int) -> None:
        """A group fsync covered every record below `offset`."""
        self.durable_offset = max(self.durable_offset, offset)

    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def roll_if_older(self, now_ms: int, segment_ms: int, *, defer: bool = False) -> bool:
        """Start a new segment when the active one's first record is `segment_ms` old (Kafka's rule)."""
        active = self.active
        if active.offsets and now_ms - active.timestamps[0] >= segment_ms:
            self.roll(defer=defer)
            return True
        return False

    def roll(self, *, defer: bool = False) -> None:
        """Close the active segment (index written) and start one at the log-end offset.

        The closed segment and the directory are fsynced here, or with `defer` (and fsync on) by
        the next group fsync, which takes them from `unsynced` / `directory_dirty`: the records
        of either segment are durable, and visible, only once it returned.
        """
        closing = self.active
        deferring = defer and self.fsync
        if deferring:
            self.unsynced.append(os.dup(closing.fd()))
            self.directory_dirty = True
        else:
            self.sync_deferred()
            closing.sync()
            self.durable_offset = self.next_offset
        closing.close()
        closing.write_index()
        self.segments.append(Segment.create(self.directory, self.next_offset, self.fsync and not deferring))
        self._bases.append(self.next_offset)

    def sync_deferred(self) -> None:
        """Fsync here what deferred rolls left to the group fsync (a roll or close that cannot wait)."""
        while self.unsynced:
            fd = self.unsynced[0]
            os.fsync(fd)
            os.close(self.unsynced.pop(0))
        if self.directory_dirty:
            fsync_directory(self.directory)
            self.directory_dirty = False

    def truncate_to(self, offset: int) -> int:
        """Remove every record at or after `offset` (an unfinished transaction); returns how many.

        Only run while opening the log, before anything read the partition.
        """
        if offset >= self.next_offset:
            return 0
        removed = 0
        while len(self.segments) > 1 and self.segments[-1].base >= offset:
            segment = self.segments.pop()
            self._bases.pop()
            removed += len(segment)
            segment.delete()
        active = self.active
        removed += active.truncate(bisect_left(active.offsets, offset))
        if self.fsync:
            fsync_directory(self.directory)
        self.next_offset = active.offsets[-1] + 1 if active.offsets else active.base
        self.durable_offset = min(self.durable_offset, self.next_offset)
        self.last_timestamp = max((s.last_timestamp or 0) for s in self.segments)
        return removed

    def append(
        self,
        items: Sequence[tuple[bytes | None, bytes | None, Headers]],
        now_ms: int,
        segment_bytes: int,
        segment_ms: int,
        *,
        sync: bool = True,
    ) -> list[tuple[int, int]]:
        """Write records, rolling segments by age and size; returns `(offset, timestamp)` per record.

        `sync=False` leaves the fsync to the caller's group fsync (`pipeline.log.embedded.syncing`).
        """
        self.roll_if_older(now_ms, segment_ms, defer=not sync)
        timestamp = max(now_ms, self.last_timestamp)
        placed: list[tuple[int, int]] = []
        chunk: list[tuple[int, int, bytes]] = []
        chunk_bytes = 0
        offset = self.next_offset
        for key, value, headers in items:
            frame = encode_frame(offset, timestamp, key, value, headers)
            if self.active.size + chunk_bytes + len(frame) > segment_bytes and (self.active.offsets or chunk):
                if chunk:
                    self._write(chunk, timestamp, sync)
                    chunk, chunk_bytes = [], 0
                self.roll(defer=not sync)
            chunk.append((offset, timestamp, frame))
            chunk_bytes += len(frame)
            placed.append((offset, timestamp))
            offset += 1
        if chunk:
            self._write(chunk, timestamp, sync)
        return placed

    def _write(self, chunk: list[tuple[int, int, bytes]], timestamp: int, sync: bool) -> None:
        self.active.write(chunk, self.fsync and sync)
        self.next_offset = chunk[-1][0] + 1
        if sync:
            self.durable_offset = self.next_offset
        self.last_timestamp = timestamp

    def read(self, position: int, max_records: int, max_bytes: int) -> tuple[list[Record], int]:
        """Up to `max_records` records with offsets >= `position` (which must be >= log_start),
        in at most `max_bytes` of frames (at least one record: one larger than that is read
        alone), and the bytes of frames they took: the one measure of a fetch's size."""
        records: list[Record] = []
        taken = 0
        index = max(bisect_right(self._bases, position) - 1, 0)
        while index < len(self.segments) and len(records) < max_records:
            segment = self.segments[index]
            start = bisect_left(segment.offsets, position)
            available = len(segment.offsets) - start
            if available > 0:
                count = min(available, max_records - len(records))
                # at least one record: a record larger than the budget is read alone
                count = segment.fitting(start, count, max_bytes - taken) or (0 if records else 1)
                if not count:
                    break
                taken += segment.end_of(start + count - 1) - segment.positions[start]
                records.extend(segment.read(self.topic, self.partition, start, count))
            index += 1
        return records, taken

    def offset_for_time(self, timestamp_ms: int) -> int | None:
        for segment in self.segments:
            last = segment.last_timestamp
            if last is not None and last >= timestamp_ms:
                return segment.offsets[bisect_left(segment.timestamps, timestamp_ms)]
        return None

    def delete_retention(
        self, now_ms: int, retention_ms: int | None, retention_bytes: int | None, *, defer: bool = False
    ) -> RetentionOutcome:
        """Delete whole segments past `retention.ms` or beyond `retention.bytes`; moves log-start.

        `defer` leaves the fsyncs of a roll (every segment expired) to the group fsync (`roll`).
        """
        doomed = 0
        if retention_ms is not None and retention_ms >= 0:
            for segment in self.segments:
                last = segment.last_timestamp
                if last is None or now_ms - last <= retention_ms:
                    break
                doomed += 1
        if retention_bytes is not None and retention_bytes >= 0:
            excess = self.size_bytes() - retention_bytes
            by_size = 0
            for segment in self.segments[:-1]:
                if excess - segment.size < 0:
                    break
                excess -= segment.size
                by_size += 1
            doomed = max(doomed, by_size)
        if doomed == 0:
            return RetentionOutcome(0, 0, 0)
        if doomed == len(self.segments):
            self.roll(defer=defer)
        removed = self.segments[:doomed]
        del self.segments[:doomed]
        del self._bases[:doomed]
        records = 0
        for segment in removed:
            records += len(segment)
            segment.delete()
        return RetentionOutcome(len(removed), records, 0)

    def compact(self, now_ms: int, tombstone_retention_ms: int) -> RetentionOutcome:
        """Keep only the newest record per key in closed segments; drop old tombstones (all at once).

        The same three steps `EmbeddedLog.retention_pass` runs with the middle one in a thread.
        """
        plan = self.plan_compaction(now_ms, tombstone_retention_ms)
        if plan is None:
            return RetentionOutcome(0, 0, 0)
        compacted = run_compaction(plan)
        outcome = self.swap_compacted(compacted)
        finish_compaction(compacted)
        return outcome

    def plan_compaction(self, now_ms: int, tombstone_retention_ms: int) -> CompactionPlan | None:
        """What a compaction may read and rewrite, captured now (None when nothing is closed).

        Only the closed segments are rewritten; the active one is read too, so its newer values
        supersede theirs. Records not visible yet (not durable, or an unfinished transaction's)
        supersede nothing and are kept.
        """
        if len(self.segments) < 2 or self.compacting:
            return None
        limit = self.visible_offset
        scans = [
            _Scan(segment.path, len(segment.offsets), segment.size)
            for segment in self.segments
            if segment.offsets
        ]
        return CompactionPlan(
            self.topic,
            self.partition,
            tuple(self.segments[:-1]),
            tuple(scans),
            limit,
            now_ms,
            tombstone_retention_ms,
            self.fsync,
        )

    def swap_compacted(self, compacted: Compacted) -> RetentionOutcome:
        """Put a compaction's segments in place of the ones it read (on the loop, in one step).

        Appends and rolls only ever add segments after the ones compacted, so these are still the
        first ones; if they are not (a second pass got there first), the result is thrown away.
        """
        sealed = compacted.plan.sealed
        if tuple(self.segments[: len(sealed)]) != sealed or len(self.segments) == len(sealed):
            compacted.discard()
            return RetentionOutcome(0, 0, 0)
        survivors: list[Segment] = []
        deleted = 0
        for old, new in zip(sealed, compacted.replacements, strict=True):
            if new is None:
                old.delete()
                deleted += 1
            elif new is old:
                survivors.append(old)
            else:
                old.close()
                os.replace(new.path.with_name(new.path.name + CLEANED_SUFFIX), new.path)
                survivors.append(new)
        self.segments = survivors + self.segments[len(sealed) :]
        self._bases = [s.base for s in self.segments]
        return RetentionOutcome(deleted, 0, compacted.removed_records)

    def close(self) -> None:
        self.sync_deferred()
        for segment in self.segments:
            segment.sync()
            segment.close()


class _Scan(NamedTuple):
    """A segment's first `records` records (`size` bytes), as a compaction reads them."""

    path: Path
    records: int
    size: int


class CompactionPlan(NamedTuple):
    """A compaction's input, captured on the loop: the closed segments to rewrite, the records to
    read for the newest offset of each key, and the durable end beyond which nothing counts."""

    topic: str
    partition: int
    sealed: tuple[Segment, ...]
    scans: tuple[_Scan, ...]
    limit: int
    now_ms: int
    tombstone_retention_ms: int
    fsync: bool


class Compacted(NamedTuple):
    """A compaction's result: per closed segment itself (unchanged), None (to delete) or its
    rewrite, written (and fsynced) next to it as `<name>.cleaned`."""

    plan: CompactionPlan
    replacements: list[Segment | None]
    removed_records: int

    def discard(self) -> None:
        for old, new in zip(self.plan.sealed, self.replacements, strict=True):
            if new is not None and new is not old:
                new.path.with_name(new.path.name + CLEANED_SUFFIX).unlink(missing_ok=True)


def _read_prefix(scan: _Scan) -> bytes:
    """A segment's first `scan.size` bytes, through a descriptor of this thread's own."""
    fd = os.open(scan.path, os.O_RDONLY)
    try:
        return os.pread(fd, scan.size, 0)
    finally:
        os.close(fd)


def _frame_keys(data: bytes, count: int) -> Iterator[tuple[int, int, bytes | None, bool, int, int]]:
    """`(offset, timestamp, key, tombstone, start, end)` of the first `count` frames of `data`.

    No `Record` is built: a compaction of 100,000 records that kept them all alive set off full
    garbage collections (45-90 ms, every thread stopped) from its worker thread.
    """
    pos = 0
    for _ in range(count):
        length = _PREFIX.unpack_from(data, pos)[0]
        start = pos + _PREFIX.size
        offset, timestamp, key_len, value_len, _headers = _BODY.unpack_from(data, start)
        cursor = start + _BODY.size
        key = data[cursor : cursor + key_len] if key_len >= 0 else None
        end = start + length
        yield offset, timestamp, key, value_len < 0, pos, end
        pos = end


def run_compaction(plan: CompactionPlan) -> Compacted:
    """Read and rewrite the planned segments; safe in a worker thread while the loop appends.

    It reads only bytes that never change (closed segments, the active one's prefix written
    before the plan) and writes only `.cleaned` files; the loop's segments are untouched until
    `swap_compacted`. Kept frames are copied byte for byte.
    """
    limit = plan.limit
    latest: dict[bytes | None, int] = {}
    contents: dict[Path, tuple[bytes, int]] = {}
    for scan in plan.scans:
        data = _read_prefix(scan)
        contents[scan.path] = (data, scan.records)
        for offset, _, key, _, _, _ in _frame_keys(data, scan.records):
            if offset < limit:
                latest[key] = offset
    replacements: list[Segment | None] = []
    removed = 0
    for position, segment in enumerate(plan.sealed):
        data, count = contents.get(segment.path, (b"", 0))
        kept = bytearray()
        rewritten = Segment(segment.path, segment.base)
        for offset, timestamp, key, tombstone, start, end in _frame_keys(data, count):
            if offset >= limit or (
                latest.get(key) == offset
                and (not tombstone or plan.now_ms - timestamp < plan.tombstone_retention_ms)
            ):
                rewritten.offsets.append(offset)
                rewritten.positions.append(len(kept))
                rewritten.timestamps.append(timestamp)
                kept += data[start:end]
        rewritten.size = len(kept)
        dropped = len(segment.offsets) - len(rewritten.offsets)
        if not segment.offsets or not dropped:
            replacements.append(segment)
        elif not kept and position > 0:
            replacements.append(None)
        else:
            _write_cleaned(rewritten, kept)
            replacements.append(rewritten)
        if segment.offsets:
            removed += dropped
    return Compacted(plan, replacements, removed)


def _write_cleaned(rewritten: Segment, kept: bytearray) -> None:
    """`kept` written and fsynced as `<segment>.cleaned`, for the swap to rename."""
    with rewritten.path.with_name(rewritten.path.name + CLEANED_SUFFIX).open("wb") as out:
        out.write(kept)
        out.flush()
        os.fsync(out.fileno())


def finish_compaction(compacted: Compacted) -> None:
    """After the swap: index the rewritten segments and make the renames durable (any thread).

    A crash before this leaves a stale index, which the next open ignores and rebuilds.
    """
    for old, new in zip(compacted.plan.sealed, compacted.replacements, strict=True):
        if new is not None and new is not old:
            new.write_index()
    if compacted.plan.fsync and any(
        new is not old for old, new in zip(compacted.plan.sealed, compacted.replacements, strict=True)
    ):
        fsync_directory(compacted.plan.sealed[0].path.parent)
