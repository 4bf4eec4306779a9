"""Clients that try to lock the apiserver out or run the ingress out of memory (issue 27).

Real servers on loopback with real sockets (and real TLS where the finding was): every client
below is one the ingress met in a reproduction against `reverser run`, and every test checks that
the apiserver's own posts still land while the hostile ones are refused with a reason and counted.
Different loopback source addresses (127.0.0.x) stand for different peers.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import zlib
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
from prometheus_client import REGISTRY

from tests.audit.conftest import Running, read_batches
from tests.audit.corpus import event_list
from tests.audit.rawhttp import RawConnection, connect, request_head
from tests.audit.test_security import Pki
from tests.audit.test_server import write
from tests.support.wait import wait_for

TOKEN = "apiserver-token-0123456789"
AUTHORIZED = {"Authorization": f"Bearer {TOKEN}"}


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def counted(name: str, **labels: str) -> Callable[[], float]:
    """How much a counter grew since this call."""
    before = sample(name, **labels)
    return lambda: sample(name, **labels) - before


def published_names(batches: list[Any]) -> list[str]:
    return [fact.name for _, batch in batches for fact in batch.facts]


def body_of(*names: str, length: int | None = None) -> bytes:
    """An EventList of configmap writes, padded with trailing whitespace to `length` bytes."""
    body = json.dumps(event_list([write(name) for name in names])).encode()
    return body if length is None else body.ljust(length)


async def open_all(port: int, peers: list[str], per_peer: int, **kwargs: Any) -> list[RawConnection]:
    return list(
        await asyncio.gather(
            *(connect(port, source=peer, **kwargs) for peer in peers for _ in range(per_peer))
        )
    )


async def wait_open(count: int) -> None:
    """Until the listener has admitted `count` connections (a TLS server admits after its handshake)."""

    def admitted() -> bool:
        return sample("reverser_audit_open_connections") == count

    await wait_for(admitted, f"{count} admitted connections", timeout_s=60)


async def close_all(connections: list[RawConnection]) -> None:
    await asyncio.gather(*(c.close() for c in connections))


# --- finding 1: unauthenticated keep-alive connections held every slot ---------------------------


async def test_tokenless_keepalive_clients_cannot_lock_out_the_apiserver(
    tmp_path: Any,
    start_ingress: Callable[..., Any],
    http: aiohttp.ClientSession,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A full cap of tokenless clients over TLS: each is answered 401 and disconnected; a full cap
    of idle ones is made room in; the apiserver's post lands either way."""
    pki = Pki(tmp_path)
    monkeypatch.setenv("AUDIT_TOKEN", TOKEN)
    running: Running = await start_ingress(
        tls=pki.tls(mtls=False), routes=[{"name": "default", "bearer_tokens_env": ["AUDIT_TOKEN"]}]
    )
    audit = running.settings.audit
    assert (audit.max_connections, audit.max_connections_per_peer) == (256, 64)  # the defaults
    port = running.ingress.port
    assert port is not None
    peers = [f"127.0.0.{10 + i}" for i in range(audit.max_connections // audit.max_connections_per_peer)]
    closed_after_401 = counted("reverser_audit_connections_closed_total", reason="rejected_request")
    evicted = counted("reverser_audit_connections_closed_total", reason="idle_evicted")
    unauthenticated = counted(
        "reverser_audit_rejected_requests_total", route="default", reason="unauthenticated"
    )

    clients = await open_all(port, peers, audit.max_connections_per_peer, ssl_context=pki.client())
    await wait_open(audit.max_connections)
    answers = await asyncio.gather(*(c.post(body_of("from-a-stranger")) for c in clients))
    assert {(a.status, a.text) for a in answers} == {
        (401, "this route needs a client certificate or a bearer token\n")
    }
    assert {a.headers.get("connection") for a in answers} == {"close"}
    assert all(await asyncio.gather(*(c.closed_by_server() for c in clients)))
    assert closed_after_401() == unauthenticated() == audit.max_connections
    await close_all(clients)

    idle = await open_all(port, peers, audit.max_connections_per_peer, ssl_context=pki.client())
    await wait_open(audit.max_connections)
    async with http.post(
        running.url(), data=body_of("from-the-apiserver"), ssl=pki.client(), headers=AUTHORIZED
    ) as resp:
        assert resp.status == 200, await resp.text()
    assert evicted() == 1
    assert published_names(await read_batches(running)) == ["from-the-apiserver"]
    await close_all(idle)


async def test_idle_clients_of_an_open_route_make_room_for_a_new_one(
    start_ingress: Callable[..., Any], http: aiohttp.ClientSession
) -> None:
    """On a route without credentials every client is as good as the apiserver: the longest-idle one goes."""
    running: Running = await start_ingress(max_connections=8, max_connections_per_peer=4)
    port = running.ingress.port
    assert port is not None
    evicted = counted("reverser_audit_connections_closed_total", reason="idle_evicted")
    holders = await open_all(port, ["127.0.0.20", "127.0.0.21"], 4)
    for index, holder in enumerate(holders):
        answer = await holder.post(body_of(f"holder-{index}"))
        assert answer.status == 200, answer.text
    async with http.post(running.url(), data=body_of("newcomer")) as resp:
        assert resp.status == 200
    assert evicted() == 1
    assert await holders[0].closed_by_server(), "the longest-idle connection is the one dropped"
    answer = await holders[-1].post(body_of("still-open"))
    assert answer.status == 200
    assert sorted(published_names(await read_batches(running))) == sorted(
        [f"holder-{i}" for i in range(8)] + ["newcomer", "still-open"]
    )
    await close_all(holders)


async def test_a_stranger_is_dropped_before_the_apiserver_idle_longer(
    start_ingress: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Connections that never carried an authorized request go first, however recent."""
    monkeypatch.setenv("AUDIT_TOKEN", TOKEN)
    running: Running = await start_ingress(
        max_connections=2, routes=[{"name": "default", "bearer_tokens_env": ["AUDIT_TOKEN"]}]
    )
    port = running.ingress.port
    assert port is not None
    apiserver = await connect(port, source="127.0.0.60")
    assert (await apiserver.post(body_of("first"), AUTHORIZED)).status == 200
    stranger = await connect(port, source="127.0.0.61")
    await wait_open(2)
    newcomer = await connect(port, source="127.0.0.62")
    assert await stranger.closed_by_server()
    assert (await apiserver.post(body_of("second"), AUTHORIZED)).status == 200
    assert (await newcomer.post(body_of("third"), AUTHORIZED)).status == 200
    assert published_names(await read_batches(running)) == ["first", "second", "third"]
    await close_all([apiserver, stranger, newcomer])


async def test_connections_per_peer_are_limited(start_ingress: Callable[..., Any]) -> None:
    running: Running = await start_ingress(max_connections_per_peer=3)
    port = running.ingress.port
    assert port is not None
    refused = counted("reverser_audit_connections_refused_total", reason="peer_limit")
    greedy = await open_all(port, ["127.0.0.30"], 3)
    extra = await connect(port, source="127.0.0.30")
    assert await extra.closed_by_server()
    assert refused() == 1
    other = await connect(port, source="127.0.0.31")
    assert (await other.post(body_of("other-peer"))).status == 200
    await greedy[0].close()
    await wait_open(3)
    again = await connect(port, source="127.0.0.30")
    assert (await again.post(body_of("greedy-again"))).status == 200
    assert refused() == 1
    await close_all([*greedy, other, again, extra])


async def test_a_connection_serving_a_request_is_never_dropped(start_ingress: Callable[..., Any]) -> None:
    """At the cap with every connection mid-request a newcomer is refused; the requests then land."""
    running: Running = await start_ingress(max_connections=2)
    port = running.ingress.port
    assert port is not None
    refused = counted("reverser_audit_connections_refused_total", reason="all_busy")
    bodies = [body_of("busy-0", length=4096), body_of("busy-1", length=4096)]
    busy = [await connect(port), await connect(port)]
    for connection, body in zip(busy, bodies, strict=True):
        await connection.send(request_head(len(body)) + body[:100])
    newcomer = await connect(port)
    assert await newcomer.closed_by_server()
    assert refused() == 1
    for connection, body in zip(busy, bodies, strict=True):
        await connection.send(body[100:])
        assert (await connection.answer()).status == 200
    assert sorted(published_names(await read_batches(running))) == ["busy-0", "busy-1"]
    await close_all([*busy, newcomer])


# --- finding 2: compressed bodies inflated past every limit --------------------------------------


def gzip_bomb(inflated_bytes: int) -> bytes:
    """A gzip member of `inflated_bytes` spaces: about a thousandth of that on the wire."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = b" " * (1 << 20)
    parts = [compressor.compress(block) for _ in range(inflated_bytes // len(block))]
    return b"".join([*parts, compressor.flush()])


@pytest.mark.parametrize("encoding", ["gzip", "x-gzip", "deflate", "br", "zstd", "GZIP", "gzip, identity"])
async def test_compressed_bodies_are_refused_unread(
    encoding: str, running: Running, http: aiohttp.ClientSession
) -> None:
    bomb = gzip_bomb(256 << 20)
    read = counted("reverser_audit_received_bytes_total", route="default")
    refused = counted(
        "reverser_audit_rejected_requests_total", route="default", reason="unsupported_encoding"
    )
    headers = {"Content-Encoding": encoding, "Content-Type": "application/json"}
    async with http.post(running.url(), data=bomb, headers=headers) as resp:
        assert resp.status == 415
        assert resp.headers["Accept-Encoding"] == "identity"
        assert await resp.text() == "unsupported Content-Encoding: send the audit event list uncompressed\n"
    assert read() == 0, "not a byte of the body was read, let alone inflated"
    assert refused() == 1
    assert await read_batches(running) == []


async def test_many_gzip_uploads_at_once_are_all_refused_before_inflation(
    start_ingress: Callable[..., Any],
) -> None:
    """The reproduction's 256 concurrent small uploads (3 MiB each once inflated), held open."""
    running: Running = await start_ingress()
    port = running.ingress.port
    assert port is not None
    upload = gzip.compress(body_of("zipped", length=3 * 1024 * 1024 - 1))
    read = counted("reverser_audit_received_bytes_total", route="default")
    peers = [f"127.0.0.{40 + i}" for i in range(4)]
    clients = await open_all(port, peers, 64)
    answers = await asyncio.gather(*(c.post(upload, {"Content-Encoding": "gzip"}) for c in clients))
    assert {a.status for a in answers} == {415}
    assert read() == 0
    assert sample("reverser_audit_inflight_body_bytes") == 0
    identity = await connect(port, source="127.0.0.50")
    assert (await identity.post(body_of("plain"), {"Content-Encoding": "identity"})).status == 200
    assert published_names(await read_batches(running)) == ["plain"]
    await close_all([*clients, identity])


async def test_bodies_in_flight_are_bounded_as_a_whole(start_ingress: Callable[..., Any]) -> None:
    """Two half-sent bodies hold the budget: a third is 503 with Retry-After, unread; the two land."""
    limit = 64 * 1024
    running: Running = await start_ingress(max_body_bytes=limit, max_inflight_body_bytes=2 * limit)
    port = running.ingress.port
    assert port is not None
    refused = counted("reverser_audit_rejected_requests_total", route="default", reason="bodies_in_flight")
    read = counted("reverser_audit_received_bytes_total", route="default")
    held = [await connect(port), await connect(port)]
    bodies = [body_of("held-0", length=limit), body_of("held-1", length=limit)]
    for connection, body in zip(held, bodies, strict=True):
        await connection.send(request_head(limit) + body[:1000])

    # Each held request takes its share as soon as its handler starts; wait until both have.
    await wait_for(lambda: sample("reverser_audit_inflight_body_bytes") == 2 * limit, "both bodies held")
    third = await connect(port)
    answer = await third.post(body_of("third"))
    assert (answer.status, answer.headers["retry-after"]) == (503, "1")
    assert answer.text == f"too many request bodies in flight (max {2 * limit} bytes in all), retry\n"
    assert await third.closed_by_server(), "a refusal that asks for a retry closes the connection"
    assert refused() == 1
    for connection, body in zip(held, bodies, strict=True):
        await connection.send(body[1000:])
        assert (await connection.answer()).status == 200
    assert sample("reverser_audit_inflight_body_bytes") == 0
    retried = await connect(port)
    assert (await retried.post(body_of("third"))).status == 200
    assert read() == 2 * limit + len(body_of("third"))
    assert sorted(published_names(await read_batches(running))) == ["held-0", "held-1", "third"]
    await close_all([*held, third, retried])


async def test_a_chunked_body_is_covered_as_it_grows(start_ingress: Callable[..., Any]) -> None:
    limit = 64 * 1024
    running: Running = await start_ingress(max_body_bytes=limit, max_inflight_body_bytes=limit)
    port = running.ingress.port
    assert port is not None
    holder = await connect(port)
    await holder.send(request_head(limit) + b" ")
    await wait_for(lambda: sample("reverser_audit_inflight_body_bytes") == limit, "the budget held")
    chunked = await connect(port)
    chunk = b" " * 1000
    await chunked.send(request_head(None, chunked=True) + f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
    answer = await chunked.answer()
    assert (answer.status, answer.headers["retry-after"]) == (503, "1")
    assert answer.text.startswith("too many request bodies in flight")
    await close_all([holder, chunked])


# --- finding 3: malformed input answered 500 with a traceback ------------------------------------


@pytest.fixture
def no_tracebacks(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.WARNING)
    return caplog


def tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


async def test_a_damaged_gzip_body_is_refused_with_a_reason(
    running: Running, http: aiohttp.ClientSession, no_tracebacks: pytest.LogCaptureFixture
) -> None:
    damaged = bytearray(gzip.compress(body_of("cm")))
    damaged[12:20] = b"\xff" * 8
    for body in (bytes(damaged), bytes(damaged[: len(damaged) // 2])):
        async with http.post(running.url(), data=body, headers={"Content-Encoding": "gzip"}) as resp:
            assert resp.status == 415
            assert "Content-Encoding" in await resp.text()
        # The same bytes without the header are just a body that is not JSON.
        async with http.post(running.url(), data=body) as resp:
            assert (resp.status, await resp.text()) == (
                400,
                "invalid audit event list: body is not valid JSON\n",
            )
    assert tracebacks(no_tracebacks) == []
    assert await read_batches(running) == []


@pytest.mark.parametrize("field", ["resource", "apiGroup"])
async def test_a_lone_surrogate_in_the_stream_type_is_a_malformed_event(
    field: str, running: Running, http: aiohttp.ClientSession, no_tracebacks: pytest.LogCaptureFixture
) -> None:
    """The type is the record key, which must be UTF-8: that event is skipped, the rest land.

    A whole-list 400 would let anyone who can put a string into an audit event (a patch body is
    logged verbatim) make the apiserver drop the other events of its batch.
    """
    bad = write("bad")
    bad["objectRef"][field] = "config\ud800maps"
    body = json.dumps(event_list([bad, write("good")])).encode()
    assert b"\\ud800" in body
    malformed = counted(
        "reverser_audit_events_total", route="default", reason="malformed_event", category="dropped"
    )
    async with http.post(running.url(), data=body) as resp:
        assert (resp.status, await resp.text()) == (200, "audit events processed: 2 events, 1 facts\n")
    assert malformed() == 1
    assert published_names(await read_batches(running)) == ["good"]
    assert tracebacks(no_tracebacks) == []


async def test_a_token_that_is_not_utf8_is_forbidden(
    start_ingress: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    no_tracebacks: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("AUDIT_TOKEN", TOKEN)
    running: Running = await start_ingress(routes=[{"name": "default", "bearer_tokens_env": ["AUDIT_TOKEN"]}])
    assert running.ingress.port is not None
    client = await connect(running.ingress.port)
    body = body_of("cm")
    head = request_head(len(body)).replace(b"\r\n\r\n", b"\r\nAuthorization: Bearer \xff\xfe\x80\r\n\r\n")
    await client.send(head + body)
    answer = await client.answer()
    assert (answer.status, answer.text) == (403, "bearer token not allowed on this route\n")
    assert tracebacks(no_tracebacks) == []
    await client.close()


@pytest.mark.parametrize(
    "sent",
    [
        request_head(None, chunked=True) + b'10\r\n{"kind": "Event\r\nzz\r\n',  # broken chunk framing
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 32 + b"\r\n\r\n",  # TLS on plain HTTP
        b"POST /audit-webhook/default HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
    ],
    ids=["broken-chunk", "not-http", "two-lengths"],
)
async def test_what_the_http_parser_refuses_is_400_and_counted(
    sent: bytes, running: Running, no_tracebacks: pytest.LogCaptureFixture
) -> None:
    """aiohttp's parser answers these itself, before any handler; they are counted like the rest."""
    assert running.ingress.port is not None
    malformed = counted("reverser_audit_rejected_requests_total", route="-", reason="malformed_http")
    client = await connect(running.ingress.port)
    await client.send(sent)
    answer = await client.answer()
    assert answer.status == 400
    assert answer.text
    assert await client.closed_by_server()
    assert malformed() == 1
    assert tracebacks(no_tracebacks) == []
    await client.close()


async def test_a_client_leaving_mid_body_is_counted_not_logged_as_a_failure(
    running: Running, no_tracebacks: pytest.LogCaptureFixture
) -> None:
    assert running.ingress.port is not None
    broken = counted("reverser_audit_rejected_requests_total", route="default", reason="broken_body")
    client = await connect(running.ingress.port)
    await client.send(request_head(10_000) + b'{"kind": "EventList"')
    await wait_for(lambda: sample("reverser_audit_inflight_body_bytes") == 10_000, "the request to start")
    client.writer.transport.abort()
    await wait_for(lambda: broken() == 1, "the abandoned request to be counted")
    assert sample("reverser_audit_inflight_body_bytes") == 0
    assert tracebacks(no_tracebacks) == []
