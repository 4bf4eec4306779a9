"""KafkaLog against a real Apache Kafka broker: what the shared conformance suite cannot show.

Partition placement is checked against the Java client's own partitioner (kafka-clients from the
broker jars), the crash test kills and restarts a private broker under a live client, and the
unreachable-bootstrap test needs no broker at all.
"""

from __future__ import annotations

import asyncio
import functools
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from pipeline.config import LogSettings
from pipeline.log import (
    AppendResult,
    GroupConsumer,
    LogError,
    LogUnavailableError,
    PendingRecord,
    RebalanceListener,
    Record,
    TopicNotFoundError,
    TopicPartition,
    TopicSpec,
)
from pipeline.log.api import Gap
from pipeline.log.kafka import KafkaLog
from pipeline.log.partitioner import murmur2_partition
from tests.conftest import unique_prefix
from tests.integration.kafka.broker import BrokerSecurity, KafkaBroker, libs_dir
from tests.support.net import free_port
from tests.support.wait import wait_for

HERE = Path(__file__).resolve().parent
WAIT_S = 90.0


def kafka_settings(bootstrap: str, **overrides: object) -> LogSettings:
    return LogSettings.model_validate(
        {"backend": "kafka", "bootstrap_servers": bootstrap, "topic_prefix": unique_prefix(), **overrides}
    )


@pytest.fixture
async def kafka_log(kafka_bootstrap: str) -> AsyncIterator[KafkaLog]:
    log = KafkaLog(kafka_settings(kafka_bootstrap))
    await log.start()
    try:
        yield log
    finally:
        await log.close()


async def new_topic(log: KafkaLog, suffix: str, partitions: int = 1, **config: object) -> str:
    name = f"{log.settings.topic_prefix}.{suffix}"
    spec = TopicSpec(name, partitions, **config)  # type: ignore[arg-type]
    assert await log.create_topics([spec]) == [name]
    return name


# Kafka runs retention, compaction and rebalances in the background.
eventually = functools.partial(wait_for, timeout_s=WAIT_S, interval_s=0.5)


async def read_partition(log: KafkaLog, tp: TopicPartition) -> list[Record]:
    """Every surviving record of `tp`, from log-start to log-end."""
    start = (await log.beginning_offsets([tp]))[tp]
    end = (await log.end_offsets([tp]))[tp]
    reader = log.reader()
    records: list[Record] = []
    try:
        await reader.assign({tp: start})
        deadline = time.monotonic() + WAIT_S
        while reader.position(tp) < end:
            if time.monotonic() > deadline:
                pytest.fail(f"could not read {tp} up to {end}; at {reader.position(tp)}")
            fetched = await reader.fetch(timeout_ms=500)
            assert fetched.gaps == []
            records.extend(fetched.records)
    finally:
        await reader.close()
    return records


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


# appending and reading ---------------------------------------------------------------------------


@pytest.mark.kafka
async def test_round_trip_keeps_key_value_headers_and_broker_timestamps(kafka_log: KafkaLog) -> None:
    appended_topic = await new_topic(kafka_log, "append-time", partitions=2)
    created_topic = await new_topic(kafka_log, "create-time", partitions=2, log_append_time=False)
    headers = (("reverser-schema", b"fact_batch/1"), ("trace", b"\x00\xff"), ("trace", b"second"))
    for topic in (appended_topic, created_topic):
        before_ms = int(time.time() * 1000)
        result = await kafka_log.append(topic, b"value", key=b"key", headers=headers)
        after_ms = int(time.time() * 1000)
        assert result.partition == murmur2_partition(b"key", 2)
        assert before_ms - 1000 <= result.timestamp_ms <= after_ms + 1000
        tombstone = await kafka_log.append(topic, None, key=b"key")
        assert (tombstone.partition, tombstone.offset) == (result.partition, result.offset + 1)

        records = await read_partition(kafka_log, TopicPartition(topic, result.partition))
        assert [(r.offset, r.key, r.value, r.headers) for r in records] == [
            (result.offset, b"key", b"value", headers),
            (tombstone.offset, b"key", None, ()),
        ]
        assert records[0].timestamp_ms == result.timestamp_ms
        assert records[0].header("trace") == b"\x00\xff"

    description = await kafka_log.describe_topics([appended_topic, created_topic])
    assert description[appended_topic].configs["message.timestamp.type"] == "LogAppendTime"
    assert description[created_topic].configs["message.timestamp.type"] == "CreateTime"


@pytest.mark.kafka
async def test_append_many_to_several_partitions_acknowledges_all_in_input_order(kafka_log: KafkaLog) -> None:
    topic = await new_topic(kafka_log, "many", partitions=4)
    pending = [PendingRecord(f"v{i}".encode(), key=f"k{i % 7}".encode()) for i in range(200)]
    results = await kafka_log.append_many(topic, pending)
    assert [r.partition for r in results] == [murmur2_partition(p.key or b"", 4) for p in pending]
    for partition in range(4):
        offsets = [r.offset for r in results if r.partition == partition]
        assert offsets == sorted(offsets)
        stored = await read_partition(kafka_log, TopicPartition(topic, partition))
        expected = [p.value for p, r in zip(pending, results, strict=True) if r.partition == partition]
        assert [r.value for r in stored] == expected


@pytest.mark.kafka
async def test_broker_rejections_are_typed_errors(kafka_log: KafkaLog) -> None:
    topic = await new_topic(kafka_log, "rules", partitions=2)
    compacted = await new_topic(kafka_log, "compacted", partitions=1, cleanup_policy="compact")
    with pytest.raises(TopicNotFoundError):
        await kafka_log.append(f"{topic}-missing", b"x")
    with pytest.raises(TopicNotFoundError):
        await kafka_log.end_offsets([TopicPartition(topic, 2)])
    with pytest.raises(LogError, match="partition 5 does not exist"):
        await kafka_log.append(topic, b"x", partition=5)
    with pytest.raises(LogError, match="without a key"):
        await kafka_log.append(compacted, b"x")
    reader = kafka_log.reader()
    with pytest.raises(TopicNotFoundError):
        await reader.assign({TopicPartition(f"{topic}-missing", 0): 0})
    await reader.close()
    with pytest.raises(LogError, match="closed"):
        await reader.fetch(timeout_ms=0)
    # Nothing about the log broke: it still appends.
    assert (await kafka_log.append(topic, b"fine", partition=1)).offset == 0


@pytest.mark.kafka
async def test_append_many_fits_batches_to_a_small_max_message_bytes(kafka_log: KafkaLog) -> None:
    """Each record fits the topic's limit; together they would not, so they must not share a batch."""
    topic = await new_topic(kafka_log, "small-limit", partitions=1, max_message_bytes=4096)
    pending = [PendingRecord(bytes([65 + i]) * 1500) for i in range(12)]
    results = await kafka_log.append_many(topic, pending)
    assert [r.offset for r in results] == list(range(12))
    stored = await read_partition(kafka_log, TopicPartition(topic, 0))
    assert [r.value for r in stored] == [p.value for p in pending]


# partitioning agrees with the Java client ---------------------------------------------------------


def java_partitions(keys: list[bytes], partitions: int) -> list[int]:
    """Partitions chosen by kafka-clients' BuiltInPartitioner (the Java producer's default)."""
    java = shutil.which("java")
    if java is None:
        pytest.fail("java is needed to run the Java partitioner (it also runs the test broker)")
    command = [java, "-cp", f"{libs_dir()}/*", str(HERE / "kafka" / "JavaPartitioner.java"), str(partitions)]
    result = subprocess.run(
        [*command, *(key.hex() for key in keys)], capture_output=True, text=True, check=True, timeout=120
    )
    return [int(line) for line in result.stdout.split()]


KEYS = [b"", b"a", b"ab", b"abc", b"abcd", b"\x00", b"\xff\xfe\xfd", "κλειδί/ünïcode".encode()] + [
    f"default/apps/deployments/{i}".encode() for i in range(40)
]


@pytest.mark.kafka
async def test_partitions_match_the_java_producer_and_aiokafka(kafka_log: KafkaLog) -> None:
    from aiokafka.partitioner import DefaultPartitioner

    partitions = 7
    java = java_partitions(KEYS, partitions)
    ours = [murmur2_partition(key, partitions) for key in KEYS]
    aiokafka_default = [DefaultPartitioner()(key, list(range(partitions)), []) for key in KEYS]
    assert ours == java
    assert aiokafka_default == java

    topic = await new_topic(kafka_log, "placement", partitions=partitions)
    results = await kafka_log.append_many(topic, [PendingRecord(b"v", key=key) for key in KEYS])
    assert [r.partition for r in results] == java


@hypothesis_settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=64), st.integers(min_value=1, max_value=500))
def test_murmur2_partition_matches_aiokafka_for_any_key(key: bytes, partitions: int) -> None:
    """aiokafka's DefaultPartitioner is what KafkaLog would fall back to; both must be Java's."""
    from aiokafka.partitioner import DefaultPartitioner

    assert murmur2_partition(key, partitions) == DefaultPartitioner()(key, list(range(partitions)), [])


# gaps ------------------------------------------------------------------------------------------------


@pytest.mark.kafka
async def test_reader_reports_a_gap_only_where_retention_deleted_unread_records(kafka_log: KafkaLog) -> None:
    short = await new_topic(kafka_log, "short", partitions=1, retention_ms=1000, segment_ms=100)
    kept = await new_topic(kafka_log, "kept", partitions=1)
    short_tp, kept_tp = TopicPartition(short, 0), TopicPartition(kept, 0)
    await kafka_log.append_many(short, [PendingRecord(f"s{i}".encode()) for i in range(5)])
    await kafka_log.append_many(kept, [PendingRecord(f"k{i}".encode()) for i in range(5)])

    async def short_log_start_moved() -> bool:
        return (await kafka_log.beginning_offsets([short_tp]))[short_tp] > 0

    await eventually(short_log_start_moved, "retention to move the log-start offset")
    gaps_before = metric("reverser_log_kafka_gap_records_total")

    reader = kafka_log.reader()
    try:
        await reader.assign({short_tp: 0, kept_tp: 0})
        gaps: list[Gap]
        kept_values: list[bytes | None]
        gaps, kept_values = [], []
        deadline = time.monotonic() + WAIT_S
        while (not gaps or len(kept_values) < 5) and time.monotonic() < deadline:
            fetched = await reader.fetch(timeout_ms=500)
            gaps += fetched.gaps
            kept_values += [r.value for r in fetched.records if r.topic == kept]
            short_offsets = [r.offset for r in fetched.records if r.topic == short]
            assert all(offset >= g.first_surviving for offset in short_offsets for g in gaps)
        assert kept_values == [f"k{i}".encode() for i in range(5)]
        assert [(g.topic, g.partition, g.position) for g in gaps] == [(short, 0, 0)]
        assert gaps[0].first_surviving > 0
        assert reader.position(short_tp) >= gaps[0].first_surviving
        assert metric("reverser_log_kafka_gap_records_total") - gaps_before == gaps[0].lost
    finally:
        await reader.close()


@pytest.mark.kafka
async def test_reader_beyond_the_log_end_waits_instead_of_resetting(kafka_log: KafkaLog) -> None:
    topic = await new_topic(kafka_log, "ahead", partitions=1)
    tp = TopicPartition(topic, 0)
    await kafka_log.append_many(topic, [PendingRecord(b"old") for _ in range(3)])
    reader = kafka_log.reader()
    try:
        await reader.assign({tp: 5})
        fetched = await reader.fetch(timeout_ms=300)
        assert (fetched.records, fetched.gaps, reader.position(tp)) == ([], [], 5)
        await kafka_log.append_many(topic, [PendingRecord(f"new{i}".encode()) for i in range(3)])
        records: list[Record] = []
        deadline = time.monotonic() + WAIT_S
        while not records and time.monotonic() < deadline:
            records = (await reader.fetch(timeout_ms=500)).records
        assert [(r.offset, r.value) for r in records] == [(5, b"new2")]
        assert reader.position(tp) == 6
    finally:
        await reader.close()


# consumer groups ---------------------------------------------------------------------------------


class CommitOnRevoke(RebalanceListener):
    """Commits the member's read progress when partitions are taken away, as the commit worker does."""

    def __init__(self) -> None:
        self.member: GroupConsumer | None = None
        self.progress: dict[TopicPartition, int] = {}
        self.committed: list[dict[TopicPartition, int]] = []

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        mine = {tp: offset for tp, offset in self.progress.items() if tp in revoked}
        if mine and self.member is not None:
            await self.member.commit(mine)
            self.committed.append(mine)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        return None


@pytest.mark.kafka
async def test_progress_committed_on_revoke_is_where_the_next_owner_resumes(kafka_log: KafkaLog) -> None:
    topic = await new_topic(kafka_log, "handover", partitions=2)
    every = {TopicPartition(topic, 0), TopicPartition(topic, 1)}
    group = f"{kafka_log.settings.topic_prefix}-handover"
    await kafka_log.append_many(topic, [PendingRecord(f"old{i}".encode(), partition=i % 2) for i in range(6)])
    listener = CommitOnRevoke()
    first = kafka_log.group_consumer(group, [topic], listener=listener)
    listener.member = first
    second = kafka_log.group_consumer(group, [topic])
    await first.start()
    try:
        assert first.assignment() == every

        async def read_everything() -> bool:
            for record in (await first.fetch(timeout_ms=300)).records:
                listener.progress[TopicPartition(record.topic, record.partition)] = record.offset + 1
            return listener.progress == dict.fromkeys(every, 3)

        await eventually(read_everything, "the first member to read every record")
        await second.start()

        async def split() -> bool:
            await asyncio.gather(first.fetch(timeout_ms=200), second.fetch(timeout_ms=200))
            return len(first.assignment()) == len(second.assignment()) == 1

        await eventually(split, "the partitions to be split")
        assert listener.committed, "nothing was committed while the partitions were revoked"
        assert listener.committed[0] == dict.fromkeys(every, 3)
        assert await kafka_log.group_offsets(group) == dict.fromkeys(every, 3)

        (moved,) = second.assignment()
        await kafka_log.append(topic, b"new", partition=moved.partition)
        seen: list[Record] = []

        async def second_reads_new() -> bool:
            fetched = await second.fetch(timeout_ms=300)
            seen.extend(fetched.records)
            return bool(seen)

        await eventually(second_reads_new, "the new owner to read the new record")
        assert [(r.partition, r.offset, r.value) for r in seen] == [(moved.partition, 3, b"new")]
    finally:
        await second.close()
        await first.close()


class SlowRevoke(RebalanceListener):
    """Takes `revoke_s` to give partitions up, as a commit worker flushing its pushes does."""

    def __init__(self, revoke_s: float) -> None:
        self.revoke_s = revoke_s
        self.revoked = 0

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        if revoked:
            self.revoked += 1
            await asyncio.sleep(self.revoke_s)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        return None


@pytest.mark.kafka
async def test_joining_waits_for_a_slow_rebalance_beyond_the_request_timeout(kafka_bootstrap: str) -> None:
    """A member joining while another flushes on revoke (longer than a request may take) joins.

    The join is bounded by the group-join timeout, not by the per-request retry budget: with
    only the latter a new replica exits whenever the running one is slow to hand over.
    """
    settings = kafka_settings(
        kafka_bootstrap, request_timeout_ms=1000, connect_retries=1, retry_backoff_ms=100
    )
    request_budget_s = (settings.connect_retries + 1) * settings.request_timeout_ms * 1.5 / 1000
    log = KafkaLog(settings)
    await log.start()
    topic = await new_topic(log, "slow-handover", partitions=2)
    group = f"{settings.topic_prefix}-slow"
    listener = SlowRevoke(revoke_s=2 * request_budget_s)
    first = log.group_consumer(group, [topic], listener=listener)
    second = log.group_consumer(group, [topic])
    try:
        await first.start()
        await second.start()
        assert listener.revoked == 1
        await eventually(
            lambda: len(first.assignment()) == len(second.assignment()) == 1, "the partitions to be split"
        )
    finally:
        await second.close()
        await first.close()
        await log.close()


@pytest.mark.kafka
async def test_group_admin_refuses_a_group_with_active_members(kafka_log: KafkaLog) -> None:
    topic = await new_topic(kafka_log, "busy", partitions=1)
    tp = TopicPartition(topic, 0)
    await kafka_log.append_many(topic, [PendingRecord(b"v") for _ in range(3)])
    group = f"{kafka_log.settings.topic_prefix}-busy"
    member = kafka_log.group_consumer(group, [topic])
    await member.start()
    try:
        await member.commit({tp: 1})
        with pytest.raises(LogError, match="active members") as caught:
            await kafka_log.commit_group_offsets(group, {tp: 3})
        assert not isinstance(caught.value, LogUnavailableError)
        with pytest.raises(LogError, match="not empty"):
            await kafka_log.delete_group(group)
        assert await kafka_log.group_offsets(group) == {tp: 1}
    finally:
        await member.close()
    await kafka_log.commit_group_offsets(group, {tp: 3})
    assert await kafka_log.group_offsets(group) == {tp: 3}
    await kafka_log.delete_group(group)
    assert group not in await kafka_log.list_groups()


# unavailability ------------------------------------------------------------------------------------


async def test_unreachable_bootstrap_is_a_typed_error_after_bounded_retries() -> None:
    address = f"127.0.0.1:{free_port()}"
    log = KafkaLog(kafka_settings(address, connect_retries=2, retry_backoff_ms=50, request_timeout_ms=2000))
    retries_before = metric("reverser_log_kafka_retries_total", operation="connect")
    with pytest.raises(LogUnavailableError, match=f"{address}.*after 3 attempts"):
        await log.start()
    assert metric("reverser_log_kafka_retries_total", operation="connect") - retries_before == 2
    with pytest.raises(LogError, match="not started"):
        await log.append("any", b"x")
    await log.close()


@pytest.mark.kafka
async def test_killed_broker_gives_a_typed_error_and_the_same_client_continues_after_restart(
    tmp_path: Path,
) -> None:
    """Uses a private broker (never KAFKA_BOOTSTRAP_SERVERS): the test kills and restarts it."""
    broker = KafkaBroker(tmp_path / "broker")
    await asyncio.to_thread(broker.start)
    log = KafkaLog(
        kafka_settings(broker.bootstrap, request_timeout_ms=4000, connect_retries=2, retry_backoff_ms=100)
    )
    try:
        await log.start()
        topic = await new_topic(log, "crash", partitions=3)
        acknowledged: dict[bytes, AppendResult] = {}

        async def keep_appending() -> LogUnavailableError:
            number = 0
            while True:
                value = f"before-{number}".encode()
                try:
                    if number % 2:
                        acknowledged[value] = await log.append(topic, value, key=value)
                    else:
                        batch = [PendingRecord(value + b"-" + bytes([i + 48]), key=value) for i in range(5)]
                        for record, result in zip(batch, await log.append_many(topic, batch), strict=True):
                            acknowledged[record.value or b""] = result
                except LogUnavailableError as exc:
                    return exc
                number += 1

        unavailable_before = metric("reverser_log_kafka_errors_total", kind="unavailable")
        writer = asyncio.create_task(keep_appending())

        async def enough_acknowledged() -> bool:
            assert not writer.done(), writer
            return len(acknowledged) >= 200

        await eventually(enough_acknowledged, "appends before the crash")
        await asyncio.to_thread(broker.kill)
        error = await asyncio.wait_for(writer, WAIT_S)
        assert isinstance(error, LogUnavailableError)
        assert metric("reverser_log_kafka_errors_total", kind="unavailable") > unavailable_before
        with pytest.raises(LogUnavailableError):
            await log.end_offsets([TopicPartition(topic, 0)])

        await asyncio.to_thread(broker.restart)
        after = await log.append(topic, b"after-restart", key=b"after-restart")
        acknowledged[b"after-restart"] = after

        stored: dict[bytes, tuple[int, int]] = {}
        for partition in range(3):
            for record in await read_partition(log, TopicPartition(topic, partition)):
                stored[record.value or b""] = (record.partition, record.offset)
        lost = [v for v, r in acknowledged.items() if stored.get(v) != (r.partition, r.offset)]
        assert lost == []
    finally:
        await log.close()
        await asyncio.to_thread(broker.stop)


# TLS and SASL ----------------------------------------------------------------------------------------


def pkcs8(key_pem: bytes) -> str:
    """Kafka's PEM keystore wants PKCS#8; trustme writes the traditional EC form."""
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(key_pem, password=None)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


@pytest.fixture(scope="module")
def secured_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaBroker, Path]]:
    """A private broker with mutual-TLS and SASL_SSL (PLAIN, SCRAM-SHA-256) listeners, and the PEMs."""
    import trustme

    pems = tmp_path_factory.mktemp("pems")
    server_ca, client_ca = trustme.CA(), trustme.CA()
    server = server_ca.issue_cert("127.0.0.1", "localhost")
    client = client_ca.issue_cert("reverser-client")
    server_ca.cert_pem.write_to_path(str(pems / "ca.pem"))
    client.private_key_and_cert_chain_pem.write_to_path(str(pems / "client.pem"))
    trustme.CA().cert_pem.write_to_path(str(pems / "other-ca.pem"))
    chain = "".join(blob.bytes().decode() for blob in server.cert_chain_pems)
    security = BrokerSecurity(
        keystore_pem=pkcs8(server.private_key_pem.bytes()) + chain,
        client_ca_pem=client_ca.cert_pem.bytes().decode(),
        plain_users={"alice": "alice-secret"},
        scram_users={"bob": "bob-secret"},
    )
    broker = KafkaBroker(tmp_path_factory.mktemp("secured") / "broker", security=security)
    broker.start()
    try:
        yield broker, pems
    finally:
        broker.stop()


async def round_trip(settings: LogSettings) -> None:
    log = KafkaLog(settings)
    await log.start()
    try:
        topic = await new_topic(log, "secured", partitions=1)
        result = await log.append(topic, b"over tls", key=b"k")
        records = await read_partition(log, TopicPartition(topic, 0))
        assert [(r.offset, r.value) for r in records] == [(result.offset, b"over tls")]
    finally:
        await log.close()


@pytest.mark.kafka
@pytest.mark.parametrize(
    ("protocol", "mechanism", "username", "password"),
    [
        ("SSL", "PLAIN", "", ""),
        ("SASL_SSL", "PLAIN", "alice", "alice-secret"),
        ("SASL_SSL", "SCRAM-SHA-256", "bob", "bob-secret"),
    ],
)
async def test_tls_and_sasl_options_reach_a_secured_broker(
    secured_broker: tuple[KafkaBroker, Path], protocol: str, mechanism: str, username: str, password: str
) -> None:
    broker, pems = secured_broker
    bootstrap = broker.ssl_bootstrap if protocol == "SSL" else broker.sasl_ssl_bootstrap
    tls = {"ca_file": str(pems / "ca.pem")}
    if protocol == "SSL":
        tls |= {"cert_file": str(pems / "client.pem"), "key_file": str(pems / "client.pem")}
    await round_trip(
        kafka_settings(
            bootstrap,
            security_protocol=protocol,
            tls=tls,
            sasl={"mechanism": mechanism, "username": username, "password": password},
        )
    )


@pytest.mark.kafka
async def test_tls_and_sasl_misconfiguration_is_a_typed_error(
    secured_broker: tuple[KafkaBroker, Path],
) -> None:
    broker, pems = secured_broker
    quick = {"connect_retries": 1, "retry_backoff_ms": 50, "request_timeout_ms": 3000}
    wrong_password = kafka_settings(
        broker.sasl_ssl_bootstrap,
        security_protocol="SASL_SSL",
        tls={"ca_file": str(pems / "ca.pem")},
        sasl={"mechanism": "SCRAM-SHA-256", "username": "bob", "password": "wrong"},
        **quick,
    )
    untrusted_server = kafka_settings(
        broker.sasl_ssl_bootstrap,
        security_protocol="SASL_SSL",
        tls={"ca_file": str(pems / "other-ca.pem")},
        sasl={"mechanism": "PLAIN", "username": "alice", "password": "alice-secret"},
        **quick,
    )
    missing_ca = kafka_settings(
        broker.ssl_bootstrap, security_protocol="SSL", tls={"ca_file": str(pems / "absent.pem")}, **quick
    )
    expected = [
        (wrong_password, "authentication failed.*invalid credentials"),
        (untrusted_server, "TLS handshake failed.*CERTIFICATE_VERIFY_FAILED"),
        (missing_ca, "log.tls: cannot load TLS material"),
    ]
    for settings, reason in expected:
        log = KafkaLog(settings)
        with pytest.raises(LogError, match=reason) as caught:
            await log.start()
        # Retrying cannot fix configuration: it is not reported as an outage.
        assert not isinstance(caught.value, LogUnavailableError)
        await log.close()
