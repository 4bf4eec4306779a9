"""The chaos suite's cuttable network path (tests/chaos/netcut.py) against a real echo server."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest

from tests.chaos.netcut import Relays
from tests.support.wait import wait_for


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(1024):
            self.request.sendall(data)


@pytest.fixture
def echo() -> Iterator[int]:
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo) as server:
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        yield server.server_address[1]
        server.shutdown()


async def test_a_cut_path_holds_the_request_until_it_is_restored(echo: int) -> None:
    relays = Relays([(echo, echo)])
    relays.start()
    try:
        path = relays.paths[0]
        with socket.create_connection(("127.0.0.1", path.ports[0]), timeout=10) as conn:
            conn.sendall(b"before")
            assert conn.recv(1024) == b"before"
            await wait_for(lambda: not path.holding_request, what="the answer to clear the hold")
            path.cut()
            path.request_sent.clear()
            conn.sendall(b"during")
            await wait_for(lambda: path.holding_request, what="the request to be held")
            assert path.request_sent.is_set(), "a fault waiting for the next request sees it"
            # cut: nothing comes back (a bounded look, which can only pass wrongly, never fail wrongly)
            conn.settimeout(0.5)
            with pytest.raises(TimeoutError):
                conn.recv(1024)
            path.restore()
            conn.settimeout(10)
            assert conn.recv(1024) == b"during"
            await wait_for(lambda: not path.holding_request, what="the answer to clear the hold")
    finally:
        relays.stop()
