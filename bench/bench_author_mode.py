"""Time to commit of a cluster without audit delivery: configured-author against attribution on.

The service as `reverser run` runs it, in this process, on the embedded log with a bare remote and
no audit webhook (the managed-cluster case). CHANGES live ConfigMap creations are appended one
every SPACING_S (a steady writer, so commit windows close by their age as well as by silence),
and each change's latency is from its append until the remote's branch holds its file (pushes
without a cooldown, `push_cooldown_s: 0`, so the remote shows each commit when it is made; the
default 5 s cooldown batches pushes, not commits). Two runs
in one process, same machine, same load, commit window WINDOW_S:
- configured-author: the target's mode, the committer authors at once. Checked against the
  issue's bound: every change on the remote within the commit window + 1 s, and every commit
  authored by the configured identity;
- audit: attribution on with the default grace and maximum wait, and no fact will ever come, so
  each change is held until `attribution.max_wait_ms` and committed as unresolved.

Printed: each run's latencies (median, max), the bound and whether it held, the authors seen, and
the ratio of the maximum latencies (audit / configured-author).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from pipeline.authormode import AttributionMode
from pipeline.config import (
    AttributionSettings,
    AuditSettings,
    CommitterSettings,
    LagSettings,
    LogSettings,
    MetricsSettings,
    ProviderSettings,
    Settings,
    TargetSettings,
)
from pipeline.demo.recording import WatchRecordBuilder, WatchStep
from pipeline.demo.runner import ensure_bare_remote
from pipeline.log.api import PendingRecord
from pipeline.log.topics import TopicNames
from pipeline.service.app import Service
from tests.support.net import free_port

CHANGES = 20
SPACING_S = 0.2
WINDOW_S = 1
TIMEOUT_S = 120.0
POLL_S = 0.02
COMMITTER = "Ops Bot <ops@example.com>"


def _settings(workdir: Path, remote: Path, mode: AttributionMode) -> Settings:
    return Settings(
        workdir=workdir,
        log=LogSettings(backend="embedded", fsync=False),
        metrics=MetricsSettings(addr=f"127.0.0.1:{free_port()}"),
        audit=AuditSettings(enabled=False),
        lag=LagSettings(enabled=False),
        providers=[
            ProviderSettings(
                name="git",
                url=str(remote),
                default_branch="main",
                commit_window_s=WINDOW_S,
                committer=CommitterSettings(name="Ops Bot", email="ops@example.com"),
                push_cooldown_s=0,
            )
        ],
        targets=[TargetSettings(name="t", provider="git", path="live", attribution=mode)],
    )


def _git(remote: Path, *args: str) -> list[str]:
    listed = subprocess.run(
        ["git", f"--git-dir={remote}", *args], capture_output=True, text=True, check=False
    )
    return listed.stdout.splitlines() if listed.returncode == 0 else []


def _committed(remote: Path) -> set[str]:
    """The ConfigMaps whose file is on the remote's branch, by name."""
    return {Path(name).stem for name in _git(remote, "ls-tree", "-r", "--name-only", "main")}


def _configmap(builder: WatchRecordBuilder, i: int) -> PendingRecord:
    meta = {"name": f"cm-{i}", "namespace": "shop", "uid": f"u-{i}", "resourceVersion": str(i + 1)}
    return builder.live(
        WatchStep("ADDED", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"i": str(i)}})
    )


@dataclass(frozen=True, slots=True)
class Run:
    """One run's latency per change (s, in order) and the authors of its commits."""

    latencies_s: list[float]
    authors: set[str]


async def _run_mode(root: Path, mode: AttributionMode) -> Run:
    remote = root / f"{mode}.git"
    await asyncio.to_thread(ensure_bare_remote, remote)
    settings = _settings(root / f"{mode}-work", remote, mode)
    service = Service(settings)
    await service.start()
    try:
        builder = WatchRecordBuilder("default", "default", "t", "shop")
        topic = TopicNames.for_prefix(settings.log.topic_prefix).watch_events
        appended: dict[str, float] = {}
        seen: dict[str, float] = {}

        async def append() -> None:
            for i in range(CHANGES):
                await service.log.append_many(topic, [_configmap(builder, i)])
                appended[f"cm-{i}"] = time.perf_counter()
                await asyncio.sleep(SPACING_S)

        writer = asyncio.create_task(append())
        started = time.perf_counter()
        while len(seen) < CHANGES:
            if time.perf_counter() - started > TIMEOUT_S:
                raise TimeoutError(f"{mode}: not all {CHANGES} changes committed within {TIMEOUT_S:.0f} s")
            await asyncio.sleep(POLL_S)
            now = time.perf_counter()
            for name in await asyncio.to_thread(_committed, remote):
                if name in appended:
                    seen.setdefault(name, now)
        await writer
        authors = set(await asyncio.to_thread(_git, remote, "log", "--format=%an <%ae>", "main"))
        return Run([seen[f"cm-{i}"] - appended[f"cm-{i}"] for i in range(CHANGES)], authors)
    finally:
        await service.stop()


def _shown(run: Run) -> str:
    ordered = sorted(run.latencies_s)
    return f"median {ordered[len(ordered) // 2]:5.2f} s, max {ordered[-1]:5.2f} s"


async def _run() -> None:
    defaults = AttributionSettings()
    with tempfile.TemporaryDirectory(prefix="bench-author-mode-") as tmp:
        root = Path(tmp)
        configured = await _run_mode(root, AttributionMode.CONFIGURED_AUTHOR)
        audit = await _run_mode(root, AttributionMode.AUDIT)
    bound_s = WINDOW_S + 1.0
    held = max(configured.latencies_s) <= bound_s and configured.authors == {COMMITTER}
    print(
        f"{CHANGES} changes one every {SPACING_S} s, commit window {WINDOW_S} s, no audit webhook, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print(f"  configured-author: {_shown(configured)} to commit; authors {sorted(configured.authors)}")
    print(f"    every change within window + 1 s ({bound_s:.1f} s) as {COMMITTER}: {'yes' if held else 'NO'}")
    print(
        f"  audit (no facts):  {_shown(audit)} to commit; authors {sorted(audit.authors)} "
        f"(grace {defaults.grace_ms} ms, max wait {defaults.max_wait_ms} ms)"
    )
    ratio = max(audit.latencies_s) / max(configured.latencies_s)
    print(f"  ratio of the maxima audit / configured-author: {ratio:.1f}x")
    if not held:
        raise SystemExit("configured-author missed the bound of the commit window + 1 s")


def main() -> None:
    asyncio.run(_run())
