"""Lag monitor: one evaluation over 1,000 groups x 50 partitions, and the memory its state holds.

Baselines, measured in the same run: a plain loop computing offset lag only (no history, no
status) for time, and the memory of one poll's offsets (the input every monitor must hold) for
memory. The evaluated state is warmed with several polls so windows are full, and histories are
filled to their configured capacity before memory is measured.
"""

from __future__ import annotations

import gc
import random
import statistics
import time
import tracemalloc
from collections.abc import Callable

from pipeline.config import LagSettings
from pipeline.lag.evaluator import LagEvaluator
from pipeline.log.api import TopicPartition

GROUPS = 1000
PARTITIONS = 50
POLL_MS = 30_000
WARM_POLLS = 12
REPEATS = 3

Offsets = dict[TopicPartition, int]


def _inputs(seed: int = 7) -> tuple[dict[str, Offsets], Offsets, Offsets]:
    rng = random.Random(seed)
    committed: dict[str, Offsets] = {}
    starts: Offsets = {}
    ends: Offsets = {}
    for g in range(GROUPS):
        offsets: Offsets = {}
        for p in range(PARTITIONS):
            tp = TopicPartition(f"topic-{g:04d}", p)
            end = rng.randrange(10_000, 1_000_000)
            starts[tp] = end // 2
            ends[tp] = end
            offsets[tp] = end - rng.randrange(0, 500)
        committed[f"group-{g:04d}"] = offsets
    return committed, starts, ends


def _advance(committed: dict[str, Offsets], ends: Offsets, rng: random.Random) -> None:
    for tp in ends:
        ends[tp] += rng.randrange(0, 200)
    for offsets in committed.values():
        for tp in offsets:
            offsets[tp] = min(ends[tp], offsets[tp] + rng.randrange(0, 200))


def lag_only(committed: dict[str, Offsets], ends: Offsets) -> int:
    """The baseline: offset lag of every partition, nothing kept."""
    total = 0
    for offsets in committed.values():
        for tp, offset in offsets.items():
            total += max(0, ends[tp] - offset)
    return total


def _best_of(fn: Callable[[], object]) -> float:
    times = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    settings = LagSettings()
    committed, starts, ends = _inputs()
    rng = random.Random(11)
    partitions = GROUPS * PARTITIONS

    baseline_s = _best_of(lambda: lag_only(committed, ends))

    evaluator = LagEvaluator(settings)
    now = 0
    for _ in range(WARM_POLLS):
        now += POLL_MS
        _advance(committed, ends, rng)
        evaluator.observe(committed, starts, ends, now)

    def one_evaluation() -> None:
        nonlocal now
        now += POLL_MS
        evaluator.observe(committed, starts, ends, now)

    evaluation_s = _best_of(one_evaluation)
    print(f"groups x partitions        : {GROUPS} x {PARTITIONS} = {partitions}")
    print(f"baseline (lag-only loop)   : {baseline_s * 1000:.1f} ms")
    print(
        f"one evaluation             : {evaluation_s * 1000:.1f} ms "
        f"= {evaluation_s / baseline_s:.1f} x baseline "
        f"({evaluation_s / partitions * 1e6:.2f} us per partition, "
        f"{evaluation_s / (settings.poll_interval_s) * 100:.2f} % of a {settings.poll_interval_s:.0f} s poll)"
    )

    del evaluator
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    snapshot_input = _inputs(seed=3)
    after_input = tracemalloc.take_snapshot()
    input_bytes = sum(s.size_diff for s in after_input.compare_to(before, "filename"))

    committed2, starts2, ends2 = snapshot_input
    gc.collect()
    base = tracemalloc.take_snapshot()
    evaluator = LagEvaluator(settings)
    now = 0
    for _ in range(settings.window + 1):
        now += POLL_MS
        _advance(committed2, ends2, rng)
        evaluator.observe(committed2, starts2, ends2, now)
    t = now
    while evaluator.histories.points(next(iter(ends2))) < settings.history_points:
        _advance(committed2, ends2, rng)
        t += POLL_MS
        evaluator.histories.record(ends2, t)
    gc.collect()
    held = tracemalloc.take_snapshot()
    tracemalloc.stop()
    state_bytes = sum(
        s.size_diff for s in held.compare_to(base, "filename") if "pipeline/lag" in str(s.traceback)
    )
    print(f"baseline (one poll's offsets held in dicts): {input_bytes / 2**20:.1f} MiB")
    print(
        f"state held (windows of {settings.window} + histories of {settings.history_points} points): "
        f"{state_bytes / 2**20:.1f} MiB = {state_bytes / input_bytes:.1f} x baseline "
        f"({state_bytes / partitions:.0f} bytes per group partition)"
    )


if __name__ == "__main__":
    main()
