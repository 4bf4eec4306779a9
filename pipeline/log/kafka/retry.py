"""Bounded retries of Kafka operations with the project's jittered backoff (`pipeline.backoff`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from pipeline.backoff import Backoff
from pipeline.config import LogSettings
from pipeline.log.api import (
    LogError,
    LogUnavailableError,
)
from pipeline.log.kafka.errors import ERRORS, RETRIES, UNREACHABLE_HINT, describe, is_transient, translate

logger = logging.getLogger(__name__)
T = TypeVar("T")


#: Upper bound for one backoff sleep between retries.
MAX_BACKOFF_S = 5.0


class Retrier:
    """Runs an operation with bounded retries and jittered exponential backoff on transient failures."""

    __slots__ = ("backoff_s", "retries", "timeout_s")

    def __init__(self, settings: LogSettings) -> None:
        self.retries = settings.connect_retries
        self.backoff_s = settings.retry_backoff_ms / 1000
        self.timeout_s = settings.request_timeout_ms * 1.5 / 1000

    @property
    def poll_s(self) -> float:
        """How long to wait before looking again at something that is not ready yet (one backoff step)."""
        return self.backoff_s

    def backoff(self) -> Backoff:
        """The pacing of one operation's retries: `retry_backoff_ms`, doubling, capped at `MAX_BACKOFF_S`."""
        return Backoff(self.backoff_s, max(self.backoff_s, MAX_BACKOFF_S))

    async def run(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        backoff = self.backoff()
        while True:
            try:
                async with asyncio.timeout(self.timeout_s):
                    return await call()
            except LogError:
                raise
            except Exception as exc:
                if not is_transient(exc):
                    raise translate(exc, what) from exc
                if backoff.attempt >= self.retries:
                    ERRORS.labels("unavailable").inc()
                    raise LogUnavailableError(
                        f"{what}: Kafka unavailable after {backoff.attempt + 1} attempts "
                        f"({describe(exc)}): {UNREACHABLE_HINT}"
                    ) from exc
                logger.debug("%s failed (%s), retry %d of %d", what, exc, backoff.attempt + 1, self.retries)
            RETRIES.labels(what.split(" ", 1)[0]).inc()
            await backoff.wait()
