"""Time slices on the event loop (pipeline/slices.py), on a clock the test moves by hand."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.slices import Slicer, Steps, finish


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_the_slicer_is_due_once_its_slice_is_used_and_pausing_lets_others_run() -> None:
    clock = _Clock()
    slicer = Slicer(20.0, clock)
    assert not slicer.due()
    clock.now = 0.019
    assert not slicer.due()
    clock.now = 0.020
    assert slicer.due()
    ran: list[str] = []

    async def other() -> None:
        ran.append("other")

    task = asyncio.create_task(other())
    await slicer.pause()
    assert ran == ["other"]
    assert not slicer.due()  # a new slice from the pause
    clock.now = 0.040
    assert slicer.due()
    await task


@given(st.lists(st.floats(min_value=0, max_value=10), max_size=40))
def test_slices_are_counted_from_each_pause(gaps_ms: list[float]) -> None:
    """Model: due exactly when at least `slice_ms` passed since the last pause (or the start)."""
    clock = _Clock()
    slicer = Slicer(5.0, clock)
    started = 0.0

    async def run() -> None:
        nonlocal started
        for gap in gaps_ms:
            clock.now += gap / 1000
            assert slicer.due() == (clock.now >= started + 0.005)
            if slicer.due():
                await slicer.pause()
                started = clock.now

    asyncio.run(run())


def _counted(clock: _Clock, steps: int, step_s: float, done: list[int]) -> Steps[str]:
    """`steps` steps of `step_s` each on `clock`; notes each step in `done`, returns a result."""
    for n in range(steps):
        clock.now += step_s
        done.append(n)
        yield
    return f"{steps} steps"


async def test_drive_returns_the_result_and_lets_others_run_once_per_used_slice() -> None:
    clock = _Clock()
    slicer = Slicer(20.0, clock)
    done: list[int] = []
    seen: list[int] = []

    async def other() -> None:
        while True:
            seen.append(len(done))
            await asyncio.sleep(0)

    task = asyncio.create_task(other())
    # ten steps of 10 ms: the slice is used up after every second step (and the last one returns)
    assert await slicer.drive(_counted(clock, 10, 0.010, done)) == "10 steps"
    task.cancel()
    assert done == list(range(10))
    assert seen == [2, 4, 6, 8]


async def test_drive_does_not_pause_within_a_slice() -> None:
    clock = _Clock()
    slicer = Slicer(20.0, clock)
    seen: list[str] = []

    async def other() -> None:
        seen.append("other")

    task = asyncio.create_task(other())
    assert await slicer.drive(_counted(clock, 3, 0.001, [])) == "3 steps"
    assert seen == []
    await task


def test_finish_runs_every_step_in_one_go() -> None:
    done: list[int] = []
    assert finish(_counted(_Clock(), 4, 1.0, done)) == "4 steps"
    assert done == [0, 1, 2, 3]


async def test_an_error_in_a_step_reaches_the_caller_of_drive() -> None:
    def failing() -> Steps[None]:
        yield
        raise ValueError("step 2")

    with pytest.raises(ValueError, match="step 2"):
        await Slicer().drive(failing())
