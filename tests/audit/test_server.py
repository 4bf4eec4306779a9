"""The ingress over real HTTP on loopback with the embedded log: corpus, status table, failures."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client import REGISTRY

from pipeline.audit.component import build
from pipeline.config import ConfigError, Settings
from pipeline.facts.reduce import EventReason as Reason
from pipeline.facts.reduce import category
from pipeline.log import max_value_bytes
from pipeline.models import GroupResource, stream_key
from pipeline.service.app import COMPONENT_FACTORIES, Service
from tests.audit.conftest import Running, ingress_settings, read_batches
from tests.audit.corpus import (
    MUTATIONLAB_AUDIT_FILES,
    PUBLISHED,
    WEBHOOK_FILES,
    as_event_list,
    event_list,
    load_recording,
    recording_id,
    to_json,
)
from tests.support.logread import read_topic

NOW = datetime.now(UTC)


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def events_of(path: Path) -> list[Any]:
    return list(as_event_list(load_recording(path, NOW))["items"])


def write(name: str, resource: str = "configmaps", group: str = "", user: str = "alice") -> dict[str, Any]:
    return {
        "stage": "ResponseComplete",
        "verb": "create",
        "auditID": f"id-{name}",
        "requestURI": f"/api/v1/namespaces/ns/{resource}",
        "user": {"username": user},
        "objectRef": {"resource": resource, "apiGroup": group, "namespace": "ns", "name": name},
        "responseStatus": {"code": 201},
        "responseObject": {"metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "5"}},
        "stageTimestamp": "2026-11-30T09:50:00.000001Z",
    }


async def post(
    http: aiohttp.ClientSession,
    running: Running,
    body: bytes | dict[str, Any],
    path: str = "/audit-webhook/default",
) -> tuple[int, str]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with http.post(running.url(path), data=data, headers={"Content-Type": "application/json"}) as resp:
        return resp.status, await resp.text()


# --- the corpus through the real server ----------------------------------------------------------


def test_the_corpus_table_covers_every_recording() -> None:
    assert sorted(PUBLISHED) == sorted(recording_id(p) for p in WEBHOOK_FILES + MUTATIONLAB_AUDIT_FILES)


@pytest.mark.parametrize("path", WEBHOOK_FILES + MUTATIONLAB_AUDIT_FILES, ids=recording_id)
async def test_corpus_recording_published_or_dropped(
    path: Path, running: Running, http: aiohttp.ClientSession
) -> None:
    document = as_event_list(load_recording(path, NOW))
    status, text = await post(http, running, to_json(document))
    assert status == 200, text
    batches = await read_batches(running)
    published = [(b.group_resource.key, f.name, f.author, f.verb) for _, b in batches for f in b.facts]
    assert published == PUBLISHED[recording_id(path)]
    for key, batch in batches:
        assert key == stream_key("default", batch.group_resource)


async def test_whole_corpus_in_one_request_groups_by_type(
    running: Running, http: aiohttp.ClientSession
) -> None:
    events = [e for p in WEBHOOK_FILES + MUTATIONLAB_AUDIT_FILES for e in events_of(p)]
    status, _ = await post(http, running, to_json(event_list(events)))
    assert status == 200
    batches = await read_batches(running)
    by_type = {b.group_resource.key: b for _, b in batches}
    assert len(batches) == len(by_type) == 3  # one record per group/resource for the request
    assert set(by_type) == {"wardle.example.com/flunders", "configmaps", "secrets"}
    secrets = by_type["secrets"].facts
    assert [f.name for f in secrets] == ["app-secret"]  # the dry-run patch was dropped
    configmaps = by_type["configmaps"].facts
    collection = [f for f in configmaps if f.verb == "deletecollection"]
    assert len(collection) == 2
    assert collection[0].uids is not None
    assert len(collection[0].uids) == 6
    assert collection[0].stage_timestamp_us > 0
    update = next(f for f in configmaps if f.name == "test-config3")
    assert (update.uid, update.resource_version) == ("271ee126-790e-4ee3-a7f8-f8451c550e8d", "13772844")


async def test_five_events_three_types_become_three_records_in_order(
    running: Running, http: aiohttp.ClientSession
) -> None:
    events = [
        write("web", "deployments", "apps"),
        write("config"),
        write("api", "deployments", "apps"),
        write("creds", "secrets"),
        write("other"),
    ]
    status, _ = await post(http, running, event_list(events))
    assert status == 200
    records = await read_topic(running.log, running.topic)
    keys = [r.key for r in records]
    assert sorted(keys, key=str) == sorted(
        [b"default:apps/deployments", b"default:configmaps", b"default:secrets"], key=str
    )
    names = {b.group_resource.key: [f.name for f in b.facts] for _, b in await read_batches(running)}
    assert names == {
        "apps/deployments": ["web", "api"],
        "configmaps": ["config", "other"],
        "secrets": ["creds"],
    }


async def test_outcomes_and_metrics(running: Running, http: aiohttp.ClientSession) -> None:
    def events(reason: str) -> float:
        return sample(
            "reverser_audit_events_total", route="default", reason=reason, category=category(reason)
        )

    before = {
        r: events(r) for r in ("queued", "dry_run", "no_attribution_fact", "malformed_event", "nil_event")
    }
    requests_before = sample("reverser_audit_requests_total", route="default", code="200")
    facts_before = sample("reverser_audit_facts_published_total", route="default")
    bytes_before = sample("reverser_audit_received_bytes_total", route="default")
    batches_before = sample("reverser_audit_batch_events_sum", route="default")
    latency_before = sample("reverser_audit_request_duration_seconds_count", route="default")
    dry = write("dry")
    dry["requestURI"] += "?dryRun=All"
    nameless = write("x")
    nameless["objectRef"].pop("name")
    nameless["responseObject"] = None
    body = json.dumps(event_list([write("a"), dry, nameless, 42, None, write("b")])).encode()
    status, text = await post(http, running, body)
    assert status == 200
    assert "6 events, 2 facts" in text
    assert events("queued") - before["queued"] == 2
    assert events("dry_run") - before["dry_run"] == 1
    assert events("no_attribution_fact") - before["no_attribution_fact"] == 1
    assert events("malformed_event") - before["malformed_event"] == 1
    assert events("nil_event") - before["nil_event"] == 1
    assert sample("reverser_audit_requests_total", route="default", code="200") - requests_before == 1
    assert sample("reverser_audit_facts_published_total", route="default") - facts_before == 2
    assert sample("reverser_audit_received_bytes_total", route="default") - bytes_before == len(body)
    assert sample("reverser_audit_batch_events_sum", route="default") - batches_before == 6
    assert sample("reverser_audit_request_duration_seconds_count", route="default") - latency_before == 1
    assert [f.name for _, b in await read_batches(running) for f in b.facts] == ["a", "b"]


async def test_collection_without_uid_set_is_counted(running: Running, http: aiohttp.ClientSession) -> None:
    event = write("c")
    event["verb"] = "deletecollection"
    event["responseObject"] = {"kind": "ConfigMapList", "items": [{"metadata": {"name": "x"}}]}
    before = sample("reverser_audit_collection_without_uidset_total", reason="no_uids")
    assert (await post(http, running, event_list([event])))[0] == 200
    assert sample("reverser_audit_collection_without_uidset_total", reason="no_uids") - before == 1


async def test_empty_list_and_missing_items_are_ok(running: Running, http: aiohttp.ClientSession) -> None:
    assert (await post(http, running, event_list([])))[0] == 200
    assert (await post(http, running, {"kind": "EventList", "apiVersion": "audit.k8s.io/v1"}))[0] == 200
    assert await read_topic(running.log, running.topic) == []


# --- the status table ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("POST", "/audit-webhook/default", 200),
        ("GET", "/audit-webhook/default", 405),
        ("PUT", "/audit-webhook/default", 405),
        ("DELETE", "/audit-webhook/default", 405),
        ("GET", "/audit-webhook", 405),
        ("POST", "/audit-webhook", 400),
        ("POST", "/audit-webhook/", 400),
        ("POST", "/audit-webhook/a/b", 400),
        ("POST", "/audit-webhook/a%2Fb", 400),
        ("POST", "/audit-webhook/nope", 404),
        ("POST", "/audit-webhook/defaul", 404),
        ("POST", "/audit-webhook-additional", 404),
        ("POST", "/wrong", 404),
        ("GET", "/healthz", 404),
        ("POST", "/audit-webhook/%64efault", 200),
    ],
)
async def test_method_path_route_table(
    method: str, path: str, status: int, running: Running, http: aiohttp.ClientSession
) -> None:
    url = f"http://127.0.0.1:{running.ingress.port}{path}"
    body = json.dumps(event_list([write("t")])).encode()
    async with http.request(method, aiohttp.client.URL(url, encoded=True), data=body) as resp:  # type: ignore[attr-defined]
        text = await resp.text()
        assert resp.status == status, text
        if status == 405:
            assert resp.headers["Allow"] == "POST"
        if status in (400, 404, 405):
            assert text.strip()


async def test_declared_routes_record_under_their_name(
    start_ingress: Callable[..., Any], http: aiohttp.ClientSession
) -> None:
    running = await start_ingress(routes=[{"name": "prod-eu-1"}, {"name": "dev"}])
    assert (await post(http, running, event_list([write("a")]), "/audit-webhook/prod-eu-1"))[0] == 200
    assert (await post(http, running, event_list([write("b")]), "/audit-webhook/default"))[0] == 404
    ((key, batch),) = await read_batches(running)
    assert key == b"prod-eu-1:configmaps"
    assert batch.route == "prod-eu-1"


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"", "not valid JSON"),
        (b"not json", "not valid JSON"),
        (b'{"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": [', "not valid JSON"),
        (b"\xff\xfe\x00garbage", "not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "not valid JSON"),
        (b"[]", "expected a JSON object"),
        (b'"EventList"', "expected a JSON object"),
        (b'{"apiVersion": "audit.k8s.io/v1", "items": []}', "kind must be EventList"),
        (b'{"kind": "Event", "apiVersion": "audit.k8s.io/v1"}', "kind must be EventList"),
        (b'{"kind": "EventList", "apiVersion": "audit.k8s.io/v1beta1", "items": []}', "apiVersion must be"),
        (b'{"kind": "EventList", "items": []}', "apiVersion must be"),
        (b'{"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": {}}', "items must be a list"),
        (b'{"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": "x"}', "items must be a list"),
    ],
)
async def test_bad_bodies_are_400_with_a_reason(
    body: bytes, reason: str, running: Running, http: aiohttp.ClientSession
) -> None:
    status, text = await post(http, running, body)
    assert status == 400
    assert reason in text


async def test_body_over_the_limit_is_413_before_reading_it(
    start_ingress: Callable[..., Any], http: aiohttp.ClientSession
) -> None:
    running = await start_ingress(max_body_bytes=1000)
    before = sample("reverser_audit_received_bytes_total", route="default")
    status, text = await post(http, running, b" " * 1001)
    assert (status, text.strip()) == (413, "request body too large: max 1000 bytes")
    assert sample("reverser_audit_received_bytes_total", route="default") == before  # never read
    assert (await post(http, running, json.dumps(event_list([])).encode().ljust(1000)))[0] == 200


STREAMED_CHUNKS = 10_000


async def test_chunked_body_over_the_limit_is_413_while_streaming(
    start_ingress: Callable[..., Any], http: aiohttp.ClientSession
) -> None:
    """The server stops reading within one read (256 KiB) of the limit and answers 413 while the
    client is still streaming. How much the client had pushed by the time it saw the answer is
    the loopback socket buffers' business (about 6 MB here), so it bounds only loosely."""
    limit = 300_000
    running = await start_ingress(max_body_bytes=limit)
    sent = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal sent
        for _ in range(STREAMED_CHUNKS):  # 640 MB if nobody stopped it
            sent += 65536
            yield b" " * 65536

    before = sample("reverser_audit_requests_total", route="default", code="413")
    read_before = sample("reverser_audit_received_bytes_total", route="default")
    with contextlib.suppress(aiohttp.ClientError):  # the server may close before the client is done
        async with http.post(running.url(), data=chunks()) as resp:
            assert resp.status == 413
    read = sample("reverser_audit_received_bytes_total", route="default") - read_before
    assert limit < read <= limit + 256 * 1024
    assert sent < STREAMED_CHUNKS * 65536 // 10, "the answer came only after most of the body"
    assert sample("reverser_audit_requests_total", route="default", code="413") - before == 1


async def test_log_unavailable_is_503_and_nothing_is_acknowledged(
    running: Running, http: aiohttp.ClientSession
) -> None:
    await running.log.close()  # the real log goes away under the server
    before = sample("reverser_audit_events_total", route="default", reason="write_error", category="error")
    body = json.dumps(event_list([write("a"), write("b", "secrets")])).encode()
    async with http.post(running.url(), data=body) as resp:
        status, text = resp.status, await resp.text()
        # The apiserver retries a 503 only with Retry-After; closing lets the retry go elsewhere.
        assert (resp.headers.get("Retry-After"), resp.headers.get("Connection")) == ("1", "close")
    assert status == 503
    assert "retry" in text
    assert (
        sample("reverser_audit_events_total", route="default", reason="write_error", category="error")
        - before
        == 2
    )
    # a request without facts does not need the log
    assert (await post(http, running, event_list([{"stage": "Panic"}])))[0] == 200


async def test_an_internal_error_is_500_with_retry_after_and_a_success_keeps_the_connection(
    running: Running, http: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = json.dumps(event_list([write("a")])).encode()
    async with http.post(running.url(), data=body) as resp:
        assert resp.status == 200
        assert "Retry-After" not in resp.headers
        assert resp.headers.get("Connection") != "close"

    async def bug(*_: Any) -> tuple[int, str]:
        # A bug cannot be provoked through the real request path: the handler itself is replaced.
        raise RuntimeError("a bug")

    monkeypatch.setattr(running.ingress, "_process", bug)
    async with http.post(running.url(), data=body) as resp:
        assert resp.status == 500
        assert (resp.headers.get("Retry-After"), resp.headers.get("Connection")) == ("1", "close")


async def test_oversized_group_is_split_into_consecutive_records(
    start_ingress: Callable[..., Any], http: aiohttp.ClientSession
) -> None:
    running = await start_ingress(max_message_bytes=4096)
    events = [write(f"cm-{i:03d}") for i in range(240)]
    assert (await post(http, running, event_list(events)))[0] == 200
    records = await read_topic(running.log, running.topic)
    assert len(records) > 3
    assert {(r.key, r.partition) for r in records} == {(b"default:configmaps", records[0].partition)}
    # Each value fits the topic with its key, headers and the log's record overhead (one definition).
    assert all(len(r.value or b"") <= max_value_bytes(4096, r.key, r.headers) for r in records)
    names = [f.name for _, b in await read_batches(running) for f in b.facts]
    assert names == [f"cm-{i:03d}" for i in range(240)]


async def test_fact_too_large_loses_uid_set_then_is_dropped(
    start_ingress: Callable[..., Any], http: aiohttp.ClientSession
) -> None:
    running = await start_ingress(max_message_bytes=4096)
    collection = write("c")
    collection["verb"] = "deletecollection"
    collection["responseObject"] = {"items": [{"metadata": {"uid": f"{i:036d}"}} for i in range(200)]}
    huge = write("h", user="u" * 10_000)
    too_large = {"route": "default", "reason": Reason.FACT_TOO_LARGE, "category": "error"}
    before = sample("reverser_audit_events_total", **too_large)
    status, text = await post(http, running, event_list([collection, huge, write("ok")]))
    assert status == 200, text
    facts = [f for _, batch in await read_batches(running) for f in batch.facts]
    assert [(f.verb, f.name, f.uids) for f in facts] == [
        ("deletecollection", "", None),
        ("create", "ok", None),
    ]
    assert sample("reverser_audit_events_total", **too_large) - before == 1


async def test_secret_data_never_reaches_the_logs(
    running: Running, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    secret = "never-commit-this-7d1f"
    event = write("s", "secrets")
    event["requestObject"] = {"kind": "Secret", "stringData": {"password": secret}}
    dry = dict(event, requestURI="/api/v1/namespaces/ns/secrets/s?dryRun=All")
    await post(http, running, event_list([event, dry, {"stage": secret}]))
    await post(http, running, json.dumps({"kind": secret}).encode())
    await post(http, running, json.dumps(event_list([event])).encode()[:-5])
    await post(http, running, json.dumps(event_list([event])).encode(), "/audit-webhook/" + secret)
    await running.log.close()
    await post(http, running, event_list([event]))
    assert caplog.records  # the requests above were logged about ...
    assert secret not in caplog.text  # ... but never with their content


# --- configuration and the service ----------------------------------------------------------------


def test_plain_http_refused_off_loopback(tmp_path: Path) -> None:
    settings = ingress_settings(tmp_path, addr="0.0.0.0:0")
    with pytest.raises(ConfigError, match="refusing plain HTTP"):
        build(settings, None)  # type: ignore[arg-type]
    allowed = ingress_settings(
        tmp_path,
        addr="0.0.0.0:0",
        allow_plain_http=True,
        routes=[{"name": "default", "allowed_identities": ["kube-apiserver"]}],
    )
    assert build(allowed, None) is not None  # type: ignore[arg-type]
    for host in ("127.0.0.1", "[::1]", "localhost", "127.3.4.5"):
        assert build(ingress_settings(tmp_path, addr=f"{host}:0"), None) is not None  # type: ignore[arg-type]


def test_open_route_refused_off_loopback_naming_the_route(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """12.1: a route with neither identities nor tokens must be opened explicitly off loopback."""
    monkeypatch.setenv("AUDIT_TOKEN_SET", "t0ken")
    routes: list[dict[str, Any]] = [
        {"name": "guarded", "allowed_identities": ["kube-apiserver"]},
        {"name": "tokened", "bearer_tokens_env": ["AUDIT_TOKEN_SET"]},
        {"name": "wide-open"},
    ]
    exposed = ingress_settings(tmp_path, addr="0.0.0.0:0", allow_plain_http=True, routes=routes)
    with pytest.raises(ConfigError, match=r"audit\.routes\[wide-open\]: refusing an unauthenticated route"):
        build(exposed, None)  # type: ignore[arg-type]
    routes[2]["allow_unauthenticated"] = True
    opted_in = ingress_settings(tmp_path, addr="0.0.0.0:0", allow_plain_http=True, routes=routes)
    assert build(opted_in, None) is not None  # type: ignore[arg-type]
    del routes[2]["allow_unauthenticated"]
    loopback = ingress_settings(tmp_path, addr="127.0.0.1:0", routes=routes)
    assert build(loopback, None) is not None  # type: ignore[arg-type]


def test_disabled_ingress_builds_nothing(tmp_path: Path) -> None:
    assert build(ingress_settings(tmp_path, enabled=False), None) is None  # type: ignore[arg-type]


def test_missing_token_variable_refuses_to_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AUDIT_TOKEN_NOT_SET", raising=False)
    settings = ingress_settings(
        tmp_path, routes=[{"name": "r", "bearer_tokens_env": ["AUDIT_TOKEN_NOT_SET"]}]
    )
    with pytest.raises(ConfigError, match="AUDIT_TOKEN_NOT_SET"):
        build(settings, None)  # type: ignore[arg-type]


async def test_reverser_run_starts_the_ingress(tmp_path: Path, http: aiohttp.ClientSession) -> None:
    assert build in COMPONENT_FACTORIES
    settings: Settings = ingress_settings(tmp_path)
    settings.metrics.addr = "127.0.0.1:0"
    service = Service(settings, factories=[build])
    await service.start()
    try:
        (ingress,) = service.components
        assert ingress.ready()
        port = ingress.port  # type: ignore[attr-defined]
        url = f"http://127.0.0.1:{port}/audit-webhook/default"
        async with http.post(url, data=json.dumps(event_list([write("via-service")]))) as resp:
            assert resp.status == 200
        async with http.get(f"http://127.0.0.1:{service.metrics_port}/metrics") as resp:
            assert 'reverser_audit_requests_total{code="200",route="default"}' in await resp.text()
        records = await read_topic(service.log, f"{settings.log.topic_prefix}.audit-facts")
        assert [r.key for r in records] == [stream_key("default", GroupResource("", "configmaps"))]
    finally:
        await service.stop()


async def test_topic_with_a_smaller_limit_than_configured_still_gets_the_batch(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    """The topic was created with max.message.bytes=40000 while the ingress believes 4 MiB."""
    from pipeline.audit.server import AuditIngress
    from tests.audit.conftest import open_embedded

    small = ingress_settings(tmp_path, max_message_bytes=40_000)
    log = await open_embedded(small)  # creates the topics with the small limit
    settings = small.model_copy(
        update={"log": small.log.model_copy(update={"topics": type(small.log.topics)()})}
    )
    ingress = AuditIngress(settings, log)
    await ingress.start()
    try:
        running = Running(ingress, log, settings)
        events = [write(f"cm-{i:04d}") for i in range(2000)]
        status, text = await post(http, running, event_list(events))
        assert status == 200, text
        names = [f.name for _, b in await read_batches(running) for f in b.facts]
        assert names == [f"cm-{i:04d}" for i in range(2000)]
    finally:
        await ingress.stop()
        await log.close()


async def test_lone_surrogates_in_json_do_not_fail_the_request(
    running: Running, http: aiohttp.ClientSession
) -> None:
    body = json.dumps(event_list([write("cm-\ud800"), write("fine")])).encode()  # "\ud800" escape
    status, text = await post(http, running, body)
    assert status == 200, text
    assert [f.name for _, b in await read_batches(running) for f in b.facts] == ["cm-?", "fine"]


async def test_slow_body_is_408(start_ingress: Callable[..., Any], http: aiohttp.ClientSession) -> None:
    running = await start_ingress(read_timeout_s=0.3)

    async def trickle() -> AsyncIterator[bytes]:
        yield b'{"kind": "EventList", '
        await asyncio.sleep(5)
        yield b'"apiVersion": "audit.k8s.io/v1"}'

    before = sample("reverser_audit_requests_total", route="default", code="408")
    with contextlib.suppress(aiohttp.ClientError):  # the client may still be writing when answered
        async with http.post(running.url(), data=trickle()) as resp:
            assert resp.status == 408
            assert "timed out" in await resp.text()
    assert sample("reverser_audit_requests_total", route="default", code="408") - before == 1


def test_unreadable_certificates_refuse_to_start(tmp_path: Path) -> None:
    (tmp_path / "tls.crt").write_text("not a certificate")
    (tmp_path / "tls.key").write_text("not a key")
    settings = ingress_settings(
        tmp_path, tls={"cert_file": tmp_path / "tls.crt", "key_file": tmp_path / "tls.key"}
    )
    with pytest.raises(ConfigError, match="cannot load certificates"):
        build(settings, None)  # type: ignore[arg-type]
