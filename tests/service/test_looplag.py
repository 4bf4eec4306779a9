"""The loop-lag metrics: a stall of the event loop shows up, and the window keeps the recent maximum."""

from __future__ import annotations

import asyncio
import contextlib
import time

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from pipeline.service.looplag import LagWindow, watch_loop_lag


@given(
    st.lists(
        st.tuples(st.floats(min_value=0, max_value=30), st.floats(min_value=0, max_value=5)), max_size=60
    )
)
def test_the_window_maximum_is_the_largest_lag_of_the_last_window(steps: list[tuple[float, float]]) -> None:
    """Model: the maximum over every observation no older than the window."""
    window = LagWindow(window_s=60.0)
    now = 0.0
    seen: list[tuple[float, float]] = []
    for gap, lag in steps:
        now += gap
        window.observe(now, lag)
        seen.append((now, lag))
        recent = [value for at, value in seen if at >= now - 60.0]
        assert window.maximum(now) == max(recent)
    assert window.maximum(now + 61.0) == 0.0


async def test_a_blocked_loop_is_reported_as_lag() -> None:
    window = LagWindow()
    task = asyncio.create_task(watch_loop_lag(0.01, window=window))
    try:
        await asyncio.sleep(0.05)
        time.sleep(0.3)  # noqa: ASYNC251 - holds the loop on purpose, as a whole-collection snapshot did
        await asyncio.sleep(0.05)
        assert window.maximum(time.monotonic()) >= 0.25
        assert (REGISTRY.get_sample_value("reverser_event_loop_lag_max_seconds") or 0.0) >= 0.25
        assert (REGISTRY.get_sample_value("reverser_event_loop_lag_seconds_bucket", {"le": "0.25"}) or 0) < (
            REGISTRY.get_sample_value("reverser_event_loop_lag_seconds_count") or 0
        )
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_loop_held_by_cpu_work_is_told_apart_from_one_the_machine_did_not_run() -> None:
    """Both stall the ticker; only the task that computes shows as CPU time held."""
    lag, held = LagWindow(), LagWindow()
    task = asyncio.create_task(watch_loop_lag(0.01, window=lag, held_window=held))
    try:
        await asyncio.sleep(0.05)
        time.sleep(0.3)  # noqa: ASYNC251 - the loop's thread waits without CPU, as when not scheduled
        await asyncio.sleep(0.05)
        assert lag.maximum(time.monotonic()) >= 0.25
        assert held.maximum(time.monotonic()) < 0.1
        busy_until = time.thread_time() + 0.3
        while time.thread_time() < busy_until:  # holds the loop with CPU work, as a big chunk did
            pass
        await asyncio.sleep(0.05)
        assert held.maximum(time.monotonic()) >= 0.25
        assert (REGISTRY.get_sample_value("reverser_event_loop_held_max_seconds") or 0.0) >= 0.25
        assert (REGISTRY.get_sample_value("reverser_event_loop_held_seconds_bucket", {"le": "0.25"}) or 0) < (
            REGISTRY.get_sample_value("reverser_event_loop_held_seconds_count") or 0
        )
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
