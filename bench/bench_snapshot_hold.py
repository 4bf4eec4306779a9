"""The event loop while the commit worker applies a large first snapshot (issue 32).

A `BranchWorker` on a real local bare remote receives a first snapshot of N ConfigMaps (1 KiB of
data each, chunks of 500) and applies it: plan, tree, commit, index, object-state records. While
it does, a task on the same loop measures every gap between two of its turns (the loop hold; the
longest garbage collection is given too, as it stops the loop whatever the worker does), and a
thread asks `/healthz` of the real ops server (`pipeline/service/ops.py`, its own thread, fed by a
publisher task on the main loop as in `reverser run`) back to back. With `stall_fail_s` at
1 s, /healthz answers 503 while the main loop has not run for a second.

Baselines, in the same run: the same apply with slicing off (`slice_ms` = infinity, what the
worker did before it ran that work in slices), and sliced but without the garbage collector
policy (`pipeline.gcpolicy.long_lived` made a no-op: the home index stays in every full
collection's walk). The figures are the worst hold, the longest collection (and how many full
ones ran) and the apply time of each, as ratios; the worst /healthz answer and its 503s.
`REVERSER_BENCH_SNAPSHOT_OBJECTS` sets N (default 20000).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import http.client
import math
import os
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from unittest.mock import patch

from pipeline import gcpolicy
from pipeline.codec.object_state import ObjectState
from pipeline.commit.branch import BranchWorker
from pipeline.commit.git.repo import LocalRepo
from pipeline.commit.ports import BranchPorts
from pipeline.config import ProviderSettings, Settings, TargetSettings
from pipeline.log.api import PendingRecord
from pipeline.service.ops import PUBLISH_INTERVAL_S, HealthSnapshot, OpsServer
from pipeline.slices import DEFAULT_SLICE_MS
from tests.commit.helpers import Work, bare_remote, cm

OBJECTS = int(os.environ.get("REVERSER_BENCH_SNAPSHOT_OBJECTS", "20000"))
STALL_FAIL_S = 1.0
DATA = "x" * 1024


@dataclass(frozen=True, slots=True)
class Figures:
    apply_s: float
    worst_hold_s: float
    health_worst_s: float
    health_answers: int
    health_503: int
    worst_gc_s: float
    full_collections: int


def _health(port: int) -> tuple[float, int]:
    started = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    connection.request("GET", "/healthz")
    response = connection.getresponse()
    response.read()
    connection.close()
    return time.perf_counter() - started, response.status


async def _apply(root: Path, slice_ms: float) -> Figures:
    remote = bare_remote(root / "remote.git")
    provider = ProviderSettings(name="git", url=str(remote), commit_window_s=0, push_cooldown_s=10_000)
    settings = Settings(
        workdir=root / "work",
        providers=[provider],
        targets=[TargetSettings(name="t1", provider="git", path="live")],
    )
    states: list[PendingRecord] = []

    async def no_state(_targets: frozenset[str]) -> list[ObjectState]:
        return []

    repo = LocalRepo.for_branch(root / "clones", "git", "main", str(remote), None)
    worker = BranchWorker(
        settings,
        provider,
        "main",
        repo,
        lambda _offsets: None,
        BranchPorts(load_state=no_state, on_state=states.extend, slice_ms=slice_ms),
    )
    await worker.sync()
    *collected, end = Work().snapshot(
        1, [cm(f"cm-{n:06d}", f"ns-{n % 2}", data=DATA) for n in range(OBJECTS)], chunk_size=500
    )
    for item in collected:
        await worker.handle(item)

    ops = OpsServer("127.0.0.1", 0, stall_fail_s=STALL_FAIL_S)
    port = await ops.start()
    ops.publish(HealthSnapshot(time.monotonic(), ready=True, problems=()))

    async def publish() -> None:
        while True:
            await asyncio.sleep(PUBLISH_INTERVAL_S)
            ops.publish(HealthSnapshot(time.monotonic(), ready=True, problems=()))

    holds: list[float] = []

    async def probe() -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(0)
            holds.append(time.perf_counter() - before)

    answers: list[tuple[float, int]] = []
    done = threading.Event()

    def ask() -> None:
        while not done.is_set():
            answers.append(_health(port))

    collections: list[tuple[int, float]] = []
    gc_started = [0.0]

    def timed_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_started[0] = time.perf_counter()
        else:
            collections.append((info["generation"], time.perf_counter() - gc_started[0]))

    gc.callbacks.append(timed_gc)
    tasks = [asyncio.create_task(publish()), asyncio.create_task(probe())]
    prober = threading.Thread(target=ask)
    prober.start()
    await asyncio.sleep(0)  # the probe is waiting for its next turn when the apply starts
    try:
        started = time.perf_counter()
        await worker.handle(end)
        apply_s = time.perf_counter() - started
    finally:
        gc.callbacks.remove(timed_gc)
        done.set()
        await asyncio.to_thread(prober.join)
        for task in tasks:
            task.cancel()
        await ops.stop()
        repo.close()
    return Figures(
        apply_s,
        max(holds, default=apply_s),
        max(a for a, _ in answers),
        len(answers),
        sum(status == 503 for _, status in answers),
        max((took for _, took in collections), default=0.0),
        sum(generation == 2 for generation, _ in collections),
    )


def _run(root: Path, slice_ms: float, *, gc_policy: bool) -> Figures:
    """One apply from a clean collector (nothing frozen by an earlier run). With `gc_policy`, what
    exists before (the modules, as after a service's start) is frozen as the service does, and the
    worker's builds freeze what they keep; without it nothing is frozen."""
    gc.unfreeze()
    gc.collect()
    if gc_policy:
        gc.freeze()  # what `gcpolicy.configure` does once the service has started
    with contextlib.ExitStack() as stack:
        if not gc_policy:
            stack.enter_context(patch.object(gcpolicy, "long_lived", contextlib.nullcontext))
        return asyncio.run(_apply(root, slice_ms))


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-snapshot-hold-") as workdir:
        unsliced = _run(Path(workdir) / "unsliced", math.inf, gc_policy=False)
        sliced = _run(Path(workdir) / "sliced", DEFAULT_SLICE_MS, gc_policy=False)
        frozen = _run(Path(workdir) / "frozen", DEFAULT_SLICE_MS, gc_policy=True)
    gc.unfreeze()
    print(
        f"first snapshot of {OBJECTS} ConfigMaps applied by one branch worker (load {os.getloadavg()[0]:.1f})"
    )
    runs = (
        ("unsliced (baseline)", unsliced),
        (f"sliced, {DEFAULT_SLICE_MS:.0f} ms", sliced),
        (f"sliced, {DEFAULT_SLICE_MS:.0f} ms, long-lived index frozen (gcpolicy)", frozen),
    )
    for name, figures in runs:
        print(
            f"{name}: apply {figures.apply_s:.2f} s, worst loop hold {figures.worst_hold_s * 1000:.0f} ms, "
            f"/healthz worst {figures.health_worst_s * 1000:.1f} ms over {figures.health_answers} answers, "
            f"{figures.health_503} answered 503 (loop stalled > {STALL_FAIL_S:.0f} s); "
            f"longest garbage collection {figures.worst_gc_s * 1000:.0f} ms, "
            f"{figures.full_collections} full (generation 2)"
        )
    print(
        f"sliced: worst loop hold {sliced.worst_hold_s / unsliced.worst_hold_s:.3f}x the unsliced baseline, "
        f"apply time {sliced.apply_s / unsliced.apply_s:.2f}x"
    )
    print(
        f"frozen: worst loop hold {frozen.worst_hold_s / sliced.worst_hold_s:.3f}x sliced alone, "
        f"longest garbage collection {frozen.worst_gc_s / max(sliced.worst_gc_s, 1e-9):.3f}x, "
        f"/healthz worst {frozen.health_worst_s / sliced.health_worst_s:.3f}x, "
        f"apply time {frozen.apply_s / sliced.apply_s:.2f}x"
    )
