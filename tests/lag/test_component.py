"""The monitor as a `reverser run` component: factory, polling loop, readiness and /metrics over HTTP."""

from __future__ import annotations

import aiohttp
from prometheus_client import REGISTRY

from pipeline.config import Settings
from pipeline.lag.component import LagComponent, build
from pipeline.log.api import Log
from pipeline.service.app import COMPONENT_FACTORIES, Service
from tests.lag.helpers import lag_settings, make_topic, produce
from tests.support.wait import wait_for

WAIT_S = 30.0


def test_factory_is_registered_and_honours_enabled(embedded_log: Log, embedded_settings: Settings) -> None:
    assert build in COMPONENT_FACTORIES
    disabled = embedded_settings.model_copy(update={"lag": lag_settings(enabled=False)})
    assert build(disabled, embedded_log) is None
    assert isinstance(build(embedded_settings, embedded_log), LagComponent)


async def test_component_polls_exports_and_clears_on_stop(
    embedded_log: Log, embedded_settings: Settings
) -> None:
    group = f"{embedded_settings.log.topic_prefix}-component"
    tp = await make_topic(embedded_log, embedded_settings, "component")
    await produce(embedded_log, tp, 9)
    await embedded_log.commit_group_offsets(group, {tp: 4})
    component = LagComponent(embedded_log, lag_settings(allow=[f"^{group}$"]))
    labels = {"group": group, "topic": tp.topic, "partition": "0"}
    await component.start()
    try:
        assert component.name == "lag-monitor"
        await wait_for(component.ready, "the first good poll", timeout_s=WAIT_S)
        assert REGISTRY.get_sample_value("reverser_consumergroup_lag", labels) == 5
        await embedded_log.commit_group_offsets(group, {tp: 9})
        await wait_for(
            lambda: REGISTRY.get_sample_value("reverser_consumergroup_lag", labels) == 0,
            "the next poll to see the new commit",
            timeout_s=WAIT_S,
        )
    finally:
        await component.stop()
    assert REGISTRY.get_sample_value("reverser_consumergroup_lag", labels) is None


async def test_reverser_run_serves_lag_metrics(embedded_log: Log, embedded_settings: Settings) -> None:
    group = f"{embedded_settings.log.topic_prefix}-served"
    tp = await make_topic(embedded_log, embedded_settings, "served")
    await produce(embedded_log, tp, 3)
    await embedded_log.commit_group_offsets(group, {tp: 1})
    settings = embedded_settings.model_copy(
        update={
            "lag": lag_settings(allow=[f"^{group}$"]),
            "metrics": embedded_settings.metrics.model_copy(update={"addr": "127.0.0.1:0"}),
        }
    )
    service = Service(settings, embedded_log, [build])
    await service.start()
    try:
        await wait_for(service.ready, "the service to be ready", timeout_s=WAIT_S)
        async with aiohttp.ClientSession() as session:
            url = f"http://127.0.0.1:{service.metrics_port}/metrics"
            async with session.get(url) as response:
                text = await response.text()
    finally:
        await service.stop()
    expected = f'reverser_consumergroup_lag{{group="{group}",partition="0",topic="{tp.topic}"}} 2.0'
    assert expected in text
    assert f'reverser_consumergroup_status{{group="{group}",status="OK"}} 1.0' in text
