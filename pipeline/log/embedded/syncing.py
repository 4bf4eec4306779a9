"""Group fsync: appends that arrive while one fsync runs share the next one, done in a thread.

An fsync costs milliseconds to tens of milliseconds whatever it covers. Done on the event loop for
every append, it stalled every other task (the ops endpoint, the watch streams) and capped the
ingress at one fsync per request. Here an append writes its records (`write(2)`, on the loop, so
offsets stay in order) and then waits for the *durable* point to pass its write: one flush at a
time runs in a worker thread, covering every partition written before it began; appends that come
in meanwhile wait for the next flush, which covers them all at once.

The rule that keeps "acknowledged means durable": a write is acknowledged only when a flush that
*began after it* returned without error. `GroupSync` owns that rule and nothing else; what a flush
does (which files, what counts as durable afterwards) is the caller's `begin` / `sync` / `end`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Collection
from typing import Any, Generic, TypeVar

from prometheus_client import Counter

__all__ = ["FSYNCS", "GroupSync", "in_thread"]

K = TypeVar("K")
J = TypeVar("J")
R = TypeVar("R")

FSYNCS = Counter(
    "reverser_log_embedded_group_fsyncs",
    "Group fsyncs of the embedded log (each covers every append written before it began).",
)


class GroupSync(Generic[K, J]):
    """Tickets for writes, and one flush at a time that makes every earlier ticket durable.

    `begin(keys)` runs on the loop and captures what to sync (the keys written since the last
    flush); `sync(job)` runs in a thread; `end(job, ok)` runs on the loop afterwards, whether the
    sync succeeded or raised `OSError` (which fails the waiters it covered, and their keys are
    synced again by the next flush).
    """

    __slots__ = ("_begin", "_dirty", "_end", "_flusher", "_sync", "_synced", "_waiters", "_written")

    def __init__(
        self,
        begin: Callable[[Collection[K]], J],
        sync: Callable[[J], None],
        end: Callable[[J, bool], None],
    ) -> None:
        self._begin = begin
        self._sync = sync
        self._end = end
        self._written = 0  # the ticket of the newest write
        self._synced = 0  # every ticket up to this one is durable
        self._dirty: set[K] = set()
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._flusher: asyncio.Task[None] | None = None

    def written(self, key: K) -> int:
        """Note a write to `key` (already handed to the OS); returns its ticket for `durable`."""
        self._written += 1
        self._dirty.add(key)
        return self._written

    async def durable(self, ticket: int) -> None:
        """Wait until a flush begun after write `ticket` succeeded; `OSError` if that flush failed."""
        if ticket <= self._synced:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append((ticket, waiter))
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush_all(), name="embedded-log-group-fsync")
        await waiter

    async def drain(self) -> None:
        """Wait for the flushes under way (before the files close)."""
        while self._flusher is not None:
            await asyncio.shield(self._flusher)

    async def _flush_all(self) -> None:
        try:
            while self._waiters:
                target, keys = self._written, self._dirty
                self._dirty = set()
                failure: OSError | None = None
                job: J | None = None
                try:
                    job = self._begin(keys)
                    await asyncio.to_thread(self._sync, job)
                except OSError as exc:
                    failure = exc
                    self._dirty |= keys
                finally:
                    if job is not None:
                        self._end(job, failure is None)
                FSYNCS.inc()
                if failure is None:
                    self._synced = target
                self._settle(target, failure)
        except BaseException:
            # Cancelled (the loop is closing) or a bug: no waiter may hang or be told "durable".
            self._settle(self._written, OSError(0, "the group fsync stopped"))
            raise
        finally:
            self._flusher = None

    def _settle(self, target: int, failure: OSError | None) -> None:
        """Answer every waiter the flush up to `target` covered: done, or the flush's error."""
        waiting: list[tuple[int, asyncio.Future[None]]] = []
        for ticket, waiter in self._waiters:
            if ticket > target:
                waiting.append((ticket, waiter))
            elif not waiter.done():
                if failure is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(OSError(failure.errno, failure.strerror))
        self._waiters = waiting


async def in_thread(work: Callable[..., R], *args: Any) -> R:
    """`work(*args)` in a worker thread, off the loop; a cancelled caller still waits for it.

    A thread cannot be stopped: returning early would let the next writer of the same file (a
    transaction intent, a group's offsets) start while this one still writes.
    """
    step = asyncio.ensure_future(asyncio.to_thread(work, *args))
    try:
        return await asyncio.shield(step)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await step
        raise
