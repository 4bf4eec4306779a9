"""`/healthz` while the audit ingress decodes the most expensive request its defaults allow.

A `reverser run` process (embedded log, audit webhook and metrics on loopback) receives the worst
bodies of `tests/audit/worst.py` (4,096 padded events in 3 MiB; collection deletes listing 10,000
uids each in 3 MiB) while another thread probes `/healthz` back to back. Figures: the request's
duration, the slowest health answer during it, and that answer as a ratio against the median
health answer of the idle process measured in the same run. A liveness probe's usual timeout is
1 s, so the slowest answer must stay well under that.
"""

from __future__ import annotations

import http.client
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

from tests.audit.worst import worst_events_body, worst_uids_body

ROUNDS = int(os.environ.get("BENCH_HEALTH_ROUNDS", "5"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _health(port: int) -> float:
    started = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.request("GET", "/healthz")
    response = connection.getresponse()
    response.read()
    connection.close()
    if response.status != 200:
        raise RuntimeError(f"/healthz answered {response.status}")
    return time.perf_counter() - started


def _post(port: int, body: bytes) -> float:
    started = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    connection.request("POST", "/audit-webhook/default", body, {"Content-Type": "application/json"})
    response = connection.getresponse()
    text = response.read()
    connection.close()
    if response.status != 200:
        raise RuntimeError(f"the audit webhook answered {response.status}: {text[:200]!r}")
    return time.perf_counter() - started


def main() -> None:
    audit_port, metrics_port = _free_port(), _free_port()
    with tempfile.TemporaryDirectory(prefix="bench-health-") as workdir:
        config = Path(workdir) / "config.yaml"
        config.write_text(yaml.safe_dump({"workdir": workdir, "lag": {"enabled": False}}))
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pipeline.cli",
                "run",
                "--config",
                str(config),
                "--audit-addr",
                f"127.0.0.1:{audit_port}",
                "--metrics-addr",
                f"127.0.0.1:{metrics_port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    _health(metrics_port)
                    _post(audit_port, b'{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[]}')
                    break
                except (OSError, RuntimeError):
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            idle = statistics.median(_health(metrics_port) for _ in range(50))
            print(f"idle /healthz median: {idle * 1000:.2f} ms (baseline)")
            for shape, build in (("events", worst_events_body), ("uids", worst_uids_body)):
                body = build()
                rounds = [_during(audit_port, metrics_port, body) for _ in range(ROUNDS)]
                worst_took = max(t for t, _ in rounds)
                worst_health = max(h for _, h in rounds)
                print(
                    f"worst {shape} request ({len(body) / 2**20:.2f} MiB): request {worst_took:.3f} s, "
                    f"slowest /healthz during it {worst_health * 1000:.1f} ms = "
                    f"{worst_health / idle:.0f}x idle ({'under' if worst_health < 1 else 'OVER'} 1 s)"
                )
        finally:
            server.terminate()
            server.wait(timeout=30)


def _during(audit_port: int, metrics_port: int, body: bytes) -> tuple[float, float]:
    """(request seconds, slowest health answer while it was in flight)."""
    answers: list[float] = []
    done = threading.Event()

    def probe() -> None:
        while not done.is_set():
            answers.append(_health(metrics_port))

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        took = _post(audit_port, body)
    finally:
        done.set()
        prober.join()
    return took, max(answers)
