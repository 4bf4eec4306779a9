"""The log seam: one async interface over topics, partitions, offsets and consumer groups.

Every stage reads its input from one topic and writes its output to the next through this
interface only, so the same code runs on Apache Kafka, Redpanda and the embedded file log.
Offsets follow Kafka's convention: a committed offset or a reader position is the offset of
the *next* record to read.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

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
        for name, value in self.headers:
            size += len(name.encode()) + len(value)
        return size


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


class Reader(abc.ABC):
    """Reads partitions by manual assignment, with no consumer group and no committed offsets."""

    @abc.abstractmethod
    async def assign(self, positions: dict[TopicPartition, int]) -> None:
        """Replace the assignment; each partition starts at the given offset."""

    @abc.abstractmethod
    async def seek(self, tp: TopicPartition, offset: int) -> None:
        """Move one assigned partition to `offset`."""

    @abc.abstractmethod
    def position(self, tp: TopicPartition) -> int:
        """The offset of the next record this reader will return for `tp`."""

    @abc.abstractmethod
    async def fetch(self, timeout_ms: int = 1000, max_records: int = 500) -> Fetched:
        """Wait up to `timeout_ms` for records; a position below log-start yields a Gap, then moves on."""

    @abc.abstractmethod
    async def close(self) -> None: ...


class GroupConsumer(abc.ABC):
    """A member of a consumer group: partitions are shared out, progress is committed explicitly."""

    group_id: str

    @abc.abstractmethod
    async def start(self) -> None:
        """Join the group; the listener is told about the first assignment before records flow."""

    @abc.abstractmethod
    def assignment(self) -> set[TopicPartition]: ...

    @abc.abstractmethod
    async def fetch(self, timeout_ms: int = 1000, max_records: int = 500) -> Fetched:
        """Records of assigned partitions from the committed offsets (or the reset policy)."""

    @abc.abstractmethod
    async def seek(self, tp: TopicPartition, offset: int) -> None:
        """Move the fetch position of an assigned partition (to skip work already applied)."""

    @abc.abstractmethod
    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        """Commit next-offsets-to-read for the group (moved on by `committable`)."""

    def committable(self, offsets: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """`offsets` as they should be committed: an offset just past the last record fetched moves
        on past what follows it but holds no record (Kafka's transaction markers, aborted records),
        so a group that has read everything shows no lag. `commit` applies it itself; callers that
        commit offsets in a transaction (`GroupOffsets`) apply it first."""
        return dict(offsets)

    @abc.abstractmethod
    async def committed(self, tp: TopicPartition) -> int | None: ...

    @abc.abstractmethod
    async def close(self) -> None:
        """Leave the group without committing anything further."""


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

    @abc.abstractmethod
    async def start(self) -> None:
        """Take the id over (fencing older producers) once their open transaction is resolved."""

    @abc.abstractmethod
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
        lost), `LogUnavailableError` when the log did not answer in time.
        """

    @abc.abstractmethod
    async def close(self) -> None:
        """Release the producer; an open transaction is aborted (by the log, at the latest on timeout)."""


class Log(abc.ABC):
    """A Kafka-compatible log: the one seam every stage reads and writes through."""

    kind: str

    @abc.abstractmethod
    async def start(self) -> None:
        """Connect (or open files); raises LogUnavailableError after bounded retries."""

    @abc.abstractmethod
    async def close(self) -> None: ...

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

    # writing --------------------------------------------------------------------------------
    @abc.abstractmethod
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

    @abc.abstractmethod
    async def append_many(self, topic: str, records: Sequence[PendingRecord]) -> list[AppendResult]:
        """Append several records and wait for every acknowledgement; results are in input order.

        Records for one partition keep their relative order. If any append fails the call raises;
        records acknowledged before the failure stay in the log (callers must tolerate duplicates).
        """

    @abc.abstractmethod
    def transactional_producer(self, transactional_id: str) -> TransactionalProducer:
        """A producer for atomic, fenced writes under `transactional_id`; call start() first.

        Readers and group members of every backend read committed data only: records of a
        transaction that is still open or was aborted are never returned.
        """

    # offsets --------------------------------------------------------------------------------
    @abc.abstractmethod
    async def beginning_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """Log-start offsets (the first offset retention has not deleted)."""

    @abc.abstractmethod
    async def end_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """Log-end offsets (the offset the next appended record will get)."""

    @abc.abstractmethod
    async def offsets_for_times(
        self, timestamps_ms: dict[TopicPartition, int]
    ) -> dict[TopicPartition, int | None]:
        """Earliest offset whose timestamp is >= the given time, or None when there is none."""

    # reading --------------------------------------------------------------------------------
    @abc.abstractmethod
    def reader(self) -> Reader:
        """A reader with manual assignment (no group); assign before fetching."""

    @abc.abstractmethod
    def group_consumer(
        self,
        group_id: str,
        topics: Sequence[str],
        *,
        listener: RebalanceListener | None = None,
        reset: Literal["earliest", "latest"] = "earliest",
    ) -> GroupConsumer:
        """A consumer-group member; call start() before fetching."""

    # consumer-group administration ----------------------------------------------------------
    @abc.abstractmethod
    async def list_groups(self) -> list[str]: ...

    @abc.abstractmethod
    async def group_offsets(self, group_id: str) -> dict[TopicPartition, int]:
        """Committed offsets of a group (empty when the group is unknown)."""

    @abc.abstractmethod
    async def commit_group_offsets(self, group_id: str, offsets: dict[TopicPartition, int]) -> None:
        """Commit offsets for a group that has no active members (tools, replays, tests)."""

    @abc.abstractmethod
    async def delete_group(self, group_id: str) -> None: ...
