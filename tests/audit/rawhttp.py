"""HTTP/1.1 by hand over asyncio streams: for what aiohttp's client will not do on purpose.

Hostile-client tests need exact control: a connection from a chosen loopback address, a request
sent in pieces, a connection kept open without sending anything, raw header bytes, and a way to
tell whether the server closed the connection after answering.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from typing import NamedTuple

__all__ = ["Answer", "RawConnection", "connect", "request_head"]

PATH = "/audit-webhook/default"


class Answer(NamedTuple):
    status: int
    headers: dict[str, str]
    text: str


def request_head(
    length: int | None, headers: dict[str, str] | None = None, *, path: str = PATH, chunked: bool = False
) -> bytes:
    """A POST's request line and headers (keep-alive; a `Content-Length` unless `length` is None)."""
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    if chunked:
        lines.append("Transfer-Encoding: chunked")
    lines.extend(f"{name}: {value}" for name, value in (headers or {}).items())
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


class RawConnection:
    """One client connection to the ingress."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def post(self, body: bytes, headers: dict[str, str] | None = None) -> Answer:
        await self.send(request_head(len(body), headers) + body)
        return await self.answer()

    async def answer(self) -> Answer:
        """The next response on the connection (its body by Content-Length)."""
        head = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), 30)
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        headers: dict[str, str] = {}
        for line in header_lines:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        body = await asyncio.wait_for(self.reader.readexactly(int(headers.get("content-length", "0"))), 30)
        return Answer(int(status_line.split()[1]), headers, body.decode())

    async def closed_by_server(self) -> bool:
        """Whether the server ends the connection (EOF or reset) rather than sending more."""
        try:
            return await asyncio.wait_for(self.reader.read(1), 30) == b""
        except (ConnectionResetError, ssl.SSLError):
            return True

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            await self.writer.wait_closed()


async def connect(
    port: int, *, source: str = "127.0.0.1", ssl_context: ssl.SSLContext | None = None
) -> RawConnection:
    """A connection to the ingress on 127.0.0.1 from `source`, another loopback address (a peer)."""
    reader, writer = await asyncio.open_connection(
        "127.0.0.1",
        port,
        local_addr=(source, 0),
        ssl=ssl_context,
        server_hostname="127.0.0.1" if ssl_context is not None else None,
    )
    return RawConnection(reader, writer)
