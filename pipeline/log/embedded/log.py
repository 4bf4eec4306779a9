"""The embedded log: Kafka's semantics on local files, for one process with no broker to run.

It is the default backend (`make run`), so it honours everything the stages rely on: murmur2 key
partitioning, append-time timestamps, retention and compaction that move the log-start offset,
gap reports, consumer groups with committed offsets and rebalance callbacks, transactions with
fencing per transactional id. Durability: every append is written to the OS before it is
acknowledged (it survives a process crash); with `fsync=True` (the service's default) records,
group offsets and the directories that name them are fsynced before the acknowledgement too, so
they also survive a power loss. Appends (a transaction's records too) share a group fsync run in a
thread (`syncing.GroupSync`), which also covers the segments a roll closed and created, and the
other fsyncs (transaction intents, group offsets, compaction) run in threads as well, so the loop
never waits on the disk; readers see a record only once it is durable (and a transaction's only
once it committed). A lock file keeps a second process (a second replica) out.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import re
import time
import urllib.parse
from collections.abc import Callable, Collection, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from prometheus_client import Counter

from pipeline.config import LogBackend
from pipeline.log.api import (
    DEFAULT_MAX_MESSAGE_BYTES,
    AppendResult,
    GroupConsumer,
    Log,
    LogError,
    LogInUseError,
    Membership,
    PendingRecord,
    Placement,
    Reader,
    TopicDescription,
    TopicLimits,
    TopicNotFoundError,
    TopicPartition,
    TopicSpec,
    TransactionalProducer,
)
from pipeline.log.embedded.files import previous_version, spec_to_json, write_json
from pipeline.log.embedded.groups import EmbeddedGroupMember, GroupState, load_group_offsets, rebalance
from pipeline.log.embedded.reading import EmbeddedReader
from pipeline.log.embedded.segments import (
    PartitionLog,
    RetentionOutcome,
    finish_compaction,
    fsync_directory,
    run_compaction,
)
from pipeline.log.embedded.syncing import GroupSync, in_thread
from pipeline.log.embedded.transactions import (
    EmbeddedTransactionalProducer,
    recover_transactions,
)

logger = logging.getLogger(__name__)

_A = TypeVar("_A")
_R = TypeVar("_R")


DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
DEFAULT_SEGMENT_MS = 7 * 24 * 3600 * 1000
DEFAULT_TOMBSTONE_RETENTION_MS = 24 * 3600 * 1000
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


class RetentionReport(NamedTuple):
    """What one `enforce_retention` pass did across all topics."""

    deleted_segments: int
    deleted_records: int
    compacted_records: int


def _report(outcomes: Sequence[RetentionOutcome]) -> RetentionReport:
    """Add up a pass's outcomes, and count them."""
    report = (
        RetentionReport(*(sum(column) for column in zip(*outcomes, strict=True)))
        if outcomes
        else RetentionReport(0, 0, 0)
    )
    RETENTION_DELETED_SEGMENTS.inc(report.deleted_segments)
    COMPACTED_RECORDS.inc(report.compacted_records)
    return report


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class OpenTopic:
    __slots__ = ("directory", "limits", "partitions", "round_robin", "spec", "waiters")

    def __init__(self, spec: TopicSpec, directory: Path, partitions: list[PartitionLog]) -> None:
        self.spec = spec
        self.directory = directory
        self.partitions = partitions
        self.limits = TopicLimits(
            spec.name,
            len(partitions),
            spec.cleanup_policy == "compact",
            spec.max_message_bytes or DEFAULT_MAX_MESSAGE_BYTES,
        )
        self.round_robin = 0
        self.waiters: set[asyncio.Future[None]] = set()

    def wake(self) -> None:
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_result(None)
        self.waiters.clear()


class Placed(NamedTuple):
    """Records checked for one topic (`Log.place`), grouped by the partition each goes to."""

    topic: OpenTopic
    records: Sequence[PendingRecord]
    by_partition: dict[int, list[int]]


class EmbeddedLog(Log):
    """A Kafka-compatible log in `directory`; one process at a time (see the module docstring)."""

    kind = LogBackend.EMBEDDED

    def __init__(
        self,
        directory: Path,
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        fsync: bool = True,
        retention_interval_s: float = 60.0,
        tombstone_retention_ms: int = DEFAULT_TOMBSTONE_RETENTION_MS,
    ) -> None:
        super().__init__()
        self.directory = Path(directory)
        self.segment_bytes = segment_bytes
        self.fsync = fsync
        self.retention_interval_s = retention_interval_s
        self.tombstone_retention_ms = tombstone_retention_ms
        self._topics: dict[str, OpenTopic] = {}
        self._groups: dict[str, GroupState] = {}
        self._epochs: dict[str, int] = {}
        self._lock_fd: int | None = None
        self._retention_task: asyncio.Task[None] | None = None
        self._thread_step: asyncio.Future[Any] | None = None
        self._group_sync: GroupSync[tuple[OpenTopic, PartitionLog], list[_SyncJob]] = GroupSync(
            _begin_sync, _run_sync, _end_sync
        )
        self._holds: dict[PartitionLog, asyncio.Future[None]] = {}
        self.transaction_lock = asyncio.Lock()

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
        if self._thread_step is not None:
            with contextlib.suppress(Exception):
                await self._thread_step
            self._thread_step = None
        await self._group_sync.drain()
        await self._close_owners()
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
            raise LogInUseError(
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
            self._groups[name] = GroupState(name, load_group_offsets(groups_dir / file_name))
        recover_transactions(self)

    def _open_topic(self, spec: TopicSpec, directory: Path) -> OpenTopic:
        partitions = []
        for number in range(spec.partitions):
            partition, torn = PartitionLog.open(spec.name, number, directory / str(number), self.fsync)
            if torn:
                TORN_BYTES.inc(torn)
                logger.warning(
                    "embedded log: cut %d torn bytes from the tail of %s[%d]", torn, spec.name, number
                )
            partitions.append(partition)
        topic = self._topics[spec.name] = OpenTopic(spec, directory, partitions)
        return topic

    @property
    def started(self) -> bool:
        """Whether the log is open (started and not yet closed)."""
        return self._lock_fd is not None

    def _require_started(self) -> None:
        if self._lock_fd is None:
            raise LogError(f"embedded log at {self.directory} is not started")

    def require_started(self) -> None:
        """Raise LogError unless the log is open: the check its readers and producers make first."""
        self._require_started()

    def find_topic(self, name: str) -> OpenTopic | None:
        """The open topic `name`, or None where it does not exist."""
        return self._topics.get(name)

    def _topic(self, name: str) -> OpenTopic:
        self._require_started()
        topic = self._topics.get(name)
        if topic is None:
            raise TopicNotFoundError(f"topic {name!r} does not exist in the embedded log")
        return topic

    def partition(self, tp: TopicPartition) -> PartitionLog:
        """The open partition `tp` (TopicNotFoundError unless it exists; LogError unless started)."""
        topic = self._topic(tp.topic)
        if not topic.limits.has_partition(tp.partition):
            raise TopicNotFoundError(topic.limits.missing_partition(tp.partition))
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
            write_json(directory / "topic.json", spec_to_json(spec), fsync=True)
            fsync_directory(directory.parent)
            self._open_topic(spec, directory)
            if self.fsync:
                fsync_directory(directory)
            created.append(spec.name)
        if created:
            for group in list(self._groups.values()):
                async with group.lock:
                    if any(set(created) & set(m.topics) for m in group.members):
                        await rebalance(self, group)
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

    async def _topic_limits(self, topic: str, *, refresh: bool = False) -> TopicLimits:
        return self._topic(topic).limits

    # writing --------------------------------------------------------------------------------
    async def _append(self, placement: Placement) -> list[AppendResult]:
        """Write now, acknowledge once durable: the group fsync that began after the write returned.

        Records written after an unfinished transaction's (on one of its partitions) are
        acknowledged only once it finished: a crash before its commit point rolls them back too.
        """
        placed = self.placed(placement)
        results = await self.write_durably([placed])
        for number in placed.by_partition:
            partition = placed.topic.partitions[number]
            last = max(r.offset for r in results if r.partition == number)
            while (held := self._holds.get(partition)) is not None and last >= (partition.hold_from or 0):
                await asyncio.shield(held)
        return results

    async def write_durably(self, placed: Sequence[Placed]) -> list[AppendResult]:
        """Write now (offsets in order), return once a group fsync begun after the write returned."""
        if not self.fsync:
            return [result for p in placed for result in self.write_placed(p)]
        results = [result for p in placed for result in self.write_placed(p, sync=False)]
        ticket = 0
        for p in placed:
            for number in p.by_partition:
                ticket = self._group_sync.written((p.topic, p.topic.partitions[number]))
        if not ticket:
            return results
        durable = asyncio.ensure_future(self._group_sync.durable(ticket))
        try:
            await asyncio.shield(durable)
        except asyncio.CancelledError:
            # The records are written: a caller cancelled meanwhile still waits for them to be
            # visible, as a synchronous append was, so whoever starts after it (a restarted
            # stream reading its cursor) sees them.
            with contextlib.suppress(OSError):
                await durable
            raise
        except OSError as exc:
            names = ", ".join(sorted({p.topic.spec.name for p in placed}))
            raise LogError(f"cannot fsync {names}: {exc.strerror or exc}") from exc
        return results

    @contextlib.contextmanager
    def holding(self, placed: Sequence[Placed]) -> Iterator[None]:
        """Keep what is written to `placed`'s partitions from now on invisible until the block ends.

        A transaction holds its partitions from before its intent is written until its commit
        point, so no reader sees part of it and no append after it is acknowledged before it.
        One transaction at a time (`transaction_lock`), so holds never overlap.
        """
        held = {(p.topic, p.topic.partitions[number]) for p in placed for number in p.by_partition}
        released: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for _, partition in held:
            partition.hold_from = partition.next_offset
            self._holds[partition] = released
        try:
            yield
        finally:
            for topic, partition in held:
                partition.hold_from = None
                del self._holds[partition]
                topic.wake()
            released.set_result(None)

    def placed(self, placement: Placement) -> Placed:
        """Checked records grouped by partition; keyless records without one go round-robin."""
        topic = self._topic(placement.topic)
        count = len(topic.partitions)
        by_partition: dict[int, list[int]] = {}
        for index, partition in enumerate(placement.partitions):
            if partition is None:
                topic.round_robin = partition = (topic.round_robin + 1) % count
            by_partition.setdefault(partition, []).append(index)
        return Placed(topic, placement.records, by_partition)

    def write_placed(self, placed: Placed, *, sync: bool = True) -> list[AppendResult]:
        """Write validated records to their partitions (synchronously: nothing interleaves).

        With `sync` (transactions) the records are fsynced here and visible on return; without,
        the caller waits for the group fsync, which makes them visible.
        """
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
                sync=sync,
            )
            for i, (offset, timestamp) in zip(indexes, written, strict=True):
                results[i] = AppendResult(name, number, offset, timestamp)
        APPENDED_RECORDS.inc(len(records))
        APPENDED_BYTES.inc(sum(record.size_bytes for record in records))
        topic.wake()
        return [r for r in results if r is not None]

    # transactions ---------------------------------------------------------------------------
    def transactional_producer(self, transactional_id: str) -> TransactionalProducer:
        self._require_started()
        return EmbeddedTransactionalProducer(self, transactional_id)

    def fence(self, transactional_id: str) -> int:
        """A new epoch for `transactional_id`: producers holding an older one are fenced."""
        epoch = self._epochs.get(transactional_id, 0) + 1
        self._epochs[transactional_id] = epoch
        return epoch

    def epoch(self, transactional_id: str) -> int | None:
        """The newest epoch of `transactional_id` (None before its first producer started)."""
        self._require_started()
        return self._epochs.get(transactional_id)

    # offsets --------------------------------------------------------------------------------
    async def _beginning_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.partition(tp).log_start for tp in tps}

    async def _end_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.partition(tp).visible_offset for tp in tps}

    async def _offsets_for_times(
        self, timestamps_ms: dict[TopicPartition, int]
    ) -> dict[TopicPartition, int | None]:
        return {tp: self.partition(tp).offset_for_time(ts) for tp, ts in timestamps_ms.items()}

    # retention ------------------------------------------------------------------------------
    def enforce_retention(self, now_ms: int | None = None) -> RetentionReport:
        """Apply retention.ms / retention.bytes and compaction to every partition now, in one go.

        Tests call it with an explicit `now_ms` to age the log deterministically; the background
        task runs `retention_pass`, the same with compaction's reading and writing in a thread.
        Segments older than `segment.ms` are rolled first, as Kafka would on the next append, so
        an idle topic still ages out.
        """
        self._require_started()
        now = _now_ms() if now_ms is None else now_ms
        outcomes: list[RetentionOutcome] = []
        for topic, partition in self._retention_targets(now):
            if topic.spec.cleanup_policy == "compact":
                outcomes.append(partition.compact(now, self.tombstone_retention_ms))
            else:
                outcomes.append(self._delete_retention(topic, partition, now))
        return _report(outcomes)

    async def retention_pass(self, now_ms: int | None = None) -> RetentionReport:
        """`enforce_retention` without holding the loop: compaction reads and writes in a thread.

        Appends and reads go on meanwhile; only the swap of a partition's segment list happens on
        the loop (`PartitionLog.swap_compacted`). Closing the log waits for the thread's step.
        """
        self._require_started()
        now = _now_ms() if now_ms is None else now_ms
        outcomes: list[RetentionOutcome] = []
        targets = self._retention_targets(now, defer=True)
        compacted_targets = []
        for topic, partition in targets:
            if topic.spec.cleanup_policy == "compact":
                compacted_targets.append(partition)
            else:
                outcomes.append(self._delete_retention(topic, partition, now, defer=True))
        ticket = 0
        for key in targets:
            if key[1].unsynced or key[1].directory_dirty:
                ticket = self._group_sync.written(key)
        if ticket:
            await self._group_sync.durable(ticket)
        for partition in compacted_targets:
            plan = partition.plan_compaction(now, self.tombstone_retention_ms)
            if plan is None:
                continue
            partition.compacting = True
            try:
                compacted = await self._in_thread(run_compaction, plan)
                if not self.started:
                    compacted.discard()
                    break
                outcomes.append(partition.swap_compacted(compacted))
                await self._in_thread(finish_compaction, compacted)
            finally:
                partition.compacting = False
        return _report(outcomes)

    async def _in_thread(self, work: Callable[[_A], _R], arg: _A) -> _R:
        """`work(arg)` in a worker thread that `close` waits for, even when this task is cancelled."""
        step = asyncio.ensure_future(asyncio.to_thread(work, arg))
        self._thread_step = step
        try:
            return await asyncio.shield(step)
        finally:
            if step.done():
                self._thread_step = None

    def _retention_targets(self, now_ms: int, *, defer: bool = False) -> list[tuple[OpenTopic, PartitionLog]]:
        """Every partition, each rolled first when its active segment is `segment.ms` old (with
        `defer`, its fsyncs left to the group fsync)."""
        targets = []
        for topic in list(self._topics.values()):
            spec = topic.spec
            segment_ms = spec.segment_ms if spec.segment_ms is not None else DEFAULT_SEGMENT_MS
            for partition in topic.partitions:
                partition.roll_if_older(now_ms, segment_ms, defer=defer)
                targets.append((topic, partition))
        return targets

    def _delete_retention(
        self, topic: OpenTopic, partition: PartitionLog, now_ms: int, *, defer: bool = False
    ) -> RetentionOutcome:
        spec = topic.spec
        return partition.delete_retention(now_ms, spec.retention_ms, spec.retention_bytes, defer=defer)

    async def _retention_loop(self) -> None:
        while True:
            await asyncio.sleep(self.retention_interval_s)
            try:
                await self.retention_pass()
            except OSError:
                logger.exception("embedded log: retention pass failed; retrying next interval")

    # reading --------------------------------------------------------------------------------
    def _new_reader(self) -> Reader:
        return EmbeddedReader(self)

    def _new_group_member(self, membership: Membership) -> GroupConsumer:
        return EmbeddedGroupMember(self, membership)

    # consumer groups ------------------------------------------------------------------------
    def group(self, group_id: str) -> GroupState:
        """The state of consumer group `group_id` (created empty on first use)."""
        group = self._groups.get(group_id)
        if group is None:
            group = self._groups[group_id] = GroupState(group_id, {})
        return group

    def _persist_group(self, group: GroupState) -> None:
        path, content = self._group_file(group)
        write_json(path, content, fsync=self.fsync, keep_previous=True)

    def _group_file(self, group: GroupState) -> tuple[Path, dict[str, Any]]:
        """Where a group's offsets live, and their content now."""
        path = self.directory / "groups" / f"{urllib.parse.quote(group.name, safe='')}.json"
        entries = [[tp.topic, tp.partition, offset] for tp, offset in sorted(group.offsets.items())]
        return path, {"group": group.name, "offsets": entries}

    async def list_groups(self) -> list[str]:
        self._require_started()
        return sorted(name for name, g in self._groups.items() if g.offsets or g.members)

    async def group_offsets(self, group_id: str) -> dict[TopicPartition, int]:
        self._require_started()
        group = self._groups.get(group_id)
        return dict(group.offsets) if group is not None else {}

    async def _commit_group_offsets(self, group_id: str, offsets: dict[TopicPartition, int]) -> None:
        self._require_started()
        group = self.group(group_id)
        if group.members:
            raise LogError(
                f"group {group_id!r} has {len(group.members)} active members; "
                "stop them before committing offsets from outside"
            )
        await self.persist_group_offsets(group_id, offsets)

    async def persist_group_offsets(self, group_id: str, offsets: dict[TopicPartition, int]) -> None:
        """`store_group_offsets` with the file written (and fsynced) in a worker thread."""
        group = self.group(group_id)
        group.offsets.update(offsets)
        async with group.write_lock:
            path, content = self._group_file(group)
            await in_thread(partial(write_json, path, content, self.fsync, keep_previous=True))

    def store_group_offsets(self, group_id: str, offsets: dict[TopicPartition, int]) -> None:
        """Store checked offsets durably (`Log.commit_group_offsets`, `GroupConsumer.commit`, a
        transaction's offsets, and a committed transaction's offsets completed on open)."""
        group = self.group(group_id)
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
        previous_version(path).unlink(missing_ok=True)


class _SyncJob(NamedTuple):
    """One partition in a group fsync: a duplicate of its segment's descriptor (the loop may
    roll and close the segment while the thread syncs), those of segments rolled since the last
    sync, the directory when a roll created a segment in it, and the offset the sync makes durable."""

    topic: OpenTopic
    partition: PartitionLog
    fd: int
    closed: list[int]
    directory: Path | None
    end: int


def _begin_sync(written: Collection[tuple[OpenTopic, PartitionLog]]) -> list[_SyncJob]:
    jobs: list[_SyncJob] = []
    try:
        for topic, partition in written:
            fd = os.dup(partition.active.fd())
            closed, partition.unsynced = partition.unsynced, []
            directory = partition.directory if partition.directory_dirty else None
            partition.directory_dirty = False
            jobs.append(_SyncJob(topic, partition, fd, closed, directory, partition.next_offset))
    except OSError:
        _end_sync(jobs, False)
        raise
    return jobs


def _run_sync(jobs: list[_SyncJob]) -> None:
    for job in jobs:
        for fd in job.closed:
            os.fsync(fd)
        os.fsync(job.fd)
        if job.directory is not None:
            fsync_directory(job.directory)


def _end_sync(jobs: list[_SyncJob], ok: bool) -> None:
    """Close the duplicates; after a good sync the records are visible: wake their readers.
    After a failed one, the rolled segments and the directory wait for the next sync again."""
    for job in jobs:
        os.close(job.fd)
        if ok:
            for fd in job.closed:
                os.close(fd)
            job.partition.synced(job.end)
            job.topic.wake()
        else:
            job.partition.unsynced[:0] = job.closed
            job.partition.directory_dirty |= job.directory is not None
