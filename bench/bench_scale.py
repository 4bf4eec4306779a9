"""First sync at scale: N ConfigMaps already on a real kube-apiserver, then `reverser run` starts.

The objects (in two namespaces, 1 KiB of data each) are created before the service starts, with
concurrent creates. The figures, from the service's launch: the time until every object is a
file on the Git remote's `main`, the service's peak RSS (VmHWM), its CPU seconds (its own and its
reaped children's: git), the ops endpoint's answer times while it syncs (`/healthz`, `/readyz`,
`/metrics` in turn, every 20 ms; p99 and worst, and `/healthz`'s worst alone), the largest
event-loop stall the service itself measured (`reverser_event_loop_lag_max_seconds`) with how
many of its 25 ms ticks came more than 50 ms late (`reverser_event_loop_lag_seconds`), the most
CPU time the loop's thread used between two ticks (`reverser_event_loop_held_max_seconds`: the
task steps a timer waited behind, often several in one loop iteration) with how many ticks it
exceeded 50 ms, and the machine's load average
as the sync ends: on a shared 2-core host most of a long stall is the time the kernel ran other
processes (docs/operations.md), so a figure is read with its load.

Baselines, in the same command: a paginated LIST of the same collection with `json.loads` of
every page, the floor any mirror pays to read it (the sync time is given as a multiple of it);
and a first sync of a tenth of the objects (`REVERSER_BENCH_SCALE_BASELINE`, default a tenth of
the smallest size, at least 500), run first on its own control plane: each size's peak RSS, loop
stall and `/healthz` worst are given as ratios against it, and its memory per object as the
slope between the two runs (what one more object costs, the process's fixed part left out).

Sizes: `REVERSER_BENCH_SCALE_OBJECTS` (comma-separated, default `10000`, a few minutes here;
`100000` is the full run behind the sizing table in docs/operations.md).
`REVERSER_BENCH_SCALE_PYTHONPATH` runs the service from another tree (a checkout of an older
commit) for a before/after figure in one command.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from tests.e2e.cluster.controlplane import ControlPlane, build_binaries
from tests.e2e.kube import kube_client
from tests.support.net import free_port
from tests.support.process import ReverserProcess, bare_remote

NAMESPACES = ("scale-a", "scale-b")
CREATE_CONCURRENCY = 48
DATA_BYTES = 1024
SYNC_TIMEOUT_S = 1800.0
PROBE_GAP_S = 0.02
PROBE_TIMEOUT_S = 10.0
#: The loop stall issue 32 allows; ticks later than this are counted (a bucket of the histogram).
LOOP_HOLD_LIMIT_S = 0.05
OPS_PATHS = ("/healthz", "/readyz", "/metrics")


@dataclass(frozen=True, slots=True)
class Figures:
    objects: int
    list_s: float
    sync_s: float
    peak_rss_mib: float
    cpu_s: float
    ops_p99_ms: float
    ops_max_ms: float
    healthz_max_ms: float
    ops_answers: int
    loop_lag_max_ms: float
    loop_ticks: int
    loop_ticks_over_limit: int
    loop_held_max_ms: float
    loop_held_over_limit: int
    load_1m: float


def sizes() -> list[int]:
    return [int(n) for n in os.environ.get("REVERSER_BENCH_SCALE_OBJECTS", "10000").split(",") if n]


def baseline_size(sizes: list[int]) -> int:
    configured = os.environ.get("REVERSER_BENCH_SCALE_BASELINE")
    return int(configured) if configured else max(500, min(sizes) // 10)


async def create_objects(kubeconfig: Path, total: int) -> None:
    """`total` ConfigMaps over the namespaces, `CREATE_CONCURRENCY` requests in flight."""
    async with kube_client(kubeconfig) as api:
        core = client.CoreV1Api(api)
        for namespace in NAMESPACES:
            await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        gate = asyncio.Semaphore(CREATE_CONCURRENCY)
        data = {"config.yaml": "x" * DATA_BYTES}

        async def create(n: int) -> None:
            namespace = NAMESPACES[n % len(NAMESPACES)]
            body = client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name=f"cm-{n:06d}", labels={"app": f"app-{n % 50}"}),
                data={**data, "index": str(n)},
            )
            async with gate:
                await core.create_namespaced_config_map(namespace, body)

        await asyncio.gather(*(create(n) for n in range(total)))


async def list_baseline(kubeconfig: Path) -> tuple[float, int]:
    """Seconds to LIST every namespace's ConfigMaps in pages of 500 and json.loads each page."""
    async with kube_client(kubeconfig) as api:
        started = time.perf_counter()
        count = 0
        for namespace in NAMESPACES:
            token = ""
            while True:
                query: list[tuple[str, Any]] = [("limit", 500)]
                if token:
                    query.append(("continue", token))
                response = await api.call_api(
                    f"/api/v1/namespaces/{namespace}/configmaps",
                    "GET",
                    query_params=query,
                    header_params={"Accept": "application/json"},
                    auth_settings=["BearerToken"],
                    _preload_content=False,
                )
                page = json.loads(await response.read())
                count += len(page["items"])
                token = page["metadata"].get("continue") or ""
                if not token:
                    break
        return time.perf_counter() - started, count


class OpsProbe(threading.Thread):
    """Asks the ops endpoints in turn until stopped; keeps every answer's time (errors included)."""

    def __init__(self, addr: str) -> None:
        super().__init__(daemon=True)
        self.addr = addr
        self.answers_s: list[float] = []
        self.healthz_s: list[float] = []
        self.unanswered = 0
        self._stop_flag = threading.Event()

    def run(self) -> None:
        n = 0
        while not self._stop_flag.is_set():
            path = OPS_PATHS[n % len(OPS_PATHS)]
            n += 1
            started = time.perf_counter()
            try:
                with urllib.request.urlopen(f"http://{self.addr}{path}", timeout=PROBE_TIMEOUT_S) as answer:
                    answer.read()
            except urllib.error.HTTPError:
                pass  # /readyz answers 503 until ready: still an answer
            except (urllib.error.URLError, OSError) as exc:
                if "refused" in str(exc):  # not listening yet
                    time.sleep(PROBE_GAP_S)
                    continue
                self.unanswered += 1
            took = time.perf_counter() - started
            self.answers_s.append(took)
            if path == "/healthz":
                self.healthz_s.append(took)
            time.sleep(PROBE_GAP_S)

    def stop(self) -> None:
        self._stop_flag.set()
        self.join()


def files_on_main(remote: Path) -> int:
    listing = subprocess.run(
        ["git", "--git-dir", str(remote), "ls-tree", "-r", "--name-only", "main"],
        capture_output=True,
        text=True,
        check=False,
    )
    return sum(1 for line in listing.stdout.splitlines() if "/configmaps/" in line)


def proc_figures(pid: int) -> tuple[float, float]:
    """(peak RSS in MiB, CPU seconds of the process and its reaped children)."""
    status = Path(f"/proc/{pid}/status").read_text()
    hwm_kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime stime cutime cstime
    return hwm_kib / 1024, ticks / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class LoopFigures:
    lag_max_ms: float
    ticks: int
    ticks_over_limit: int
    held_max_ms: float
    held_over_limit: int


def loop_figures(service: ReverserProcess) -> LoopFigures:
    """The longest stall of the last minute and how many ticks were later than the limit; the
    most CPU the loop held between two ticks in the last minute, and how often over the limit."""
    samples = service.metric_samples("reverser_event_loop_lag_max_seconds")
    lag_max_ms = max((value for _, value in samples), default=float("nan")) * 1000
    ticks = int(service.metric_sum("reverser_event_loop_lag_seconds_count"))
    within = int(service.metric_sum("reverser_event_loop_lag_seconds_bucket", le=str(LOOP_HOLD_LIMIT_S)))
    held = service.metric_samples("reverser_event_loop_held_max_seconds")
    held_max_ms = max((value for _, value in held), default=float("nan")) * 1000
    held_ticks = int(service.metric_sum("reverser_event_loop_held_seconds_count"))
    limit = str(LOOP_HOLD_LIMIT_S)
    held_within = int(service.metric_sum("reverser_event_loop_held_seconds_bucket", le=limit))
    return LoopFigures(lag_max_ms, ticks, ticks - within, held_max_ms, held_ticks - held_within)


def run_sync(
    workdir: Path, kubeconfig: Path, total: int, extra_env: dict[str, str] | None = None
) -> tuple[float, float, float, OpsProbe, LoopFigures, float]:
    remote = bare_remote(workdir / "remote.git")
    port = free_port()
    config = {
        "workdir": str(workdir / "work"),
        "metrics": {"addr": f"127.0.0.1:{port}"},
        "audit": {"enabled": False},
        "lag": {"enabled": False},
        "clusters": [{"name": "c", "kubeconfig": str(kubeconfig), "attribution": "configured-author"}],
        "providers": [{"name": "git", "url": str(remote)}],
        "targets": [
            {
                "name": "t",
                "provider": "git",
                "cluster": "c",
                "rules": [{"resources": ["configmaps"], "namespaces": list(NAMESPACES)}],
            }
        ],
    }
    child_path = os.environ.get("REVERSER_BENCH_SCALE_PYTHONPATH")
    # PYTHONSAFEPATH: `python -m` would otherwise put the working directory (this tree) first
    env = {"PYTHONPATH": child_path, "PYTHONSAFEPATH": "1"} if child_path else {}
    service = ReverserProcess(workdir, "reverser", config, env=env | (extra_env or {}), log_level="WARNING")
    probe = OpsProbe(f"127.0.0.1:{port}")
    probe.start()
    started = time.perf_counter()
    service.start()
    assert service.proc is not None
    try:
        deadline = time.monotonic() + SYNC_TIMEOUT_S
        while files_on_main(remote) < total:
            if service.exit_code() is not None:
                raise RuntimeError(f"reverser run exited: {service.log_path.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{files_on_main(remote)} of {total} objects after {SYNC_TIMEOUT_S} s")
            time.sleep(0.5)
        sync_s = time.perf_counter() - started
        load_1m = os.getloadavg()[0]
        probe.stop()
        rss, cpu = proc_figures(service.proc.pid)
        loop = loop_figures(service)
    finally:
        if probe.is_alive():
            probe.stop()
        service.proc.terminate()
        service.proc.wait(60)
    return sync_s, rss, cpu, probe, loop, load_1m


def measure(total: int) -> Figures:
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as directory:
        workdir = Path(directory)
        plane = ControlPlane(workdir / "plane", build_binaries())
        plane.start()
        try:
            created = time.perf_counter()
            asyncio.run(create_objects(plane.kubeconfig, total))
            print(f"  created {total:,} ConfigMaps in {time.perf_counter() - created:.1f} s", flush=True)
            list_s, listed = asyncio.run(list_baseline(plane.kubeconfig))
            assert listed == total, (listed, total)
            sync_s, rss, cpu, probe, loop, load_1m = run_sync(workdir, plane.kubeconfig, total)
        finally:
            plane.stop()
    answers = sorted(probe.answers_s)
    p99 = answers[min(len(answers) - 1, int(len(answers) * 0.99))] if answers else float("nan")
    return Figures(
        total,
        list_s,
        sync_s,
        rss,
        cpu,
        p99 * 1000,
        max(answers, default=float("nan")) * 1000,
        max(probe.healthz_s, default=float("nan")) * 1000,
        len(answers),
        loop.lag_max_ms,
        loop.ticks,
        loop.ticks_over_limit,
        loop.held_max_ms,
        loop.held_over_limit,
        load_1m,
    )


def report(figures: Figures) -> None:
    f = figures
    print(
        f"{f.objects:>7,} objects: all in the remote {f.sync_s:6.1f} s ({f.sync_s / f.list_s:.1f}x the raw "
        f"LIST+json.loads of {f.list_s:.2f} s); peak RSS {f.peak_rss_mib:.0f} MiB; CPU {f.cpu_s:.1f} s; "
        f"ops endpoint p99 {f.ops_p99_ms:.0f} ms, worst {f.ops_max_ms:.0f} ms over {f.ops_answers} answers "
        f"(/healthz worst {f.healthz_max_ms:.0f} ms); largest loop stall the service saw "
        f"{f.loop_lag_max_ms:.0f} ms, {f.loop_ticks_over_limit} of {f.loop_ticks} loop ticks over "
        f"{LOOP_HOLD_LIMIT_S * 1000:.0f} ms late; most CPU the loop held between two ticks "
        f"{f.loop_held_max_ms:.0f} ms, {f.loop_held_over_limit} ticks over that limit; "
        f"load average {f.load_1m:.1f} as the sync ended",
        flush=True,
    )


def compare(figures: Figures, base: Figures) -> None:
    """One size against the baseline sync: ratios, and memory and CPU per object as slopes."""
    f, b = figures, base
    more = f.objects - b.objects
    per_object_kib = (f.peak_rss_mib - b.peak_rss_mib) * 1024 / more if more else float("nan")
    cpu_ms = (f.cpu_s - b.cpu_s) * 1000 / more if more else float("nan")
    print(
        f"{f.objects:>7,} against the {b.objects:,}-object baseline "
        f"({f.objects / b.objects:.0f}x the objects): "
        f"peak RSS {f.peak_rss_mib / b.peak_rss_mib:.2f}x ({per_object_kib:.2f} KiB per further object), "
        f"CPU {cpu_ms:.2f} ms per further object, sync time per object "
        f"{(f.sync_s / f.objects) / (b.sync_s / b.objects):.2f}x, largest loop stall "
        f"{f.loop_lag_max_ms / b.loop_lag_max_ms:.2f}x, "
        f"/healthz worst {f.healthz_max_ms / b.healthz_max_ms:.2f}x",
        flush=True,
    )


def main() -> None:
    wanted = sizes()
    runs = [baseline_size(wanted), *wanted]
    measured: list[Figures] = []
    for total in runs:
        load = os.getloadavg()
        label = "baseline " if not measured else ""
        print(f"scale {label}{total:,}: load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
        measured.append(measure(total))
        report(measured[-1])
    for figures in measured[1:]:
        compare(figures, measured[0])
