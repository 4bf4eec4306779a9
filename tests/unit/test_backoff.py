"""Reconnect backoff: exponential, jittered, capped, resettable."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.backoff import Backoff


async def test_wait_sleeps_the_delay_it_returns() -> None:
    slept: list[float] = []

    async def sleep(delay_s: float) -> None:
        slept.append(delay_s)

    backoff = Backoff(1.0, 8.0, sleep=sleep, rng=random.Random(1))
    delays = [await backoff.wait() for _ in range(6)]
    assert slept == delays
    assert backoff.attempt == 6
    backoff.reset()
    assert backoff.attempt == 0
    assert 0.5 <= backoff.next_delay_s() <= 1.0


@given(
    initial_s=st.floats(0.001, 10),
    factor=st.floats(1, 1000),
    seed=st.integers(0, 2**32),
    steps=st.integers(1, 80),
)
def test_delays_double_within_jitter_and_never_exceed_the_cap(
    initial_s: float, factor: float, seed: int, steps: int
) -> None:
    max_s = initial_s * factor
    backoff = Backoff(initial_s, max_s, rng=random.Random(seed))
    for attempt in range(steps):
        ceiling = min(max_s, initial_s * 2.0**attempt)
        delay = backoff.next_delay_s()
        assert ceiling / 2 <= delay <= ceiling


def test_invalid_ranges_are_refused() -> None:
    with pytest.raises(ValueError, match="initial_s"):
        Backoff(0, 1)
    with pytest.raises(ValueError, match="initial_s"):
        Backoff(2, 1)
