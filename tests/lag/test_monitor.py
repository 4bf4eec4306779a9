"""The lag monitor against a real log, one consumer group per behaviour, on both backends.

Kafka cases run on the real broker and read commits from `__consumer_offsets`; the embedded log
has no commit feed, so there a commit is seen only when the committed offset moves (documented:
re-committing the same offset shows as STOP, not STALL). Time moves with `SkewedClock`.
"""

from __future__ import annotations

import asyncio
import itertools

import pytest
from prometheus_client import REGISTRY

from pipeline.config import Settings
from pipeline.lag.metrics import LagMetrics
from pipeline.lag.snapshot import GroupLag, LagSnapshot
from pipeline.lag.status import Status
from pipeline.log.api import Log, TopicPartition
from tests.lag.helpers import (
    COMMIT_SPACING_S,
    SLOW_COMMIT_SPACING_S,
    SLOW_POLL_INTERVAL_S,
    SkewedClock,
    make_topic,
    monitor_for,
    produce,
)


def only(snapshot: LagSnapshot, group: str) -> GroupLag:
    assert not snapshot.stale, snapshot.error
    found = snapshot.group(group)
    assert found is not None, f"group {group} missing from {[g.group for g in snapshot.groups]}"
    return found


def group_name(settings: Settings, what: str) -> str:
    return f"{settings.log.topic_prefix}-{what}"


async def test_caught_up_idle_group_is_ok_and_never_stops(any_log: Log, settings: Settings) -> None:
    group = group_name(settings, "idle")
    tp = await make_topic(any_log, settings, "idle")
    await produce(any_log, tp, 5)
    await any_log.commit_group_offsets(group, {tp: 5})
    clock = SkewedClock()
    monitor = monitor_for(any_log, [group], clock)
    try:
        await monitor.poll()
        clock.advance(3600)
        result = only(await monitor.poll(), group)
    finally:
        await monitor.close()
    assert result.status is Status.OK
    (partition,) = result.partitions
    assert (partition.committed, partition.end, partition.lag, partition.lost) == (5, 5, 0, 0)
    assert partition.lag_seconds == 0.0
    assert partition.status is Status.OK


async def test_falling_behind_is_warn(any_log: Log, settings: Settings) -> None:
    group = group_name(settings, "behind")
    tp = await make_topic(any_log, settings, "behind")
    monitor = monitor_for(any_log, [group], SkewedClock())
    try:
        for step in range(1, 6):
            await produce(any_log, tp, 10)
            await any_log.commit_group_offsets(group, {tp: 2 * step})
            snapshot = await monitor.poll()
            await asyncio.sleep(COMMIT_SPACING_S)
    finally:
        await monitor.close()
    result = only(snapshot, group)
    assert result.partitions[0].lag == 40
    assert result.partitions[0].status is Status.WARN
    assert result.status is Status.WARN


async def test_stopped_committing_is_stop_and_group_err(any_log: Log, settings: Settings) -> None:
    group = group_name(settings, "stopped")
    tp = await make_topic(any_log, settings, "stopped")
    clock = SkewedClock()
    monitor = monitor_for(any_log, [group], clock, poll_interval_s=SLOW_POLL_INTERVAL_S)
    try:
        for step in range(1, 4):
            await produce(any_log, tp, 10)
            await any_log.commit_group_offsets(group, {tp: step})
            assert only(await monitor.poll(), group).partitions[0].status is not Status.STOP
            await asyncio.sleep(SLOW_COMMIT_SPACING_S)
        clock.advance(600)
        result = only(await monitor.poll(), group)
    finally:
        await monitor.close()
    assert result.partitions[0].status is Status.STOP
    assert result.status is Status.ERR


async def _recommit_same_offset(log: Log, settings: Settings, group: str) -> GroupLag:
    tp = await make_topic(log, settings, "stuck")
    monitor = monitor_for(log, [group], SkewedClock())
    try:
        for _ in range(6):
            await produce(log, tp, 10)
            await log.commit_group_offsets(group, {tp: 3})
            await monitor.poll()
            await asyncio.sleep(COMMIT_SPACING_S)
        await log.commit_group_offsets(group, {tp: 3})
        return only(await monitor.poll(), group)
    finally:
        await monitor.close()


@pytest.mark.kafka
async def test_kafka_group_stuck_on_one_offset_is_stall(kafka_log: Log, kafka_settings: Settings) -> None:
    group = group_name(kafka_settings, "stuck")
    result = await _recommit_same_offset(kafka_log, kafka_settings, group)
    assert result.partitions[0].lag == 57
    assert result.partitions[0].status is Status.STALL
    assert result.status is Status.ERR


async def test_embedded_group_stuck_on_one_offset_shows_stop(
    embedded_log: Log, embedded_settings: Settings
) -> None:
    group = group_name(embedded_settings, "stuck")
    result = await _recommit_same_offset(embedded_log, embedded_settings, group)
    assert result.partitions[0].lag == 57
    assert result.partitions[0].status is Status.STOP
    assert result.status is Status.ERR


async def test_offset_reset_backwards_is_rewind(any_log: Log, settings: Settings) -> None:
    group = group_name(settings, "rewind")
    tp = await make_topic(any_log, settings, "rewind")
    await produce(any_log, tp, 20)
    monitor = monitor_for(any_log, [group], SkewedClock())
    try:
        for offset in (5, 10):
            await any_log.commit_group_offsets(group, {tp: offset})
            await monitor.poll()
            await asyncio.sleep(COMMIT_SPACING_S)
        await any_log.commit_group_offsets(group, {tp: 3})
        result = only(await monitor.poll(), group)
    finally:
        await monitor.close()
    assert result.partitions[0].lag == 17
    assert result.partitions[0].status is Status.REWIND
    assert result.status is Status.ERR


async def test_lag_seconds_is_within_one_poll_interval_of_the_truth(any_log: Log, settings: Settings) -> None:
    group = group_name(settings, "seconds")
    tp = await make_topic(any_log, settings, "seconds")
    await any_log.commit_group_offsets(group, {tp: 3})
    monitor = monitor_for(any_log, [group], SkewedClock(), poll_interval_s=0.2)
    polled_ms = [(await monitor.poll()).taken_ms]
    try:
        for _ in range(6):
            await produce(any_log, tp, 2)
            await asyncio.sleep(0.2)
            snapshot = await monitor.poll()
            polled_ms.append(snapshot.taken_ms)
    finally:
        await monitor.close()
    reader = any_log.reader()
    await reader.assign({tp: 3})
    try:
        fetched = await reader.fetch(timeout_ms=5000, max_records=1)
    finally:
        await reader.close()
    appended_ms = fetched.records[0].timestamp_ms
    truth_s = (snapshot.taken_ms - appended_ms) / 1000.0
    estimate = only(snapshot, group).partitions[0].lag_seconds
    assert estimate is not None
    widest_poll_gap_s = max(b - a for a, b in itertools.pairwise(polled_ms)) / 1000.0
    # the estimator places the record somewhere between the two polls around its append (+ slack
    # for the moments between reading offsets and stamping the poll)
    assert abs(estimate - truth_s) <= widest_poll_gap_s + 0.05


async def test_deleted_group_disappears_with_its_metrics(any_log: Log, settings: Settings) -> None:
    group = group_name(settings, "deleted")
    tp = await make_topic(any_log, settings, "deleted")
    await produce(any_log, tp, 4)
    await any_log.commit_group_offsets(group, {tp: 1})
    monitor = monitor_for(any_log, [group], SkewedClock())
    metrics = LagMetrics(kafka_lag_exporter_names=True)
    labels = {"group": group, "topic": tp.topic, "partition": "0"}
    try:
        metrics.export(await monitor.poll())
        assert REGISTRY.get_sample_value("reverser_consumergroup_lag", labels) == 3
        assert REGISTRY.get_sample_value("kafka_consumergroup_group_lag", labels) == 3
        assert (
            REGISTRY.get_sample_value("reverser_consumergroup_status", {"group": group, "status": "OK"}) == 1
        )
        await any_log.delete_group(group)
        snapshot = await monitor.poll()
        metrics.export(snapshot)
    finally:
        await monitor.close()
        metrics.clear()
    assert not snapshot.stale
    assert snapshot.group(group) is None
    assert REGISTRY.get_sample_value("reverser_consumergroup_lag", labels) is None
    assert REGISTRY.get_sample_value("kafka_consumergroup_group_lag", labels) is None
    for status in ("OK", "WARN", "ERR"):
        assert (
            REGISTRY.get_sample_value("reverser_consumergroup_status", {"group": group, "status": status})
            is None
        )


async def test_groups_outside_the_allow_list_are_not_read(any_log: Log, settings: Settings) -> None:
    wanted = group_name(settings, "wanted")
    other = group_name(settings, "other")
    tp = await make_topic(any_log, settings, "allow")
    await produce(any_log, tp, 2)
    for group in (wanted, other):
        await any_log.commit_group_offsets(group, {tp: 1})
    monitor = monitor_for(any_log, [wanted], SkewedClock())
    try:
        snapshot = await monitor.poll()
    finally:
        await monitor.close()
    names = [g.group for g in snapshot.groups]
    assert wanted in names
    assert other not in names


async def test_partitions_of_a_group_are_reported_in_order(any_log: Log, settings: Settings) -> None:
    group = group_name(settings, "multi")
    tp0 = await make_topic(any_log, settings, "multi", partitions=3)
    tps = [TopicPartition(tp0.topic, p) for p in range(3)]
    for tp in tps:
        await produce(any_log, tp, 5 + tp.partition)
    await any_log.commit_group_offsets(group, {tp: 5 for tp in tps})
    monitor = monitor_for(any_log, [group], SkewedClock())
    try:
        result = only(await monitor.poll(), group)
    finally:
        await monitor.close()
    assert [(p.partition, p.lag) for p in result.partitions] == [(0, 0), (1, 1), (2, 2)]
    assert result.total_lag == 3
