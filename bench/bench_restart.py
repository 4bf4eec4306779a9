"""Restart at full load: `reverser run` on a log holding a whole TTL window of audit facts.

Ten minutes of audit traffic at the apiserver's ceiling of 4,000 events/s is 2.4 million facts in
`<prefix>.audit-facts` (EventLists of 100-400 events over 200 namespaces, 20 users and 8 types, one
record per (request, type) as the webhook writes them). The bench fills an embedded log with
that window, starts `reverser run` on it and reports, from launch:

- the time to the first HTTP answer (`/healthz`; target <= 2 s),
- the time to ready (`/readyz` 200, i.e. the fact index has replayed the window),
- the latency of the ops endpoints (`/healthz`, `/metrics`, `/readyz` in turn) and of the audit
  webhook (a one-event batch) during the rebuild, p50/p99/max (target ops p99 <= 100 ms),
- peak RSS (VmHWM) as a ratio of the steady RSS, measured after the first sweep with the index at
  its caps (target <= 1.5).

`REVERSER_BENCH_RESTART_FACTS` scales the window down for quick runs (default 2,400,000).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from pipeline.codec import FACT_BATCH, codec
from pipeline.codec.fact_batch import AuthorFact, FactBatch
from pipeline.config import LogSettings, Settings
from pipeline.log.api import PendingRecord
from pipeline.log.embedded import EmbeddedLog
from pipeline.log.topics import TopicNames, topic_specs
from pipeline.models import GroupResource, stream_key

FACTS = int(os.environ.get("REVERSER_BENCH_RESTART_FACTS", "2400000"))
ROUTE = "default"
TYPES = [
    GroupResource("", "configmaps"),
    GroupResource("", "secrets"),
    GroupResource("", "services"),
    GroupResource("", "serviceaccounts"),
    GroupResource("apps", "deployments"),
    GroupResource("apps", "statefulsets"),
    GroupResource("batch", "jobs"),
    GroupResource("networking.k8s.io", "ingresses"),
]
NAMESPACES = [f"team-{i:03d}" for i in range(200)]
USERS = [f"user{i}@example.com" for i in range(16)] + [
    f"system:serviceaccount:flux-system:controller-{i}" for i in range(4)
]
POLL_GAP_S = 0.02
SETTLE_S = 12.0
READY_TIMEOUT_S = 900.0


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def requests(total: int, seed: int = 19) -> Iterator[list[FactBatch]]:
    """The window as webhook requests: 100-400 events each, one batch per type they touch."""
    rng = random.Random(seed)
    made = 0
    serial = 0
    while made < total:
        size = min(rng.randint(100, 400), total - made)
        per_type: dict[GroupResource, list[AuthorFact]] = {}
        for _ in range(size):
            serial += 1
            gr = TYPES[rng.randrange(len(TYPES))]
            verb = "delete" if serial % 25 == 0 else ("create" if serial % 5 == 0 else "update")
            per_type.setdefault(gr, []).append(
                AuthorFact(
                    author=USERS[rng.randrange(len(USERS))],
                    verb=verb,
                    audit_id=str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                    namespace=NAMESPACES[rng.randrange(len(NAMESPACES))],
                    name=f"app-{rng.randrange(50_000):05d}",
                    uid=str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                    resource_version=str(10_000_000 + serial),
                    stage_timestamp_us=0,
                )
            )
        made += size
        yield [FactBatch(ROUTE, gr, facts) for gr, facts in per_type.items()]


async def fill(settings: Settings, facts: int) -> int:
    """Append the window to the embedded log; returns the number of records."""
    writer = codec(FACT_BATCH)
    log = EmbeddedLog(settings.workdir / "log")
    await log.start()
    records = 0
    try:
        await log.create_topics(topic_specs(settings))
        topic = TopicNames.for_prefix(settings.log.topic_prefix).audit_facts
        pending: list[PendingRecord] = []
        for batches in requests(facts):
            for batch in batches:
                pending.append(
                    PendingRecord(
                        writer.encode(batch.to_avro()),
                        key=stream_key(batch.route, batch.group_resource),
                        headers=(writer.header,),
                    )
                )
            if len(pending) >= 2000:
                await log.append_many(topic, pending)
                records += len(pending)
                pending = []
        if pending:
            await log.append_many(topic, pending)
            records += len(pending)
    finally:
        await log.close()
    return records


def config(workdir: Path, prefix: str, metrics_port: int, audit_port: int) -> dict[str, Any]:
    remote = workdir / "remote.git"
    subprocess.run(["git", "init", "--quiet", "--bare", "-b", "main", str(remote)], check=True)
    return {
        "workdir": str(workdir),
        "log": {"backend": "embedded", "topic_prefix": prefix},
        "metrics": {"addr": f"127.0.0.1:{metrics_port}"},
        "audit": {"addr": f"127.0.0.1:{audit_port}"},
        "attribution": {"sweep_interval_s": 5},
        "providers": [{"name": "git", "url": str(remote)}],
        "targets": [{"name": "t", "provider": "git"}],
    }


def proc_status(pid: int, field_name: str) -> int:
    """A `VmRSS`/`VmHWM` line of /proc/PID/status, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field_name} in /proc/{pid}/status")


@dataclass
class Probe:
    """Polls the service from launch until ready; every answer is (path, sent_at, latency_s, status)."""

    metrics_port: int
    audit_port: int
    launched: float
    answers: list[tuple[str, float, float, int]] = field(default_factory=list)
    first_answer_s: float | None = None
    ready_s: float | None = None

    @staticmethod
    def _status(request: str | urllib.request.Request) -> int:
        """The HTTP status of one request, error statuses included (the body is read and dropped)."""
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                response.read()
                return int(response.status)
        except urllib.error.HTTPError as exc:
            exc.read()
            return int(exc.code)

    def _get(self, path: str) -> int:
        return self._status(f"http://127.0.0.1:{self.metrics_port}{path}")

    def _post_audit(self) -> int:
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        body = json.dumps(
            {
                "kind": "EventList",
                "apiVersion": "audit.k8s.io/v1",
                "items": [
                    {
                        "kind": "Event",
                        "apiVersion": "audit.k8s.io/v1",
                        "auditID": str(uuid.uuid4()),
                        "stage": "ResponseComplete",
                        "verb": "update",
                        "user": {"username": "bench"},
                        "objectRef": {
                            "apiVersion": "v1",
                            "resource": "configmaps",
                            "namespace": "ns",
                            "name": "b",
                        },
                        "responseObject": {
                            "metadata": {
                                "name": "b",
                                "namespace": "ns",
                                "uid": str(uuid.uuid4()),
                                "resourceVersion": "1",
                            }
                        },
                        "responseStatus": {"code": 200},
                        "stageTimestamp": stamp,
                    }
                ],
            }
        ).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.audit_port}/audit-webhook/{ROUTE}",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        return self._status(request)

    def run(self, alive: Any) -> None:
        paths = ["/healthz", "/metrics", "/readyz", "audit"]
        turn = 0
        deadline = self.launched + READY_TIMEOUT_S
        while time.perf_counter() < deadline and alive():
            path = paths[turn % len(paths)] if self.first_answer_s is not None else "/healthz"
            turn += 1
            sent = time.perf_counter()
            try:
                status = self._post_audit() if path == "audit" else self._get(path)
            except (urllib.error.URLError, OSError):
                time.sleep(0.005)
                continue
            done = time.perf_counter()
            if self.first_answer_s is None:
                self.first_answer_s = done - self.launched
            self.answers.append((path, sent - self.launched, done - sent, status))
            if path == "/readyz" and status == 200:
                self.ready_s = done - self.launched
                return
            time.sleep(POLL_GAP_S)


def quantiles(values: list[float]) -> str:
    if not values:
        return "no samples"
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (
        f"p50 {statistics.median(ordered) * 1000:6.1f} ms  p99 {p99 * 1000:6.1f} ms  "
        f"max {ordered[-1] * 1000:6.1f} ms  ({len(ordered)} requests)"
    )


@dataclass
class Restart:
    """What one restart measured."""

    facts: int
    records: int
    first_answer_s: float
    ready_s: float
    ops: list[float]
    webhook: list[float]
    webhook_ok: int
    readyz_503: int
    peak: int
    at_ready: int
    steady: int


def restart(facts: int) -> Restart:
    """Fill a fresh embedded log with `facts` facts, launch `reverser run` on it, measure."""
    with tempfile.TemporaryDirectory(prefix="bench-restart-") as tmp:
        workdir = Path(tmp)
        prefix = f"bench{uuid.uuid4().hex[:8]}"
        settings = Settings(workdir=workdir, log=LogSettings(backend="embedded", topic_prefix=prefix))
        started = time.perf_counter()
        records = asyncio.run(fill(settings, facts))
        if facts:
            print(
                f"  (filled the log with {facts:,} facts in {records:,} records in "
                f"{time.perf_counter() - started:.0f} s)",
                flush=True,
            )
        metrics_port, audit_port = free_port(), free_port()
        config_path = workdir / "config.yaml"
        config_path.write_text(yaml.safe_dump(config(workdir, prefix, metrics_port, audit_port)))
        log_path = workdir / "reverser.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("REVERSER_")}
        with log_path.open("wb") as out:
            launched = time.perf_counter()
            proc = subprocess.Popen(
                [sys.executable, "-m", "pipeline.cli", "run", "--config", str(config_path)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )
        try:
            probe = Probe(metrics_port, audit_port, launched)
            poller = threading.Thread(target=probe.run, args=(lambda: proc.poll() is None,), daemon=True)
            poller.start()
            poller.join(READY_TIMEOUT_S + 30)
            if probe.ready_s is None:
                tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
                raise RuntimeError(f"reverser run never became ready:\n{tail}")
            peak = proc_status(proc.pid, "VmHWM")
            at_ready = proc_status(proc.pid, "VmRSS")
            time.sleep(SETTLE_S)
            samples = []
            for _ in range(5):
                samples.append(proc_status(proc.pid, "VmRSS"))
                time.sleep(0.5)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    ready = probe.ready_s
    during = [a for a in probe.answers if a[1] < ready]
    return Restart(
        facts=facts,
        records=records,
        first_answer_s=probe.first_answer_s or 0.0,
        ready_s=ready,
        ops=[latency for path, _sent, latency, _status in during if path != "audit"],
        webhook=[latency for path, _sent, latency, _status in during if path == "audit"],
        webhook_ok=sum(1 for path, _s, _l, status in during if path == "audit" and status == 200),
        readyz_503=sum(1 for path, _s, _l, status in during if path == "/readyz" and status == 503),
        peak=peak,
        at_ready=at_ready,
        steady=int(statistics.median(samples)),
    )


def main() -> None:
    load_before = os.getloadavg()
    print("baseline: the same restart on an empty fact log", flush=True)
    base = restart(0)
    print(f"restart on {FACTS:,} facts (REVERSER_BENCH_RESTART_FACTS)", flush=True)
    full = restart(FACTS)
    load_after = os.getloadavg()
    mib = 1024 * 1024
    print(
        f"restart on {full.facts:,} facts ({full.records:,} records) vs an empty log, "
        f"{os.cpu_count()} CPUs, load average {'/'.join(f'{x:.2f}' for x in load_before)} before, "
        f"{'/'.join(f'{x:.2f}' for x in load_after)} after"
    )
    print(
        f"  first HTTP answer      {full.first_answer_s:6.2f} s after launch, "
        f"empty log {base.first_answer_s:5.2f} s, "
        f"ratio {full.first_answer_s / base.first_answer_s:4.2f}  (target <= 2 s)"
    )
    print(
        f"  ready                  {full.ready_s:6.2f} s after launch, empty log {base.ready_s:5.2f} s "
        f"({full.readyz_503} /readyz answers were 503 before; "
        f"{full.facts / max(full.ready_s - full.first_answer_s, 1e-9):,.0f} facts/s from the first answer "
        f"to ready)"
    )
    print(f"  ops during rebuild     {quantiles(full.ops)}  (target p99 <= 100 ms)")
    print(f"  ops, empty log         {quantiles(base.ops)}")
    print(
        f"  webhook during rebuild {quantiles(full.webhook)}, "
        f"{full.webhook_ok} of {len(full.webhook)} answered 200"
    )
    print(
        f"  RSS                    peak {full.peak / mib:6.0f} MiB, "
        f"at ready {full.at_ready / mib:6.0f} MiB, steady {full.steady / mib:6.0f} MiB "
        f"(after the first sweep); empty log steady "
        f"{base.steady / mib:4.0f} MiB"
    )
    print(f"  ratio                  peak / steady {full.peak / full.steady:5.2f}  (target <= 1.5)")


if __name__ == "__main__":
    main()
