"""The log goes away while monitored: the poll error is counted, last values stay and are marked stale.

The Kafka case runs its own broker (not the shared one) so it can stop and restart it; the
embedded case closes the log under the monitor and opens it again.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from pipeline.config import Settings
from pipeline.lag.metrics import LagMetrics
from pipeline.lag.monitor import LagMonitor
from pipeline.lag.snapshot import LagSnapshot
from pipeline.log import open_log
from pipeline.log.api import Log, TopicPartition
from tests.conftest import outage_settings
from tests.integration.kafka.broker import KafkaBroker
from tests.lag.helpers import SkewedClock, make_topic, monitor_for, produce


def poll_errors() -> float:
    return REGISTRY.get_sample_value("reverser_lag_poll_errors_total") or 0.0


def lag_value(group: str, tp: TopicPartition) -> float | None:
    labels = {"group": group, "topic": tp.topic, "partition": str(tp.partition)}
    return REGISTRY.get_sample_value("reverser_consumergroup_lag", labels)


async def _prepare(log: Log, settings: Settings) -> tuple[str, TopicPartition]:
    group = f"{settings.log.topic_prefix}-down"
    tp = await make_topic(log, settings, "down")
    await produce(log, tp, 7)
    await log.commit_group_offsets(group, {tp: 4})
    return group, tp


def _assert_stale_kept(snapshot: LagSnapshot, group: str, tp: TopicPartition, errors_before: float) -> None:
    assert snapshot.stale
    assert snapshot.error
    kept = snapshot.group(group)
    assert kept is not None
    assert kept.partitions[0].lag == 3
    assert poll_errors() == errors_before + 1
    assert REGISTRY.get_sample_value("reverser_lag_stale") == 1
    assert lag_value(group, tp) == 3


async def test_embedded_log_closed_under_the_monitor(embedded_log: Log, embedded_settings: Settings) -> None:
    group, tp = await _prepare(embedded_log, embedded_settings)
    monitor = monitor_for(embedded_log, [group], SkewedClock())
    metrics = LagMetrics()
    try:
        metrics.export(await monitor.poll())
        assert REGISTRY.get_sample_value("reverser_lag_stale") == 0
        before = poll_errors()
        await embedded_log.close()
        snapshot = await monitor.poll()
        metrics.export(snapshot)
        _assert_stale_kept(snapshot, group, tp, before)
        await embedded_log.start()
        recovered = await monitor.poll()
        metrics.export(recovered)
        assert not recovered.stale
        assert REGISTRY.get_sample_value("reverser_lag_stale") == 0
    finally:
        await monitor.close()
        metrics.clear()


@pytest.mark.kafka
async def test_kafka_broker_stopped_and_restarted(own_broker: KafkaBroker, tmp_path: Path) -> None:
    settings = outage_settings(own_broker.bootstrap, tmp_path)
    log = open_log(settings)
    await log.start()
    monitor: LagMonitor | None = None
    metrics = LagMetrics()
    try:
        group, tp = await _prepare(log, settings)
        monitor = monitor_for(log, [group], SkewedClock())
        metrics.export(await monitor.poll())
        assert lag_value(group, tp) == 3
        before = poll_errors()
        await asyncio.to_thread(own_broker.stop)
        snapshot = await monitor.poll()
        metrics.export(snapshot)
        _assert_stale_kept(snapshot, group, tp, before)
        await asyncio.to_thread(own_broker.start)
        # the restarted coordinator may list no groups until it has loaded its offsets
        for _ in range(30):
            recovered = await monitor.poll()
            metrics.export(recovered)
            if not recovered.stale and recovered.group(group) is not None:
                break
            await asyncio.sleep(1)
        assert not recovered.stale, recovered.error
        assert REGISTRY.get_sample_value("reverser_lag_stale") == 0
        assert lag_value(group, tp) == 3
    finally:
        if monitor is not None:
            await monitor.close()
        metrics.clear()
        await log.close()
