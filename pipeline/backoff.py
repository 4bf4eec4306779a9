"""The one retry pacing of the project: exponential, jittered, capped.

Every loop that retries after a failure (watch streams reconnecting, Kafka requests, pushes to a
Git remote, the router re-joining its group) waits through a `Backoff`. A fixed short retry
interval is what turned one failing namespace into 595 resyncs in 16 s upstream; growing delays
with jitter keep a broken dependency cheap and spread the retries of many workers over time.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

__all__ = ["LOG_RETRY_INITIAL_S", "LOG_RETRY_MAX_S", "Backoff", "Sleep", "log_retry"]

#: Retries against the log (a failed fetch, append, transaction or group join): 0.2 s at first,
#: doubling to at most 5 s, so a blip costs a fraction of a second and an outage little CPU.
LOG_RETRY_INITIAL_S = 0.2
LOG_RETRY_MAX_S = 5.0

Sleep = Callable[[float], Awaitable[None]]


class Backoff:
    """Delays `initial_s * 2**n`, each drawn uniformly from its upper half, never above `max_s`."""

    __slots__ = ("_attempt", "_rng", "_sleep", "initial_s", "max_s")

    def __init__(
        self,
        initial_s: float,
        max_s: float,
        *,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        if initial_s <= 0 or max_s < initial_s:
            raise ValueError("backoff needs 0 < initial_s <= max_s")
        self.initial_s = initial_s
        self.max_s = max_s
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._attempt = 0

    @property
    def attempt(self) -> int:
        """Failures since the last reset."""
        return self._attempt

    def next_delay_s(self) -> float:
        """The delay before the next attempt; advances the exponent."""
        ceiling = min(self.max_s, self.initial_s * (2.0 ** min(self._attempt, 62)))
        self._attempt += 1
        return self._rng.uniform(ceiling / 2.0, ceiling)

    async def wait(self) -> float:
        """Sleep the next delay and return it."""
        delay_s = self.next_delay_s()
        await self._sleep(delay_s)
        return delay_s

    def reset(self) -> None:
        """Back to the initial delay, after a stream was healthy again."""
        self._attempt = 0


def log_retry() -> Backoff:
    """A fresh pacing for retrying an operation on the log (`LOG_RETRY_INITIAL_S` .. `LOG_RETRY_MAX_S`)."""
    return Backoff(LOG_RETRY_INITIAL_S, LOG_RETRY_MAX_S)
