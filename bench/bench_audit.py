"""Audit ingress throughput: 400-event RequestResponse batches over real HTTP, acknowledged by the log.

Backends: the embedded log with fsync (the service's default), without it (the demo's setting), and
Kafka. Closed loop (1 and 4 requests in flight) gives the sustained rate; open loop at the apiserver's
ceiling (4,000 events/s) and at the 20,000 events/s target gives the request latency at that load.

The server runs in its own process pinned to one core; the load generator (this process) keeps a
few requests in flight, like an apiserver with several webhook batches outstanding. Figures:
events/s on the wall clock, events per CPU-second of the server process (the one-core figure,
insensitive to other load on the machine), p50/p99 request latency, and each rate as a ratio
against `json.loads` of the same bytes measured in this run (the floor any Python ingress pays).

Environment: `KAFKA_BOOTSTRAP_SERVERS` (or `/tmp/reverser-dev-kafka`) names a broker; without one
a private broker is started from `tests/integration/kafka/broker.py` if its jars are cached.
`BENCH_AUDIT_SECONDS` sets the measuring window per backend (default 10).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import copy
import json
import multiprocessing
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import aiohttp

from bench.kafka import kafka_bootstrap

EVENTS_PER_BATCH = 400
DISTINCT_BATCHES = 25
IN_FLIGHT = 4
TARGET_EVENTS_PER_S = 20_000
TARGET_P99_S = 0.050
#: Requests the open-loop generator keeps on the wire at most: half the ingress's default
#: `audit.max_connections` (256), so the cap that protects the listener is never what is measured.
PACED_CONNECTIONS = 128
#: The embedded log as the demo runs it (`log.fsync: false`): an fsync before every acknowledgement
#: (the service's default, docs/log.md) costs 10-25% of the ingress's CPU per event on an ext4 VM, so
#: both are measured, and this one compares with figures taken before fsync became the default.
EMBEDDED_NO_FSYNC = "embedded-nofsync"
CORPUS = (
    Path(os.environ.get("REVERSER_CORPUS", Path(__file__).resolve().parents[1] / "tests" / "corpus"))
    / "mutationlab"
    / "configmap"
)


def _template(name: str) -> dict[str, Any]:
    import yaml

    event: dict[str, Any] = yaml.safe_load((CORPUS / name).read_text())
    return event


def _events(batch: int) -> Iterator[dict[str, Any]]:
    """Events shaped like the corpus: creates, updates, SSA patches, deletes, a few reads."""
    templates = [
        _template("create-succeeds/audit.create.yaml"),
        _template("update/audit.update.yaml"),
        _template("server-side-apply/audit.patch.yaml"),
    ]
    types = [
        ("", "configmaps", "ConfigMap"),
        ("", "secrets", "Secret"),
        ("apps", "deployments", "Deployment"),
    ]
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.123456Z", time.gmtime())
    for i in range(EVENTS_PER_BATCH):
        event = copy.deepcopy(templates[i % len(templates)])
        group, resource, kind = types[(i // 3) % len(types)]
        name, uid, rv = f"obj-{batch}-{i}", str(uuid.uuid4()), str(100_000 + batch * 1000 + i)
        namespace = f"team-{i % 7}"
        event.update(auditID=str(uuid.uuid4()), stageTimestamp=stamp, requestReceivedTimestamp=stamp)
        event["objectRef"].update(resource=resource, apiGroup=group, namespace=namespace, name=name)
        for body in (event.get("requestObject"), event.get("responseObject")):
            if isinstance(body, dict):
                body["kind"] = kind
                body["metadata"].update(name=name, namespace=namespace, creationTimestamp=stamp)
        event["responseObject"]["metadata"].update(uid=uid, resourceVersion=rv)
        if i % 10 == 9:  # a read at Metadata level: dropped by the gate
            event.update(verb="get", level="Metadata")
            event.pop("requestObject", None)
            event.pop("responseObject", None)
        yield event


def make_bodies() -> list[bytes]:
    return [
        json.dumps({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": list(_events(b))}).encode()
        for b in range(DISTINCT_BATCHES)
    ]


def json_baseline(bodies: list[bytes], min_seconds: float = 2.0) -> float:
    """Events per second that `json.loads` alone reaches on these bodies in this process."""
    events = 0
    started = time.perf_counter()
    while time.perf_counter() - started < min_seconds:
        for body in bodies:
            json.loads(body)
            events += EVENTS_PER_BATCH
    return events / (time.perf_counter() - started)


# --- the server process ---------------------------------------------------------------------------


def _serve(backend: str, bootstrap: str, workdir: str, conn: Connection) -> None:
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    asyncio.run(_serve_async(backend, bootstrap, Path(workdir), conn))


async def _serve_async(backend: str, bootstrap: str, workdir: Path, conn: Connection) -> None:
    from pipeline.audit.server import AuditIngress
    from pipeline.config import AuditSettings, LogSettings, Settings
    from pipeline.log import open_log
    from pipeline.log.topics import topic_specs

    log_settings = (
        LogSettings(backend="kafka", bootstrap_servers=bootstrap, topic_prefix=f"bench{uuid.uuid4().hex[:8]}")
        if backend == "kafka"
        else LogSettings(backend="embedded", topic_prefix="bench", fsync=backend != EMBEDDED_NO_FSYNC)
    )
    # One client process stands for many apiservers: its connections are not held to one peer's
    # share, and every paced request's body fits the in-flight budget, so neither guard is measured.
    audit = AuditSettings(
        addr="127.0.0.1:0",
        max_connections_per_peer=AuditSettings().max_connections,
        max_inflight_body_bytes=PACED_CONNECTIONS * AuditSettings().max_body_bytes,
    )
    settings = Settings(workdir=workdir, log=log_settings, audit=audit)
    log = open_log(settings)
    await log.start()
    await log.create_topics(topic_specs(settings))
    ingress = AuditIngress(settings, log)
    await ingress.start()
    conn.send(ingress.port)
    await asyncio.get_running_loop().run_in_executor(None, conn.recv)
    await ingress.stop()
    await log.close()


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --- the load generator ---------------------------------------------------------------------------


class Outcomes:
    """What the ingress answered: latencies of the 200s, and every other answer or connection failure.

    A benchmark run reports these instead of stopping at the first one: under overload the ingress
    is meant to shed (a 503 with Retry-After, or a connection reset past `audit.max_connections`,
    both of which the apiserver retries), and how often it did is part of the result.
    """

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.failures: collections.Counter[str] = collections.Counter()

    async def post(self, session: aiohttp.ClientSession, url: str, body: bytes) -> bool:
        started = time.perf_counter()
        try:
            async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
                await resp.read()
                status = resp.status
        except aiohttp.ClientError as exc:
            self.failures[type(exc).__name__] += 1
            return False
        if status != 200:
            self.failures[f"HTTP {status}"] += 1
            return False
        self.latencies.append(time.perf_counter() - started)
        return True

    def describe_failures(self) -> str:
        if not self.failures:
            return "no failures"
        return "failed: " + ", ".join(f"{count} {what}" for what, count in sorted(self.failures.items()))


async def _drive(url: str, bodies: list[bytes], seconds: float, in_flight: int) -> tuple[int, Outcomes]:
    outcomes = Outcomes()
    events = 0
    deadline = time.perf_counter() + seconds
    counter = 0

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal events, counter
        while time.perf_counter() < deadline:
            body = bodies[counter % len(bodies)]
            counter += 1
            if await outcomes.post(session, url, body):
                events += EVENTS_PER_BATCH

    connector = aiohttp.TCPConnector(limit=in_flight)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(worker(session) for _ in range(in_flight)))
    return events, outcomes


async def _drive_paced(url: str, bodies: list[bytes], seconds: float, batches_per_s: float) -> Outcomes:
    """Open loop: a batch every 1/rate seconds whether or not earlier ones were answered.

    At most `PACED_CONNECTIONS` requests are on the wire at once (as an apiserver has a bounded
    number of webhook batches outstanding); a batch waiting for a connection counts that wait in
    its latency. Unbounded, a loaded ingress falling behind would see more connections than its
    `audit.max_connections` and reset the extra ones, by design.
    """
    outcomes = Outcomes()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=PACED_CONNECTIONS)) as session:
        tasks = []
        begin = time.perf_counter()
        for n in range(int(seconds * batches_per_s)):
            delay = begin + n / batches_per_s - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(outcomes.post(session, url, bodies[n % len(bodies)])))
        await asyncio.gather(*tasks)
    return outcomes


def _percentile(values: list[float], q: int) -> float:
    if not values:
        return float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def run_backend(backend: str, bootstrap: str, bodies: list[bytes], baseline: float, seconds: float) -> None:
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    with tempfile.TemporaryDirectory(prefix="bench-audit-") as workdir:
        process = context.Process(target=_serve, args=(backend, bootstrap, workdir, child), daemon=True)
        process.start()
        try:
            port = parent.recv()
            url = f"http://127.0.0.1:{port}/audit-webhook/default"
            asyncio.run(_drive(url, bodies, 2.0, IN_FLIGHT))  # warm-up
            assert process.pid is not None
            for in_flight in (1, IN_FLIGHT):
                cpu_before = _cpu_seconds(process.pid)
                started = time.perf_counter()
                events, outcomes = asyncio.run(_drive(url, bodies, seconds, in_flight))
                wall = time.perf_counter() - started
                cpu = _cpu_seconds(process.pid) - cpu_before
                rate, per_cpu = events / wall, events / cpu if cpu > 0 else float("inf")
                p50, p99 = _percentile(outcomes.latencies, 50), _percentile(outcomes.latencies, 99)
                print(
                    f"{backend:8s} in-flight={in_flight}: {rate:9,.0f} events/s wall "
                    f"({rate / baseline:.2f}x json.loads), {per_cpu:9,.0f} events per server CPU-second "
                    f"({per_cpu / baseline:.2f}x json.loads); p50 {p50 * 1000:.1f} ms, "
                    f"p99 {p99 * 1000:.1f} ms per {EVENTS_PER_BATCH}-event batch; "
                    f"{len(outcomes.latencies)} requests answered 200, {outcomes.describe_failures()}; "
                    f"target >= {TARGET_EVENTS_PER_S:,}/s per core: "
                    f"{'met' if per_cpu >= TARGET_EVENTS_PER_S else 'MISSED'}",
                    flush=True,
                )
            for events_per_s in (4_000, TARGET_EVENTS_PER_S):
                outcomes = asyncio.run(_drive_paced(url, bodies, seconds, events_per_s / EVENTS_PER_BATCH))
                p50, p99 = _percentile(outcomes.latencies, 50), _percentile(outcomes.latencies, 99)
                print(
                    f"{backend:8s} paced at {events_per_s:,} events/s: p50 {p50 * 1000:.1f} ms, "
                    f"p99 {p99 * 1000:.1f} ms per {EVENTS_PER_BATCH}-event batch "
                    f"({len(outcomes.latencies)} requests answered 200, {outcomes.describe_failures()}; "
                    f"p99 < {TARGET_P99_S * 1000:.0f} ms: {'met' if p99 < TARGET_P99_S else 'MISSED'})",
                    flush=True,
                )
        finally:
            parent.send("stop")
            process.join(60)
            if process.is_alive():
                process.kill()


def main() -> None:
    seconds = float(os.environ.get("BENCH_AUDIT_SECONDS", "10"))
    bodies = make_bodies()
    size = sum(len(b) for b in bodies) / len(bodies)
    baseline = json_baseline(bodies)
    print(
        f"baseline: json.loads of the same bodies: {baseline:,.0f} events/s "
        f"({EVENTS_PER_BATCH} events, {size / 1024:.0f} KiB per batch)",
        flush=True,
    )
    run_backend("embedded", "", bodies, baseline, seconds)
    run_backend(EMBEDDED_NO_FSYNC, "", bodies, baseline, seconds)
    bootstrap, broker = kafka_bootstrap()
    with broker:
        run_backend("kafka", bootstrap, bodies, baseline, seconds)


if __name__ == "__main__":
    main()
