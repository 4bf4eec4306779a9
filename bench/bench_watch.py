"""Watch ingestion throughput: events/s from a local watch stream to acknowledged log records.

A stream resumes from its cursor into a backlog of ConfigMap updates (the recorded corpus object,
one data value changed per event) served over loopback HTTP by the watch-protocol test server;
the figure is the time until the cursor, which advances only after the log acknowledged the
records, reaches the last event. Each event is read, decoded, sanitized, hashed, Avro-encoded and
appended to the embedded log. Baseline, measured in the same run: `json.loads` of the same watch
lines.

The test server runs in a process of its own. It used to share the watch's process, and a profile
charged it about half of the measured time (serialising and writing the backlog), so the ratio
compared json.loads to the pipeline plus a web server; on the 2-core machine the two processes
now use a core each, as the apiserver and the watcher do in a cluster. The watch process's own
CPU seconds per event are printed too (a figure no second process can blur), and the old
in-process figure once more beside the new one, so the change of method shows in one run.

Measured twice: on the embedded log as the service runs it (`log.fsync: true`: every append waits
for its group fsync, so a busy disk shows here) and without fsync (the CPU of the watch path
alone, comparable across machines whose disks differ).
"""

from __future__ import annotations

import asyncio
import gc
import json
import multiprocessing
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path

from pipeline.config import (
    ClusterSettings,
    LogBackend,
    LogSettings,
    ProviderSettings,
    Settings,
    TargetSettings,
    WatchRule,
)
from pipeline.log import Log, open_log
from pipeline.log.topics import topic_specs
from pipeline.watch.component import WatchComponent
from tests.watch.kube_server import FakeKubeApiServer, corpus_object

EVENTS = 20_000
ROUNDS = 3
NAMESPACE = "bench"
SNAPSHOT_NAMESPACE = "snapshot"
SNAPSHOT_OBJECTS = 10_000
DATA_BYTES = 1024
TICK_S = 0.005


@dataclass(frozen=True, slots=True)
class Backlog:
    """Where the server listens and which resourceVersions the backlog spans."""

    kubeconfig: Path
    first_rv: int
    last_rv: int


@dataclass(frozen=True, slots=True)
class Rate:
    """Events per second of wall time, and the watch process's CPU seconds per event."""

    events_per_s: float
    cpu_us_per_event: float


def _updates() -> list[dict[str, object]]:
    base = corpus_object("configmap/update/watch.modified.yaml", NAMESPACE)
    out = []
    for n in range(EVENTS):
        obj = json.loads(json.dumps(base))
        obj["metadata"]["name"] = f"cm-{n % 100:03d}"
        obj["data"] = {"revision": str(n), "config.yaml": f"key: value-{n}\n"}
        out.append(obj)
    return out


def _fill(kube: FakeKubeApiServer, workdir: Path) -> tuple[Backlog, list[bytes]]:
    """Put the snapshot's objects, then the updates on `kube`; the backlog the updates make and
    their watch lines."""
    kube.namespaces[NAMESPACE] = kube.namespaces[SNAPSHOT_NAMESPACE] = "Active"
    base = corpus_object("configmap/update/watch.modified.yaml", SNAPSHOT_NAMESPACE)
    for n in range(SNAPSHOT_OBJECTS):
        base["metadata"]["name"] = f"cm-{n:05d}"
        base["data"] = {"payload": f"{n:05d}".ljust(DATA_BYTES, "x")}
        kube.put(base)
    first_rv = kube.rv
    lines = []
    for obj in _updates():
        stored = kube.put(obj)
        lines.append(json.dumps({"type": "MODIFIED", "object": stored}).encode())
    return Backlog(kube.kubeconfig(workdir), first_rv, kube.rv), lines


def _serve(workdir: Path, control: Connection) -> None:
    """The server process: fill the backlog, send it and its lines, serve until told to stop."""

    async def serve() -> None:
        kube = FakeKubeApiServer()
        await kube.start()
        try:
            backlog, lines = _fill(kube, workdir)
            gc.collect()
            gc.freeze()  # the backlog is static; keep collections from rescanning it
            control.send((backlog, lines))
            await asyncio.get_running_loop().run_in_executor(None, control.recv)
        finally:
            await kube.stop()

    asyncio.run(serve())


def baseline_rate(lines: list[bytes]) -> Rate:
    """`json.loads` of every line: best of `ROUNDS` in wall time and in CPU time."""
    best, best_cpu = float("inf"), float("inf")
    for _ in range(ROUNDS):
        started, started_cpu = time.perf_counter(), time.process_time()
        for line in lines:
            json.loads(line)
        best = min(best, time.perf_counter() - started)
        best_cpu = min(best_cpu, time.process_time() - started_cpu)
    return Rate(len(lines) / best, best_cpu / len(lines) * 1e6)


def _settings(workdir: Path, kubeconfig: Path, fsync: bool, namespace: str = NAMESPACE) -> Settings:
    return Settings(
        workdir=workdir,
        log=LogSettings(backend=LogBackend.EMBEDDED, topic_prefix="bench", fsync=fsync),
        clusters=[ClusterSettings(name="src", kubeconfig=kubeconfig)],
        providers=[ProviderSettings(name="git", url="file:///dev/null")],
        targets=[
            TargetSettings(
                name="t",
                provider="git",
                cluster="src",
                rules=[WatchRule(resources=["configmaps"], namespaces=[namespace])],
            )
        ],
    )


async def pipeline_rate(workdir: Path, backlog: Backlog, fsync: bool) -> Rate:
    """Best of `ROUNDS` resumes from before the backlog until the cursor names its last event,
    less what a resume with nothing to catch up on costs (start-up: the kubeconfig, a TLS
    context, discovery, the connection; the same whatever the backlog)."""
    settings = _settings(workdir, backlog.kubeconfig, fsync)
    log = open_log(settings)
    await log.start()
    await log.create_topics(topic_specs(settings))
    try:
        component = WatchComponent(settings, log)
        await component.start()  # the first session snapshots the collection and writes a cursor
        (stream,) = component.manager.streams.values()
        await _until(lambda: stream.resource_version == str(backlog.last_rv))
        await component.stop()
        cursor_key = stream.spec.cursor_key
        gc.collect()
        gc.freeze()  # as the service does once it has started (pipeline.gcpolicy.configure)
        rounds = [await _resume(settings, log, cursor_key, backlog, rv) for rv in (backlog.last_rv,) * 2]
        idle_s, idle_cpu_s = min(r[0] for r in rounds), min(r[1] for r in rounds)
        rounds = [await _resume(settings, log, cursor_key, backlog, backlog.first_rv) for _ in range(ROUNDS)]
        busy_s, busy_cpu_s = min(r[0] for r in rounds), min(r[1] for r in rounds)
        return Rate(EVENTS / (busy_s - idle_s), (busy_cpu_s - idle_cpu_s) / EVENTS * 1e6)
    finally:
        await log.close()


async def _resume(
    settings: Settings, log: Log, cursor_key: str, backlog: Backlog, resource_version: int
) -> tuple[float, float]:
    """Wall and CPU seconds of one start from `resource_version` until the cursor names the
    backlog's last event, and the stop."""
    component = WatchComponent(settings, log)
    await _rewind(component, cursor_key, resource_version)
    started, started_cpu = time.perf_counter(), time.process_time()
    await component.start()
    (resumed,) = component.manager.streams.values()
    await _until(lambda: resumed.resource_version == str(backlog.last_rv))
    await component.stop()
    return time.perf_counter() - started, time.process_time() - started_cpu


@dataclass(frozen=True, slots=True)
class Hold:
    """A first snapshot's time and the longest the event loop waited meanwhile."""

    snapshot_s: float
    worst_hold_s: float
    worst_hold_cpu_s: float


async def snapshot_hold(workdir: Path, backlog: Backlog) -> Hold:
    """A first sync (a WatchList snapshot) of `SNAPSHOT_OBJECTS` ConfigMaps, while a ticker on the
    same loop measures how late each of its 5 ms sleeps woke: the stall it waited behind.

    The stall in wall time also counts the time the OS gave the CPU to other processes (on a
    loaded 2-core machine, often the larger part); the thread's CPU time over the same sleep
    is the work that held the loop, the figure the 50 ms budget is about.
    """
    settings = _settings(workdir, backlog.kubeconfig, fsync=True, namespace=SNAPSHOT_NAMESPACE)
    log = open_log(settings)
    await log.start()
    await log.create_topics(topic_specs(settings))
    worst = worst_cpu = 0.0

    async def tick() -> None:
        nonlocal worst, worst_cpu
        while True:
            before, before_cpu = time.perf_counter(), time.thread_time()
            await asyncio.sleep(TICK_S)
            worst = max(worst, time.perf_counter() - before - TICK_S)
            worst_cpu = max(worst_cpu, time.thread_time() - before_cpu)

    try:
        component = WatchComponent(settings, log)
        await component.start()
        gc.freeze()  # what start-up built, as the service does once started (gcpolicy.configure)
        ticker = asyncio.create_task(tick())
        started = time.perf_counter()
        (stream,) = component.manager.streams.values()
        await _until(lambda: stream.snapshots_completed == 1)
        took = time.perf_counter() - started
        ticker.cancel()
        await component.stop()
        return Hold(took, worst, worst_cpu)
    finally:
        await log.close()


async def in_process_rate(workdir: Path) -> Rate:
    """The former method: the server on the watch's own event loop (no fsync)."""
    kube = FakeKubeApiServer()
    await kube.start()
    try:
        backlog, _ = _fill(kube, workdir)
        gc.collect()
        gc.freeze()
        return await pipeline_rate(workdir, backlog, fsync=False)
    finally:
        await kube.stop()
        gc.unfreeze()


async def _rewind(component: WatchComponent, cursor_key: str, resource_version: int) -> None:
    """Put the cursor at `resource_version`: the next start replays the events after it."""
    await component.manager.cursors.load()
    cursor = component.manager.cursors.get(cursor_key)
    if cursor is None:
        raise RuntimeError("the stream wrote no cursor")
    await component.manager.cursors.write(replace(cursor, resource_version=str(resource_version)))


async def _until(predicate: Callable[[], bool], timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.005)
    raise TimeoutError("the watch stream did not catch up")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name in ("server", "fsync", "nofsync", "inprocess", "snapshot"):
            (root / name).mkdir()
        ours, theirs = multiprocessing.get_context("spawn").Pipe()
        server = multiprocessing.get_context("spawn").Process(target=_serve, args=(root / "server", theirs))
        server.start()
        try:
            backlog, lines = ours.recv()
            synced = asyncio.run(pipeline_rate(root / "fsync", backlog, fsync=True))
            unsynced = asyncio.run(pipeline_rate(root / "nofsync", backlog, fsync=False))
            hold = asyncio.run(snapshot_hold(root / "snapshot", backlog))
        finally:
            ours.send("stop")
            server.join()
        shared = asyncio.run(in_process_rate(root / "inprocess"))
    base = baseline_rate(lines)
    baseline = base.events_per_s
    size = sum(map(len, lines)) // len(lines)
    print(f"events: {EVENTS} ConfigMap updates, {size} bytes per watch line, best of {ROUNDS}")
    print(
        f"baseline json.loads of the watch lines: {baseline:,.0f} events/s, "
        f"{base.cpu_us_per_event:.1f} CPU-us/event"
    )
    for label, rate in (("fsync", synced), ("no fsync", unsynced)):
        print(
            f"watch stream -> acknowledged log records ({label}): {rate.events_per_s:,.0f} events/s, "
            f"{rate.cpu_us_per_event:.1f} CPU-us/event in the watch process"
        )
    print(
        f"ratio watch/json: {synced.events_per_s / baseline:.3f} with fsync, "
        f"{unsynced.events_per_s / baseline:.3f} without; in CPU time "
        f"{base.cpu_us_per_event / synced.cpu_us_per_event:.3f} and "
        f"{base.cpu_us_per_event / unsynced.cpu_us_per_event:.3f}"
    )
    print(
        f"former method (server in the watch's process, no fsync): {shared.events_per_s:,.0f} events/s, "
        f"ratio {shared.events_per_s / baseline:.3f}"
    )
    print(
        f"first snapshot of {SNAPSHOT_OBJECTS:,} ConfigMaps ({DATA_BYTES} bytes of data each): "
        f"{hold.snapshot_s:.2f} s; longest event loop stall {hold.worst_hold_cpu_s * 1000:.0f} ms "
        f"of CPU work (issue 32 allows 50), {hold.worst_hold_s * 1000:.0f} ms of wall time"
    )
