"""Riding out a log outage: repeat one operation on the log until it succeeds.

A stage must outlive a broker that is away for a while: its fetch, or the write it cannot skip,
is retried with the project's jittered backoff (`pipeline.backoff`) and every failure is logged
with the wait before the next try, under the caller's logger so the line names the stage.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from pipeline.backoff import Backoff
from pipeline.log.api import LogError

__all__ = ["until_done"]

T = TypeVar("T")


async def until_done(
    call: Callable[[], Awaitable[T]], backoff: Backoff, logger: logging.Logger, what: str
) -> T:
    """`await call()` until it returns; each `LogError` is logged ("`what` failed") and retried after
    `backoff`'s next delay, and `backoff` is reset once the call succeeds (a stage reading in a
    loop passes the same one every time, so a broker that keeps failing is asked ever less often).
    Anything other than a `LogError` propagates at once, as does cancellation.
    """
    while True:
        try:
            result = await call()
        except LogError as exc:
            delay_s = backoff.next_delay_s()
            logger.warning("%s failed, retrying in %.1f s: %s", what, delay_s, exc)
            await asyncio.sleep(delay_s)
            continue
        backoff.reset()
        return result
