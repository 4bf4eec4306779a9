"""Time slices for CPU work on the event loop: give the loop back at least every `slice_ms`.

Decoding, sanitizing, hashing and encoding a snapshot is pure CPU. Done in one go it held the loop
for seconds on a 100k-object collection, so `/healthz` went unanswered and a kubelet would have
restarted the pod mid-sync. Threads would not help much (the work holds the GIL); yielding does:
the watch stream calls `tick()` after every object and awaits the yield it returns when the slice
is used up. An `await` that never suspends (an append that needs no I/O, a queue that is never
empty) does not give the loop back, which is why the check is on the clock and not on awaits.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Final

__all__ = ["DEFAULT_SLICE_MS", "Slicer"]

#: Half the 50 ms the issue allows a stall: the slice is checked between objects, and one large
#: object can run past it.
DEFAULT_SLICE_MS: Final = 20.0


class Slicer:
    """Tells CPU-bound loops when to yield: `if slicer.due(): await slicer.pause()`."""

    __slots__ = ("_clock", "_deadline", "_slice_s")

    def __init__(
        self, slice_ms: float = DEFAULT_SLICE_MS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._slice_s = slice_ms / 1000
        self._clock = clock
        self._deadline = clock() + self._slice_s

    def due(self) -> bool:
        """Whether the current slice is used up."""
        return self._clock() >= self._deadline

    async def pause(self) -> None:
        """Let every other ready task run once, then start a new slice."""
        await asyncio.sleep(0)
        self._deadline = self._clock() + self._slice_s
