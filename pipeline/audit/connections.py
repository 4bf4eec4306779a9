"""A cap on the audit listener's open connections.

Every open connection holds a socket and a handler; without a cap, a client that opens connections
and never sends (or never finishes a TLS handshake) exhausts file descriptors. Connections beyond
`limit` are closed as soon as they are established and counted. TLS handshakes are bounded
separately by the listener's handshake timeout, so a connection that never completes one goes
away within a few seconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from pipeline.audit.metrics import CONNECTIONS_REFUSED

__all__ = ["ConnectionCap"]


class ConnectionCap:
    """A protocol factory wrapping another one, admitting at most `limit` open connections."""

    def __init__(self, factory: Callable[[], asyncio.Protocol], limit: int) -> None:
        self._factory = factory
        self.limit = limit
        self.open = 0

    def __call__(self) -> asyncio.Protocol:
        return _Counted(self, self._factory())


class _Counted(asyncio.Protocol):
    """Forwards every callback to the real protocol, unless the cap refused the connection."""

    def __init__(self, cap: ConnectionCap, inner: asyncio.Protocol) -> None:
        self._cap = cap
        self._inner = inner
        self._admitted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self._cap.open >= self._cap.limit:
            CONNECTIONS_REFUSED.inc()
            if isinstance(transport, asyncio.WriteTransport):
                transport.abort()
            else:
                transport.close()
            return
        self._admitted = True
        self._cap.open += 1
        self._inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._admitted:
            self._admitted = False
            self._cap.open -= 1
            self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._admitted:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._admitted else None

    def pause_writing(self) -> None:
        if self._admitted:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._admitted:
            self._inner.resume_writing()
