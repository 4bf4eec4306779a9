"""Rebuilding a 5,000-object target from `<prefix>.object-state`, as a ratio to reading that topic raw.

The topic holds 5,000 ConfigMaps (50 namespaces x 100) in two versions each, plus 500 tombstones
and 500 re-creations, not compacted (the costlier case: the first read collapses duplicates).
Baseline: a manually assigned reader fetching every record of the topic to its end, nothing
decoded. Measured: `reverser replay branch --from object-state` into an empty bare repository
(first read with key filter, Avro decode, YAML render, tree build, one commit, pack and push).
The figure is raw-read time / rebuild time (>= 0.5x is the target: a rebuild costs at most twice
reading the topic). Embedded log, and Kafka (`KAFKA_BOOTSTRAP_SERVERS` or a broker started from
`tests/integration/kafka`).

The floor line times, each alone and as a multiple of the raw read, the parts no rebuild can skip:
decoding the 5,000 current values (`decode_state`), writing their blobs with the trees and the
commit into a pack (`LocalRepo`), and one push of it into an empty bare repository; `floor` is
raw / (raw + those three), the best ratio a rebuild could reach if everything else were free.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.bench_log import kafka_bootstrap
from pipeline.codec.branch_work import WorkAuthor
from pipeline.codec.object_state import ObjectKey, ObjectState, decode_state, state_record, tombstone_record
from pipeline.commit.git.repo import LocalRepo, Signature
from pipeline.commit.identity import Identity
from pipeline.commit.replay_cli import ReplayRequest, Source, replay_branch
from pipeline.commit.yamlrender import render_object
from pipeline.config import LogSettings, ProviderSettings, Settings, TargetSettings
from pipeline.log import Log, PendingRecord, Record, TopicPartition, open_log
from pipeline.log.topics import TopicNames, topic_specs

NAMESPACES = 50
PER_NAMESPACE = 100
VERSIONS = 2
DELETED = 500
BATCH = 1000
REPEATS = 3
AUTHOR = WorkAuthor("RESOLVED", "alice", "Alice", "alice@example.com", "exact", "user")
COMMITTER = Identity("Bench", "bench@example.com")


def _state(ns: int, i: int, version: int, offset: int) -> ObjectState:
    obj = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"cm-{i:03d}", "namespace": f"ns-{ns:02d}", "labels": {"app": f"app-{i}"}},
        "data": {"revision": str(version), "config.yaml": f"key: value-{version}\nother: {i}\n"},
    }
    return ObjectState(
        "bench",
        "git",
        "main",
        "live",
        "default",
        "",
        "v1",
        "configmaps",
        f"ns-{ns:02d}",
        f"cm-{i:03d}",
        f"uid-{ns}-{i}",
        str(offset + 1),
        json.dumps(obj).encode(),
        False,
        render_object(obj),
        AUTHOR,
        0,
        offset,
        0,
    )


def workload() -> list[PendingRecord]:
    records: list[PendingRecord] = []
    offset = 0
    for version in range(VERSIONS):
        for ns in range(NAMESPACES):
            for i in range(PER_NAMESPACE):
                records.append(state_record(_state(ns, i, version, offset)))
                offset += 1
    for n in range(DELETED):
        ns, i = n % NAMESPACES, n // NAMESPACES
        records.append(tombstone_record(ObjectKey("bench", "", "configmaps", f"ns-{ns:02d}", f"cm-{i:03d}")))
    for n in range(DELETED):
        ns, i = n % NAMESPACES, n // NAMESPACES
        records.append(state_record(_state(ns, i, VERSIONS, offset)))
        offset += 1
    return records


async def read_raw(log: Log, topic: str) -> int:
    partitions = await log.partitions_for(topic)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    ends = await log.end_offsets(tps)
    reader = log.reader()
    await reader.assign({tp: 0 for tp in tps})
    read = 0
    try:
        while any(reader.position(tp) < ends[tp] for tp in tps):
            read += len((await reader.fetch(timeout_ms=1000, max_records=2000)).records)
    finally:
        await reader.close()
    return read


def _settings(log: LogSettings, workdir: Path) -> Settings:
    return Settings(
        workdir=workdir,
        log=log,
        providers=[ProviderSettings(name="git", url=str(workdir / "unused.git"))],
        targets=[TargetSettings(name="bench", provider="git", path="live")],
    )


@dataclass(frozen=True, slots=True)
class Floor:
    """Best seconds of each part every rebuild must do, timed alone."""

    decode: float
    write: float
    push: float


def current(records: list[PendingRecord], topic: str) -> list[Record]:
    """The newest live record per key, as a first read hands them out."""
    newest: dict[bytes, Record] = {}
    for offset, record in enumerate(records):
        assert record.key is not None
        if record.value is None:
            newest.pop(record.key, None)
        else:
            newest[record.key] = Record(topic, 0, offset, 0, record.key, record.value, record.headers)
    return list(newest.values())


async def floor(records: list[Record], workdir: Path) -> Floor:
    decode = write = push = float("inf")
    for attempt in range(REPEATS):
        started = time.perf_counter()
        states = [decode_state(record) for record in records]
        decode = min(decode, time.perf_counter() - started)
        remote = _bare(workdir / f"floor-remote-{attempt}.git")
        repo = LocalRepo(workdir / f"floor-local-{attempt}", str(remote))
        try:
            started = time.perf_counter()
            tree = repo.tree(None)
            for state in states:
                path = f"live/{state.namespace}/{state.resource}/{state.name}.yaml"
                tree.put(path, repo.store_blob(state.document))
            tip = repo.commit(tree.write(), None, Signature(COMMITTER, 0), Signature(COMMITTER, 0), "floor\n")
            repo.set_branch("main", tip)
            write = min(write, time.perf_counter() - started)
            started = time.perf_counter()
            await repo.push("main", tip, None)
            push = min(push, time.perf_counter() - started)
        finally:
            repo.close()
    return Floor(decode, write, push)


async def measure(settings: Settings, workdir: Path) -> tuple[float, float, int, Floor]:
    """(best raw-read seconds, best rebuild seconds, files in the rebuilt tree, the floor's parts)."""
    log = open_log(settings)
    await log.start()
    try:
        await log.create_topics(topic_specs(settings))
        topic = TopicNames.for_prefix(settings.log.topic_prefix).object_state
        records = workload()
        for start in range(0, len(records), BATCH):
            await log.append_many(topic, records[start : start + BATCH])
        raw = float("inf")
        for _ in range(REPEATS):
            started = time.perf_counter()
            count = await read_raw(log, topic)
            raw = min(raw, time.perf_counter() - started)
        assert count == len(records), (count, len(records))
    finally:
        await log.close()
    rebuild = float("inf")
    files = 0
    for attempt in range(REPEATS):
        into = workdir / f"rebuilt-{attempt}.git"
        started = time.perf_counter()
        request = ReplayRequest(
            provider="git", branch="main", into=str(into), source=Source.OBJECT_STATE, tty=False
        )
        await replay_branch(settings, request, lambda _: None)
        rebuild = min(rebuild, time.perf_counter() - started)
        files = _files(into)
    return raw, rebuild, files, await floor(current(records, topic), workdir)


def _bare(path: Path) -> Path:
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
    return path


def _files(repo: Path) -> int:
    listing = subprocess.run(
        ["git", "--git-dir", str(repo), "ls-tree", "-r", "--name-only", "main"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return len(listing.split())


def report(backend: str, raw: float, rebuild: float, files: int, parts: Floor) -> None:
    print(
        f"{backend:<9} rebuild {files:,} objects {rebuild:6.2f} s; raw read of the topic {raw:6.3f} s; "
        f"ratio raw/rebuild = {raw / rebuild:.3f}x (target >= 0.5x)",
        flush=True,
    )
    least = raw + parts.decode + parts.write + parts.push
    print(
        f"{'':<9} floor: decode {parts.decode / raw:.2f}x the raw read, write blobs+trees+pack "
        f"{parts.write / raw:.2f}x, push {parts.push / raw:.2f}x; raw/(raw+these) = {raw / least:.3f}x; "
        f"the rest of the rebuild {(rebuild - least) / raw:.2f}x",
        flush=True,
    )


def main() -> None:
    print(
        f"object-state: {NAMESPACES * PER_NAMESPACE:,} objects x {VERSIONS} versions, "
        f"{DELETED} deleted and re-created, not compacted"
    )
    with tempfile.TemporaryDirectory(prefix="bench-rebuild-") as directory:
        workdir = Path(directory)
        embedded = LogSettings(backend="embedded", topic_prefix="bench", fsync=False)
        report("embedded", *asyncio.run(measure(_settings(embedded, workdir / "e"), workdir / "e")))
        with kafka_bootstrap() as bootstrap:
            log = LogSettings(backend="kafka", bootstrap_servers=bootstrap, topic_prefix="bench-rebuild")
            report("kafka", *asyncio.run(measure(_settings(log, workdir / "k"), workdir / "k")))
