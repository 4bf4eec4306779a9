"""The watch component inside `reverser run`'s Service: factory, readiness and metrics."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from pipeline.config import MetricsSettings, Settings
from pipeline.log import open_log
from pipeline.service.app import COMPONENT_FACTORIES, Service
from pipeline.watch.component import WatchComponent, build
from tests.watch.conftest import rule, target, wait_for, with_targets
from tests.watch.kube_server import FakeKubeApiServer, corpus_object


def test_factory_is_registered_and_off_without_clusters(settings: Settings) -> None:
    assert build in COMPONENT_FACTORIES
    log = open_log(settings)
    assert build(settings, log) is None
    no_rules = settings.model_copy(update={"targets": []})
    assert build(no_rules, log) is None


async def test_service_runs_watch_streams_and_exports_metrics(
    kube: FakeKubeApiServer, settings: Settings, tmp_path: Path
) -> None:
    kube.put(corpus_object("configmap/create-succeeds/watch.added.yaml", "team-a"))
    config = with_targets(
        settings,
        kube.kubeconfig(tmp_path),
        target("t1", rule("configmaps", "secrets", namespaces=("team-a",))),
    ).model_copy(update={"metrics": MetricsSettings(addr="127.0.0.1:0")})
    service = Service(config, factories=[build])
    await service.start()
    try:
        (component,) = service.components
        assert isinstance(component, WatchComponent)
        assert service.ready()
        (stream,) = component.manager.streams.values()
        # The state turns Streaming before the snapshot's cursor is acknowledged; the age needs the cursor.
        await wait_for(
            lambda: stream.state == "Streaming" and stream.cursor_updated_at_ms is not None,
            what="streaming with a cursor",
        )
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{service.metrics_port}/metrics") as response,
        ):
            text = await response.text()
    finally:
        await service.stop()
    assert 'reverser_watch_streams{state="Streaming"} 1.0' in text
    assert 'reverser_watch_rule_problems{reason="SecretExcluded",target="t1"} 1.0' in text
    assert 'reverser_watch_cursor_age_seconds{resource="configmaps",scope="team-a",target="t1"}' in text
    assert "reverser_watch_snapshots_total" in text
    assert stream.state == "Stopped"
