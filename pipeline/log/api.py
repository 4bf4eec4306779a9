"""The log seam: one async interface over topics, partitions, offsets and consumer groups.

Every stage reads its input from one topic and writes its output to the next through this
interface only, so the same code runs on Apache Kafka, Redpanda and the embedded file log.
Offsets follow Kafka's convention: a committed offset or a reader position is the offset of
the *next* record to read.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Literal, Self

from pipeline.config import LogBackend
from pipeline.incarnation import Incarnation
from pipeline.log.partitioner import murmur2_partition

# Three copies, two in sync: one broker may fail without losing or refusing acknowledged writes.
SAFE_REPLICATION_FACTOR = 3
SAFE_MIN_INSYNC_REPLICAS = 2

Headers = tuple[tuple[str, bytes], ...]
CleanupPolicy = Literal["delete", "compact"]


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    """One partition of one topic."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]"


@dataclass(frozen=True, slots=True)
class Record:
    """A record as read back from the log; `timestamp_ms` is the append time for LogAppendTime topics."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()

    def header(self, name: str) -> bytes | None:
        """The first header called `name`, or None."""
        for key, value in self.headers:
            if key == name:
                return value
        return None


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Where an appended record landed, as acknowledged by the log."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class PendingRecord:
    """A record to append; `partition=None` means murmur2(key) like the Java client."""

    value: bytes | None
    key: bytes | None = None
    headers: Headers = ()
    partition: int | None = None

    @property
    def size_bytes(self) -> int:
        """Key, value and header bytes as Kafka counts them against `max.message.bytes` (UTF-8 names)."""
        size = len(self.key or b"") + len(self.value or b"")
        headers = self.headers
        if headers:
            size += _headers_size(headers) if isinstance(headers, tuple) else _headers_bytes(headers)
        return size


def _headers_bytes(headers: Headers) -> int:
    return sum(len(name.encode()) + len(value) for name, value in headers)


#: a writer sends the same headers with many records, each checked against the size limit
_headers_size = functools.lru_cache(maxsize=1024)(_headers_bytes)


#: What one record costs against `max.message.bytes` beyond its key, value and header bytes: Kafka
#: counts it inside a record batch (61 bytes of batch header) with its own varint framing
#: (attributes, deltas, lengths, header count: at most about 40 bytes for any realistic record),
#: rounded up. Both backends refuse a record over the limit with it, and writers that split their
#: payloads to fit (`max_value_bytes`) use the same figure, so what they build is what the log takes.
RECORD_OVERHEAD_BYTES = 128
#: Kafka's broker default for `max.message.bytes`, for topics that do not set it.
DEFAULT_MAX_MESSAGE_BYTES = 1_048_588


def max_value_bytes(max_message_bytes: int, key: bytes | None = None, headers: Headers = ()) -> int:
    """The largest value a record with `key` and `headers` may carry under `max_message_bytes`."""
    return max_message_bytes - RECORD_OVERHEAD_BYTES - PendingRecord(None, key, headers).size_bytes


def check_offset(tp: TopicPartition, offset: int, action: str) -> None:
    """Offsets are never negative: `action` ("read", "seek", "commit") names what was refused."""
    if offset < 0:
        raise LogError(f"cannot {action} {tp} at negative offset {offset}")


def not_assigned(tp: TopicPartition, owner: str) -> LogError:
    """The error for using a partition that `owner` ("this reader", a group member) was not given."""
    return LogError(f"{tp} is not assigned to {owner}")


@dataclass(frozen=True, slots=True)
class TopicLimits:
    """What the seam checks records and positions against: partition count, policy, size limit."""

    topic: str
    partitions: int
    compact: bool
    max_message_bytes: int

    def has_partition(self, partition: int) -> bool:
        return 0 <= partition < self.partitions

    def missing_partition(self, partition: int) -> str:
        return f"partition {partition} does not exist: topic {self.topic!r} has {self.partitions} partitions"

    def place(self, record: PendingRecord) -> int | None:
        """Check one record against the seam's rules and pick its partition.

        The rules, the same on every backend: the record with its overhead fits
        `max.message.bytes`; every record of a compacted topic has a key, since compaction keeps
        the newest record per key; a tombstone (a record without a value) has a key on every
        topic, since it deletes its key and "no key, no value" carries nothing (aiokafka refuses
        to send it at all); an explicit partition exists.
        The partition is the explicit one, else murmur2 of the key like the Java client, else None
        (the backend spreads keyless records).
        """
        size = record.size_bytes
        if size + RECORD_OVERHEAD_BYTES > self.max_message_bytes:
            raise RecordTooLargeError(
                f"record of {size} bytes exceeds max.message.bytes={self.max_message_bytes} "
                f"of topic {self.topic!r}"
            )
        if record.key is None and (self.compact or record.value is None):
            what = "a tombstone" if record.value is None else "a record"
            raise LogError(f"topic {self.topic!r} cannot accept {what} without a key")
        if record.partition is not None:
            if not self.has_partition(record.partition):
                raise LogError(self.missing_partition(record.partition))
            return record.partition
        if record.key is not None:
            return murmur2_partition(record.key, self.partitions)
        return None


@dataclass(frozen=True, slots=True)
class Placement:
    """Records checked for one topic, with the partition each goes to (None: the backend spreads it)."""

    limits: TopicLimits
    records: Sequence[PendingRecord]
    partitions: list[int | None]

    @property
    def topic(self) -> str:
        return self.limits.topic

    @property
    def size_bytes(self) -> int:
        return sum(record.size_bytes for record in self.records)


@dataclass(frozen=True, slots=True)
class Gap:
    """Records `[position, first_surviving)` were deleted by retention before this reader read them."""

    topic: str
    partition: int
    position: int
    first_surviving: int

    @property
    def lost(self) -> int:
        return self.first_surviving - self.position


@dataclass(frozen=True, slots=True)
class Fetched:
    """One round of reading: records in log order per partition, plus any gaps found."""

    records: list[Record] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """The configuration a topic needs; `None` means "leave the broker default"."""

    name: str
    partitions: int
    cleanup_policy: CleanupPolicy = "delete"
    retention_ms: int | None = None
    retention_bytes: int | None = None
    segment_ms: int | None = None
    log_append_time: bool = True
    max_message_bytes: int | None = None
    # None: chosen from the cluster's size when the topic is created (`default_replication`).
    replication_factor: int | None = None
    min_insync_replicas: int | None = None

    def for_brokers(self, brokers: int) -> TopicSpec:
        """This spec with replication settled for a cluster of `brokers` (explicit values win)."""
        factor = self.replication_factor or default_replication(brokers)[0]
        min_insync = self.min_insync_replicas or default_replication(factor)[1]
        return dataclasses.replace(self, replication_factor=factor, min_insync_replicas=min_insync)

    def configs(self) -> dict[str, str]:
        """The Kafka topic-level configuration entries this spec sets."""
        entries: dict[str, str] = {"cleanup.policy": self.cleanup_policy}
        if self.retention_ms is not None:
            entries["retention.ms"] = str(self.retention_ms)
        if self.retention_bytes is not None:
            entries["retention.bytes"] = str(self.retention_bytes)
        if self.segment_ms is not None:
            entries["segment.ms"] = str(self.segment_ms)
        if self.log_append_time:
            entries["message.timestamp.type"] = "LogAppendTime"
        if self.max_message_bytes is not None:
            entries["max.message.bytes"] = str(self.max_message_bytes)
        if self.min_insync_replicas is not None:
            entries["min.insync.replicas"] = str(self.min_insync_replicas)
        return entries


def default_replication(brokers: int) -> tuple[int, int]:
    """(replication factor, min.insync.replicas) for a cluster of `brokers` brokers.

    Three copies with two in sync survive the loss of any one broker without losing an
    acknowledged record (`acks=all`) and without refusing writes; a smaller cluster gets every
    broker as a replica and one in-sync copy, since it cannot do better.
    """
    factor = max(1, min(SAFE_REPLICATION_FACTOR, brokers))
    return factor, (SAFE_MIN_INSYNC_REPLICAS if factor >= SAFE_REPLICATION_FACTOR else 1)


@dataclass(frozen=True, slots=True)
class TopicDescription:
    """What the log reports about an existing topic: partition count and configuration entries."""

    name: str
    partitions: int
    configs: dict[str, str]
    # The fewest replicas any partition has (1 on the embedded log).
    replication_factor: int = 1


class LogError(Exception):
    """Base class of every error the log seam raises."""


class LogUnavailableError(LogError):
    """The log could not be reached or did not acknowledge in time, after bounded retries."""


class LogInUseError(LogError):
    """The embedded log is held by another process (a running `reverser run`): one process at a
    time may open it. Not a `LogUnavailableError`, since retrying would wait for that process to
    stop; a command that only reads can ask the running service instead."""


class TopicNotFoundError(LogError):
    """The topic does not exist."""


class RecordTooLargeError(LogError):
    """The record exceeds the topic's `max.message.bytes`; callers should split it."""


class FencedError(LogError):
    """This transactional producer may no longer write: a newer one with the same id has started.

    Raised for good: every later call of the same producer raises it too. The owner must stop the
    work the id stands for (a leader steps down, a router drops the partition's pending work) and
    may start a new producer only once it owns that work again, reading its progress afresh.
    """


class RebalanceListener(abc.ABC):
    """Told which partitions a group member gained or lost, so it can flush or reload state."""

    @abc.abstractmethod
    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None: ...

    @abc.abstractmethod
    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None: ...


class StartedByAsyncWith(abc.ABC):
    """`async with thing:` starts it and closes it on every path (`Log`, `GroupConsumer`)."""

    @abc.abstractmethod
    async def start(self) -> None: ...

    @abc.abstractmethod
    async def close(self) -> None: ...

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.close()


class HandedOut(abc.ABC):
    """A reader or group member a `Log` handed out: closing it, or closing the log, releases it."""

    _seam_log: Log

    async def close(self) -> None:
        """Release it (idempotent); the log no longer closes it when the log closes."""
        self._seam_log._forget(self)
        await self._close()

    @abc.abstractmethod
    async def _close(self) -> None:
        """Release the backend's resources (a group member leaves its group); may be called again."""

    async def _log_closing(self) -> None:
        """The log closes while this is open: by default it is closed like any other."""
        await self._close()


class Reader(HandedOut):
    """Reads partitions by manual assignment, with no consumer group and no committed offsets.

    The public methods check the seam's contract (offsets not negative, partitions that exist,
    seeks only on assigned partitions) once for every backend, then call the backend's `_assign`
    and `_seek`. Use it as `async with log.reader() as reader:` so it is closed on every path.
    """

    def __init__(self, log: Log) -> None:
        self._seam_log = log
        self._positions: dict[TopicPartition, int] = {}

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.close()

    @abc.abstractmethod
    def _ensure_usable(self) -> None:
        """Raise when the reader (or its log) can no longer be used; checked before the contract."""

    async def assign(self, positions: dict[TopicPartition, int]) -> None:
        """Replace the assignment; each partition starts at the given offset."""
        self._ensure_usable()
        for tp, offset in positions.items():
            check_offset(tp, offset, "read")
        await self._seam_log.check_partitions(list(positions))
        await self._assign(dict(positions))
        self._positions = dict(positions)

    async def seek(self, tp: TopicPartition, offset: int) -> None:
        """Move one assigned partition to `offset`."""
        self._ensure_usable()
        if tp not in self._positions:
            raise not_assigned(tp, "this reader")
        check_offset(tp, offset, "seek")
        await self._seek(tp, offset)
        self._positions[tp] = offset

    def position(self, tp: TopicPartition) -> int:
        """The offset of the next record this reader will return for `tp`."""
        position = self._positions.get(tp)
        if position is None:
            raise not_assigned(tp, "this reader")
        return position

    @abc.abstractmethod
    async def _assign(self, positions: dict[TopicPartition, int]) -> None:
        """Start reading `positions` (already checked); `_positions` is set once this returns."""

    @abc.abstractmethod
    async def _seek(self, tp: TopicPartition, offset: int) -> None:
        """Move the backend's read position of the assigned `tp` (already checked)."""

    @abc.abstractmethod
    async def fetch(self, timeout_ms: int = 1000, max_records: int = 500) -> Fetched:
        """Wait up to `timeout_ms` for records; a position below log-start yields a Gap, then moves on."""


@dataclass(frozen=True, slots=True)
class Membership:
    """What a group member is asked for; `Log.group_consumer` checks it before a backend builds one."""

    group_id: str
    topics: tuple[str, ...]
    listener: RebalanceListener | None = None
    reset: Literal["earliest", "latest"] = "earliest"


class GroupConsumer(HandedOut, StartedByAsyncWith):
    """A member of a consumer group: partitions are shared out, progress is committed explicitly.

    `seek` and `commit` check the seam's contract (assigned partitions only, offsets not negative)
    once for every backend before the backend's `_seek` and `_commit`. Leaving without committing
    anything further is `close()`.
    """

    def __init__(self, log: Log, membership: Membership) -> None:
        self._seam_log = log
        self.group_id = membership.group_id
        self.topics = membership.topics
        self.listener = membership.listener
        self.reset = membership.reset

    @abc.abstractmethod
    async def start(self) -> None:
        """Join the group; the listener is told about the first assignment before records flow."""

    @abc.abstractmethod
    def assignment(self) -> set[TopicPartition]: ...

    @abc.abstractmethod
    async def fetch(self, timeout_ms: int = 1000, max_records: int = 500) -> Fetched:
        """Records of assigned partitions from the committed offsets (or the reset policy)."""

    @abc.abstractmethod
    def _ensure_usable(self) -> None:
        """Raise when the member is not started or closed; checked before the contract."""

    def _not_assigned(self, tp: TopicPartition) -> LogError:
        return not_assigned(tp, f"this member of {self.group_id!r}")

    async def seek(self, tp: TopicPartition, offset: int) -> None:
        """Move the fetch position of an assigned partition (to skip work already applied)."""
        self._ensure_usable()
        if tp not in self.assignment():
            raise self._not_assigned(tp)
        check_offset(tp, offset, "seek")
        await self._seek(tp, offset)

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        """Commit next-offsets-to-read for the group (moved on by `committable`)."""
        self._ensure_usable()
        assigned = self.assignment()
        foreign = sorted(str(tp) for tp in offsets if tp not in assigned)
        if foreign:
            raise LogError(
                f"cannot commit {', '.join(foreign)}: not assigned to this member of {self.group_id!r}"
            )
        for tp, offset in offsets.items():
            check_offset(tp, offset, "commit")
        if offsets:
            await self._commit(self.committable(offsets))

    @abc.abstractmethod
    async def _seek(self, tp: TopicPartition, offset: int) -> None:
        """Move the position of the assigned `tp` (already checked)."""

    @abc.abstractmethod
    async def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        """Commit checked, non-empty offsets (already passed through `committable`)."""

    def committable(self, offsets: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """`offsets` as they should be committed: an offset just past the last record fetched moves
        on past what follows it but holds no record (Kafka's transaction markers, aborted records),
        so a group that has read everything shows no lag. `commit` applies it itself; callers that
        commit offsets in a transaction (`GroupOffsets`) apply it first."""
        return dict(offsets)

    def quiet_positions(self) -> dict[TopicPartition, int]:
        """Positions of assigned partitions that returned no record since they were assigned.

        Whatever a member read there held no record (Kafka's transaction markers, aborted
        records), so the position may be committed as is. Without it, a partition whose committed
        offset sits on the marker of the last transaction shows a lag of 1 under its next owner
        until a new record arrives, because that owner never gets a record to commit after.
        """
        return {}

    @abc.abstractmethod
    async def committed(self, tp: TopicPartition) -> int | None: ...


@dataclass(frozen=True, slots=True)
class GroupOffsets:
    """Next-offsets-to-read that a transaction commits for a consumer group, atomically with its records."""

    group_id: str
    offsets: dict[TopicPartition, int]


class TransactionalProducer(abc.ABC):
    """Writes atomically under a `transactional_id`; starting one fences every older one with that id.

    This is Kafka's zombie fencing: whoever owns a piece of work (a source cluster's watch, one
    input partition of the router) writes it through the producer of that work's id. `start()`
    registers the id with a new epoch and aborts whatever transaction an older producer left open;
    from then on the older producer's writes are refused (`FencedError`) by the log itself, so a
    paused process that resumes cannot append anything after its successor started.
    """

    transactional_id: str

    def __init__(self, log: Log, transactional_id: str) -> None:
        self._seam_log = log
        self.transactional_id = transactional_id

    @abc.abstractmethod
    async def start(self) -> None:
        """Take the id over (fencing older producers) once their open transaction is resolved."""

    async def commit(
        self,
        appends: Mapping[str, Sequence[PendingRecord]],
        offsets: GroupOffsets | None = None,
    ) -> list[AppendResult]:
        """Append records to several topics and commit a group's offsets as one transaction.

        All or nothing: readers see the records (and the group the offsets) only once this returns;
        if it raises, none of it is visible, and the same content may be committed again with this
        producer. Results are in the order of `appends`, then input order. Raises `FencedError`
        once a newer producer with the same id started (or the producer's transaction state is
        lost), `LogUnavailableError` when the log did not answer in time. Records and offsets are
        checked against the seam's rules before anything is written.
        """
        placements = [
            await self._seam_log.place(topic, records) for topic, records in appends.items() if records
        ]
        if offsets is not None:
            for tp, offset in offsets.offsets.items():
                check_offset(tp, offset, "commit")
            await self._seam_log.check_partitions(list(offsets.offsets))
        return await self._commit(placements, offsets)

    @abc.abstractmethod
    async def _commit(self, placements: list[Placement], offsets: GroupOffsets | None) -> list[AppendResult]:
        """Write checked records and offsets as one transaction (see `commit`)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release the producer; an open transaction is aborted (by the log, at the latest on timeout)."""


class Log(StartedByAsyncWith):
    """A Kafka-compatible log: the one seam every stage reads and writes through.

    The checks every backend needs (record size, keys, partitions that exist, offsets that are not
    negative) live here, in the public methods, and run before the backend's `_append`,
    `_end_offsets` and the like; a backend tells them each topic's limits (`_topic_limits`).
    Use it as `async with open_log(settings) as log:` so it is closed on every path.
    The readers and group members it hands out are tracked here, so closing the log closes them.
    """

    #: `KAFKA` or `EMBEDDED`: which backend this is
    kind: LogBackend

    def __init__(self) -> None:
        self._owners: set[HandedOut] = set()
        #: The replica's record of its group memberships, set by `reverser run` before `start`:
        #: a backend whose groups outlive a crashed process (Kafka's session timeout) hands the
        #: previous run's members back through it. The embedded log's groups die with the process.
        self.incarnation: Incarnation | None = None

    @abc.abstractmethod
    async def start(self) -> None:
        """Connect (or open files); raises LogUnavailableError after bounded retries."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release the log; a backend calls `_close_owners` first."""

    @abc.abstractmethod
    def _require_started(self) -> None:
        """Raise LogError unless the log is started (and not closed)."""

    async def _close_owners(self) -> None:
        """Close every reader and group member still open, as the log goes (`_log_closing`)."""
        owners, self._owners = list(self._owners), set()
        for owner in owners:
            with contextlib.suppress(Exception):
                await owner._log_closing()

    def _forget(self, owner: HandedOut) -> None:
        self._owners.discard(owner)

    # topics ---------------------------------------------------------------------------------
    @abc.abstractmethod
    async def broker_count(self) -> int:
        """Brokers that can hold a replica (1 for the embedded log): sizes default replication."""

    @abc.abstractmethod
    async def create_topics(self, specs: Sequence[TopicSpec]) -> list[str]:
        """Create the topics that are missing (replication per `TopicSpec.for_brokers`).

        Returns the names created.
        """

    @abc.abstractmethod
    async def describe_topics(self, names: Sequence[str]) -> dict[str, TopicDescription]:
        """Describe existing topics; missing names are absent from the result."""

    @abc.abstractmethod
    async def partitions_for(self, topic: str) -> int:
        """Number of partitions; raises TopicNotFoundError."""

    # the contract ---------------------------------------------------------------------------
    @abc.abstractmethod
    async def _topic_limits(self, topic: str, *, refresh: bool = False) -> TopicLimits:
        """Partition count, policy and size limit of `topic`; raises TopicNotFoundError.

        A backend may cache them; `refresh` asks for a fresh look (partitions may have been added).
        """

    async def place(self, topic: str, records: Sequence[PendingRecord]) -> Placement:
        """Check `records` for `topic` against the seam's rules and pick their partitions."""
        limits = await self._topic_limits(topic)
        return Placement(limits, records, [limits.place(record) for record in records])

    async def check_partitions(self, tps: Sequence[TopicPartition]) -> None:
        """Raise TopicNotFoundError unless every topic and partition of `tps` exists."""
        for topic in sorted({tp.topic for tp in tps}):
            limits = await self._topic_limits(topic)
            for tp in tps:
                if tp.topic == topic and not limits.has_partition(tp.partition):
                    limits = await self._topic_limits(topic, refresh=True)
                    if not limits.has_partition(tp.partition):
                        raise TopicNotFoundError(limits.missing_partition(tp.partition))

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
        """Append one record and wait until the log acknowledged it (acks=all)."""
        results = await self.append_many(topic, [PendingRecord(value, key, headers, partition)])
        return results[0]

    async def append_many(self, topic: str, records: Sequence[PendingRecord]) -> list[AppendResult]:
        """Append several records and wait for every acknowledgement; results are in input order.

        Records for one partition keep their relative order. A record that breaks the seam's
        rules (`TopicLimits.place`) fails the whole call before anything is written. If an append
        fails later the call raises; records acknowledged before the failure stay in the log
        (callers must tolerate duplicates).
        """
        if not records:
            return []
        return await self._append(await self.place(topic, records))

    @abc.abstractmethod
    async def _append(self, placement: Placement) -> list[AppendResult]:
        """Write checked records to their partitions and wait for every acknowledgement."""

    @abc.abstractmethod
    def transactional_producer(self, transactional_id: str) -> TransactionalProducer:
        """A producer for atomic, fenced writes under `transactional_id`; call start() first.

        Readers and group members of every backend read committed data only: records of a
        transaction that is still open or was aborted are never returned.
        """

    # offsets --------------------------------------------------------------------------------
    async def beginning_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """Log-start offsets (the first offset retention has not deleted)."""
        await self.check_partitions(tps)
        return await self._beginning_offsets(tps) if tps else {}

    async def end_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """Log-end offsets (the offset the next appended record will get)."""
        await self.check_partitions(tps)
        return await self._end_offsets(tps) if tps else {}

    async def offsets_for_times(
        self, timestamps_ms: dict[TopicPartition, int]
    ) -> dict[TopicPartition, int | None]:
        """Earliest offset whose timestamp is >= the given time, or None when there is none."""
        await self.check_partitions(list(timestamps_ms))
        return await self._offsets_for_times(timestamps_ms) if timestamps_ms else {}

    @abc.abstractmethod
    async def _beginning_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]: ...

    @abc.abstractmethod
    async def _end_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]: ...

    @abc.abstractmethod
    async def _offsets_for_times(
        self, timestamps_ms: dict[TopicPartition, int]
    ) -> dict[TopicPartition, int | None]: ...

    # reading --------------------------------------------------------------------------------
    def reader(self) -> Reader:
        """A reader with manual assignment (no group); assign before fetching."""
        self._require_started()
        reader = self._new_reader()
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
        """A consumer-group member; call start() before fetching."""
        self._require_started()
        if not group_id:
            raise LogError("a consumer group needs a non-empty group id")
        if not topics:
            raise LogError(f"group {group_id!r}: a member must subscribe to at least one topic")
        if reset not in ("earliest", "latest"):
            raise LogError(f"group {group_id!r}: reset must be 'earliest' or 'latest', not {reset!r}")
        member = self._new_group_member(Membership(group_id, tuple(topics), listener, reset))
        self._owners.add(member)
        return member

    @abc.abstractmethod
    def _new_reader(self) -> Reader:
        """The backend's reader (the log is started; `reader` registers it)."""

    @abc.abstractmethod
    def _new_group_member(self, membership: Membership) -> GroupConsumer:
        """The backend's group member for a checked membership (`group_consumer` registers it)."""

    # consumer-group administration ----------------------------------------------------------
    @abc.abstractmethod
    async def list_groups(self) -> list[str]: ...

    @abc.abstractmethod
    async def group_offsets(self, group_id: str) -> dict[TopicPartition, int]:
        """Committed offsets of a group (empty when the group is unknown)."""

    async def commit_group_offsets(self, group_id: str, offsets: dict[TopicPartition, int]) -> None:
        """Commit offsets for a group that has no active members (tools, replays, tests)."""
        for tp, offset in offsets.items():
            check_offset(tp, offset, "commit")
        await self.check_partitions(list(offsets))
        if offsets:
            await self._commit_group_offsets(group_id, offsets)

    @abc.abstractmethod
    async def _commit_group_offsets(self, group_id: str, offsets: dict[TopicPartition, int]) -> None: ...

    @abc.abstractmethod
    async def delete_group(self, group_id: str) -> None: ...
