"""Time slices for CPU work on the event loop: give the loop back at least every `slice_ms`.

Decoding, sanitizing, hashing and encoding a snapshot is pure CPU, and so is planning, applying
and indexing its commit. Done in one go it held the loop for seconds on a large collection, so
`/healthz` went unanswered and a kubelet would have restarted the pod mid-sync. Threads would not
help much (the work holds the GIL); yielding does. Two ways to use it:

- a loop that awaits anyway checks `if slicer.due(): await slicer.pause()` after every object
  (the watch stream);
- pure work written as `Steps` (a generator that yields between its steps and returns its
  result) stays free of I/O and of the event loop: `await slicer.drive(steps)` runs it on the
  loop in slices, `finish(steps)` runs it in one go where nothing else waits (tests, a CLI).

An `await` that never suspends (an append that needs no I/O, a queue that is never empty) does
not give the loop back, which is why the check is on the clock and not on awaits.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Generator
from typing import Final, TypeAlias, TypeVar

__all__ = ["DEFAULT_SLICE_MS", "Slicer", "Steps", "finish"]

T = TypeVar("T")

#: Work cut into steps: yields (None) between two steps, returns its result at the end.
Steps: TypeAlias = Generator[None, None, T]

#: Half the 50 ms the issue allows a stall: the slice is checked between steps, and one large
#: step (a large object) can run past it.
DEFAULT_SLICE_MS: Final = 20.0


def finish(steps: Steps[T]) -> T:
    """Run `steps` to the end in one go and return its result."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


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

    async def drive(self, steps: Steps[T]) -> T:
        """Run `steps` to the end on the loop, pausing whenever a slice is used up; its result.

        The slice is not restarted on entry: work the caller did just before counts against it.
        """
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            if self.due():
                await self.pause()
