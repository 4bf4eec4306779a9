"""Watch ingestion throughput: events/s from a local watch stream to acknowledged log records.

A stream resumes from its cursor into a backlog of ConfigMap updates (the recorded corpus object,
one data value changed per event) served over loopback HTTP by the watch-protocol test server;
the figure is the time until the cursor, which advances only after the log acknowledged the
records, reaches the last event. Each event is read, decoded, sanitized, hashed, Avro-encoded and
appended to the embedded log. Baseline, measured in the same run: `json.loads` of the same watch
lines. The test server shares the process (and the CPU), so the ratio is a floor.

Measured twice: on the embedded log as the service runs it (`log.fsync: true`: every append waits
for its group fsync, so a busy disk shows here) and without fsync (the CPU of the watch path
alone, comparable across machines whose disks differ).
"""

from __future__ import annotations

import asyncio
import gc
import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from pipeline.config import (
    ClusterSettings,
    LogSettings,
    ProviderSettings,
    Settings,
    TargetSettings,
    WatchRule,
)
from pipeline.log import open_log
from pipeline.log.topics import topic_specs
from pipeline.watch.component import WatchComponent
from pipeline.watch.stream import WatchStream
from tests.watch.kube_server import FakeKubeApiServer, corpus_object

EVENTS = 20_000
ROUNDS = 3


def _updates(namespace: str) -> list[dict[str, object]]:
    base = corpus_object("configmap/update/watch.modified.yaml", namespace)
    out = []
    for n in range(EVENTS):
        obj = json.loads(json.dumps(base))
        obj["metadata"]["name"] = f"cm-{n % 100:03d}"
        obj["data"] = {"revision": str(n), "config.yaml": f"key: value-{n}\n"}
        out.append(obj)
    return out


def baseline_events_per_s(lines: list[bytes]) -> float:
    best = float("inf")
    for _ in range(ROUNDS):
        started = time.perf_counter()
        for line in lines:
            json.loads(line)
        best = min(best, time.perf_counter() - started)
    return len(lines) / best


async def pipeline_events_per_s(workdir: Path, fsync: bool = True) -> tuple[float, list[bytes]]:
    kube = FakeKubeApiServer()
    await kube.start()
    try:
        kube.namespaces["bench"] = "Active"
        settings = Settings(
            workdir=workdir,
            log=LogSettings(backend="embedded", topic_prefix="bench", fsync=fsync),
            clusters=[ClusterSettings(name="src", kubeconfig=kube.kubeconfig(workdir))],
            providers=[ProviderSettings(name="git", url="file:///dev/null")],
            targets=[
                TargetSettings(
                    name="t",
                    provider="git",
                    cluster="src",
                    rules=[WatchRule(resources=["configmaps"], namespaces=["bench"])],
                )
            ],
        )
        log = open_log(settings)
        await log.start()
        await log.create_topics(topic_specs(settings))
        try:
            component = WatchComponent(settings, log)
            await component.start()
            (stream,) = component.manager.streams.values()
            await _until(lambda: stream.state == "Streaming")
            await component.stop()
            updates = _updates("bench")
            lines = []
            for obj in updates:
                stored = kube.put(obj)
                lines.append(json.dumps({"type": "MODIFIED", "object": stored}).encode())
            gc.collect()
            gc.freeze()  # the server's backlog is static; keep collections from rescanning it
            best = float("inf")
            for _ in range(ROUNDS):
                component = WatchComponent(settings, log)
                started = time.perf_counter()
                await component.start()
                (resumed,) = component.manager.streams.values()
                await _until(lambda s=resumed: s.resource_version == str(kube.rv))
                best = min(best, time.perf_counter() - started)
                await component.stop()
                await _rewind(component, resumed)
            return EVENTS / best, lines
        finally:
            await log.close()
    finally:
        await kube.stop()


async def _rewind(component: WatchComponent, stream: WatchStream) -> None:
    """Put the cursor back to before the backlog so the next round replays the same events."""
    cursor = component.manager.cursors.get(stream.spec.cursor_key)
    if cursor is None:
        raise RuntimeError("the stream wrote no cursor")
    rewound = replace(cursor, resource_version=str(int(cursor.resource_version) - EVENTS))
    await component.manager.cursors.write(rewound)


async def _until(predicate: Callable[[], bool], timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.005)
    raise TimeoutError("the watch stream did not catch up")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        synced_dir, unsynced_dir = Path(tmp) / "fsync", Path(tmp) / "nofsync"
        synced_dir.mkdir()
        unsynced_dir.mkdir()
        measured, lines = asyncio.run(pipeline_events_per_s(synced_dir))
        unsynced, _ = asyncio.run(pipeline_events_per_s(unsynced_dir, fsync=False))
    baseline = baseline_events_per_s(lines)
    size = sum(map(len, lines)) // len(lines)
    print(f"events: {EVENTS} ConfigMap updates, {size} bytes per watch line, best of {ROUNDS}")
    print(f"baseline json.loads of the watch lines: {baseline:,.0f} events/s")
    print(f"watch stream -> acknowledged log records (fsync): {measured:,.0f} events/s")
    print(f"watch stream -> acknowledged log records (no fsync): {unsynced:,.0f} events/s")
    print(f"ratio watch/json: {measured / baseline:.3f} with fsync, {unsynced / baseline:.3f} without")
