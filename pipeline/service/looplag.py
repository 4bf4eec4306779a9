"""How long the event loop was held: `reverser_event_loop_lag_seconds` and its recent maximum.

Everything the process serves (`/healthz`, `/readyz`, `/metrics`, the audit ingress, every watch
stream) shares one event loop, so one task holding it delays all of them. A ticker sleeps
`interval_s` and measures how late it woke; the lateness is the stall it waited behind. The
histogram shows how often the loop stalls; the gauge is the longest stall of the last
`window_s`, so a dashboard or an alert sees a stall between two scrapes.

A stall in wall time also counts the time the machine ran other processes instead of this one.
The ticker therefore also measures the CPU time the loop's thread used between two ticks
(`reverser_event_loop_held_seconds`): the task steps the timer waited behind, often several
in one loop iteration. A long stall with little CPU held was the machine, not the process; no
single step was longer than the CPU held (asyncio's debug mode names the steps themselves).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Final

from prometheus_client import Gauge, Histogram

__all__ = ["LOOP_HELD", "LOOP_HELD_MAX", "LOOP_LAG", "LOOP_LAG_MAX", "LagWindow", "watch_loop_lag"]

#: How often the ticker wakes: finer costs CPU, coarser misses short stalls.
TICK_S: Final = 0.025
WINDOW_S: Final = 60.0

LOOP_LAG = Histogram(
    "reverser_event_loop_lag_seconds",
    "How late the event loop ran a timer (the stall it waited behind), observed every 25 ms",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)
LOOP_LAG_MAX = Gauge(
    "reverser_event_loop_lag_max_seconds",
    "Longest event loop stall in the last 60 s (0 when idle)",
)
LOOP_HELD = Histogram(
    "reverser_event_loop_held_seconds",
    "CPU time the event loop's thread used between two 25 ms ticks (the task steps a timer waited behind)",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
LOOP_HELD_MAX = Gauge(
    "reverser_event_loop_held_max_seconds",
    "Most CPU time the event loop's thread used between two ticks in the last 60 s",
)


class LagWindow:
    """The maximum of the lags observed in the last `window_s` (kept as a monotonic deque)."""

    __slots__ = ("_entries", "_window_s")

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self._window_s = window_s
        self._entries: deque[tuple[float, float]] = deque()  # (at, lag), lags decreasing

    def observe(self, at: float, lag_s: float) -> None:
        entries = self._entries
        while entries and entries[-1][1] <= lag_s:
            entries.pop()
        entries.append((at, lag_s))

    def maximum(self, now: float) -> float:
        entries = self._entries
        while entries and entries[0][0] < now - self._window_s:
            entries.popleft()
        return entries[0][1] if entries else 0.0


async def watch_loop_lag(
    interval_s: float = TICK_S,
    clock: Callable[[], float] = time.monotonic,
    window: LagWindow | None = None,
    held_window: LagWindow | None = None,
    cpu_clock: Callable[[], float] = time.thread_time,
) -> None:
    """Run until cancelled: observe every tick's lateness, and the loop thread's CPU time since
    the tick before, into the metrics."""
    window = window if window is not None else LagWindow()
    held_window = held_window if held_window is not None else LagWindow()
    while True:
        before, cpu_before = clock(), cpu_clock()
        await asyncio.sleep(interval_s)
        now, held_s = clock(), cpu_clock() - cpu_before
        lag_s = max(now - before - interval_s, 0.0)
        LOOP_LAG.observe(lag_s)
        window.observe(now, lag_s)
        LOOP_LAG_MAX.set(window.maximum(now))
        LOOP_HELD.observe(held_s)
        held_window.observe(now, held_s)
        LOOP_HELD_MAX.set(held_window.maximum(now))
