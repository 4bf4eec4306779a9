"""The client-side request throttle of one cluster: a token bucket (`qps`, `burst`).

A watch stage that re-lists hundreds of types after a restart, or rediscovers a cluster with many
CRDs, can send the API server more requests at once than its owner wants from one client.
gitops-reverser's ClusterProvider `qps`/`burst` bound that the way client-go does: `burst` requests
may go at once, then one every `1/qps` seconds. The bucket's arithmetic is pure (`TokenBucket`, a
clock passed in), so it is tested without waiting; `Throttle` is the small async edge that sleeps.

A long WATCH holds its token only to start: the bucket limits how often requests begin, not how
many are open, as in client-go.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

__all__ = ["Throttle", "TokenBucket"]


@dataclass(slots=True)
class TokenBucket:
    """`burst` tokens, refilled at `rate_per_s`; a request takes one, waiting when none is left.

    Reservations may drive the count below zero: each waiter is told how long until *its* token
    exists, so concurrent callers are spaced `1/rate_per_s` apart instead of all waking at once.
    """

    rate_per_s: float
    burst: int
    _tokens: float = 0.0
    _stamp_s: float | None = None

    def __post_init__(self) -> None:
        if self.rate_per_s <= 0:
            raise ValueError(f"rate_per_s must be > 0, not {self.rate_per_s}")
        if self.burst < 1:
            raise ValueError(f"burst must be >= 1, not {self.burst}")

    def reserve(self, now_s: float) -> float:
        """Take one token at monotonic time `now_s`; returns the seconds to wait before sending."""
        if self._stamp_s is None:
            self._tokens = float(self.burst)
        else:
            elapsed_s = max(0.0, now_s - self._stamp_s)
            self._tokens = min(float(self.burst), self._tokens + elapsed_s * self.rate_per_s)
        self._stamp_s = now_s
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate_per_s


class Throttle:
    """Waits for a `TokenBucket` token before each request (the clock and sleep are injectable)."""

    def __init__(
        self,
        bucket: TokenBucket,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.bucket = bucket
        self._clock = clock
        self._sleep = sleep

    @classmethod
    def of(cls, qps: float | None, burst: int | None) -> Throttle | None:
        """The throttle of a cluster's `qps` and `burst`; None when it has no `qps` (unthrottled)."""
        if qps is None or burst is None:
            return None
        return cls(TokenBucket(qps, burst))

    async def acquire(self) -> None:
        wait_s = self.bucket.reserve(self._clock())
        if wait_s > 0:
            await self._sleep(wait_s)
