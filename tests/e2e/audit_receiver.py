"""A real aiohttp HTTPS endpoint that records the audit batches kube-apiserver posts to it.

It checks the control plane's half of the audit contract independently of the pipeline's ingress:
mutual TLS with the apiserver's client certificate, `audit.k8s.io/v1` EventLists, impersonated
users, and the apiserver's retry of a batch that was answered 5xx. It runs its own event loop in a
thread so that sync fixtures can start it before the (blocking) control-plane start.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

__all__ = ["AuditReceiver", "ReceivedBatch"]

START_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class ReceivedBatch:
    """One POST as it arrived: the route, the client certificate's CN and the decoded body."""

    route: str
    client_cn: str
    status: int
    body: dict[str, Any]

    @property
    def items(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.body.get("items", [])
        return items


@dataclass
class _Recorder:
    batches: list[ReceivedBatch] = field(default_factory=list)
    fail_next: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def _client_cn(request: web.Request) -> str:
    transport = request.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    cert = ssl_object.getpeercert() if ssl_object is not None else None
    for rdn in (cert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return ""


class AuditReceiver:
    """`https://127.0.0.1:<port>/audit-webhook/<route>`, requiring a client certificate from `ca`."""

    def __init__(self, port: int, cert: Path, key: Path, client_ca: Path) -> None:
        self.port = port
        self._ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(client_ca))
        self._ssl.load_cert_chain(str(cert), str(key))
        self._ssl.verify_mode = ssl.CERT_REQUIRED
        self._recorder = _Recorder()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="audit-receiver", daemon=True)
        self._runner: web.AppRunner | None = None

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(START_TIMEOUT_S)

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(START_TIMEOUT_S)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(START_TIMEOUT_S)
        self._loop.close()

    def fail_next(self, count: int) -> None:
        """Answer the next `count` posts with 503, as an ingress whose broker is down would."""
        with self._recorder.lock:
            self._recorder.fail_next = count

    def batches(self) -> list[ReceivedBatch]:
        with self._recorder.lock:
            return list(self._recorder.batches)

    def events(self, accepted_only: bool = True) -> list[dict[str, Any]]:
        return [
            item
            for batch in self.batches()
            if batch.status == 200 or not accepted_only
            for item in batch.items
        ]

    def wait_for(
        self, predicate: Callable[[dict[str, Any]], bool], timeout_s: float, accepted_only: bool = True
    ) -> list[dict[str, Any]]:
        """Audit events matching `predicate`, waiting up to `timeout_s` for at least one."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = [e for e in self.events(accepted_only) if predicate(e)]
            if found or time.monotonic() >= deadline:
                return found
            time.sleep(0.2)

    async def _serve(self) -> None:
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_post("/audit-webhook/{route}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port, ssl_context=self._ssl).start()

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        with self._recorder.lock:
            status = 503 if self._recorder.fail_next > 0 else 200
            self._recorder.fail_next = max(0, self._recorder.fail_next - 1)
            self._recorder.batches.append(
                ReceivedBatch(request.match_info["route"], _client_cn(request), status, body)
            )
        return web.Response(status=status, text="recorded\n" if status == 200 else "unavailable\n")
