"""Starting and stopping aiokafka clients: TLS material, bootstrap failures, producers that never drain."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Awaitable
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka import errors as kafka_errors
from aiokafka.admin import AIOKafkaAdminClient

from pipeline.config import Compression, TlsSettings
from pipeline.log.api import (
    LogError,
)
from pipeline.log.kafka.errors import ERRORS

#: Every consumer reads committed data only: records of open or aborted transactions stay hidden.
ISOLATION_LEVEL = "read_committed"


def compression_type(compression: Compression) -> str | None:
    """aiokafka's `compression_type` for the configured codec (`None` is its "no compression").

    lz4, snappy and zstd need `cramjam` (a dependency); aiokafka refuses to build a producer
    without it, so a missing codec fails at start rather than on the first batch.
    """
    return None if compression is Compression.NONE else compression.value


def ssl_context(tls: TlsSettings) -> ssl.SSLContext:
    """Client TLS from the settings: system CAs unless `ca_file`, mutual TLS when a cert is set."""
    try:
        context = ssl.create_default_context(cafile=str(tls.ca_file) if tls.ca_file else None)
        if tls.cert_file is not None:
            context.load_cert_chain(
                str(tls.cert_file), str(tls.key_file) if tls.key_file is not None else None
            )
    except (OSError, ssl.SSLError) as exc:
        raise LogError(f"log.tls: cannot load TLS material: {exc}") from exc
    context.check_hostname = tls.check_hostname
    return context


AIOKAFKA_LOGGER = logging.getLogger("aiokafka")
_AUTH_ERRORS = (
    kafka_errors.AuthenticationFailedError,
    kafka_errors.AuthenticationMethodNotSupported,
    kafka_errors.UnsupportedSaslMechanismError,
    kafka_errors.IllegalSaslStateError,
    kafka_errors.SaslAuthenticationFailed,
)


class BootstrapFailures(logging.Handler):
    """Collects why aiokafka could not bootstrap: it logs the cause, then raises a bare error.

    A refused connection is worth retrying; a certificate the client does not trust or rejected
    credentials are configuration errors that retrying cannot fix, so they fail at once.
    """

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.last: BaseException | None = None
        self.fatal: BaseException | None = None

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        cause = args[-1] if args else None
        if not isinstance(cause, BaseException):
            return
        self.last = cause
        if isinstance(cause, (ssl.SSLError, *_AUTH_ERRORS)):
            self.fatal = cause

    def raise_fatal(self, where: str, exc: BaseException) -> None:
        if self.fatal is None:
            return
        ERRORS.labels("configuration").inc()
        kind = "TLS handshake failed" if isinstance(self.fatal, ssl.SSLError) else "authentication failed"
        raise LogError(f"{where}: {kind}: {self.fatal} (check log.tls / log.sasl)") from exc


async def bounded(operation: Awaitable[Any], timeout_s: float) -> None:
    async with asyncio.timeout(timeout_s):
        await operation


def outcome_error(future: asyncio.Future[Any]) -> BaseException | None:
    if future.cancelled():
        return asyncio.CancelledError()
    return future.exception()


def consume_outcome(future: asyncio.Future[Any]) -> None:
    """Retrieve the late outcome of an abandoned send, so asyncio does not log it as unhandled."""
    if not future.cancelled():
        future.exception()


async def discard_producer(producer: AIOKafkaProducer, grace_s: float = 1.0) -> None:
    """Stop a producer whose batches may never be acknowledged.

    `stop()` waits for in-flight batches, which an idempotent aiokafka producer retries forever;
    after `grace_s` its sender task is cancelled, which lets `stop()` close the connections.
    """
    stopping = asyncio.ensure_future(stop_client(producer))
    _, pending = await asyncio.wait({stopping}, timeout=grace_s)
    if pending:
        sender = getattr(getattr(producer, "_sender", None), "sender_task", None)
        if sender is not None:
            sender.cancel()
    with contextlib.suppress(Exception):
        async with asyncio.timeout(grace_s * 5):
            await stopping


async def start_client(client: Any) -> None:
    await client.start()


async def stop_client(client: Any) -> None:
    """Stop an aiokafka client; its own cancelled background tasks must not cancel the caller.

    aiokafka 0.14's consumer `stop()` awaits a background task it has just cancelled, and the
    CancelledError escapes; it is swallowed here unless this task itself is being cancelled.
    """
    try:
        if isinstance(client, AIOKafkaAdminClient):
            await client.close()
        else:
            await client.stop()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
