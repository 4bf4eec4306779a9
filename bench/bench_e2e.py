"""End to end at a steady rate: mutation response to commit on the remote, with three replicas.

The environment of `make chaos` without the faults (real apiserver, three Kafka nodes, three
`reverser run` replicas behind HAProxy, a smart-HTTP Git remote). alice patches ConfigMaps of one
target and bob of another at a steady combined RATE per second for DURATION_S. For each mutation
the latency is the time from its response to the first accepted push whose commit carries that
version or a later one of the same object (a version replaced inside a commit window is published
by the window's commit). Reported as p50/p99 and as a ratio of (commit window + attribution
grace), the floor the design sets: a change waits for its window to close and for the grace.

Halfway through, the replica that owns the first target's branch is SIGKILLed and restarted
`RESTART_AFTER_S` later, as an OOM kill and a pod restart would do. The changes sent from the kill
until `RECOVERY_S` after it are the ones the crash held up: their p50 is reported beside the steady
p50 of the changes sent before the kill, with the target of issue 32 (post-kill p50 <= steady p50
+ the commit window). `REVERSER_BENCH_E2E_RATE` and `REVERSER_BENCH_E2E_DURATION_S` change the
load (the defaults fit a 2-core machine), `REVERSER_BENCH_E2E_OBJECTS` the ConfigMaps per user
(default one per 2 mutations/s of the rate, at least 40); `REVERSER_BENCH_E2E_KILL=0` leaves the
kill out.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kubernetes_asyncio import client

from bench.e2e_stages import StageSampler, stage_report
from tests.chaos.env import COMMIT_WINDOW_S, GRACE_MS, ChaosEnv, chaos_env
from tests.chaos.history import first_pushes, read_files, read_transitions
from tests.chaos.oracle import Transition, percentile
from tests.chaos.workload import fingerprint
from tests.e2e.cluster.controlplane import build_binaries
from tests.e2e.kube import kube_client

RATE = float(os.environ.get("REVERSER_BENCH_E2E_RATE", "50"))  # mutations per second, both users
DURATION_S = float(os.environ.get("REVERSER_BENCH_E2E_DURATION_S", "60"))
KILL = os.environ.get("REVERSER_BENCH_E2E_KILL", "1") != "0"
RESTART_AFTER_S = 5.0
# the changes sent this long after the kill are the ones the crash held up
RECOVERY_S = RESTART_AFTER_S + COMMIT_WINDOW_S + GRACE_MS / 1000
# ConfigMaps per user: one object's patches go one at a time, so the objects bound the patches in
# flight (80 objects at a 0.5 s round trip cap the rate near 160/s); by default one per 2/s sent
OBJECTS = int(os.environ.get("REVERSER_BENCH_E2E_OBJECTS", str(max(40, int(RATE) // 2))))
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


Sent = tuple[str, str, int, float]  # branch, path, version sent, response time (monotonic)


@dataclass(frozen=True, slots=True)
class Kill:
    """The owner kill: which replica, the branches it owned, and when (monotonic)."""

    replica: int
    branches: frozenset[str]
    at: float


def _latencies(sent: list[Sent], transitions: list[Transition]) -> list[float]:
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
    sent: list[Sent] = []
    kill: Kill | None = None
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
        restart: asyncio.Task[None] | None = None
        for n in range(total):
            delay = started + n / RATE - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(mutate(n)))
            if KILL and kill is None and n == total // 2:
                kill = await _kill_owner(env, targets[0].branch)
                restart = asyncio.create_task(_restart_later(env.replicas[kill.replica].start))
        await asyncio.gather(*tasks)
        if restart is not None:
            await restart
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
    if kill is not None:
        for line in _kill_report(kill, sent, transitions, p50):
            print(line)
    for line in stage_report(sampler):
        print(line)
    print(f"  load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


async def _kill_owner(env: ChaosEnv, branch: str) -> Kill:
    """SIGKILL the replica whose commit worker owns `branch` (the first replica if none says)."""
    owners = env.branch_owners()
    victim = owners.get(branch, 0)
    owned = frozenset(b for b, index in owners.items() if index == victim) | {branch}
    at = time.monotonic()
    await asyncio.to_thread(env.replicas[victim].kill)
    print(
        f"  SIGKILLed replica-{victim} (owner of {', '.join(sorted(owned))}); "
        f"restart in {RESTART_AFTER_S:.0f} s"
    )
    return Kill(victim, owned, at)


async def _restart_later(start: Callable[[], None]) -> None:
    await asyncio.sleep(RESTART_AFTER_S)
    await asyncio.to_thread(start)


def _kill_report(kill: Kill, sent: list[Sent], transitions: list[Transition], steady_p50: float) -> list[str]:
    """Steady p50 (sent before the kill) against the p50 of the changes the kill held up."""
    before = [s for s in sent if s[3] < kill.at]
    held = [s for s in sent if s[0] in kill.branches and kill.at <= s[3] < kill.at + RECOVERY_S]
    before_p50 = percentile(_latencies(before, transitions), 0.5)
    held_latencies = _latencies(held, transitions)
    held_p50 = percentile(held_latencies, 0.5)
    bound = before_p50 + COMMIT_WINDOW_S
    return [
        f"  owner kill: {len(held_latencies)} changes of its branches sent in the "
        f"{RECOVERY_S:.0f} s after it",
        f"    steady p50 before the kill {before_p50:.2f} s; post-kill p50 {held_p50:.2f} s "
        f"({held_p50 / before_p50:.2f}x the steady p50; "
        f"target <= steady p50 + commit window = {bound:.2f} s: "
        f"{'met' if held_p50 <= bound else 'NOT met'})",
        f"    (all changes, kill included: p50 {steady_p50:.2f} s)",
    ]


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
