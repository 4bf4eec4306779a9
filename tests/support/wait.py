"""Polling until something the system does in the background has happened."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable

__all__ = ["run_ready_tasks", "wait_for"]


async def wait_for(
    predicate: Callable[[], object | Awaitable[object]],
    what: str,
    *,
    timeout_s: float = 15.0,
    interval_s: float = 0.02,
) -> None:
    """Poll `predicate` (sync, or returning an awaitable) until truthy.

    The timeout only bounds a hung test; it is not a timing assertion.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        await asyncio.sleep(interval_s)


async def run_ready_tasks(rounds: int = 5) -> None:
    """Let every task that is ready run until it blocks again: a scheduler step, not a wait.

    For in-memory code (no I/O, no timer due) the event loop runs ready tasks in a fixed order,
    so what they have done after these rounds is the same on every run and every machine; use
    it to check that a task has *not* finished after what should have woken it was handled.
    Anything that waits for I/O or time needs `wait_for` instead.
    """
    for _ in range(rounds):
        await asyncio.sleep(0)
