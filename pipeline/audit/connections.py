"""Who holds the audit listener's connections: a global cap, a cap per peer, and idle eviction.

Every open connection holds a socket and a handler. Without a cap, a client that opens connections
and never sends (or never finishes a TLS handshake) exhausts file descriptors; with a cap that
refuses newcomers, anyone who can reach the port can hold every slot with idle keep-alive
connections and lock the apiserver out. So:

* one peer (client IP address) holds at most `max_per_peer` connections; more are refused at once;
* at `max_open`, a new connection replaces an idle one instead of being refused: connections that
  never carried an authorized request go first, then the longest-idle. A connection serving a
  request is never dropped, so a newcomer is refused only when every connection is busy.

Dropped and refused connections are aborted (a TCP reset), which the apiserver's webhook client
retries; a clean close while it writes a batch would read as EOF, which it does not. TLS
handshakes are bounded separately by the listener's handshake timeout, and a connection enters the
cap only once its handshake completed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum

from pipeline.audit.metrics import CONNECTIONS_CLOSED, CONNECTIONS_REFUSED, OPEN_CONNECTIONS

__all__ = ["CloseReason", "Connection", "ConnectionCap", "Refusal"]


class Refusal(StrEnum):
    """Why a new connection was closed as soon as it was established (`reason` label)."""

    PEER_LIMIT = "peer_limit"
    ALL_BUSY = "all_busy"


class CloseReason(StrEnum):
    """Why the ingress closed a connection it had admitted (`reason` label)."""

    IDLE_EVICTED = "idle_evicted"
    REJECTED_REQUEST = "rejected_request"


@dataclass(slots=True, eq=False)
class Connection:
    """One admitted connection: its peer, whether a request is being served, and since when idle."""

    transport: asyncio.BaseTransport
    peer: str
    idle_since: float
    busy: int = 0
    authorized: bool = False

    def eviction_order(self) -> tuple[bool, float]:
        """Never-authorized connections sort first, then the longest-idle."""
        return (self.authorized, self.idle_since)


def _peer_of(transport: asyncio.BaseTransport) -> str:
    peername = transport.get_extra_info("peername")
    if isinstance(peername, tuple) and peername:
        return str(peername[0])
    return ""


class ConnectionCap:
    """A protocol factory wrapping another one, enforcing the caps described above."""

    def __init__(self, factory: Callable[[], asyncio.Protocol], *, max_open: int, max_per_peer: int) -> None:
        self._factory = factory
        self._max_open = max_open
        self._max_per_peer = max_per_peer
        self._open: dict[asyncio.BaseTransport, Connection] = {}
        self._per_peer: dict[str, int] = {}

    def __call__(self) -> asyncio.Protocol:
        return _Counted(self, self._factory())

    def admit(self, transport: asyncio.BaseTransport) -> bool:
        """Take a new connection in, making room by evicting an idle one; False if refused."""
        peer = _peer_of(transport)
        refusal: Refusal | None = None
        if self._per_peer.get(peer, 0) >= self._max_per_peer:
            refusal = Refusal.PEER_LIMIT
        elif len(self._open) >= self._max_open and not self._evict_one():
            refusal = Refusal.ALL_BUSY
        if refusal is not None:
            CONNECTIONS_REFUSED.labels(refusal).inc()
            _abort(transport)
            return False
        self._open[transport] = Connection(transport, peer, time.monotonic())
        self._per_peer[peer] = self._per_peer.get(peer, 0) + 1
        OPEN_CONNECTIONS.inc()
        return True

    def release(self, transport: asyncio.BaseTransport) -> None:
        connection = self._open.pop(transport, None)
        if connection is None:
            return
        left = self._per_peer[connection.peer] - 1
        if left:
            self._per_peer[connection.peer] = left
        else:
            del self._per_peer[connection.peer]
        OPEN_CONNECTIONS.dec()

    @contextlib.contextmanager
    def serving(self, transport: asyncio.BaseTransport | None) -> Iterator[Connection | None]:
        """Mark a connection busy while one of its requests is served (and its answer written)."""
        connection = self._open.get(transport) if transport is not None else None
        if connection is None:
            yield None
            return
        connection.busy += 1
        try:
            yield connection
        finally:
            connection.busy -= 1
            connection.idle_since = time.monotonic()

    def _evict_one(self) -> bool:
        idle = [c for c in self._open.values() if not c.busy]
        if not idle:
            return False
        victim = min(idle, key=Connection.eviction_order)
        CONNECTIONS_CLOSED.labels(CloseReason.IDLE_EVICTED).inc()
        # Aborting calls connection_lost later; leave the slot now so the newcomer can take it.
        self.release(victim.transport)
        _abort(victim.transport)
        return True


def _abort(transport: asyncio.BaseTransport) -> None:
    if isinstance(transport, asyncio.WriteTransport):
        transport.abort()
    else:
        transport.close()


class _Counted(asyncio.Protocol):
    """Forwards every callback to the real protocol, unless the cap refused the connection."""

    def __init__(self, cap: ConnectionCap, inner: asyncio.Protocol) -> None:
        self._cap = cap
        self._inner = inner
        self._transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if not self._cap.admit(transport):
            return
        self._transport = transport
        self._inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is not None:
            self._cap.release(self._transport)
            self._transport = None
            self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._transport is not None:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._transport is not None else None

    def pause_writing(self) -> None:
        if self._transport is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._transport is not None:
            self._inner.resume_writing()
