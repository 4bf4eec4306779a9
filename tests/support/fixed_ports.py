"""A guard that fails any test binding a fixed port in the test process.

A test that listens on a fixed port (the service's own defaults 9444 and 9464 above all) fails
whenever something else holds it: a second xdist worker, or a user's `make run` still serving
while they run `make test`. Every test port must come from `tests.support.net.free_port` (which
hands out ports at or above its `LOWEST_PORT`) or be port 0; a bind below that range in the test
process raises `FixedPortError` naming the port. Subprocesses (the Kafka broker, sshd, a
`reverser run`) are given their ports by the tests, which take them from `free_port` too.
"""

from __future__ import annotations

import contextlib
import errno
import socket
from collections.abc import Iterator
from typing import Any

from tests.support.net import LOWEST_PORT

__all__ = ["FixedPortError", "forbid_fixed_ports"]


class FixedPortError(OSError):
    """A test tried to listen on a port that is not its own (take one from `free_port()`)."""

    def __init__(self, port: int) -> None:
        # As errno and strerror, so asyncio's create_server keeps the reason in its own message.
        super().__init__(
            errno.EACCES,
            f"a test bound the fixed port {port}: take a port from tests.support.net.free_port() "
            "or bind port 0, so the suite runs beside `make run` and other workers",
        )


def _port_of(address: Any) -> int | None:
    if isinstance(address, tuple) and len(address) >= 2 and isinstance(address[1], int):
        return address[1]
    return None


@contextlib.contextmanager
def forbid_fixed_ports() -> Iterator[None]:
    """Within the block, binding an IP socket to a port in 1..LOWEST_PORT-1 raises FixedPortError."""
    original = socket.socket.bind

    def guarded_bind(sock: socket.socket, address: Any) -> None:
        port = _port_of(address)
        if sock.family in (socket.AF_INET, socket.AF_INET6) and port is not None and 0 < port < LOWEST_PORT:
            raise FixedPortError(port)
        original(sock, address)

    socket.socket.bind = guarded_bind  # type: ignore[method-assign, assignment]
    try:
        yield
    finally:
        socket.socket.bind = original  # type: ignore[method-assign]
