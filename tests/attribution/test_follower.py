"""The follower on real logs: replay horizon, readiness, refused records, errors, gaps, restart."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from pipeline.attribution import FactFollower, FactIndex, Resolver, Tier
from pipeline.attribution.cli import (
    publish_audit_documents,
    read_audit_file,
    read_watch_file,
    resolve_watch_event,
)
from pipeline.codec import FACT_BATCH, codec
from pipeline.codec.fact_batch import AuthorFact, FactBatch
from pipeline.config import LogSettings, Settings
from pipeline.log import open_log
from pipeline.log.api import Fetched, Gap, Log, PendingRecord, Record
from pipeline.log.embedded import EmbeddedLog
from pipeline.log.topics import TopicNames, topic_specs
from pipeline.models import stream_key
from tests.attribution.corpus import SCENARIOS, materialise
from tests.attribution.helpers import CM, DEPLOY, fact, query
from tests.conftest import unique_prefix
from tests.support.wait import wait_for

GUARD_S = 60.0
FACTS = FACT_BATCH


def topics_of(settings: Settings) -> TopicNames:
    return TopicNames.for_prefix(settings.log.topic_prefix)


async def create_fact_topic(log: Log, settings: Settings) -> str:
    topic = topics_of(settings).audit_facts
    await log.create_topics([s for s in topic_specs(settings) if s.name == topic])
    return topic


def record_for(batch: FactBatch) -> PendingRecord:
    writer = codec(FACTS)
    return PendingRecord(
        writer.encode(batch.to_avro()),
        key=stream_key(batch.route, batch.group_resource),
        headers=(writer.header,),
    )


def sample(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


def labelled(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


eventually = functools.partial(wait_for, timeout_s=GUARD_S)


async def test_replays_in_order_and_is_ready_only_after_catching_up(any_log: Log, settings: Settings) -> None:
    topic = await create_fact_topic(any_log, settings)
    records = [
        record_for(FactBatch("default", CM, [fact(f"user{i}", "update", name="a")])) for i in range(300)
    ]
    await any_log.append_many(topic, records)
    index = FactIndex.from_settings(settings.attribution)
    follower = FactFollower(any_log, topics_of(settings), index, settings, fetch_timeout_ms=100)
    assert not follower.ready()
    await follower.start()
    try:
        assert not follower.ready(), "ready before a single record was applied"
        assert sample("reverser_attribution_fact_index_ready") == 0
        await asyncio.wait_for(follower.wait_ready(), GUARD_S)
        assert sample("reverser_attribution_fact_index_ready") == 1
        assert follower.records_applied == 300
        assert sample("reverser_attribution_replay_remaining_records") == 0
        found = index.lookup(query(uid="u1", rv="gone", name="a"))
        assert (found.tier, found.author) == (Tier.NAME, "user299"), "last writer in log order wins"
        assert labelled("reverser_attribution_transport_info", transport=any_log.kind) == 1
    finally:
        await follower.stop()


async def test_starts_at_the_ttl_horizon(tmp_path: Path) -> None:
    settings = Settings(workdir=tmp_path)
    log = EmbeddedLog(tmp_path / "log")
    await log.start()
    try:
        topic = await create_fact_topic(log, settings)
        await log.append_many(
            topic, [record_for(FactBatch("default", CM, [fact("old", name="a", uid="u1", rv="1")]))]
        )
        # A follower whose TTL is already over when it starts skips the old record entirely.
        short = settings.model_copy(
            update={"attribution": settings.attribution.model_copy(update={"ttl_s": 0.001})}
        )
        await asyncio.sleep(0.01)
        index = FactIndex.from_settings(settings.attribution)
        follower = FactFollower(log, topics_of(settings), index, short, fetch_timeout_ms=50)
        await follower.start()
        await asyncio.wait_for(follower.wait_ready(), GUARD_S)
        assert follower.records_applied == 0
        assert len(index) == 0
        await follower.stop()
    finally:
        await log.close()


async def test_refuses_undecodable_and_authorless_records_and_moves_on(
    any_log: Log, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "pipeline.attribution.follower")
    topic = await create_fact_topic(any_log, settings)
    writer = codec(FACTS)
    key = stream_key("default", CM)
    authorless = FactBatch("default", CM, [fact("bob", name="b", uid="u2", rv="2"), AuthorFact("", name="x")])
    await any_log.append_many(
        topic,
        [
            PendingRecord(b"\x00garbage", key=key, headers=(writer.header,), partition=0),
            PendingRecord(
                writer.encode(authorless.to_avro()), key=key, headers=(writer.header,), partition=0
            ),
            PendingRecord(b"no header", key=key, partition=0),
            PendingRecord(
                writer.encode(
                    FactBatch("default", CM, [fact("alice", name="a", uid="u1", rv="1")]).to_avro()
                ),
                key=key,
                headers=(writer.header,),
                partition=0,
            ),
        ],
    )
    before = labelled("reverser_attribution_fact_stream_decode_errors_total", transport=any_log.kind)
    index = FactIndex.from_settings(settings.attribution)
    follower = FactFollower(any_log, topics_of(settings), index, settings, fetch_timeout_ms=100)
    await follower.start()
    try:
        await asyncio.wait_for(follower.wait_ready(), GUARD_S)
        assert follower.records_refused == 3
        assert follower.records_applied == 1
        assert (
            labelled("reverser_attribution_fact_stream_decode_errors_total", transport=any_log.kind)
            == before + 3
        )
        assert index.lookup(query(uid="u2", rv="2")).tier == "absent", "no half-absorbed record"
        assert index.lookup(query(uid="u1", rv="1")).author == "alice"
        messages = [r.getMessage() for r in caplog.records]
        assert any(f"{topic}[0]@0" in m for m in messages)
        assert any(f"{topic}[0]@1" in m and "author" in m for m in messages)
    finally:
        await follower.stop()


async def test_errors_are_counted_and_retried_until_the_topic_exists(tmp_path: Path) -> None:
    settings = Settings(workdir=tmp_path)
    log = EmbeddedLog(tmp_path / "log")
    await log.start()
    index = FactIndex.from_settings(settings.attribution)
    follower = FactFollower(
        log, topics_of(settings), index, settings, fetch_timeout_ms=50, error_backoff_s=0.05
    )
    before = labelled("reverser_attribution_fact_follower_errors_total", transport="embedded")
    try:
        await follower.start()
        await eventually(lambda: follower.errors >= 2, "two failed rounds")
        assert not follower.ready()
        assert labelled("reverser_attribution_fact_follower_errors_total", transport="embedded") >= before + 2
        await create_fact_topic(log, settings)
        await asyncio.wait_for(follower.wait_ready(), GUARD_S)
        stamped = sample("reverser_attribution_fact_follower_last_success_timestamp_seconds")
        await eventually(
            lambda: sample("reverser_attribution_fact_follower_last_success_timestamp_seconds") > stamped,
            "liveness stamped on an idle round",
        )
    finally:
        await follower.stop()
        await log.close()


async def test_gap_when_retention_deleted_unread_records(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "pipeline.attribution.follower")
    settings = Settings(workdir=tmp_path)
    log = EmbeddedLog(tmp_path / "log")
    await log.start()
    try:
        topic = await create_fact_topic(log, settings)
        for i in range(5):
            await log.append(
                topic,
                record_for(FactBatch("default", CM, [fact(name=f"n{i}", rv=str(i))])).value,
                key=stream_key("default", CM),
                headers=(codec(FACTS).header,),
                partition=2,
            )
        index = FactIndex.from_settings(settings.attribution)
        follower = FactFollower(log, topics_of(settings), index, settings, fetch_timeout_ms=50)
        label = f"{topic}[2]"
        before = labelled("reverser_attribution_stream_gaps_total", stream=label)
        await follower.start()  # assigned at offset 0; the loop has not fetched yet
        report = log.enforce_retention(now_ms=int(time.time() * 1000) + 2 * 600_000)
        assert report.deleted_records == 5
        await asyncio.wait_for(follower.wait_ready(), GUARD_S)
        await eventually(lambda: follower.gaps == 1, "gap reported")
        assert labelled("reverser_attribution_stream_gaps_total", stream=label) == before + 1
        assert follower.records_applied == 0
        assert any("gap" in r.getMessage() and "[0, 5)" in r.getMessage() for r in caplog.records)
        await follower.stop()
    finally:
        await log.close()


async def test_gap_is_labelled_by_the_streams_seen_on_the_partition(tmp_path: Path) -> None:
    settings = Settings(workdir=tmp_path)
    index = FactIndex.from_settings(settings.attribution)
    log = EmbeddedLog(tmp_path / "log")
    follower = FactFollower(log, topics_of(settings), index, settings)
    topic = topics_of(settings).audit_facts
    writer = codec(FACTS)
    batch = FactBatch("prod-eu-1", DEPLOY, [fact(name="web", rv="1")])
    await follower._apply(
        Fetched(
            records=[
                Record(
                    topic,
                    4,
                    7,
                    int(time.time() * 1000),
                    b"k",
                    writer.encode(batch.to_avro()),
                    (writer.header,),
                )
            ]
        )
    )
    before = labelled("reverser_attribution_stream_gaps_total", stream="prod-eu-1/apps/deployments")
    follower._report_gaps(Fetched(gaps=[Gap(topic, 4, 8, 20)]))
    assert (
        labelled("reverser_attribution_stream_gaps_total", stream="prod-eu-1/apps/deployments") == before + 1
    )


@pytest.mark.kafka
async def test_restart_on_the_real_broker_rebuilds_the_same_tiers(
    kafka_bootstrap: str, tmp_path: Path
) -> None:

    settings = Settings(
        workdir=tmp_path / "w",
        log=LogSettings(backend="kafka", bootstrap_servers=kafka_bootstrap, topic_prefix=unique_prefix()),
    )
    scenarios = [
        "configmap/create-succeeds",
        "configmap/deletecollection",
        "configmap/update",
        "configmap/generate-name-create",
        "flunder/aggregated-api-write",
    ]
    watches = []
    first = open_log(settings)
    await first.start()
    try:
        topic = await create_fact_topic(first, settings)
        for scenario in scenarios:
            directory = materialise(scenario, tmp_path)
            for name in SCENARIOS[scenario].audits:
                await publish_audit_documents(
                    first, topic, "default", read_audit_file(directory / name), settings
                )
            watches += [
                event for name in SCENARIOS[scenario].watches for event in read_watch_file(directory / name)
            ]
        before = await resolve_all(first, settings, watches)
    finally:
        await first.close()
    # A new process: a fresh client, index and follower rebuild from the broker alone.
    second = open_log(settings)
    await second.start()
    try:
        after = await resolve_all(second, settings, watches)
    finally:
        await second.close()
    assert after == before
    tiers = [line[0] for line in after]
    assert tiers.count("exact") == 3
    assert tiers.count("deletecollection_body_uid") == 3
    assert tiers.count("absent") == 1


async def resolve_all(
    log: Log, settings: Settings, watches: list[dict[str, object]]
) -> list[tuple[str, str]]:
    index = FactIndex.from_settings(settings.attribution)
    follower = FactFollower(log, topics_of(settings), index, settings, fetch_timeout_ms=100)
    await follower.start()
    try:
        await asyncio.wait_for(follower.wait_ready(), GUARD_S)
        resolver = Resolver(index, grace_ms=100)
        out = []
        for event in watches:
            line = await resolve_watch_event(resolver, "default", event)  # type: ignore[arg-type]
            out.append((line["tier"], line["author"]))
        return out
    finally:
        await follower.stop()


async def test_the_follower_loop_sweeps_expired_facts(tmp_path: Path) -> None:
    base = Settings(workdir=tmp_path)
    settings = base.model_copy(
        update={"attribution": base.attribution.model_copy(update={"ttl_s": 0.5, "sweep_interval_s": 0.05})}
    )
    log = EmbeddedLog(tmp_path / "log")
    await log.start()
    try:
        topic = await create_fact_topic(log, settings)
        index = FactIndex.from_settings(settings.attribution)
        follower = FactFollower(log, topics_of(settings), index, settings, fetch_timeout_ms=50)
        await follower.start()
        await asyncio.wait_for(follower.wait_ready(), GUARD_S)
        await log.append_many(
            topic, [record_for(FactBatch("default", CM, [fact(name="a", uid="u1", rv="1")]))]
        )
        await eventually(lambda: follower.records_applied == 1, "fact applied")
        await eventually(lambda: len(index) == 0, "expired fact swept from memory")
        assert sample("reverser_attribution_fact_index_entries") == 0
        await follower.stop()
    finally:
        await log.close()
