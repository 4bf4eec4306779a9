"""End to end at a steady rate: mutation response to commit on the remote, with three replicas.

The environment of `make chaos` without the faults (real apiserver, three Kafka nodes, three
`reverser run` replicas behind HAProxy, a smart-HTTP Git remote). alice patches ConfigMaps of one
target and bob of another at a steady combined RATE per second for DURATION_S. For each mutation
the latency is the time from its response to the first accepted push whose commit carries that
version or a later one of the same object (a version replaced inside a commit window is published
by the window's commit). Reported as p50/p99 and as a ratio of (commit window + attribution
grace), the floor the design sets: a change waits for its window to close and for the grace.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from kubernetes_asyncio import client

from bench.e2e_stages import StageSampler, stage_report
from tests.chaos.env import COMMIT_WINDOW_S, GRACE_MS, ChaosEnv, chaos_env
from tests.chaos.history import first_pushes, read_files, read_transitions
from tests.chaos.oracle import Transition, percentile
from tests.chaos.workload import fingerprint
from tests.e2e.cluster.controlplane import build_binaries
from tests.e2e.kube import kube_client

RATE = 50.0  # mutations per second, both users together
DURATION_S = 60.0
OBJECTS = 40  # ConfigMaps per user
SETTLE_TIMEOUT_S = 180.0
USERS = ("alice", "bob")


def _caught_up(env: ChaosEnv, latest: dict[tuple[str, str], int]) -> bool:
    """Every object's file at its branch tip carries at least the latest version sent."""
    for branch in {b for b, _ in latest}:
        target = next(t for t in env.targets if t.branch == branch)
        files = read_files(env.repo, branch, target.path)
        for (b, path), seq in latest.items():
            if b == branch and not fingerprint(files.get(path, {})).isdigit():
                return False
            if b == branch and int(fingerprint(files[path])) < seq:
                return False
    return True


def _latencies(sent: list[tuple[str, str, int, float]], transitions: list[Transition]) -> list[float]:
    """Per mutation: first push of a version >= its own, minus its response time."""
    by_file: dict[tuple[str, str], list[tuple[int, float]]] = defaultdict(list)
    for t in transitions:
        if t.fingerprint and t.fingerprint.isdigit() and t.pushed_at is not None:
            by_file[(t.branch, t.path)].append((int(t.fingerprint), t.pushed_at))
    latencies = []
    for branch, path, seq, at in sent:
        pushed = [p for version, p in by_file[(branch, path)] if version >= seq]
        if pushed:
            latencies.append(min(pushed) - at)
    return latencies


async def _run(env: ChaosEnv) -> None:
    targets = env.targets[: len(USERS)]
    seq = 0
    latest: dict[tuple[str, str], int] = {}
    sent: list[tuple[str, str, int, float]] = []
    async with contextlib.AsyncExitStack() as stack:
        clients = {user: await stack.enter_async_context(kube_client(env.kubeconfig, user)) for user in USERS}
        for user, target in zip(USERS, targets, strict=True):
            core = client.CoreV1Api(clients[user])
            for i in range(OBJECTS):
                seq += 1
                body = client.V1ConfigMap(
                    metadata=client.V1ObjectMeta(name=f"cm-{i}"), data={"seq": str(seq)}
                )
                await core.create_namespaced_config_map(target.namespace, body)
                latest[(target.branch, target.file("configmaps", f"cm-{i}"))] = seq
        await _settle(env, latest)

        # One object's patches are sent one after another: two in flight at once could be applied
        # in either order, and the later number would then never be the object's final version.
        in_order: dict[tuple[str, str], asyncio.Lock] = defaultdict(asyncio.Lock)

        async def mutate(n: int) -> None:
            nonlocal seq
            user = USERS[n % len(USERS)]
            target = targets[n % len(USERS)]
            name = f"cm-{(n // len(USERS)) % OBJECTS}"
            async with in_order[(target.namespace, name)]:
                seq += 1
                mine = seq
                await client.CoreV1Api(clients[user]).patch_namespaced_config_map(
                    name, target.namespace, {"data": {"seq": str(mine)}}
                )
            key = (target.branch, target.file("configmaps", name))
            latest[key] = max(latest[key], mine)
            sent.append((key[0], key[1], mine, time.monotonic()))

        print(f"  load average at the start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
        sampler = StageSampler(env.replicas)
        sampling = asyncio.create_task(sampler.run())
        started = time.monotonic()
        tasks = []
        total = int(RATE * DURATION_S)
        for n in range(total):
            delay = started + n / RATE - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(mutate(n)))
        await asyncio.gather(*tasks)
        elapsed = time.monotonic() - started
        caught_up = await _settle(env, latest)
        sampling.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampling
    published = first_pushes(env.repo, env.git.pushes)
    transitions = [
        t for target in targets for t in read_transitions(env.repo, target.branch, target.path, published)
    ]
    latencies = _latencies(sent, transitions)
    floor = COMMIT_WINDOW_S + GRACE_MS / 1000
    p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
    print(
        f"e2e steady: {len(sent)} mutations in {elapsed:.1f} s ({len(sent) / elapsed:.1f}/s, "
        f"target {RATE:.0f}/s), 3 replicas, {len(latencies)} measured"
        + ("" if caught_up else f" ({len(sent) - len(latencies)} never reached the remote)")
    )
    print(f"  latency mutation -> commit on remote: p50 {p50:.2f} s, p99 {p99:.2f} s")
    print(
        f"  as a ratio of commit window + grace ({COMMIT_WINDOW_S:.0f} s + {GRACE_MS / 1000:.0f} s = "
        f"{floor:.0f} s): p50 {p50 / floor:.2f}x, p99 {p99 / floor:.2f}x "
        f"(target p99 <= 1.0x + 1 s = {floor + 1:.0f} s)"
    )
    for line in stage_report(sampler):
        print(line)
    print(f"  load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


async def _settle(env: ChaosEnv, latest: dict[tuple[str, str], int]) -> bool:
    """Wait (bounded) until the remote carries every latest version; False if it never did."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while not await asyncio.to_thread(_caught_up, env, latest):
        if time.monotonic() > deadline:
            print(
                f"  the remote did not catch up within {SETTLE_TIMEOUT_S:.0f} s",
                "(figures cover what was pushed)",
            )
            return False
        await asyncio.sleep(1.0)
    return True


def main() -> None:
    bin_dir = build_binaries()
    with tempfile.TemporaryDirectory(prefix="bench-e2e-") as tmp, chaos_env(Path(tmp), bin_dir) as env:
        asyncio.run(_run(env))
