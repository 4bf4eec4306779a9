"""The embedded log: Kafka's semantics on local files, for one process with no broker to run.

It is the default backend (`make run`), so it honours everything the stages rely on: murmur2 key
partitioning, append-time timestamps, retention and compaction that move the log-start offset,
gap reports, consumer groups with committed offsets and rebalance callbacks, transactions with
fencing per transactional id. Durability: every append is written to the OS before it is
acknowledged (it survives a process crash); with `fsync=True` (the service's default) records,
group offsets and the directories that name them are fsynced before the acknowledgement too, so
they also survive a power loss. A lock file keeps a second process (a second replica) out.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import fcntl
import json
import logging
import os
import re
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple

from prometheus_client import Counter

from pipeline.log.api import (
    AppendResult,
    FencedError,
    Fetched,
    Gap,
    GroupConsumer,
    GroupOffsets,
    Headers,
    Log,
    LogError,
    PendingRecord,
    Reader,
    RebalanceListener,
    Record,
    RecordTooLargeError,
    TopicDescription,
    TopicNotFoundError,
    TopicPartition,
    TopicSpec,
    TransactionalProducer,
)
from pipeline.log.embedded_segments import PartitionLog, RetentionOutcome, fsync_directory
from pipeline.log.faults import crash_point
from pipeline.log.partitioner import murmur2_partition

__all__ = ["EmbeddedLog", "RetentionReport"]

logger = logging.getLogger(__name__)

DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
DEFAULT_SEGMENT_MS = 7 * 24 * 3600 * 1000
DEFAULT_MAX_MESSAGE_BYTES = 1_048_588
DEFAULT_TOMBSTONE_RETENTION_MS = 24 * 3600 * 1000
# Kafka counts a record against max.message.bytes inside a batch: 61 bytes of batch header plus a
# varint-framed record; 21 bytes covers the record's own framing for any realistic size.
_BATCH_OVERHEAD_BYTES = 61 + 21
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")

APPENDED_RECORDS = Counter("reverser_log_embedded_appended_records", "Records appended to the embedded log.")
APPENDED_BYTES = Counter(
    "reverser_log_embedded_appended_bytes", "Bytes (keys, values, headers) appended to the embedded log."
)
RETENTION_DELETED_SEGMENTS = Counter(
    "reverser_log_embedded_retention_deleted_segments",
    "Segments the embedded log deleted for retention.ms / retention.bytes.",
)
COMPACTED_RECORDS = Counter(
    "reverser_log_embedded_compacted_records",
    "Superseded records and expired tombstones removed by compaction.",
)
TORN_BYTES = Counter(
    "reverser_log_embedded_torn_bytes",
    "Bytes of torn or corrupt segment tails cut off when the embedded log was opened.",
)
LISTENER_ERRORS = Counter(
    "reverser_log_embedded_listener_errors",
    "Rebalance listener callbacks that raised (logged; the rebalance went ahead).",
)
GAP_RECORDS = Counter(
    "reverser_log_embedded_gap_records",
    "Records a reader or group member lost because retention deleted them before they were read.",
)
DAMAGED_FILES = Counter(
    "reverser_log_embedded_damaged_files",
    "Group offset or transaction files found empty or corrupt when the embedded log was opened.",
    ["kind"],
)
FENCED_WRITES = Counter(
    "reverser_log_embedded_fenced_writes",
    "Transactions refused because a newer producer with the same transactional id had started.",
)
ROLLED_BACK_RECORDS = Counter(
    "reverser_log_embedded_rolled_back_records",
    "Records of transactions that a crash interrupted before their commit point, removed on open.",
)


class RetentionReport(NamedTuple):
    """What one `enforce_retention` pass did across all topics."""

    deleted_segments: int
    deleted_records: int
    compacted_records: int


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _spec_to_json(spec: TopicSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "partitions": spec.partitions,
        "cleanup_policy": spec.cleanup_policy,
        "retention_ms": spec.retention_ms,
        "retention_bytes": spec.retention_bytes,
        "segment_ms": spec.segment_ms,
        "log_append_time": spec.log_append_time,
        "max_message_bytes": spec.max_message_bytes,
    }


def _write_json(path: Path, data: object, fsync: bool, *, keep_previous: bool = False) -> None:
    """Replace `path` atomically, so a crash leaves either the old or the new content.

    With `fsync`, the content and then the directory entry are on disk when this returns. With
    `keep_previous`, the replaced content stays as `<path>.prev`, the fallback when `path` is found
    damaged (a power loss without fsync can leave a renamed file empty).
    """
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as out:
        json.dump(data, out)
        out.flush()
        if fsync:
            os.fsync(out.fileno())
    if keep_previous and path.exists():
        os.replace(path, _previous(path))
    os.replace(tmp, path)
    if fsync:
        fsync_directory(path.parent)


def _previous(path: Path) -> Path:
    return path.with_name(path.name + ".prev")


def _read_json(path: Path) -> Any:
    """The JSON content of `path`; ValueError (with the reason) when it is empty or not JSON."""
    text = path.read_text(encoding="utf-8")
    if not text.strip():
        raise ValueError("the file is empty")
    return json.loads(text)


def _group_offsets(data: Any) -> dict[TopicPartition, int]:
    """Committed offsets from a group file's content; ValueError when it is not one."""
    try:
        return {TopicPartition(str(t), int(p)): int(o) for t, p, o in data["offsets"]}
    except (TypeError, KeyError, ValueError) as exc:
        raise ValueError(f"not a group offsets file ({type(exc).__name__}: {exc})") from exc


class _Topic:
    __slots__ = ("directory", "partitions", "round_robin", "spec", "waiters")

    def __init__(self, spec: TopicSpec, directory: Path, partitions: list[PartitionLog]) -> None:
        self.spec = spec
        self.directory = directory
        self.partitions = partitions
        self.round_robin = 0
        self.waiters: set[asyncio.Future[None]] = set()

    def wake(self) -> None:
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_result(None)
        self.waiters.clear()


class _Placed(NamedTuple):
    """Records validated for one topic, grouped by the partition each goes to."""

    topic: _Topic
    records: Sequence[PendingRecord]
    by_partition: dict[int, list[int]]
    size_bytes: int


class _Group:
    __slots__ = ("lock", "members", "name", "next_member", "offsets")

    def __init__(self, name: str, offsets: dict[TopicPartition, int]) -> None:
        self.name = name
        self.offsets = offsets
        self.members: list[_GroupMember] = []
        self.lock = asyncio.Lock()
        self.next_member = 0


class EmbeddedLog(Log):
    """A Kafka-compatible log in `directory`; one process at a time (see the module docstring)."""

    kind = "embedded"

    def __init__(
        self,
        directory: Path,
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        fsync: bool = True,
        retention_interval_s: float = 60.0,
        tombstone_retention_ms: int = DEFAULT_TOMBSTONE_RETENTION_MS,
    ) -> None:
        self.directory = Path(directory)
        self.segment_bytes = segment_bytes
        self.fsync = fsync
        self.retention_interval_s = retention_interval_s
        self.tombstone_retention_ms = tombstone_retention_ms
        self._topics: dict[str, _Topic] = {}
        self._groups: dict[str, _Group] = {}
        self._epochs: dict[str, int] = {}
        self._lock_fd: int | None = None
        self._retention_task: asyncio.Task[None] | None = None
        self._owners: set[_Fetcher] = set()

    # lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        if self._lock_fd is not None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock_fd = self._acquire_lock()
        try:
            self._load()
        except BaseException:
            self._release_lock()
            raise
        self._retention_task = asyncio.create_task(self._retention_loop(), name="embedded-log-retention")

    async def close(self) -> None:
        if self._lock_fd is None:
            return
        if self._retention_task is not None:
            self._retention_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._retention_task
            self._retention_task = None
        for owner in list(self._owners):
            owner.closed = True
            owner.wake()
        self._owners.clear()
        for topic in self._topics.values():
            topic.wake()
            for partition in topic.partitions:
                partition.close()
        self._topics.clear()
        self._groups.clear()
        self._release_lock()

    def _acquire_lock(self) -> int:
        path = self.directory / "LOCK"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise LogError(
                f"embedded log at {self.directory} is in use by pid {holder}; "
                "the embedded log supports one replica"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def _load(self) -> None:
        topics_dir = self.directory / "topics"
        topics_dir.mkdir(exist_ok=True)
        for meta in sorted(topics_dir.glob("*/topic.json")):
            raw = json.loads(meta.read_text(encoding="utf-8"))
            self._open_topic(TopicSpec(**raw), meta.parent)
        groups_dir = self.directory / "groups"
        groups_dir.mkdir(exist_ok=True)
        names = {path.name.removesuffix(".prev") for path in groups_dir.glob("*.json*")}
        for file_name in sorted(n for n in names if n.endswith(".json")):
            name = urllib.parse.unquote(file_name.removesuffix(".json"))
            self._groups[name] = _Group(name, self._load_group_offsets(groups_dir / file_name))
        self._recover_transactions()

    def _load_group_offsets(self, path: Path) -> dict[TopicPartition, int]:
        """A group's committed offsets; a damaged file is reported and replaced by its previous version.

        The previous version is at most one commit behind, so the group re-reads a little (which
        every stage tolerates); only when both are unreadable does it start from its reset policy.
        """
        try:
            return _group_offsets(_read_json(path))
        except FileNotFoundError:
            problem = "missing"
        except (OSError, ValueError) as exc:
            problem = str(exc)
            DAMAGED_FILES.labels("group").inc()
        previous = _previous(path)
        try:
            offsets = _group_offsets(_read_json(previous))
        except (OSError, ValueError) as exc:
            logger.error(
                "embedded log: group offsets %s unreadable (%s) and no usable previous version (%s); "
                "the group starts from its reset policy",
                path,
                problem,
                exc,
            )
            return {}
        logger.error(
            "embedded log: group offsets %s unreadable (%s); recovered the previous commit from %s",
            path,
            problem,
            previous.name,
        )
        return offsets

    def _recover_transactions(self) -> None:
        """Finish what a crash interrupted: roll back before the commit point, complete after it."""
        txn_dir = self.directory / "transactions"
        txn_dir.mkdir(exist_ok=True)
        for path in sorted(txn_dir.glob("*.json")):
            try:
                intent = _read_json(path)
                state = intent["state"]
                if state == "prepared":
                    for topic, partition, end in intent["truncate"]:
                        removed = self._partition(TopicPartition(topic, partition)).truncate_to(int(end))
                        ROLLED_BACK_RECORDS.inc(removed)
                        logger.warning(
                            "embedded log: rolled back %d records of an unfinished transaction on %s[%d]",
                            removed,
                            topic,
                            partition,
                        )
                elif state == "committed":
                    group = self._group(str(intent["group"]))
                    group.offsets.update(_group_offsets(intent))
                    self._persist_group(group)
                else:
                    raise ValueError(f"unknown state {state!r}")
            except (OSError, ValueError, KeyError, TypeError, LogError) as exc:
                DAMAGED_FILES.labels("transaction").inc()
                logger.error("embedded log: transaction file %s unusable (%s); discarded", path, exc)
            path.unlink()

    def _open_topic(self, spec: TopicSpec, directory: Path) -> _Topic:
        partitions = []
        for number in range(spec.partitions):
            partition, torn = PartitionLog.open(spec.name, number, directory / str(number), self.fsync)
            if torn:
                TORN_BYTES.inc(torn)
                logger.warning(
                    "embedded log: cut %d torn bytes from the tail of %s[%d]", torn, spec.name, number
                )
            partitions.append(partition)
        topic = self._topics[spec.name] = _Topic(spec, directory, partitions)
        return topic

    def _require_started(self) -> None:
        if self._lock_fd is None:
            raise LogError(f"embedded log at {self.directory} is not started")

    def _topic(self, name: str) -> _Topic:
        self._require_started()
        topic = self._topics.get(name)
        if topic is None:
            raise TopicNotFoundError(f"topic {name!r} does not exist in the embedded log")
        return topic

    def _partition(self, tp: TopicPartition) -> PartitionLog:
        topic = self._topic(tp.topic)
        if not 0 <= tp.partition < len(topic.partitions):
            raise TopicNotFoundError(f"{tp}: topic {tp.topic!r} has {len(topic.partitions)} partitions")
        return topic.partitions[tp.partition]

    # topics ---------------------------------------------------------------------------------
    async def broker_count(self) -> int:
        return 1

    async def create_topics(self, specs: Sequence[TopicSpec]) -> list[str]:
        self._require_started()
        created = []
        for spec in specs:
            if spec.name in self._topics:
                continue
            if not _TOPIC_NAME.match(spec.name) or spec.name in {".", ".."}:
                raise LogError(f"invalid topic name {spec.name!r}")
            if spec.partitions < 1:
                raise LogError(f"topic {spec.name!r}: partitions must be >= 1")
            directory = self.directory / "topics" / spec.name
            directory.mkdir(parents=True, exist_ok=True)
            _write_json(directory / "topic.json", _spec_to_json(spec), fsync=True)
            fsync_directory(directory.parent)
            self._open_topic(spec, directory)
            if self.fsync:
                fsync_directory(directory)
            created.append(spec.name)
        if created:
            for group in list(self._groups.values()):
                async with group.lock:
                    if any(set(created) & set(m.topics) for m in group.members):
                        await self._rebalance(group)
        return created

    async def describe_topics(self, names: Sequence[str]) -> dict[str, TopicDescription]:
        self._require_started()
        # One copy in one process: that is what a replication check must see, whatever was asked.
        return {
            name: TopicDescription(
                name, topic.spec.partitions, {**topic.spec.configs(), "min.insync.replicas": "1"}
            )
            for name in names
            if (topic := self._topics.get(name)) is not None
        }

    async def partitions_for(self, topic: str) -> int:
        return len(self._topic(topic).partitions)

    # writing --------------------------------------------------------------------------------
    async def append(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        headers: Headers = (),
        partition: int | None = None,
    ) -> AppendResult:
        results = self._append(topic, [PendingRecord(value, key, headers, partition)])
        return results[0]

    async def append_many(self, topic: str, records: Sequence[PendingRecord]) -> list[AppendResult]:
        return self._append(topic, records) if records else []

    def _append(self, name: str, records: Sequence[PendingRecord]) -> list[AppendResult]:
        return self._write(self._place(name, records))

    def _place(self, name: str, records: Sequence[PendingRecord]) -> _Placed:
        """Validate records and choose their partitions, without writing anything."""
        topic = self._topic(name)
        spec = topic.spec
        count = len(topic.partitions)
        max_bytes = spec.max_message_bytes or DEFAULT_MAX_MESSAGE_BYTES
        by_partition: dict[int, list[int]] = {}
        sizes = []
        for index, record in enumerate(records):
            size = record.size_bytes
            if size + _BATCH_OVERHEAD_BYTES > max_bytes:
                raise RecordTooLargeError(
                    f"record of {size} bytes exceeds max.message.bytes={max_bytes} of topic {name!r}"
                )
            if spec.cleanup_policy == "compact" and record.key is None:
                raise LogError(f"compacted topic {name!r} cannot accept a record without a key")
            sizes.append(size)
            by_partition.setdefault(self._choose_partition(topic, record, count), []).append(index)
        return _Placed(topic, records, by_partition, sum(sizes))

    def _write(self, placed: _Placed) -> list[AppendResult]:
        """Write validated records to their partitions (synchronously: nothing interleaves)."""
        topic, records, by_partition = placed.topic, placed.records, placed.by_partition
        name, spec = topic.spec.name, topic.spec
        now = _now_ms()
        segment_ms = spec.segment_ms if spec.segment_ms is not None else DEFAULT_SEGMENT_MS
        results: list[AppendResult | None] = [None] * len(records)
        for number, indexes in by_partition.items():
            partition = topic.partitions[number]
            written = partition.append(
                [(records[i].key, records[i].value, records[i].headers) for i in indexes],
                now,
                self.segment_bytes,
                segment_ms,
            )
            for i, (offset, timestamp) in zip(indexes, written, strict=True):
                results[i] = AppendResult(name, number, offset, timestamp)
        APPENDED_RECORDS.inc(len(records))
        APPENDED_BYTES.inc(placed.size_bytes)
        topic.wake()
        return [r for r in results if r is not None]

    # transactions ---------------------------------------------------------------------------
    def transactional_producer(self, transactional_id: str) -> TransactionalProducer:
        self._require_started()
        return _TransactionalProducer(self, transactional_id)

    def _fence(self, transactional_id: str) -> int:
        """A new epoch for `transactional_id`: producers holding an older one are fenced."""
        epoch = self._epochs.get(transactional_id, 0) + 1
        self._epochs[transactional_id] = epoch
        return epoch

    def _commit_transaction(
        self,
        transactional_id: str,
        epoch: int,
        appends: Mapping[str, Sequence[PendingRecord]],
        offsets: GroupOffsets | None,
    ) -> list[AppendResult]:
        """Write a transaction all or nothing, across a crash at any point.

        Everything here is synchronous, so no reader sees a partial transaction while the process
        runs. Across a crash, an intent file decides: written as `prepared` (with each partition's
        end offset) before the records, replaced by `committed` (with the group offsets) once they
        are written: the commit point. Opening the log rolls a `prepared` transaction back and
        completes a `committed` one (`_recover_transactions`).
        """
        self._require_started()
        if self._epochs.get(transactional_id) != epoch:
            FENCED_WRITES.inc()
            raise FencedError(
                f"transactional id {transactional_id!r}: a newer producer (epoch "
                f"{self._epochs.get(transactional_id)}) has started; this one (epoch {epoch}) is fenced"
            )
        placed = [self._place(name, records) for name, records in appends.items() if records]
        if offsets is not None:
            for tp, offset in offsets.offsets.items():
                self._partition(tp)
                if offset < 0:
                    raise LogError(f"cannot commit negative offset {offset} for {tp}")
        intent_path = (
            self.directory / "transactions" / f"{urllib.parse.quote(transactional_id, safe='')}.json"
        )
        if placed:
            ends = [
                [p.topic.spec.name, number, p.topic.partitions[number].next_offset]
                for p in placed
                for number in p.by_partition
            ]
            _write_json(intent_path, {"state": "prepared", "truncate": ends}, self.fsync)
            crash_point("embedded-transaction-prepared")
        results = [result for p in placed for result in self._write(p)]
        if offsets is None:
            self._forget_intent(intent_path)
            return results
        crash_point("embedded-transaction-written")
        entries = [[tp.topic, tp.partition, o] for tp, o in sorted(offsets.offsets.items())]
        if placed:
            _write_json(
                intent_path, {"state": "committed", "group": offsets.group_id, "offsets": entries}, self.fsync
            )
            crash_point("embedded-transaction-committed")
        self._commit(self._group(offsets.group_id), offsets.offsets)
        self._forget_intent(intent_path)
        return results

    def _forget_intent(self, path: Path) -> None:
        """Remove a finished transaction's intent durably, so a power loss cannot replay it later."""
        if path.exists():
            path.unlink()
            if self.fsync:
                fsync_directory(path.parent)

    @staticmethod
    def _choose_partition(topic: _Topic, record: PendingRecord, count: int) -> int:
        if record.partition is not None:
            if not 0 <= record.partition < count:
                raise LogError(
                    f"partition {record.partition} does not exist: topic {topic.spec.name!r} "
                    f"has {count} partitions"
                )
            return record.partition
        if record.key is not None:
            return murmur2_partition(record.key, count)
        topic.round_robin = (topic.round_robin + 1) % count
        return topic.round_robin

    # offsets --------------------------------------------------------------------------------
    async def beginning_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self._partition(tp).log_start for tp in tps}

    async def end_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self._partition(tp).next_offset for tp in tps}

    async def offsets_for_times(
        self, timestamps_ms: dict[TopicPartition, int]
    ) -> dict[TopicPartition, int | None]:
        return {tp: self._partition(tp).offset_for_time(ts) for tp, ts in timestamps_ms.items()}

    # retention ------------------------------------------------------------------------------
    def enforce_retention(self, now_ms: int | None = None) -> RetentionReport:
        """Apply retention.ms / retention.bytes and compaction to every partition now.

        Runs periodically on a background task; tests call it with an explicit `now_ms` to age the
        log deterministically. Segments older than `segment.ms` are rolled first, as Kafka would on
        the next append, so an idle topic still ages out.
        """
        self._require_started()
        now = _now_ms() if now_ms is None else now_ms
        totals = [0, 0, 0]
        for topic in self._topics.values():
            spec = topic.spec
            segment_ms = spec.segment_ms if spec.segment_ms is not None else DEFAULT_SEGMENT_MS
            for partition in topic.partitions:
                partition.roll_if_older(now, segment_ms)
                outcome: RetentionOutcome
                if spec.cleanup_policy == "compact":
                    outcome = partition.compact(now, self.tombstone_retention_ms)
                else:
                    outcome = partition.delete_retention(now, spec.retention_ms, spec.retention_bytes)
                for i, value in enumerate(outcome):
                    totals[i] += value
        RETENTION_DELETED_SEGMENTS.inc(totals[0])
        COMPACTED_RECORDS.inc(totals[2])
        return RetentionReport(*totals)

    async def _retention_loop(self) -> None:
        while True:
            await asyncio.sleep(self.retention_interval_s)
            try:
                self.enforce_retention()
            except OSError:
                logger.exception("embedded log: retention pass failed; retrying next interval")

    # reading --------------------------------------------------------------------------------
    def reader(self) -> Reader:
        self._require_started()
        reader = _Reader(self)
        self._owners.add(reader)
        return reader

    def group_consumer(
        self,
        group_id: str,
        topics: Sequence[str],
        *,
        listener: RebalanceListener | None = None,
        reset: Literal["earliest", "latest"] = "earliest",
    ) -> GroupConsumer:
        self._require_started()
        member = _GroupMember(self, group_id, tuple(topics), listener, reset)
        self._owners.add(member)
        return member

    async def _fetch(self, owner: _Fetcher, timeout_ms: int, max_records: int) -> Fetched:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_ms, 0) / 1000
        while True:
            fetched = self._collect(owner, max(max_records, 1))
            remaining = deadline - loop.time()
            if fetched.records or fetched.gaps or remaining <= 0 or owner.closed:
                return fetched
            waiter: asyncio.Future[None] = loop.create_future()
            topics = [
                self._topics[name] for name in {tp.topic for tp in owner.positions()} if name in self._topics
            ]
            for topic in topics:
                topic.waiters.add(waiter)
            owner.waiter = waiter
            try:
                await asyncio.wait({waiter}, timeout=remaining)
            finally:
                owner.waiter = None
                for topic in topics:
                    topic.waiters.discard(waiter)

    def _collect(self, owner: _Fetcher, max_records: int) -> Fetched:
        records: list[Record] = []
        gaps: list[Gap] = []
        positions = owner.positions()
        tps = sorted(positions)
        if not tps:
            return Fetched(records, gaps)
        start = owner.rotation % len(tps)
        owner.rotation += 1
        for tp in tps[start:] + tps[:start]:
            if len(records) >= max_records:
                break
            topic = self._topics.get(tp.topic)
            if topic is None or tp.partition >= len(topic.partitions):
                continue
            partition = topic.partitions[tp.partition]
            position = positions[tp]
            if position < partition.log_start:
                gap = Gap(tp.topic, tp.partition, position, partition.log_start)
                gaps.append(gap)
                GAP_RECORDS.inc(gap.lost)
                position = partition.log_start
            if position < partition.next_offset:
                batch = partition.read(position, max_records - len(records))
                if batch:
                    records.extend(batch)
                    position = batch[-1].offset + 1
                else:
                    position = partition.next_offset
            positions[tp] = position
        return Fetched(records, gaps)

    # consumer groups ------------------------------------------------------------------------
    def _group(self, group_id: str) -> _Group:
        group = self._groups.get(group_id)
        if group is None:
            group = self._groups[group_id] = _Group(group_id, {})
        return group

    def _persist_group(self, group: _Group) -> None:
        path = self.directory / "groups" / f"{urllib.parse.quote(group.name, safe='')}.json"
        entries = [[tp.topic, tp.partition, offset] for tp, offset in sorted(group.offsets.items())]
        _write_json(path, {"group": group.name, "offsets": entries}, fsync=self.fsync, keep_previous=True)

    async def _rebalance(self, group: _Group) -> None:
        """Eager range assignment like Kafka's: everyone gives up everything, then gets a share."""
        members = list(group.members)
        for member in members:
            if member.joined:
                await _tell(member, "on_partitions_revoked", member.assigned)
        shares: dict[int, set[TopicPartition]] = {m.member_id: set() for m in members}
        topics = sorted({name for m in members for name in m.topics})
        for name in topics:
            topic = self._topics.get(name)
            if topic is None:
                continue
            subscribed = sorted((m for m in members if name in m.topics), key=lambda m: m.member_id)
            count = len(topic.partitions)
            per, extra = divmod(count, len(subscribed))
            first = 0
            for i, member in enumerate(subscribed):
                take = per + (1 if i < extra else 0)
                shares[member.member_id].update(TopicPartition(name, p) for p in range(first, first + take))
                first += take
        for member in members:
            member.assigned = shares[member.member_id]
            member.position_map.clear()
            member.joined = True
        for member in members:
            await _tell(member, "on_partitions_assigned", member.assigned)
            member.wake()

    async def list_groups(self) -> list[str]:
        self._require_started()
        return sorted(name for name, g in self._groups.items() if g.offsets or g.members)

    async def group_offsets(self, group_id: str) -> dict[TopicPartition, int]:
        self._require_started()
        group = self._groups.get(group_id)
        return dict(group.offsets) if group is not None else {}

    async def commit_group_offsets(self, group_id: str, offsets: dict[TopicPartition, int]) -> None:
        self._require_started()
        group = self._group(group_id)
        if group.members:
            raise LogError(
                f"group {group_id!r} has {len(group.members)} active members; "
                "stop them before committing offsets from outside"
            )
        self._commit(group, offsets)

    def _commit(self, group: _Group, offsets: dict[TopicPartition, int]) -> None:
        for tp, offset in offsets.items():
            self._partition(tp)
            if offset < 0:
                raise LogError(f"cannot commit negative offset {offset} for {tp}")
        group.offsets.update(offsets)
        self._persist_group(group)

    async def delete_group(self, group_id: str) -> None:
        self._require_started()
        group = self._groups.get(group_id)
        if group is None:
            return
        if group.members:
            raise LogError(f"group {group_id!r} is not empty; stop its members first")
        del self._groups[group_id]
        path = self.directory / "groups" / f"{urllib.parse.quote(group_id, safe='')}.json"
        path.unlink(missing_ok=True)
        _previous(path).unlink(missing_ok=True)


class _TransactionalProducer(TransactionalProducer):
    """Fencing within the one process: each `start()` takes a newer epoch of the id."""

    def __init__(self, log: EmbeddedLog, transactional_id: str) -> None:
        self._log = log
        self.transactional_id = transactional_id
        self._epoch: int | None = None

    async def start(self) -> None:
        if self._epoch is None:
            self._epoch = self._log._fence(self.transactional_id)

    async def commit(
        self,
        appends: Mapping[str, Sequence[PendingRecord]],
        offsets: GroupOffsets | None = None,
    ) -> list[AppendResult]:
        if self._epoch is None:
            raise LogError(f"transactional producer {self.transactional_id!r} is not started")
        return self._log._commit_transaction(self.transactional_id, self._epoch, appends, offsets)

    async def close(self) -> None:
        self._epoch = None


async def _tell(
    member: _GroupMember,
    callback: Literal["on_partitions_revoked", "on_partitions_assigned"],
    partitions: set[TopicPartition],
) -> None:
    """Run a listener callback; like Kafka clients, a failing listener is logged, not fatal to the group."""
    if member.listener is None:
        return
    try:
        await getattr(member.listener, callback)(set(partitions))
    except Exception:
        LISTENER_ERRORS.inc()
        logger.exception("embedded log: %s of group %r failed", callback, member.group_id)


class _Fetcher(abc.ABC):
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


class _Reader(_Fetcher, Reader):
    def __init__(self, log: EmbeddedLog) -> None:
        self._log = log
        self._positions: dict[TopicPartition, int] = {}
        self.closed = False
        self.rotation = 0
        self.waiter = None

    def positions(self) -> dict[TopicPartition, int]:
        return self._positions

    async def assign(self, positions: dict[TopicPartition, int]) -> None:
        self._check_open()
        for tp, offset in positions.items():
            self._log._partition(tp)
            if offset < 0:
                raise LogError(f"cannot read {tp} from negative offset {offset}")
        self._positions = dict(positions)
        self.wake()

    async def seek(self, tp: TopicPartition, offset: int) -> None:
        self._check_open()
        if tp not in self._positions:
            raise LogError(f"{tp} is not assigned to this reader")
        if offset < 0:
            raise LogError(f"cannot seek {tp} to negative offset {offset}")
        self._positions[tp] = offset

    def position(self, tp: TopicPartition) -> int:
        if tp not in self._positions:
            raise LogError(f"{tp} is not assigned to this reader")
        return self._positions[tp]

    async def fetch(self, timeout_ms: int = 1000, max_records: int = 500) -> Fetched:
        self._check_open()
        return await self._log._fetch(self, timeout_ms, max_records)

    async def close(self) -> None:
        self.closed = True
        self.wake()
        self._log._owners.discard(self)

    def _check_open(self) -> None:
        if self.closed:
            raise LogError("reader is closed")
        self._log._require_started()


class _GroupMember(_Fetcher, GroupConsumer):
    def __init__(
        self,
        log: EmbeddedLog,
        group_id: str,
        topics: tuple[str, ...],
        listener: RebalanceListener | None,
        reset: Literal["earliest", "latest"],
    ) -> None:
        self._log = log
        self.group_id = group_id
        self.topics = topics
        self.listener = listener
        self.reset = reset
        self.assigned: set[TopicPartition] = set()
        self.position_map: dict[TopicPartition, int] = {}
        self.member_id = -1
        self.joined = False
        self.started = False
        self.closed = False
        self.rotation = 0
        self.waiter = None

    def positions(self) -> dict[TopicPartition, int]:
        """Positions of assigned partitions, initialised from committed offsets or the reset policy."""
        group = self._log._group(self.group_id)
        for tp in self.assigned:
            if tp not in self.position_map:
                committed = group.offsets.get(tp)
                if committed is None:
                    partition = self._log._partition(tp)
                    committed = partition.log_start if self.reset == "earliest" else partition.next_offset
                self.position_map[tp] = committed
        return self.position_map

    async def start(self) -> None:
        if self.started:
            return
        if self.closed:
            raise LogError(f"group member of {self.group_id!r} is closed")
        self._log._require_started()
        group = self._log._group(self.group_id)
        async with group.lock:
            self.member_id = group.next_member
            group.next_member += 1
            group.members.append(self)
            self.started = True
            await self._log._rebalance(group)

    def assignment(self) -> set[TopicPartition]:
        return set(self.assigned)

    async def fetch(self, timeout_ms: int = 1000, max_records: int = 500) -> Fetched:
        self._check_active()
        return await self._log._fetch(self, timeout_ms, max_records)

    async def seek(self, tp: TopicPartition, offset: int) -> None:
        self._check_active()
        if tp not in self.assigned:
            raise LogError(f"{tp} is not assigned to this member of {self.group_id!r}")
        if offset < 0:
            raise LogError(f"cannot seek {tp} to negative offset {offset}")
        self.position_map[tp] = offset

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        self._check_active()
        foreign = sorted(str(tp) for tp in offsets if tp not in self.assigned)
        if foreign:
            raise LogError(
                f"cannot commit {', '.join(foreign)}: not assigned to this member of {self.group_id!r}"
            )
        self._log._commit(self._log._group(self.group_id), offsets)

    async def committed(self, tp: TopicPartition) -> int | None:
        self._log._require_started()
        return self._log._group(self.group_id).offsets.get(tp)

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.wake()
        self._log._owners.discard(self)
        if not self.started or self._log._lock_fd is None:
            return
        group = self._log._group(self.group_id)
        async with group.lock:
            if self in group.members:
                group.members.remove(self)
                self.assigned = set()
                if group.members:
                    await self._log._rebalance(group)

    def _check_active(self) -> None:
        if self.closed:
            raise LogError(f"group member of {self.group_id!r} is closed")
        if not self.started:
            raise LogError(f"group member of {self.group_id!r} is not started; call start() first")
        self._log._require_started()
