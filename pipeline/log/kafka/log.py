"""The log seam on Apache Kafka or Redpanda, through aiokafka.

Producing is idempotent with `acks=all`, keyed records are placed by Java-compatible murmur2
(`pipeline.log.partitioner`), so both backends agree on a key's partition. Transactional producers
give atomic, fenced writes (one per transactional id). Readers run with
`auto_offset_reset="none"` and `isolation_level="read_committed"`: a position below log-start
surfaces as a `Gap`, never as a silent reset, and open or aborted transactions are never read.
Every aiokafka exception is translated into the seam's typed errors; transient failures
are retried a bounded number of times with exponential backoff before `LogUnavailableError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import errors as kafka_errors
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.protocol.admin import DeleteGroupsRequest
from aiokafka.protocol.group import LeaveGroupRequest
from aiokafka.protocol.metadata import MetadataRequest
from prometheus_client import Counter

from pipeline.config import LogBackend, LogSettings
from pipeline.log.api import (
    DEFAULT_MAX_MESSAGE_BYTES,
    AppendResult,
    GroupConsumer,
    Log,
    LogError,
    LogUnavailableError,
    Membership,
    PendingRecord,
    Placement,
    Reader,
    RecordTooLargeError,
    TopicDescription,
    TopicLimits,
    TopicNotFoundError,
    TopicPartition,
    TopicSpec,
    TransactionalProducer,
)
from pipeline.log.kafka.clients import (
    AIOKAFKA_LOGGER,
    ISOLATION_LEVEL,
    BootstrapFailures,
    compression_type,
    discard_producer,
    ssl_context,
    start_client,
    stop_client,
)
from pipeline.log.kafka.convert import kafka_tp, our_tp
from pipeline.log.kafka.errors import ERRORS, is_transient, translate
from pipeline.log.kafka.group import KafkaGroupMember
from pipeline.log.kafka.produce import (
    PRODUCER_BATCH_BYTES,
    PRODUCER_MAX_REQUEST_BYTES,
    PRODUCER_RESETS,
    KafkaTransactionalProducer,
    acknowledged,
    send_all,
)
from pipeline.log.kafka.read import KafkaReader
from pipeline.log.kafka.retry import Retrier

T = TypeVar("T")


#: How long cached topic metadata (partition count, limits) is trusted before re-reading it.
TOPIC_METADATA_TTL_S = 60.0


_GROUP_ID_NOT_FOUND = 69
_NON_EMPTY_GROUP = 68
_UNKNOWN_MEMBER_ID = 25

logger = logging.getLogger(__name__)

EXPELLED = Counter(
    "reverser_log_kafka_group_members_expelled",
    "Group members of this replica's crashed previous run expelled at start (instead of waiting out "
    "their session timeout)",
)
_TOPIC_ALREADY_EXISTS = 36


@dataclass(frozen=True, slots=True)
class _CachedLimits:
    """A topic's limits as last read from the cluster, trusted for `TOPIC_METADATA_TTL_S`."""

    limits: TopicLimits
    read_at: float


class KafkaLog(Log):
    """The log on a Kafka-compatible cluster: one producer, one admin client, one offsets client."""

    kind = LogBackend.KAFKA

    def __init__(self, settings: LogSettings) -> None:
        super().__init__()
        self._settings = settings
        self.retrier = Retrier(settings)
        self._producer: AIOKafkaProducer | None = None
        self._producer_broken = False
        self._producer_lock = asyncio.Lock()
        self._admin: AIOKafkaAdminClient | None = None
        self._offsets: AIOKafkaConsumer | None = None
        self._topics: dict[str, _CachedLimits] = {}

    @property
    def settings(self) -> LogSettings:
        """The connection settings this log was created with."""
        return self._settings

    # lifecycle ------------------------------------------------------------------------------
    def client_options(self) -> dict[str, Any]:
        """Connection options shared by every aiokafka client this log creates."""
        settings = self._settings
        options: dict[str, Any] = {
            "bootstrap_servers": settings.bootstrap_servers,
            "client_id": settings.client_id,
            "request_timeout_ms": settings.request_timeout_ms,
            "retry_backoff_ms": settings.retry_backoff_ms,
            "security_protocol": settings.security_protocol,
        }
        if settings.security_protocol in ("SSL", "SASL_SSL"):
            options["ssl_context"] = ssl_context(settings.tls)
        if settings.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            options["sasl_mechanism"] = settings.sasl.mechanism
            options["sasl_plain_username"] = settings.sasl.username
            options["sasl_plain_password"] = settings.sasl.password.get_secret_value()
        return options

    async def connect(self, what: str, factory: Callable[[], T], start: Callable[[T], Awaitable[None]]) -> T:
        """Create and start a client, retrying the bootstrap with backoff; a failed client is closed."""

        where = f"{what} to {self._settings.bootstrap_servers}"

        async def attempt() -> T:
            client = factory()
            failures = BootstrapFailures()
            AIOKAFKA_LOGGER.addHandler(failures)
            try:
                await start(client)
            except BaseException as exc:
                with contextlib.suppress(Exception):
                    await stop_client(client)
                if isinstance(exc, kafka_errors.KafkaConnectionError):
                    failures.raise_fatal(where, exc)
                    if failures.last is not None:
                        raise kafka_errors.KafkaConnectionError(f"{exc}: {failures.last}") from exc
                raise
            finally:
                AIOKAFKA_LOGGER.removeHandler(failures)
            return client

        return await self.retrier.run(where, attempt)

    async def start(self) -> None:
        if self._producer is not None:
            return
        options = self.client_options()
        self._admin = await self.connect(
            "connect admin", lambda: AIOKafkaAdminClient(**options), start_client
        )
        try:
            self._offsets = await self.connect("connect offsets", self.new_manual_consumer, start_client)
            self._producer = await self.connect("connect producer", self.new_producer, start_client)
        except BaseException:
            await self.close()
            raise
        await self._expel_predecessors()

    async def _expel_predecessors(self) -> None:
        """Hand back every membership a crashed run of this replica left (see pipeline.incarnation)
        as soon as the log is up, not when each stage joins: the live replicas take the dead
        member's partitions while this process is still starting its stages."""
        if self.incarnation is None:
            return
        for group_id, member_id in self.incarnation.take_predecessor_members().items():
            try:
                expelled = await self.expel_member(group_id, member_id)
            except LogError as exc:  # its session timeout still removes it
                logger.warning(
                    "group %s: cannot expel the previous run's member %s: %s", group_id, member_id, exc
                )
                continue
            if expelled:
                EXPELLED.inc()
                logger.info("group %s: expelled the previous run's member %s", group_id, member_id)

    def new_manual_consumer(self) -> AIOKafkaConsumer:
        """A consumer without a group that reads committed records from positions it is given
        (offset look-ups and readers): no auto commit and no reset, so a position retention
        deleted shows up as a gap instead of a silent jump."""
        return AIOKafkaConsumer(
            **self.client_options(),
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="none",
            isolation_level=ISOLATION_LEVEL,
        )

    def new_producer(self, **extra: Any) -> AIOKafkaProducer:
        return AIOKafkaProducer(
            **self.client_options(),
            acks="all",
            enable_idempotence=True,
            linger_ms=0,
            max_request_size=PRODUCER_MAX_REQUEST_BYTES,
            max_batch_size=PRODUCER_BATCH_BYTES,
            compression_type=compression_type(self._settings.compression),
            **extra,
        )

    async def close(self) -> None:
        await self._close_owners()
        producer, self._producer = self._producer, None
        if producer is not None:
            await discard_producer(producer)
        clients: list[Any] = [self._offsets, self._admin]
        self._offsets = self._admin = None
        for client in clients:
            if client is not None:
                with contextlib.suppress(Exception):
                    await stop_client(client)

    def _require_started(self) -> None:
        self._require()

    def _require(self) -> tuple[AIOKafkaAdminClient, AIOKafkaConsumer]:
        if self._admin is None or self._offsets is None:
            raise LogError("the Kafka log is not started; call start() first")
        return self._admin, self._offsets

    # topics ---------------------------------------------------------------------------------
    async def create_topics(self, specs: Sequence[TopicSpec]) -> list[str]:
        admin, _ = self._require()
        existing = await self.describe_topics([spec.name for spec in specs])
        missing = [spec for spec in specs if spec.name not in existing]
        if not missing:
            return []
        for spec in missing:
            if spec.partitions < 1:
                raise LogError(f"topic {spec.name!r}: partitions must be >= 1")
        brokers = await self.broker_count()
        resolved = [spec.for_brokers(brokers) for spec in missing]
        new_topics = [
            NewTopic(spec.name, spec.partitions, spec.replication_factor, topic_configs=spec.configs())
            for spec in resolved
        ]
        response = await self.retrier.run("create_topics", lambda: admin.create_topics(new_topics))
        created: list[str] = []
        for entry in response.topic_errors:
            name, code = entry[0], entry[1]
            message = entry[2] if len(entry) > 2 else None
            if code == 0:
                created.append(name)
            elif code != _TOPIC_ALREADY_EXISTS:
                error = kafka_errors.for_code(code)
                raise LogError(f"creating topic {name!r} failed: {error.__name__}: {message or ''}".rstrip())
        await self._await_leaders(created)
        return created

    async def _await_leaders(self, names: list[str]) -> None:
        """Wait (bounded) until every broker knows the new topics with leaders, and configs are served.

        A KRaft broker learns of a new topic from the metadata log on its own schedule, and a
        describe goes to any broker, so one broker seeing the topic is not enough: a describe
        that follows could still land on a broker that does not know it yet.
        """
        if not names:
            return
        deadline = time.monotonic() + self._settings.request_timeout_ms / 1000
        pending = list(names)
        while pending:
            led = await self._led_on_every_broker(pending)
            # Configs propagate separately from leadership; describe_topics() needs both.
            ready = set(await self._topic_configs(sorted(led))) if led else set()
            pending = [name for name in pending if name not in ready]
            if not pending:
                return
            if time.monotonic() >= deadline:
                raise LogUnavailableError(f"topics {pending} were created but have no leader yet")
            await asyncio.sleep(self.retrier.poll_s)

    async def _led_on_every_broker(self, names: list[str]) -> set[str]:
        """The topics of `names` whose partitions all have a leader in every broker's metadata."""
        admin, _ = self._require()
        cluster = await self.retrier.run("describe_cluster", admin.describe_cluster)
        led = set(names)
        for broker in cluster["brokers"]:
            # aiokafka's public describe_topics asks a random broker; ask each one in turn.
            request = MetadataRequest(list(names), allow_auto_topic_creation=False)
            node_id = broker["node_id"]
            response = await self.retrier.run(
                "describe_topics", functools.partial(admin._send_request, request, node_id)
            )
            led &= {
                t["topic"]
                for t in response.to_object()["topics"]
                if t["error_code"] == 0 and t["partitions"] and all(p["leader"] >= 0 for p in t["partitions"])
            }
        return led

    async def broker_count(self) -> int:
        admin, _ = self._require()
        cluster = await self.retrier.run("describe_cluster", admin.describe_cluster)
        return len(cluster["brokers"])

    async def _partition_layout(self, names: Sequence[str]) -> dict[str, tuple[int, int]]:
        """(partition count, fewest replicas of any partition) per existing topic."""
        admin, _ = self._require()
        if not names:
            return {}
        topics = await self.retrier.run("describe_topics", lambda: admin.describe_topics(list(names)))
        layout: dict[str, tuple[int, int]] = {}
        for topic in topics:
            if topic["error_code"] == 0:
                partitions = topic["partitions"]
                replicas = min((len(p["replicas"]) for p in partitions), default=0)
                layout[topic["topic"]] = (len(partitions), replicas)
            elif topic["error_code"] != kafka_errors.UnknownTopicOrPartitionError.errno:
                raise translate(kafka_errors.for_code(topic["error_code"])(), f"describe {topic['topic']}")
        return layout

    async def _topic_configs(self, names: Sequence[str]) -> dict[str, dict[str, str]]:
        admin, _ = self._require()
        if not names:
            return {}
        resources = [ConfigResource(ConfigResourceType.TOPIC, name) for name in names]
        responses = await self.retrier.run("describe_configs", lambda: admin.describe_configs(resources))
        configs: dict[str, dict[str, str]] = {}
        for response in responses:
            for resource in response.resources:
                code, message, name, entries = resource[0], resource[1], resource[3], resource[4]
                if code == kafka_errors.UnknownTopicOrPartitionError.errno:
                    continue
                if code != 0:
                    raise LogError(f"describing configs of {name!r} failed: {message}")
                configs[name] = {entry[0]: entry[1] for entry in entries if entry[1] is not None}
        return configs

    async def describe_topics(self, names: Sequence[str]) -> dict[str, TopicDescription]:
        layout = await self._partition_layout(names)
        configs = await self._topic_configs(list(layout))
        return {
            name: TopicDescription(name, count, configs[name], replication_factor=replicas)
            for name, (count, replicas) in layout.items()
            if name in configs
        }

    async def partitions_for(self, topic: str) -> int:
        return (await self._topic_limits(topic, refresh=True)).partitions

    async def _topic_limits(self, topic: str, *, refresh: bool = False) -> TopicLimits:
        cached = self._topics.get(topic)
        now = time.monotonic()
        if cached is not None and not refresh and now - cached.read_at < TOPIC_METADATA_TTL_S:
            return cached.limits
        described = await self.describe_topics([topic])
        description = described.get(topic)
        if description is None:
            self._topics.pop(topic, None)
            ERRORS.labels("topic_not_found").inc()
            raise TopicNotFoundError(f"topic {topic!r} does not exist")
        configs = description.configs
        limits = TopicLimits(
            topic,
            partitions=description.partitions,
            compact="compact" in configs.get("cleanup.policy", "delete"),
            max_message_bytes=int(configs.get("max.message.bytes", DEFAULT_MAX_MESSAGE_BYTES)),
        )
        self._topics[topic] = _CachedLimits(limits, now)
        return limits

    # writing --------------------------------------------------------------------------------
    async def place(self, topic: str, records: Sequence[PendingRecord]) -> Placement:
        try:
            return await super().place(topic, records)
        except RecordTooLargeError:
            ERRORS.labels("record_too_large").inc()
            raise

    async def _append(self, placement: Placement) -> list[AppendResult]:
        self._require()
        topic, records, partitions = placement.topic, placement.records, placement.partitions
        producer = await self._ready_producer()
        if placement.limits.max_message_bytes < PRODUCER_BATCH_BYTES:
            # Records that each fit the topic could exceed it together in one producer batch.
            outcomes: list[Any] = []
            failure: BaseException | None = None
            for record, partition in zip(records, partitions, strict=True):
                sent, failure = await send_all(
                    producer, topic, [record], [partition], self._settings.request_timeout_ms
                )
                outcomes += sent
                if failure is not None:
                    break
        else:
            outcomes, failure = await send_all(
                producer, topic, records, partitions, self._settings.request_timeout_ms
            )
        if failure is not None:
            if is_transient(failure):
                self._mark_producer_broken(producer)
            if isinstance(failure, kafka_errors.UnknownTopicOrPartitionError):
                self._topics.pop(topic, None)
            raise translate(failure, f"append to {topic!r}") from failure
        return acknowledged(outcomes, records)

    def transactional_producer(self, transactional_id: str) -> TransactionalProducer:
        self._require()
        return KafkaTransactionalProducer(self, transactional_id)

    async def _ready_producer(self) -> AIOKafkaProducer:
        """The producer, replaced first if an earlier append found the broker unreachable.

        A producer whose batches expired while the broker was down may hold idempotence sequence
        numbers the broker never saw; a fresh producer (new producer id) continues cleanly.
        """
        if self._producer is None:
            raise LogError("the Kafka log is not started; call start() first")
        if not self._producer_broken:
            return self._producer
        async with self._producer_lock:
            if self._producer_broken:
                old = self._producer
                replacement = await self.connect("connect producer", self.new_producer, start_client)
                self._producer, self._producer_broken = replacement, False
                PRODUCER_RESETS.inc()
                await discard_producer(old)
        return self._producer

    def _mark_producer_broken(self, producer: AIOKafkaProducer) -> None:
        if producer is self._producer:
            self._producer_broken = True

    # offsets --------------------------------------------------------------------------------
    async def _beginning_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return await self._watermarks("beginning_offsets", tps)

    async def _end_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return await self._watermarks("end_offsets", tps)

    async def _watermarks(
        self, which: Literal["beginning_offsets", "end_offsets"], tps: Sequence[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """Log-start or log-end offsets through the client's method of that name, with retries."""
        _, client = self._require()
        query = getattr(client, which)
        found = await self.retrier.run(which, lambda: query([kafka_tp(tp) for tp in tps]))
        return {our_tp(tp): int(offset) for tp, offset in found.items()}

    async def _offsets_for_times(
        self, timestamps_ms: dict[TopicPartition, int]
    ) -> dict[TopicPartition, int | None]:
        _, client = self._require()
        query = {kafka_tp(tp): ts for tp, ts in timestamps_ms.items()}
        found = await self.retrier.run("offsets_for_times", lambda: client.offsets_for_times(query))
        return {our_tp(tp): (int(entry.offset) if entry is not None else None) for tp, entry in found.items()}

    # reading --------------------------------------------------------------------------------
    def _new_reader(self) -> Reader:
        return KafkaReader(self)

    def _new_group_member(self, membership: Membership) -> GroupConsumer:
        return KafkaGroupMember(self, membership)

    # consumer-group administration ----------------------------------------------------------
    async def list_groups(self) -> list[str]:
        admin, _ = self._require()
        groups = await self.retrier.run("list_groups", admin.list_consumer_groups)
        return sorted({str(group[0]) for group in groups})

    async def group_offsets(self, group_id: str) -> dict[TopicPartition, int]:
        admin, _ = self._require()
        found = await self.retrier.run("group_offsets", lambda: admin.list_consumer_group_offsets(group_id))
        return {our_tp(tp): int(meta.offset) for tp, meta in found.items() if meta.offset >= 0}

    async def _commit_group_offsets(self, group_id: str, offsets: dict[TopicPartition, int]) -> None:
        self._require()
        options = self.client_options()
        consumer = await self.connect(
            "connect committer",
            lambda: AIOKafkaConsumer(
                **options, group_id=group_id, enable_auto_commit=False, auto_offset_reset="none"
            ),
            start_client,
        )
        try:
            consumer.assign([kafka_tp(tp) for tp in offsets])
            await self.retrier.run(
                "commit_group_offsets",
                lambda: consumer.commit({kafka_tp(tp): offset for tp, offset in offsets.items()}),
            )
        except LogUnavailableError:
            raise
        except LogError as exc:
            raise LogError(
                f"committing offsets for group {group_id!r} failed (does it have active members?): {exc}"
            ) from exc
        finally:
            with contextlib.suppress(Exception):
                await stop_client(consumer)

    async def expel_member(self, group_id: str, member_id: str) -> bool:
        """Send LeaveGroup for another process's `member_id`: the coordinator drops it and rebalances
        now instead of after its session timeout. False when the group no longer knew the member."""
        admin, _ = self._require()

        async def leave() -> Any:
            coordinator = await admin.find_coordinator(group_id)
            return await admin._send_request(LeaveGroupRequest(group_id, member_id), coordinator)

        response = await self.retrier.run("expel_member", leave)
        code = int(response.error_code)
        if code == 0:
            return True
        if code == _UNKNOWN_MEMBER_ID:
            return False
        raise translate(kafka_errors.for_code(code)(), f"expel member of group {group_id!r}")

    async def delete_group(self, group_id: str) -> None:
        admin, _ = self._require()

        async def delete() -> Any:
            # aiokafka 0.14 has no public delete_consumer_groups; send DeleteGroups to the coordinator.
            coordinator = await admin.find_coordinator(group_id)
            return await admin._send_request(DeleteGroupsRequest([group_id]), coordinator)

        response = await self.retrier.run("delete_group", delete)
        for _name, code in response.results:
            if code in (0, _GROUP_ID_NOT_FOUND):
                continue
            if code == _NON_EMPTY_GROUP:
                raise LogError(f"group {group_id!r} is not empty; stop its members first")
            raise translate(kafka_errors.for_code(code)(), f"delete group {group_id!r}")
