"""Time to commit of a cluster without audit delivery: configured-author against attribution on.

The service as `reverser run` runs it, in this process, on the embedded log with a bare remote and
no audit webhook (the managed-cluster case). CHANGES live ConfigMap creations are appended at once;
the time to commit of a run is from that append until the remote's branch holds every file. Two
runs in one process, same machine, same load:
- audit: attribution on with the default grace and maximum wait, and no fact will ever come, so
  each change is held until `attribution.max_wait_ms` and committed as unresolved (today's default);
- configured-author: the target's mode, the committer authors at once.

Printed: both times, their ratio (audit / configured-author) and the attribution defaults that
set the floor of the audit run. The configured-author run's time is the pipeline's own latency.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import tempfile
import time
from pathlib import Path

from pipeline.authormode import AttributionMode
from pipeline.config import (
    AttributionSettings,
    AuditSettings,
    LagSettings,
    LogSettings,
    MetricsSettings,
    ProviderSettings,
    Settings,
    TargetSettings,
)
from pipeline.demo.recording import WatchRecordBuilder, WatchStep
from pipeline.demo.runner import ensure_bare_remote
from pipeline.log.topics import TopicNames
from pipeline.service.app import Service
from tests.support.net import free_port

CHANGES = 20
TIMEOUT_S = 120.0
POLL_S = 0.05


def _settings(workdir: Path, remote: Path, mode: AttributionMode) -> Settings:
    return Settings(
        workdir=workdir,
        log=LogSettings(backend="embedded", fsync=False),
        metrics=MetricsSettings(addr=f"127.0.0.1:{free_port()}"),
        audit=AuditSettings(enabled=False),
        lag=LagSettings(enabled=False),
        providers=[ProviderSettings(name="git", url=str(remote), default_branch="main", commit_window_s=0)],
        targets=[TargetSettings(name="t", provider="git", path="live", attribution=mode)],
    )


def _files_on(remote: Path) -> int:
    listed = subprocess.run(
        ["git", f"--git-dir={remote}", "ls-tree", "-r", "--name-only", "main"],
        capture_output=True,
        text=True,
        check=False,
    )
    return len(listed.stdout.split()) if listed.returncode == 0 else 0


async def _time_to_commit_s(root: Path, mode: AttributionMode) -> float:
    remote = root / f"{mode}.git"
    await asyncio.to_thread(ensure_bare_remote, remote)
    settings = _settings(root / f"{mode}-work", remote, mode)
    service = Service(settings)
    await service.start()
    try:
        builder = WatchRecordBuilder("default", "default", "t", "shop")
        records = [
            builder.live(
                WatchStep(
                    "ADDED",
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {
                            "name": f"cm-{i}",
                            "namespace": "shop",
                            "uid": f"u-{i}",
                            "resourceVersion": str(i + 1),
                        },
                        "data": {"i": str(i)},
                    },
                )
            )
            for i in range(CHANGES)
        ]
        topic = TopicNames.for_prefix(settings.log.topic_prefix).watch_events
        started = time.perf_counter()
        await service.log.append_many(topic, records)
        while await asyncio.to_thread(_files_on, remote) < CHANGES:
            if time.perf_counter() - started > TIMEOUT_S:
                raise TimeoutError(f"{mode}: not all {CHANGES} changes committed within {TIMEOUT_S:.0f} s")
            await asyncio.sleep(POLL_S)
        return time.perf_counter() - started
    finally:
        await service.stop()


async def _run() -> None:
    defaults = AttributionSettings()
    with tempfile.TemporaryDirectory(prefix="bench-author-mode-") as tmp:
        root = Path(tmp)
        configured = await _time_to_commit_s(root, AttributionMode.CONFIGURED_AUTHOR)
        audit = await _time_to_commit_s(root, AttributionMode.AUDIT)
    print(f"{CHANGES} changes, no audit webhook, load average {os.getloadavg()[0]:.2f}")
    print(f"  configured-author: {configured:6.2f} s to commit")
    print(
        f"  audit (no facts):  {audit:6.2f} s to commit "
        f"(grace {defaults.grace_ms} ms, max wait {defaults.max_wait_ms} ms)"
    )
    print(f"  ratio audit / configured-author: {audit / configured:.1f}x")


def main() -> None:
    asyncio.run(_run())
