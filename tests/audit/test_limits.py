"""Bounded work per request (12.3): item cap, body limit, unwatched types, TLS handshake timeout,
and `/healthz` answering while the most expensive allowed request is decoded. The connection caps
and the in-flight body budget are tested with the clients they stop, in test_hostile_clients.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path

import aiohttp
import pytest
from prometheus_client import REGISTRY

from pipeline.audit.component import build
from pipeline.audit.server import AuditIngress
from pipeline.config import AuditSettings, ClusterSettings, ProviderSettings, TargetSettings, WatchRule
from pipeline.models import GroupResource
from pipeline.service.app import Service
from tests.audit.conftest import Running, ingress_settings, open_embedded, read_batches
from tests.audit.corpus import event_list
from tests.audit.test_security import Pki
from tests.audit.test_server import post, write
from tests.audit.worst import worst_events_body, worst_uids_body


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_default_limits_fit_the_apiserver_and_stay_small() -> None:
    audit = AuditSettings()
    assert audit.max_body_bytes == 3 * 1024 * 1024
    assert 400 <= audit.max_events_per_request <= 5000  # the apiserver's batch is 400 by default
    assert audit.tls_handshake_timeout_s <= 10
    # decoded events take up to ~15x their body: the budget must leave a 1 GiB pod room
    assert audit.max_body_bytes <= audit.max_inflight_body_bytes <= 48 * 1024 * 1024
    assert audit.max_connections_per_peer < audit.max_connections


def test_a_budget_smaller_than_one_body_is_refused() -> None:
    with pytest.raises(ValueError, match="max_inflight_body_bytes must be >= max_body_bytes"):
        AuditSettings(max_body_bytes=2048, max_inflight_body_bytes=1024)


async def test_too_many_events_are_refused_whole(start_ingress: object, http: aiohttp.ClientSession) -> None:
    running: Running = await start_ingress(max_events_per_request=5)  # type: ignore[operator]
    status, text = await post(http, running, event_list([write(f"c{i}") for i in range(6)]))
    assert (status, text.strip()) == (413, "too many events in one request: 6 > max 5")
    assert await read_batches(running) == []
    status, _ = await post(http, running, event_list([write(f"c{i}") for i in range(5)]))
    assert status == 200
    assert sum(len(batch.facts) for _, batch in await read_batches(running)) == 5


async def test_facts_for_types_the_cluster_does_not_watch_are_dropped_and_counted(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    base = ingress_settings(tmp_path)
    settings = base.model_copy(
        update={
            "clusters": [ClusterSettings(name="prod", audit_route="default")],
            "providers": [ProviderSettings(name="git", url="/srv/g")],
            "targets": [
                TargetSettings(
                    name="t",
                    provider="git",
                    cluster="prod",
                    rules=[WatchRule(resources=["configmaps", "apps/deployments"], namespaces=["ns"])],
                )
            ],
        }
    )
    log = await open_embedded(settings)
    ingress = AuditIngress(settings, log)
    await ingress.start()
    running = Running(ingress, log, settings)
    dropped_before = sample(
        "reverser_audit_events_total", route="default", reason="unwatched_type", category="dropped"
    )
    try:
        events = [
            write("cm"),
            write("secret", resource="secrets"),
            write("deploy", resource="deployments", group="apps"),
            write("job", resource="jobs", group="batch"),
            write("cm-elsewhere", resource="configmaps", group="example.com"),
        ]
        status, _ = await post(http, running, event_list(events))
        assert status == 200
        batches = [batch for _, batch in await read_batches(running)]
        published = {batch.group_resource: [f.name for f in batch.facts] for batch in batches}
    finally:
        await ingress.stop()
        await log.close()
    # A bare rule entry (`configmaps`) matches the resource in any group; `apps/deployments` only itself.
    assert published == {
        GroupResource("", "configmaps"): ["cm"],
        GroupResource("apps", "deployments"): ["deploy"],
        GroupResource("example.com", "configmaps"): ["cm-elsewhere"],
    }
    dropped = sample(
        "reverser_audit_events_total", route="default", reason="unwatched_type", category="dropped"
    )
    assert dropped - dropped_before == 2


async def test_a_stalled_tls_handshake_is_dropped(tmp_path: Path, start_ingress: object) -> None:
    pki = Pki(tmp_path)
    running: Running = await start_ingress(tls=pki.tls(), tls_handshake_timeout_s=0.5)  # type: ignore[operator]
    reader, writer = await asyncio.open_connection("127.0.0.1", running.ingress.port)
    # Send nothing: the server must give up on the handshake on its own (the default was 60 s).
    assert await asyncio.wait_for(reader.read(), 20) == b""
    writer.close()


@pytest.mark.parametrize("shape", ["events", "uids"])
async def test_healthz_answers_while_the_worst_allowed_request_is_reduced(
    tmp_path: Path, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture, shape: str
) -> None:
    """Health probes are answered between the start of decoding and the end of reduction.

    The request is the most expensive the defaults allow (see tests/audit/worst.py); its decode
    and reduction must not hold the event loop. Durations are measured in `make bench` (health).
    """
    settings = ingress_settings(tmp_path)
    settings.metrics.addr = "127.0.0.1:0"
    body = worst_events_body() if shape == "events" else worst_uids_body()
    service = Service(settings, factories=[build])
    await service.start()
    answered: list[float] = []
    stop = asyncio.Event()

    async def probe() -> None:
        while not stop.is_set():
            async with http.get(f"http://127.0.0.1:{service.metrics_port}/healthz") as resp:
                assert resp.status == 200
            answered.append(time.time())

    try:
        (ingress,) = service.components
        url = f"http://127.0.0.1:{ingress.port}/audit-webhook/default"  # type: ignore[attr-defined]
        prober = asyncio.create_task(probe())
        with caplog.at_level(logging.DEBUG, logger="pipeline.audit.server"):
            async with http.post(url, data=body) as resp:
                assert resp.status == 200, await resp.text()
        stop.set()
        await prober
    finally:
        await service.stop()
    started = [r.created for r in caplog.records if r.getMessage().startswith("route default: decoding")]
    reduced = [r.created for r in caplog.records if r.getMessage().startswith("route default: reduced")]
    assert len(started) == len(reduced) == 1
    during = [t for t in answered if started[0] < t < reduced[0]]
    assert during, f"no /healthz answer while the request was decoded and reduced ({len(answered)} in all)"
    assert json.loads(body)["items"]
