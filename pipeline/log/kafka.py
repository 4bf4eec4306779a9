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
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka import TopicPartition as KafkaTopicPartition
from aiokafka import errors as kafka_errors
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.protocol.admin import DeleteGroupsRequest
from prometheus_client import Counter

from pipeline.config import LogSettings, TlsSettings
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
    LogUnavailableError,
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
from pipeline.log.faults import crash_point
from pipeline.log.partitioner import murmur2_partition

__all__ = ["KafkaLog"]

logger = logging.getLogger(__name__)
T = TypeVar("T")

ERRORS = Counter(
    "reverser_log_kafka_errors",
    "Failed log operations on Kafka, by the typed error the caller got.",
    ["kind"],
)
RETRIES = Counter(
    "reverser_log_kafka_retries",
    "Retries of Kafka operations after a transient failure, by operation.",
    ["operation"],
)
APPENDED_RECORDS = Counter("reverser_log_kafka_appended_records", "Records acknowledged by Kafka.")
APPENDED_BYTES = Counter(
    "reverser_log_kafka_appended_bytes", "Key, value and header bytes of records acknowledged by Kafka."
)
GAP_RECORDS = Counter(
    "reverser_log_kafka_gap_records",
    "Records deleted by retention before a reader reached them (reported as gaps).",
)
PRODUCER_RESETS = Counter(
    "reverser_log_kafka_producer_resets",
    "Producers replaced after the broker became unreachable mid-append.",
)

#: Kafka's per-record overhead on top of key, value and headers (batch header amortised).
RECORD_OVERHEAD_BYTES = 128
#: Upper bound for one backoff sleep between retries.
MAX_BACKOFF_MS = 5_000
#: How long cached topic metadata (partition count, limits) is trusted before re-reading it.
TOPIC_METADATA_TTL_S = 60.0
#: How long `start()` of a group member waits for its first assignment.
GROUP_JOIN_TIMEOUT_MS = 60_000
DEFAULT_MAX_MESSAGE_BYTES = 1_048_588
#: Producer batch size: large batches make `append_many` fast; topics whose `max.message.bytes`
#: is below this are appended one record per batch instead.
PRODUCER_BATCH_BYTES = 1024 * 1024
#: Client-side request size cap; the topic's `max.message.bytes` (checked first) is the real limit.
PRODUCER_MAX_REQUEST_BYTES = 64 * 1024 * 1024

_TOO_LARGE = (
    kafka_errors.MessageSizeTooLargeError,
    kafka_errors.RecordTooLargeError,
    kafka_errors.RecordListTooLargeError,
)
#: Every consumer reads committed data only: records of open or aborted transactions stay hidden.
ISOLATION_LEVEL = "read_committed"
#: Broker answers that mean a newer producer owns the transactional id (or the old one timed out).
_FENCED = (
    kafka_errors.ProducerFenced,
    kafka_errors.InvalidProducerEpoch,
    kafka_errors.InvalidProducerIdMapping,
    kafka_errors.TransactionalIdAuthorizationFailed,
)
_GROUP_ID_NOT_FOUND = 69
_NON_EMPTY_GROUP = 68
_TOPIC_ALREADY_EXISTS = 36


def _is_transient(exc: BaseException) -> bool:
    """Whether retrying later may succeed: connection loss, timeouts, leadership moving."""
    if isinstance(exc, kafka_errors.KafkaError):
        return bool(exc.retriable) or isinstance(
            exc, kafka_errors.KafkaTimeoutError | kafka_errors.KafkaUnavailableError
        )
    return isinstance(exc, TimeoutError | ConnectionError)


def _translate(exc: BaseException, what: str) -> LogError:
    """The seam's typed error for an aiokafka (or socket) failure, counted by kind."""
    if isinstance(exc, LogError):
        return exc
    error: LogError
    if isinstance(exc, _FENCED):
        error = FencedError(f"{what}: fenced by a newer producer with the same transactional id ({exc})")
        kind = "fenced"
    elif isinstance(exc, kafka_errors.UnknownTopicOrPartitionError):
        error = TopicNotFoundError(f"{what}: unknown topic or partition")
        kind = "topic_not_found"
    elif isinstance(exc, _TOO_LARGE):
        error = RecordTooLargeError(f"{what}: record exceeds the size the broker accepts ({exc})")
        kind = "record_too_large"
    elif _is_transient(exc):
        error = LogUnavailableError(f"{what}: Kafka unavailable ({type(exc).__name__}: {exc})")
        kind = "unavailable"
    else:
        error = LogError(f"{what}: {type(exc).__name__}: {exc}")
        kind = "other"
    ERRORS.labels(kind).inc()
    return error


def _kafka_tp(tp: TopicPartition) -> KafkaTopicPartition:
    return KafkaTopicPartition(tp.topic, tp.partition)


def _our_tp(tp: KafkaTopicPartition) -> TopicPartition:
    return TopicPartition(tp.topic, tp.partition)


#: Distinct header tuples remembered by `_headers`; the cache is dropped whole when it fills up.
HEADER_CACHE_MAX = 1024
_header_cache: dict[Any, Headers] = {}


def _headers(raw: Any) -> Headers:
    """aiokafka's headers as the seam's tuple, shared between records that carry equal headers.

    Nearly every record of a topic carries the same schema header: looking the tuple up costs a
    fraction of rebuilding it, and equal records then share one headers object in memory.
    """
    if not raw:
        return ()
    try:
        found = _header_cache.get(raw)
    except TypeError:  # an unhashable header value
        found = None
    if found is None:
        found = tuple((str(k), bytes(v)) for k, v in raw)
        if len(_header_cache) >= HEADER_CACHE_MAX:
            _header_cache.clear()
        with contextlib.suppress(TypeError):
            _header_cache[raw] = found
    return found


def _record(message: Any) -> Record:
    return Record(
        message.topic,
        message.partition,
        message.offset,
        message.timestamp,
        message.key,
        message.value,
        _headers(message.headers),
    )


def ssl_context(tls: TlsSettings) -> ssl.SSLContext:
    """Client TLS from the settings: system CAs unless `ca_file`, mutual TLS when a cert is set."""
    try:
        context = ssl.create_default_context(cafile=str(tls.ca_file) if tls.ca_file else None)
        if tls.cert_file is not None:
            context.load_cert_chain(
                str(tls.cert_file), str(tls.key_file) if tls.key_file is not None else None
            )
    except (OSError, ssl.SSLError) as exc:
        raise LogError(f"log.tls: cannot load TLS material: {exc}") from exc
    context.check_hostname = tls.check_hostname
    return context


_AIOKAFKA_LOG = logging.getLogger("aiokafka")
_AUTH_ERRORS = (
    kafka_errors.AuthenticationFailedError,
    kafka_errors.AuthenticationMethodNotSupported,
    kafka_errors.UnsupportedSaslMechanismError,
    kafka_errors.IllegalSaslStateError,
    kafka_errors.SaslAuthenticationFailed,
)


class _BootstrapFailures(logging.Handler):
    """Collects why aiokafka could not bootstrap: it logs the cause, then raises a bare error.

    A refused connection is worth retrying; a certificate the client does not trust or rejected
    credentials are configuration errors that retrying cannot fix, so they fail at once.
    """

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.last: BaseException | None = None
        self.fatal: BaseException | None = None

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        cause = args[-1] if args else None
        if not isinstance(cause, BaseException):
            return
        self.last = cause
        if isinstance(cause, (ssl.SSLError, *_AUTH_ERRORS)):
            self.fatal = cause

    def raise_fatal(self, where: str, exc: BaseException) -> None:
        if self.fatal is None:
            return
        ERRORS.labels("configuration").inc()
        kind = "TLS handshake failed" if isinstance(self.fatal, ssl.SSLError) else "authentication failed"
        raise LogError(f"{where}: {kind}: {self.fatal} (check log.tls / log.sasl)") from exc


@dataclass(frozen=True, slots=True)
class _TopicMeta:
    """What appends need to know about a topic, cached for `TOPIC_METADATA_TTL_S`."""

    partitions: int
    compact: bool
    max_message_bytes: int
    read_at: float


class _Retrier:
    """Runs an operation with bounded retries and exponential backoff on transient failures."""

    __slots__ = ("backoff_ms", "retries", "timeout_s")

    def __init__(self, settings: LogSettings) -> None:
        self.retries = settings.connect_retries
        self.backoff_ms = settings.retry_backoff_ms
        self.timeout_s = settings.request_timeout_ms * 1.5 / 1000

    def delay_s(self, attempt: int) -> float:
        return float(min(self.backoff_ms * (2**attempt), MAX_BACKOFF_MS)) / 1000

    async def run(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        attempt = 0
        while True:
            try:
                async with asyncio.timeout(self.timeout_s):
                    return await call()
            except LogError:
                raise
            except Exception as exc:
                if not _is_transient(exc):
                    raise _translate(exc, what) from exc
                if attempt >= self.retries:
                    ERRORS.labels("unavailable").inc()
                    raise LogUnavailableError(
                        f"{what}: Kafka unavailable after {attempt + 1} attempts "
                        f"({type(exc).__name__}: {exc})"
                    ) from exc
                logger.debug("%s failed (%s), retry %d of %d", what, exc, attempt + 1, self.retries)
            RETRIES.labels(what.split(" ", 1)[0]).inc()
            await asyncio.sleep(self.delay_s(attempt))
            attempt += 1


class KafkaLog(Log):
    """The log on a Kafka-compatible cluster: one producer, one admin client, one offsets client."""

    kind = "kafka"

    def __init__(self, settings: LogSettings) -> None:
        self._settings = settings
        self._retrier = _Retrier(settings)
        self._producer: AIOKafkaProducer | None = None
        self._producer_broken = False
        self._producer_lock = asyncio.Lock()
        self._admin: AIOKafkaAdminClient | None = None
        self._offsets: AIOKafkaConsumer | None = None
        self._topics: dict[str, _TopicMeta] = {}
        self._owners: set[_KafkaReader | _KafkaGroupMember] = set()

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
            failures = _BootstrapFailures()
            _AIOKAFKA_LOG.addHandler(failures)
            try:
                await start(client)
            except BaseException as exc:
                with contextlib.suppress(Exception):
                    await _stop_client(client)
                if isinstance(exc, kafka_errors.KafkaConnectionError):
                    failures.raise_fatal(where, exc)
                    if failures.last is not None:
                        raise kafka_errors.KafkaConnectionError(f"{exc}: {failures.last}") from exc
                raise
            finally:
                _AIOKAFKA_LOG.removeHandler(failures)
            return client

        return await self._retrier.run(where, attempt)

    async def start(self) -> None:
        if self._producer is not None:
            return
        options = self.client_options()
        self._admin = await self.connect(
            "connect admin", lambda: AIOKafkaAdminClient(**options), _start_client
        )
        try:
            self._offsets = await self.connect(
                "connect offsets",
                lambda: AIOKafkaConsumer(
                    **options,
                    group_id=None,
                    enable_auto_commit=False,
                    auto_offset_reset="none",
                    isolation_level=ISOLATION_LEVEL,
                ),
                _start_client,
            )
            self._producer = await self.connect("connect producer", self._new_producer, _start_client)
        except BaseException:
            await self.close()
            raise

    def _new_producer(self, **extra: Any) -> AIOKafkaProducer:
        return AIOKafkaProducer(
            **self.client_options(),
            acks="all",
            enable_idempotence=True,
            linger_ms=0,
            max_request_size=PRODUCER_MAX_REQUEST_BYTES,
            max_batch_size=PRODUCER_BATCH_BYTES,
            **extra,
        )

    async def close(self) -> None:
        for owner in list(self._owners):
            with contextlib.suppress(Exception):
                await owner.close()
        self._owners.clear()
        producer, self._producer = self._producer, None
        if producer is not None:
            await _discard_producer(producer)
        clients: list[Any] = [self._offsets, self._admin]
        self._offsets = self._admin = None
        for client in clients:
            if client is not None:
                with contextlib.suppress(Exception):
                    await _stop_client(client)

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
        response = await self._retrier.run("create_topics", lambda: admin.create_topics(new_topics))
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
        """Wait (bounded) until new topics have leaders and configs, so appends and describes succeed."""
        if not names:
            return
        admin, _ = self._require()
        deadline = time.monotonic() + self._settings.request_timeout_ms / 1000
        pending = list(names)
        while pending:
            topics = await self._retrier.run(
                "describe_topics", functools.partial(admin.describe_topics, list(pending))
            )
            led = [
                t["topic"]
                for t in topics
                if t["error_code"] == 0 and t["partitions"] and all(p["leader"] >= 0 for p in t["partitions"])
            ]
            # Configs propagate separately from leadership; describe_topics() needs both.
            ready = set(await self._topic_configs(led)) if led else set()
            pending = [name for name in pending if name not in ready]
            if not pending:
                return
            if time.monotonic() >= deadline:
                raise LogUnavailableError(f"topics {pending} were created but have no leader yet")
            await asyncio.sleep(self._retrier.delay_s(0))

    async def broker_count(self) -> int:
        admin, _ = self._require()
        cluster = await self._retrier.run("describe_cluster", admin.describe_cluster)
        return len(cluster["brokers"])

    async def _partition_layout(self, names: Sequence[str]) -> dict[str, tuple[int, int]]:
        """(partition count, fewest replicas of any partition) per existing topic."""
        admin, _ = self._require()
        if not names:
            return {}
        topics = await self._retrier.run("describe_topics", lambda: admin.describe_topics(list(names)))
        layout: dict[str, tuple[int, int]] = {}
        for topic in topics:
            if topic["error_code"] == 0:
                partitions = topic["partitions"]
                replicas = min((len(p["replicas"]) for p in partitions), default=0)
                layout[topic["topic"]] = (len(partitions), replicas)
            elif topic["error_code"] != kafka_errors.UnknownTopicOrPartitionError.errno:
                raise _translate(kafka_errors.for_code(topic["error_code"])(), f"describe {topic['topic']}")
        return layout

    async def _topic_configs(self, names: Sequence[str]) -> dict[str, dict[str, str]]:
        admin, _ = self._require()
        if not names:
            return {}
        resources = [ConfigResource(ConfigResourceType.TOPIC, name) for name in names]
        responses = await self._retrier.run("describe_configs", lambda: admin.describe_configs(resources))
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
        return (await self._topic_meta(topic, refresh=True)).partitions

    async def _topic_meta(self, topic: str, *, refresh: bool = False) -> _TopicMeta:
        """Partition count and limits of `topic`; raises TopicNotFoundError."""
        meta = self._topics.get(topic)
        now = time.monotonic()
        if meta is not None and not refresh and now - meta.read_at < TOPIC_METADATA_TTL_S:
            return meta
        described = await self.describe_topics([topic])
        description = described.get(topic)
        if description is None:
            self._topics.pop(topic, None)
            ERRORS.labels("topic_not_found").inc()
            raise TopicNotFoundError(f"topic {topic!r} does not exist")
        configs = description.configs
        meta = _TopicMeta(
            partitions=description.partitions,
            compact="compact" in configs.get("cleanup.policy", "delete"),
            max_message_bytes=int(configs.get("max.message.bytes", DEFAULT_MAX_MESSAGE_BYTES)),
            read_at=now,
        )
        self._topics[topic] = meta
        return meta

    async def _check_partitions(self, tps: Sequence[TopicPartition]) -> None:
        for topic in sorted({tp.topic for tp in tps}):
            meta = await self._topic_meta(topic)
            for tp in tps:
                if tp.topic == topic and not 0 <= tp.partition < meta.partitions:
                    meta = await self._topic_meta(topic, refresh=True)
                    if not 0 <= tp.partition < meta.partitions:
                        raise TopicNotFoundError(
                            f"partition {tp} does not exist: topic has {meta.partitions} partitions"
                        )

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
        results = await self.append_many(topic, [PendingRecord(value, key, headers, partition)])
        return results[0]

    async def _placed(self, topic: str, records: Sequence[PendingRecord]) -> list[int | None]:
        """Validate records for `topic` and choose their partitions (see `_choose_partition`)."""
        meta = await self._topic_meta(topic)
        return [self._choose_partition(topic, meta, record) for record in records]

    async def append_many(self, topic: str, records: Sequence[PendingRecord]) -> list[AppendResult]:
        self._require()
        if not records:
            return []
        meta = await self._topic_meta(topic)
        partitions = await self._placed(topic, records)
        producer = await self._ready_producer()
        if meta.max_message_bytes < PRODUCER_BATCH_BYTES:
            # Records that each fit the topic could exceed it together in one producer batch.
            outcomes: list[Any] = []
            failure: BaseException | None = None
            for record, partition in zip(records, partitions, strict=True):
                acknowledged, failure = await self._send_all(producer, topic, [record], [partition])
                outcomes += acknowledged
                if failure is not None:
                    break
        else:
            outcomes, failure = await self._send_all(producer, topic, records, partitions)
        if failure is not None:
            if _is_transient(failure):
                self._mark_producer_broken(producer)
            if isinstance(failure, kafka_errors.UnknownTopicOrPartitionError):
                self._topics.pop(topic, None)
            raise _translate(failure, f"append to {topic!r}") from failure
        return _acknowledged(outcomes, records)

    async def _send_all(
        self,
        producer: AIOKafkaProducer,
        topic: str,
        records: Sequence[PendingRecord],
        partitions: Sequence[int | None],
    ) -> tuple[list[Any], BaseException | None]:
        """Send every record, then wait for every acknowledgement within the delivery timeout.

        aiokafka's idempotent producer retries an in-flight batch forever while the broker is
        down, so the wait is bounded here (`request_timeout_ms`); what is still unacknowledged
        then counts as a failure, and the producer is replaced before the next append.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._settings.request_timeout_ms / 1000
        futures: list[asyncio.Future[Any]] = []
        failure: BaseException | None = None
        try:
            async with asyncio.timeout_at(deadline):
                for record, partition in zip(records, partitions, strict=True):
                    future = await producer.send(
                        topic, record.value, key=record.key, partition=partition, headers=list(record.headers)
                    )
                    futures.append(future)
        except TimeoutError:
            failure = kafka_errors.KafkaTimeoutError(
                f"could not hand {len(records) - len(futures)} records to the producer in time"
            )
        except kafka_errors.KafkaError as exc:
            failure = exc
        if not futures:
            return [], failure
        _, pending = await asyncio.wait(futures, timeout=max(deadline - loop.time(), 0))
        for future in pending:
            future.add_done_callback(_consume_outcome)
        if failure is None and pending:
            failure = kafka_errors.KafkaTimeoutError(
                f"{len(pending)} records not acknowledged within {self._settings.request_timeout_ms} ms"
            )
        done = [f for f in futures if f.done()]
        errors = [error for error in (_outcome_error(f) for f in done) if error is not None]
        if failure is None and errors:
            failure = errors[0]
        return ([f.result() for f in futures] if failure is None else []), failure

    def transactional_producer(self, transactional_id: str) -> TransactionalProducer:
        self._require()
        return _KafkaTransactionalProducer(self, transactional_id)

    @staticmethod
    def _choose_partition(topic: str, meta: _TopicMeta, record: PendingRecord) -> int | None:
        """Validate one record and pick its partition (None lets the client spread keyless records)."""
        size = record.size_bytes
        if size + RECORD_OVERHEAD_BYTES > meta.max_message_bytes:
            ERRORS.labels("record_too_large").inc()
            raise RecordTooLargeError(
                f"record of {size} bytes exceeds max.message.bytes={meta.max_message_bytes} "
                f"of topic {topic!r}"
            )
        if record.key is None and (meta.compact or record.value is None):
            raise LogError(f"topic {topic!r} cannot accept a record without a key (compacted or tombstone)")
        if record.partition is not None:
            if not 0 <= record.partition < meta.partitions:
                raise LogError(
                    f"partition {record.partition} does not exist: "
                    f"topic {topic!r} has {meta.partitions} partitions"
                )
            return record.partition
        if record.key is not None:
            return murmur2_partition(record.key, meta.partitions)
        return None

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
                replacement = await self.connect("connect producer", self._new_producer, _start_client)
                self._producer, self._producer_broken = replacement, False
                PRODUCER_RESETS.inc()
                await _discard_producer(old)
        return self._producer

    def _mark_producer_broken(self, producer: AIOKafkaProducer) -> None:
        if producer is self._producer:
            self._producer_broken = True

    # offsets --------------------------------------------------------------------------------
    async def beginning_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return await self._watermarks("beginning_offsets", tps)

    async def end_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return await self._watermarks("end_offsets", tps)

    async def _watermarks(
        self, which: Literal["beginning_offsets", "end_offsets"], tps: Sequence[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """Log-start or log-end offsets through the client's method of that name, with retries."""
        _, client = self._require()
        if not tps:
            return {}
        await self._check_partitions(tps)
        query = getattr(client, which)
        found = await self._retrier.run(which, lambda: query([_kafka_tp(tp) for tp in tps]))
        return {_our_tp(tp): int(offset) for tp, offset in found.items()}

    async def offsets_for_times(
        self, timestamps_ms: dict[TopicPartition, int]
    ) -> dict[TopicPartition, int | None]:
        _, client = self._require()
        if not timestamps_ms:
            return {}
        await self._check_partitions(list(timestamps_ms))
        query = {_kafka_tp(tp): ts for tp, ts in timestamps_ms.items()}
        found = await self._retrier.run("offsets_for_times", lambda: client.offsets_for_times(query))
        return {
            _our_tp(tp): (int(entry.offset) if entry is not None else None) for tp, entry in found.items()
        }

    # reading --------------------------------------------------------------------------------
    def reader(self) -> Reader:
        self._require()
        reader = _KafkaReader(self)
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
        self._require()
        member = _KafkaGroupMember(self, group_id, tuple(topics), listener, reset)
        self._owners.add(member)
        return member

    def _forget(self, owner: _KafkaReader | _KafkaGroupMember) -> None:
        self._owners.discard(owner)

    # consumer-group administration ----------------------------------------------------------
    async def list_groups(self) -> list[str]:
        admin, _ = self._require()
        groups = await self._retrier.run("list_groups", admin.list_consumer_groups)
        return sorted({str(group[0]) for group in groups})

    async def group_offsets(self, group_id: str) -> dict[TopicPartition, int]:
        admin, _ = self._require()
        found = await self._retrier.run("group_offsets", lambda: admin.list_consumer_group_offsets(group_id))
        return {_our_tp(tp): int(meta.offset) for tp, meta in found.items() if meta.offset >= 0}

    async def commit_group_offsets(self, group_id: str, offsets: dict[TopicPartition, int]) -> None:
        self._require()
        if not offsets:
            return
        for tp, offset in offsets.items():
            if offset < 0:
                raise LogError(f"cannot commit negative offset {offset} for {tp}")
        await self._check_partitions(list(offsets))
        options = self.client_options()
        consumer = await self.connect(
            "connect committer",
            lambda: AIOKafkaConsumer(
                **options, group_id=group_id, enable_auto_commit=False, auto_offset_reset="none"
            ),
            _start_client,
        )
        try:
            consumer.assign([_kafka_tp(tp) for tp in offsets])
            await self._retrier.run(
                "commit_group_offsets",
                lambda: consumer.commit({_kafka_tp(tp): offset for tp, offset in offsets.items()}),
            )
        except LogUnavailableError:
            raise
        except LogError as exc:
            raise LogError(
                f"committing offsets for group {group_id!r} failed (does it have active members?): {exc}"
            ) from exc
        finally:
            with contextlib.suppress(Exception):
                await _stop_client(consumer)

    async def delete_group(self, group_id: str) -> None:
        admin, _ = self._require()

        async def delete() -> Any:
            # aiokafka 0.14 has no public delete_consumer_groups; send DeleteGroups to the coordinator.
            coordinator = await admin.find_coordinator(group_id)
            return await admin._send_request(DeleteGroupsRequest([group_id]), coordinator)

        response = await self._retrier.run("delete_group", delete)
        for _name, code in response.results:
            if code in (0, _GROUP_ID_NOT_FOUND):
                continue
            if code == _NON_EMPTY_GROUP:
                raise LogError(f"group {group_id!r} is not empty; stop its members first")
            raise _translate(kafka_errors.for_code(code)(), f"delete group {group_id!r}")


def _acknowledged(outcomes: Sequence[Any], records: Sequence[PendingRecord]) -> list[AppendResult]:
    """The seam's results for acknowledged sends, counted in the append metrics."""
    # aiokafka reports the broker's time on LogAppendTime topics and the record's own otherwise.
    results = [AppendResult(md.topic, md.partition, md.offset, int(md.timestamp)) for md in outcomes]
    APPENDED_RECORDS.inc(len(results))
    APPENDED_BYTES.inc(sum(record.size_bytes for record in records))
    return results


class _KafkaTransactionalProducer(TransactionalProducer):
    """One aiokafka producer with a `transactional_id`; one transaction per `commit`.

    aiokafka leaves a fenced producer in a fatal state (its sender task ends with
    `ProducerFenced`), and a producer whose transaction outcome is unknown (the commit or abort did
    not answer in time) cannot be reused either. Both become `FencedError` for good: a new
    producer would take a new epoch and fence whoever legitimately owns the id now, so only the
    owner, once it knows it still owns the work, may start one.
    """

    def __init__(self, owner: KafkaLog, transactional_id: str) -> None:
        self._log = owner
        self.transactional_id = transactional_id
        self._producer: AIOKafkaProducer | None = None
        self._fenced: str | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        if self._producer is not None:
            return
        timeout_ms = self._log.settings.transaction_timeout_ms
        self._producer = await self._log.connect(
            f"start transactional producer {self.transactional_id!r}",
            lambda: self._log._new_producer(
                transactional_id=self.transactional_id, transaction_timeout_ms=timeout_ms
            ),
            _start_client,
        )

    async def commit(
        self,
        appends: Mapping[str, Sequence[PendingRecord]],
        offsets: GroupOffsets | None = None,
    ) -> list[AppendResult]:
        async with self._lock:
            producer = self._usable()
            placed = [
                (topic, records, await self._log._placed(topic, records))
                for topic, records in appends.items()
            ]
            deadline_s = self._log.settings.request_timeout_ms / 1000
            try:
                await producer.begin_transaction()
                outcomes = await self._send(producer, placed, offsets, deadline_s)
                crash_point("kafka-transaction-sent")
                await _bounded(producer.commit_transaction(), deadline_s)
            except BaseException as exc:
                await self._abort(producer, exc, deadline_s)
                raise self._failure(exc) from exc
            return _acknowledged(outcomes, [record for _, records, _ in placed for record in records])

    def _usable(self) -> AIOKafkaProducer:
        if self._fenced is not None:
            raise FencedError(f"transactional producer {self.transactional_id!r}: {self._fenced}")
        if self._producer is None:
            raise LogError(f"transactional producer {self.transactional_id!r} is not started")
        return self._producer

    @staticmethod
    async def _send(
        producer: AIOKafkaProducer,
        placed: list[tuple[str, Sequence[PendingRecord], list[int | None]]],
        offsets: GroupOffsets | None,
        deadline_s: float,
    ) -> list[Any]:
        futures: list[asyncio.Future[Any]] = []
        async with asyncio.timeout(deadline_s):
            for topic, records, partitions in placed:
                for record, partition in zip(records, partitions, strict=True):
                    futures.append(
                        await producer.send(
                            topic,
                            record.value,
                            key=record.key,
                            partition=partition,
                            headers=list(record.headers),
                        )
                    )
            if offsets is not None and offsets.offsets:
                await producer.send_offsets_to_transaction(
                    {_kafka_tp(tp): offset for tp, offset in offsets.offsets.items()}, offsets.group_id
                )
            for future in futures:
                future.add_done_callback(_consume_outcome)
            return list(await asyncio.gather(*futures))

    async def _abort(self, producer: AIOKafkaProducer, cause: BaseException, deadline_s: float) -> None:
        """Abort after a failure; when that is impossible the producer is done for."""
        if isinstance(cause, _FENCED) or _fatal(producer):
            self._fenced = "a newer producer with the same transactional id has started"
        else:
            try:
                await _bounded(producer.abort_transaction(), deadline_s)
                return
            except BaseException as exc:
                if isinstance(exc, _FENCED):
                    self._fenced = "a newer producer with the same transactional id has started"
                else:
                    self._fenced = (
                        f"the outcome of its transaction is unknown ({type(cause).__name__}: {cause})"
                    )
        ERRORS.labels("fenced").inc()
        self._producer = None
        _settle_internal_futures(producer)
        await _discard_producer(producer)

    def _failure(self, exc: BaseException) -> BaseException:
        if self._fenced is not None:
            return FencedError(f"transactional producer {self.transactional_id!r}: {self._fenced}")
        if isinstance(exc, asyncio.CancelledError):
            return exc
        if isinstance(exc, TimeoutError):
            exc = kafka_errors.KafkaTimeoutError(
                f"transaction not acknowledged within {self._log.settings.request_timeout_ms} ms"
            )
        return _translate(exc, f"transaction of {self.transactional_id!r}")

    async def close(self) -> None:
        producer, self._producer = self._producer, None
        self._fenced = self._fenced or "closed"
        if producer is not None:
            await _discard_producer(producer)


def _settle_internal_futures(producer: AIOKafkaProducer) -> None:
    """Retrieve the internal futures a fenced aiokafka producer fails and nobody awaits any more.

    When the fence ends its sender task, aiokafka fails the transaction waiter and each batch's
    drain waiter; unretrieved, asyncio logs them from a finalizer, at an arbitrary later moment.
    """
    manager = getattr(producer, "_txn_manager", None)
    accumulator = getattr(producer, "_message_accumulator", None)
    futures = [getattr(manager, "_transaction_waiter", None)]
    batches = [b for queue in getattr(accumulator, "_batches", {}).values() for b in queue]
    batches += list(getattr(accumulator, "_pending_batches", ()))
    futures += [getattr(batch, "_drain_waiter", None) for batch in batches]
    for future in futures:
        if isinstance(future, asyncio.Future):
            future.add_done_callback(_consume_outcome)


def _fatal(producer: AIOKafkaProducer) -> bool:
    """Whether aiokafka's transaction manager is in its fatal state (fenced, or its sender died)."""
    manager = getattr(producer, "_txn_manager", None)
    return bool(manager is not None and manager.is_fatal_error())


async def _bounded(operation: Awaitable[Any], timeout_s: float) -> None:
    async with asyncio.timeout(timeout_s):
        await operation


def _outcome_error(future: asyncio.Future[Any]) -> BaseException | None:
    if future.cancelled():
        return asyncio.CancelledError()
    return future.exception()


def _consume_outcome(future: asyncio.Future[Any]) -> None:
    """Retrieve the late outcome of an abandoned send, so asyncio does not log it as unhandled."""
    if not future.cancelled():
        future.exception()


async def _discard_producer(producer: AIOKafkaProducer, grace_s: float = 1.0) -> None:
    """Stop a producer whose batches may never be acknowledged.

    `stop()` waits for in-flight batches, which an idempotent aiokafka producer retries forever;
    after `grace_s` its sender task is cancelled, which lets `stop()` close the connections.
    """
    stopping = asyncio.ensure_future(_stop_client(producer))
    _, pending = await asyncio.wait({stopping}, timeout=grace_s)
    if pending:
        sender = getattr(getattr(producer, "_sender", None), "sender_task", None)
        if sender is not None:
            sender.cancel()
    with contextlib.suppress(Exception):
        async with asyncio.timeout(grace_s * 5):
            await stopping


async def _start_client(client: Any) -> None:
    await client.start()


async def _stop_client(client: Any) -> None:
    """Stop an aiokafka client; its own cancelled background tasks must not cancel the caller.

    aiokafka 0.14's consumer `stop()` awaits a background task it has just cancelled, and the
    CancelledError escapes; it is swallowed here unless this task itself is being cancelled.
    """
    try:
        if isinstance(client, AIOKafkaAdminClient):
            await client.close()
        else:
            await client.stop()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise


class _KafkaReader(Reader):
    """Manual assignment without a group; positions are tracked here so `position()` is synchronous."""

    def __init__(self, owner: KafkaLog) -> None:
        self._log = owner
        self._consumer: AIOKafkaConsumer | None = None
        self._positions: dict[TopicPartition, int] = {}
        self._closed = False

    async def _client(self) -> AIOKafkaConsumer:
        if self._closed:
            raise LogError("reader is closed")
        if self._consumer is None:
            options = self._log.client_options()
            self._consumer = await self._log.connect(
                "connect reader",
                lambda: AIOKafkaConsumer(
                    **options,
                    group_id=None,
                    enable_auto_commit=False,
                    auto_offset_reset="none",
                    isolation_level=ISOLATION_LEVEL,
                ),
                _start_client,
            )
        return self._consumer

    async def assign(self, positions: dict[TopicPartition, int]) -> None:
        for tp, offset in positions.items():
            if offset < 0:
                raise LogError(f"cannot read {tp} from negative offset {offset}")
        await self._log._check_partitions(list(positions))
        consumer = await self._client()
        consumer.assign([_kafka_tp(tp) for tp in positions])
        for tp, offset in positions.items():
            consumer.seek(_kafka_tp(tp), offset)
        self._positions = dict(positions)

    async def seek(self, tp: TopicPartition, offset: int) -> None:
        consumer = await self._client()
        if tp not in self._positions:
            raise LogError(f"{tp} is not assigned to this reader")
        if offset < 0:
            raise LogError(f"cannot seek {tp} to negative offset {offset}")
        consumer.seek(_kafka_tp(tp), offset)
        self._positions[tp] = offset

    def position(self, tp: TopicPartition) -> int:
        if tp not in self._positions:
            raise LogError(f"{tp} is not assigned to this reader")
        return self._positions[tp]

    async def fetch(self, timeout_ms: int = 1000, max_records: int = 500) -> Fetched:
        consumer = await self._client()
        if not self._positions:
            await asyncio.sleep(max(timeout_ms, 0) / 1000)
            return Fetched()
        fetched, next_offsets = await _fetch(self._log, consumer, timeout_ms, max_records, None)
        for ktp, offset in next_offsets.items():
            self._positions[_our_tp(ktp)] = offset
        for gap in fetched.gaps:
            self._positions[TopicPartition(gap.topic, gap.partition)] = gap.first_surviving
        for tp in self._positions:
            # The client may have moved past compacted-away offsets or control records.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(0.1):
                    self._positions[tp] = max(self._positions[tp], await consumer.position(_kafka_tp(tp)))
        return fetched

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._log._forget(self)
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            with contextlib.suppress(Exception):
                await _stop_client(consumer)


async def _fetch(
    owner: KafkaLog,
    consumer: AIOKafkaConsumer,
    timeout_ms: int,
    max_records: int,
    reset: Literal["earliest", "latest"] | None,
) -> tuple[Fetched, dict[KafkaTopicPartition, int]]:
    """One fetch round: records, plus a Gap for every partition whose position retention passed.

    The consumer runs with `auto_offset_reset="none"`, so aiokafka raises instead of resetting;
    here a position below log-start becomes a Gap and moves to log-start, and a group partition
    without a committed offset starts at the group's reset policy. Also returns, per partition
    that yielded records, the offset after its last record (a reader's next position).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(timeout_ms, 0) / 1000
    gaps: list[Gap] = []
    records: list[Record] = []
    next_offsets: dict[KafkaTopicPartition, int] = {}
    for _round in range(len(consumer.assignment()) + 2):
        remaining_ms = 0 if gaps else max(int((deadline - loop.time()) * 1000), 0)
        try:
            batches = await consumer.getmany(timeout_ms=remaining_ms, max_records=max(max_records, 1))
        except kafka_errors.OffsetOutOfRangeError as exc:
            beyond_end = await _handle_out_of_range(owner, consumer, exc, gaps)
            if beyond_end and not gaps:
                await asyncio.sleep(min(owner._retrier.delay_s(0), max(deadline - loop.time(), 0)))
                return Fetched(records, gaps), next_offsets
            continue
        except kafka_errors.NoOffsetForPartitionError as exc:
            tp = exc.args[0] if exc.args else None
            if reset is None or not isinstance(tp, KafkaTopicPartition):
                raise _translate(exc, "fetch") from exc
            await _reset_position(consumer, tp, reset)
            continue
        except kafka_errors.ConsumerStoppedError as exc:
            raise LogError("the consumer was closed") from exc
        except kafka_errors.KafkaError as exc:
            raise _translate(exc, "fetch") from exc
        for tp in sorted(batches, key=lambda t: (t.topic, t.partition)):
            messages = batches[tp]
            if messages:
                records.extend(map(_record, messages))
                next_offsets[tp] = messages[-1].offset + 1
        break
    return Fetched(records, gaps), next_offsets


async def _reset_position(
    consumer: AIOKafkaConsumer, tp: KafkaTopicPartition, reset: Literal["earliest", "latest"]
) -> None:
    """Start a group partition without a committed offset at the reset policy, if it is still ours.

    The fetcher reports a missing offset on a later fetch than the one that found it, and a
    rebalance may have revoked the partition in between (or revokes it while the reset waits):
    the new owner resets it then, so a partition no longer assigned is left alone.
    """
    if tp not in consumer.assignment():
        return
    try:
        await (consumer.seek_to_beginning(tp) if reset == "earliest" else consumer.seek_to_end(tp))
    except kafka_errors.IllegalStateError:
        return  # revoked while the reset was being looked up
    except kafka_errors.KafkaError as exc:
        raise _translate(exc, "fetch") from exc


async def _handle_out_of_range(
    owner: KafkaLog, consumer: AIOKafkaConsumer, exc: kafka_errors.OffsetOutOfRangeError, gaps: list[Gap]
) -> bool:
    """Turn out-of-range positions into Gaps (below log-start) or waits (beyond log-end).

    Returns True when some position was beyond the log end: it stays where it is, as on the
    embedded log, and the reader sees records once the log grows past it.
    """
    positions = exc.args[0] if exc.args and isinstance(exc.args[0], dict) else {}
    beyond_end = False
    for ktp, position in positions.items():
        tp = _our_tp(ktp)
        start = (await owner.beginning_offsets([tp]))[tp]
        if ktp not in consumer.assignment():
            continue  # revoked by a rebalance while log-start was looked up: the new owner handles it
        if position < start:
            gap = Gap(tp.topic, tp.partition, int(position), start)
            gaps.append(gap)
            GAP_RECORDS.inc(gap.lost)
            logger.warning("%s: records %d..%d were deleted before they were read", tp, position, start - 1)
            consumer.seek(ktp, start)
        else:
            beyond_end = True
            consumer.seek(ktp, position)
    return beyond_end


class _RebalanceBridge(ConsumerRebalanceListener):  # type: ignore[misc]
    """Forwards aiokafka's rebalance callbacks to the seam's listener, in our TopicPartition type."""

    def __init__(self, member: _KafkaGroupMember) -> None:
        self._member = member

    async def on_partitions_revoked(self, revoked: Any) -> None:
        # The partitions stay committable inside the listener (the generation is still valid).
        self._member._read_to.clear()
        try:
            if self._member.listener is not None:
                await self._member.listener.on_partitions_revoked({_our_tp(tp) for tp in revoked})
        finally:
            self._member._assigned = set()

    async def on_partitions_assigned(self, assigned: Any) -> None:
        ours = {_our_tp(tp) for tp in assigned}
        self._member._assigned = ours
        if self._member.listener is not None:
            await self._member.listener.on_partitions_assigned(set(ours))
        self._member._joined.set()


class _KafkaGroupMember(GroupConsumer):
    """A consumer-group member: aiokafka's group protocol, explicit commits only."""

    def __init__(
        self,
        owner: KafkaLog,
        group_id: str,
        topics: tuple[str, ...],
        listener: RebalanceListener | None,
        reset: Literal["earliest", "latest"],
    ) -> None:
        self._log = owner
        self.group_id = group_id
        self.topics = topics
        self.listener = listener
        self.reset = reset
        self._consumer: AIOKafkaConsumer | None = None
        self._assigned: set[TopicPartition] = set()
        self._joined = asyncio.Event()
        self._closed = False
        # per partition: (offset after the last record returned, client position after that fetch)
        self._read_to: dict[TopicPartition, tuple[int, int]] = {}

    async def start(self) -> None:
        if self._consumer is not None:
            return
        if self._closed:
            raise LogError(f"group member of {self.group_id!r} is closed")
        for topic in self.topics:
            await self._log._topic_meta(topic)
        options = self._log.client_options()

        def factory() -> AIOKafkaConsumer:
            return AIOKafkaConsumer(
                **options,
                group_id=self.group_id,
                enable_auto_commit=False,
                auto_offset_reset="none",
                isolation_level=ISOLATION_LEVEL,
                heartbeat_interval_ms=min(1000, self._log.settings.session_timeout_ms // 3),
                session_timeout_ms=self._log.settings.session_timeout_ms,
            )

        # Subscribed only once started: aiokafka's start() of a subscribed consumer also waits
        # for the group join, which takes as long as the other members need to hand their
        # partitions over; that wait is bounded by GROUP_JOIN_TIMEOUT_MS below, not by the
        # per-request retry budget of `connect` (under which a new member gave up and exited).
        consumer = await self._log.connect("connect group member", factory, _start_client)
        self._consumer = consumer
        try:
            consumer.subscribe(list(self.topics), listener=_RebalanceBridge(self))
            await self._await_first_assignment(consumer)
        except BaseException:
            await self.close()
            raise

    async def _await_first_assignment(self, consumer: AIOKafkaConsumer) -> None:
        """Drive the join until the listener has seen the first assignment (bounded)."""
        try:
            async with asyncio.timeout(GROUP_JOIN_TIMEOUT_MS / 1000):
                await self._joined.wait()
        except TimeoutError as exc:
            ERRORS.labels("unavailable").inc()
            raise LogUnavailableError(
                f"group {self.group_id!r}: no partition assignment within {GROUP_JOIN_TIMEOUT_MS} ms"
            ) from exc

    def assignment(self) -> set[TopicPartition]:
        return set(self._assigned)

    def _active(self) -> AIOKafkaConsumer:
        if self._closed:
            raise LogError(f"group member of {self.group_id!r} is closed")
        if self._consumer is None:
            raise LogError(f"group member of {self.group_id!r} is not started; call start() first")
        return self._consumer

    async def fetch(self, timeout_ms: int = 1000, max_records: int = 500) -> Fetched:
        consumer = self._active()
        fetched, next_offsets = await _fetch(self._log, consumer, timeout_ms, max_records, self.reset)
        for ktp, offset in next_offsets.items():
            tp = _our_tp(ktp)
            self._read_to[tp] = (offset, offset)
        for tp, (returned, _) in list(self._read_to.items()):
            if tp not in self._assigned:
                del self._read_to[tp]
                continue
            # Transaction markers (and aborted records) after the last record move the position on.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(0.1):
                    position = int(await consumer.position(_kafka_tp(tp)))
                    self._read_to[tp] = (returned, max(returned, position))
        return fetched

    def committable(self, offsets: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        result = dict(offsets)
        for tp, offset in offsets.items():
            returned, position = self._read_to.get(tp, (-1, -1))
            if offset == returned:
                result[tp] = position
        return result

    async def seek(self, tp: TopicPartition, offset: int) -> None:
        consumer = self._active()
        if tp not in self._assigned:
            raise LogError(f"{tp} is not assigned to this member of {self.group_id!r}")
        if offset < 0:
            raise LogError(f"cannot seek {tp} to negative offset {offset}")
        try:
            consumer.seek(_kafka_tp(tp), offset)
        except kafka_errors.IllegalStateError as exc:
            raise LogError(f"{tp} is not assigned to this member of {self.group_id!r}") from exc
        self._read_to.pop(tp, None)

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        consumer = self._active()
        foreign = sorted(str(tp) for tp in offsets if tp not in self._assigned)
        if foreign:
            raise LogError(
                f"cannot commit {', '.join(foreign)}: not assigned to this member of {self.group_id!r}"
            )
        for tp, offset in offsets.items():
            if offset < 0:
                raise LogError(f"cannot commit negative offset {offset} for {tp}")
        if not offsets:
            return
        offsets = self.committable(offsets)
        try:
            await self._log._retrier.run(
                "commit", lambda: consumer.commit({_kafka_tp(tp): offset for tp, offset in offsets.items()})
            )
        except LogUnavailableError:
            raise
        except LogError as exc:
            raise LogError(f"commit for group {self.group_id!r} rejected: {exc}") from exc

    async def committed(self, tp: TopicPartition) -> int | None:
        consumer = self._active()
        offset = await self._log._retrier.run("committed", lambda: consumer.committed(_kafka_tp(tp)))
        return int(offset) if offset is not None and offset >= 0 else None

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._log._forget(self)
        consumer, self._consumer = self._consumer, None
        self._assigned = set()
        if consumer is not None:
            with contextlib.suppress(Exception):
                await _stop_client(consumer)
