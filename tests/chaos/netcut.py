"""A cuttable network path between HAProxy (the apiserver's side) and one replica.

Each replica's audit port and metrics port are reached through a loopback TCP relay. `cut()` drops
the path the way a partitioned network does for TCP: nothing gets through in either direction
(bytes sent meanwhile wait, as retransmissions would, and new connections are accepted but get no
further), so the batch in flight stalls and HAProxy's health checks through the relay time out;
`restore()` lets everything through again. The relay also tells whether a replica is holding an
audit request right now (bytes went to it on a connection and nothing has come back yet), which
the "pause a replica while it holds a request" fault waits for.

A relay instead of iptables: the test runs unprivileged, and a relay in the test's own process
cannot leave a rule behind if the run is killed.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Coroutine
from typing import Any

from tests.support.net import free_port

__all__ = ["NetPath", "Relays"]

CHUNK_BYTES = 65536


class NetPath:
    """One replica's two relays (audit and metrics), cut and restored together."""

    def __init__(self, loop: asyncio.AbstractEventLoop, audit_port: int, metrics_port: int) -> None:
        self._loop = loop
        self._open = asyncio.Event()
        self._open.set()
        self.targets = (audit_port, metrics_port)
        self.ports = (free_port(), free_port())
        # audit connections that carried request bytes and no answer since
        self._awaiting: set[int] = set()
        self._servers: list[asyncio.Server] = []
        #: set whenever request bytes go towards the replica (a fault clears it, then waits on it)
        self.request_sent = threading.Event()
        self._connections: set[asyncio.Task[Any]] = set()

    @property
    def holding_request(self) -> bool:
        return bool(self._awaiting)

    async def start(self) -> None:
        for index, (port, target) in enumerate(zip(self.ports, self.targets, strict=True)):
            serve = functools.partial(self._serve, target=target, audit=index == 0)
            self._servers.append(await asyncio.start_server(serve, "127.0.0.1", port))

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, target: int, audit: bool
    ) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)
        await self._open.wait()
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            writer.close()
            return
        conn = id(writer)
        await asyncio.gather(
            self._pump(reader, up_writer, conn if audit else None, request=True),
            self._pump(up_reader, writer, conn if audit else None, request=False),
            return_exceptions=True,
        )
        self._awaiting.discard(conn)

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: int | None, *, request: bool
    ) -> None:
        try:
            while data := await reader.read(CHUNK_BYTES):
                if conn is not None and request:
                    self._awaiting.add(conn)  # sent towards the replica: held from now on
                    self.request_sent.set()
                await self._open.wait()
                if conn is not None and not request:
                    self._awaiting.discard(conn)
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()

    def cut(self) -> None:
        self._loop.call_soon_threadsafe(self._open.clear)

    def restore(self) -> None:
        self._loop.call_soon_threadsafe(self._open.set)

    async def stop(self) -> None:
        self._open.set()
        for server in self._servers:
            server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)


class Relays:
    """The relays of every replica, served by one event loop in a thread of their own."""

    def __init__(self, backends: list[tuple[int, int]]) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="chaos-relays", daemon=True)
        self.paths = [NetPath(self._loop, audit, metrics) for audit, metrics in backends]

    def _run(self, coro: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    def start(self) -> None:
        self._thread.start()
        for path in self.paths:
            self._run(path.start())

    def stop(self) -> None:
        for path in self.paths:
            self._run(path.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
