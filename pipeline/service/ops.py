"""The ops endpoints (`/metrics`, `/healthz`, `/readyz`) served from a thread of their own.

A kubelet restarts a pod whose liveness probe does not answer in time. Served from the event loop
that also decodes, hashes and commits a 100k-object snapshot, the probe waited behind every stall
of that loop (up to 10 s on a busy 2-core machine), so the pods that most needed to finish their
first sync were restarted in a loop. Here the server runs its own event loop on its own thread,
and answers whenever the interpreter switches threads (every few milliseconds) however busy the
main loop is.

Health still describes the main loop: the loop publishes a `HealthSnapshot` every
`PUBLISH_INTERVAL_S`, and a snapshot older than `stall_fail_s` fails `/healthz` and `/readyz`
(naming how long the loop has not run), so a wedged process is still restarted. Other read-only
routes (the Burrow lag API) read the stages' state, so they are forwarded to the main loop.

The thread still needs the GIL for every step of an answer (accept, read, handle, write), and
takes it from a busy main thread only after the interpreter's switch interval: 5 ms by default,
paid at each of those steps, and longer when the main thread is descheduled while holding it. So
while the server runs, the interval is `SWITCH_INTERVAL_S` (the old one is put back at `stop`).
During a 10,000-object first sync on the shared 2-core VM that cut the probe's answers from p90
61 ms / p99 121 ms to 25 / 70 ms (docs/operations.md); the main loop pays a switch only when
another thread of the process wants the GIL.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

__all__ = [
    "PUBLISH_INTERVAL_S",
    "SWITCH_INTERVAL_S",
    "Answer",
    "HealthSnapshot",
    "OpsServer",
    "health_answer",
    "readiness_answer",
]

logger = logging.getLogger(__name__)

#: How often the main loop publishes its health: the staleness a stalled loop shows on top.
PUBLISH_INTERVAL_S: Final = 0.25

#: The interpreter's thread switch interval while the server runs (the module docstring says why).
SWITCH_INTERVAL_S: Final = 0.001

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True)
class HealthSnapshot:
    """What the main loop last said about itself, and when (`time.monotonic()`)."""

    at_s: float
    failures: tuple[str, ...] = ()
    ready: bool = False
    problems: tuple[str, ...] = ("starting",)


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    text: str


def _stalled_for_s(snapshot: HealthSnapshot, now_s: float, stall_fail_s: float) -> float | None:
    """How long the main loop has not published, when that is longer than `stall_fail_s`."""
    age_s = now_s - snapshot.at_s
    return age_s if age_s > stall_fail_s else None


def health_answer(snapshot: HealthSnapshot, now_s: float, stall_fail_s: float) -> Answer:
    """Alive unless a stage lost a task for good or the event loop stopped running."""
    stalled_s = _stalled_for_s(snapshot, now_s, stall_fail_s)
    if stalled_s is not None:
        return Answer(503, f"failed\nevent loop: has not run for {stalled_s:.1f} s\n")
    if snapshot.failures:
        return Answer(503, "failed\n" + "".join(f"{f}\n" for f in snapshot.failures))
    return Answer(200, "ok\n")


def readiness_answer(snapshot: HealthSnapshot, now_s: float, stall_fail_s: float) -> Answer:
    """Ready when the loop last said so and is still running."""
    stalled_s = _stalled_for_s(snapshot, now_s, stall_fail_s)
    if stalled_s is not None:
        return Answer(503, f"not ready\nevent loop: has not run for {stalled_s:.1f} s\n")
    if not snapshot.ready:
        return Answer(503, "not ready\n" + "".join(f"{p}\n" for p in snapshot.problems))
    return Answer(200, "ready\n")


class OpsServer:
    """An aiohttp server on a daemon thread with its own event loop; see the module docstring."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        stall_fail_s: float,
        forwarded: Sequence[web.RouteDef] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._host = host
        self._port = port
        self._stall_fail_s = stall_fail_s
        self._forwarded = list(forwarded)
        self._clock = clock
        # Replaced whole by the main loop, read by the server thread: one reference, no lock.
        self._snapshot = HealthSnapshot(at_s=clock())
        self._main: asyncio.AbstractEventLoop | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._switch_interval_s: float | None = None  # the interpreter's, while the server runs
        self.port: int | None = None

    def publish(self, snapshot: HealthSnapshot) -> None:
        self._snapshot = snapshot

    async def start(self) -> int:
        """Bind and serve; returns the bound port. A bind error (address in use) is raised here."""
        self._main = asyncio.get_running_loop()
        self._switch_interval_s = sys.getswitchinterval()
        sys.setswitchinterval(min(SWITCH_INTERVAL_S, self._switch_interval_s))
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="ops-server", daemon=True)
        self._thread.start()
        try:
            self.port = await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._serve(), loop))
        except BaseException:
            await self.stop()
            raise
        return self.port

    async def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if self._runner is not None:
            runner, self._runner = self._runner, None
            try:
                await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(runner.cleanup(), loop))
            except Exception:
                logger.exception("stopping the ops server failed")
        loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join)
        loop.close()
        self._loop = self._thread = None
        if self._switch_interval_s is not None:
            sys.setswitchinterval(self._switch_interval_s)
            self._switch_interval_s = None

    # on the server thread --------------------------------------------------------------------
    async def _serve(self) -> int:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.add_routes(
            web.RouteDef(route.method, route.path, self._forward(route.handler), route.kwargs)
            for route in self._forwarded
        )
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, self._host, self._port).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        addresses = runner.addresses
        return int(addresses[0][1]) if addresses else self._port

    def _forward(self, handler: Handler) -> Handler:
        """Run `handler` on the main loop, where the state it reads lives."""

        async def forwarded(request: web.Request) -> web.StreamResponse:
            assert self._main is not None

            async def on_main() -> web.StreamResponse:
                return await handler(request)

            return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(on_main(), self._main))

        return forwarded

    async def _metrics(self, _request: web.Request) -> web.Response:
        response = web.Response(body=generate_latest(REGISTRY))
        response.content_type = CONTENT_TYPE_LATEST.split(";")[0]
        return response

    async def _healthz(self, _request: web.Request) -> web.Response:
        answer = health_answer(self._snapshot, self._clock(), self._stall_fail_s)
        return web.Response(status=answer.status, text=answer.text)

    async def _readyz(self, _request: web.Request) -> web.Response:
        answer = readiness_answer(self._snapshot, self._clock(), self._stall_fail_s)
        return web.Response(status=answer.status, text=answer.text)
