"""Seeded faults against the chaos environment, each recording what it did and what it observed.

`pause_audit_holder` and `cut_audit_network` act on the path from HAProxy to a replica's ingress.
With `CHAOS_FACTS=admission` that path carries the admission webhook's reviews instead of audit
batches, so the same faults stop a replica holding a review and cut the reviews' path; the facts
topic is the same one either way (`kill_leader_broker`).
"""

from __future__ import annotations

import asyncio
import datetime
import os
import random
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum

from pipeline.log.topics import TopicNames
from tests.chaos.env import MAX_WAIT_MS, ChaosEnv, watch_shards
from tests.support.kafka_leaders import partition_leaders

__all__ = ["Fault", "FaultLog", "Faults", "ZombieWindow"]

OWNERSHIP_MOVE_TIMEOUT_S = 90.0
LEADER_TAKEOVER_TIMEOUT_S = 60.0
STEP_DOWN_TIMEOUT_S = 60.0
GIT_OUTAGE_S = 30.0
# A replica stopped or cut off while it holds an audit batch: longer than the attribution hold
# (env.MAX_WAIT_MS), so the change is committed unresolved and named by its late fact, and shorter
# than the apiserver's 30 s webhook request timeout, after which it drops the batch unretried.
HOLD_FAULT_S = (float(MAX_WAIT_MS) / 1000 + 2.0, 27.0)
HOLDING_REQUEST_TIMEOUT_S = 30.0
FOREIGN_PUSH_ATTEMPTS = 60
POLL_S = 0.5


class Fault(StrEnum):
    KILL_LEADER = "kill_watch_leader"
    KILL_OWNER = "kill_branch_owner"
    PAUSE_LEADER = "pause_watch_leader"
    KILL_BROKER = "kill_leader_broker"
    GIT_OUTAGE = "git_503"
    FOREIGN_PUSH = "foreign_push"
    APISERVER_RESTART = "apiserver_restart"
    PAUSE_AUDIT_HOLDER = "pause_audit_holder"
    CUT_AUDIT_NETWORK = "cut_audit_network"


@dataclass(frozen=True)
class ZombieWindow:
    """A paused watch leader from its SIGCONT until it reported leading nothing: whatever it got
    committed on the watch topics in between, under its writer header, is a zombie write."""

    writer_prefix: str  # `<host>-<pid>-`: the replica's identity (pipeline.watch.manager) up to its nonce
    resumed_ms: int
    stepped_down_ms: int

    def wrote(self, writer: bytes | None) -> bool:
        """Whether a record's writer header names the paused replica."""
        return writer is not None and writer.decode(errors="replace").startswith(self.writer_prefix)

    def holds(self, writer: bytes | None, timestamp_ms: int) -> bool:
        """Whether the record is a zombie write: the paused replica's, in the window."""
        return self.wrote(writer) and self.resumed_ms <= timestamp_ms <= self.stepped_down_ms


@dataclass
class FaultLog:
    """What the faults did: counts by kind, and the observations the oracle checks."""

    counts: Counter[str] = field(default_factory=Counter)
    zombie_windows: list[ZombieWindow] = field(default_factory=list)
    zombie_writes: int = 0  # counted from the log after the run (test_chaos), over zombie_windows
    ownership_moves: list[tuple[list[str], bool]] = field(default_factory=list)  # (branches, moved)
    foreign_files: list[tuple[str, str]] = field(default_factory=list)  # (branch, path)
    notes: list[str] = field(default_factory=list)
    timeline: list[tuple[str, str, str]] = field(default_factory=list)  # (kind, start, end) UTC
    last_fault_end: float = 0.0


def _utc() -> str:
    """Wall-clock time as the replicas' logs print it, to line faults up with log lines."""
    return datetime.datetime.now(datetime.UTC).strftime("%H:%M:%S.%f")[:-3]


async def _poll(predicate: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(POLL_S)
    return True


class Faults:
    """Runs every fault kind once, in a seeded order with seeded gaps, against `env`."""

    def __init__(self, env: ChaosEnv, seed: int) -> None:
        self.env = env
        self.rng = random.Random(seed)
        self.log = FaultLog()

    def schedule(self) -> list[Fault]:
        """Every kind once, seeded order; CHAOS_FAULTS=kind,kind narrows it (to debug one fault)."""
        chosen = os.environ.get("CHAOS_FAULTS")
        order = [Fault(k) for k in chosen.split(",")] if chosen else list(Fault)
        self.rng.shuffle(order)
        return order

    async def run(self, gap_s: tuple[float, float]) -> None:
        actions: dict[Fault, Callable[[], Awaitable[None]]] = {
            Fault.KILL_LEADER: self.kill_leader,
            Fault.KILL_OWNER: self.kill_owner,
            Fault.PAUSE_LEADER: self.pause_leader,
            Fault.KILL_BROKER: self.kill_broker,
            Fault.GIT_OUTAGE: self.git_outage,
            Fault.FOREIGN_PUSH: self.foreign_push,
            Fault.APISERVER_RESTART: self.apiserver_restart,
            Fault.PAUSE_AUDIT_HOLDER: self.pause_audit_holder,
            Fault.CUT_AUDIT_NETWORK: self.cut_audit_network,
        }
        for fault in self.schedule():
            await asyncio.sleep(self.rng.uniform(*gap_s))
            started = _utc()
            await actions[fault]()
            self.log.timeline.append((fault.value, started, _utc()))
            self.log.counts[fault] += 1
            self.log.last_fault_end = time.monotonic()

    # replicas -----------------------------------------------------------------------------------
    async def _kill_and_restart(self, index: int) -> None:
        replica = self.env.replicas[index]
        owned = sorted(b for b, owner in self.env.branch_owners().items() if owner == index)
        await asyncio.to_thread(replica.kill)
        survivors = {i for i in range(len(self.env.replicas)) if i != index}

        def moved() -> bool:
            owners = self.env.branch_owners()
            return all(owners.get(b) in survivors for b in owned)

        self.log.ownership_moves.append((owned, await _poll(moved, OWNERSHIP_MOVE_TIMEOUT_S)))
        await asyncio.to_thread(replica.start)

    async def kill_leader(self) -> None:
        leaders = self.env.watch_leaders()
        if not leaders:
            self.log.notes.append("kill_watch_leader: no replica reported the lease; killed replica 0")
        await self._kill_and_restart(leaders[0] if leaders else 0)

    async def kill_owner(self) -> None:
        owners = self.env.branch_owners()
        leaders = set(self.env.watch_leaders())
        candidates = sorted({i for i in owners.values() if i not in leaders}) or sorted(set(owners.values()))
        if not candidates:
            self.log.notes.append("kill_branch_owner: no replica reported owning a branch")
            candidates = [self.rng.randrange(len(self.env.replicas))]
        await self._kill_and_restart(self.rng.choice(candidates))

    async def pause_leader(self) -> None:
        """SIGSTOP a watch leader until other replicas lead what it led, then SIGCONT it.

        Whatever the resumed process gets committed on the watch topics before it notices it lost
        its Leases is a zombie write. It is resumed only once the others report leading every shard,
        which they do once they hold the shard's fencing producer. Its writes are read back from
        the log after the run (`ZombieWindow`), not counted by its own metric: a transaction it
        committed just before the SIGSTOP is acknowledged to it after the SIGCONT, and is no zombie
        write. Once resumed, the replica may be dealt a shard again, so its writes are counted only
        until it first reports leading none.
        """
        leaders = self.env.watch_leaders()
        if not leaders:
            self.log.notes.append("pause_watch_leader: no replica reported the lease")
            return
        index = leaders[0]
        zombie = self.env.replicas[index]
        shards = watch_shards()
        pid = zombie.pid
        zombie.pause()
        others = [i for i in range(len(self.env.replicas)) if i != index]
        took_over = await _poll(
            lambda: sum(self.env.shards_led(i) for i in others) >= shards, LEADER_TAKEOVER_TIMEOUT_S
        )
        if not took_over:
            self.log.notes.append("pause_watch_leader: no other replica took the lease while it was stopped")
        resumed_ms = int(time.time() * 1000)
        zombie.resume()
        stepped_down = await _poll(
            lambda: self.env.metric(zombie, "reverser_watch_leader") == 0.0, STEP_DOWN_TIMEOUT_S
        )
        if not stepped_down:
            self.log.notes.append("pause_watch_leader: the resumed replica still reports the lease")
        if took_over and pid is not None:
            self.log.zombie_windows.append(
                ZombieWindow(f"{socket.gethostname()}-{pid}-", resumed_ms, int(time.time() * 1000))
            )

    async def pause_audit_holder(self) -> None:
        """SIGSTOP a replica the moment it holds an audit batch (sent to it, not answered), SIGCONT later.

        The batch's facts reach the log only after the pause, later than the hold: the changes it
        names are committed unresolved and must be named by their late facts (git notes).
        """
        paths = self.env.relays.paths
        for path in paths:
            path.request_sent.clear()

        def first_request() -> int | None:
            # a batch is in flight for milliseconds: wait for the next one rather than poll for it
            deadline = time.monotonic() + HOLDING_REQUEST_TIMEOUT_S
            while time.monotonic() < deadline:
                for index, path in enumerate(paths):
                    if path.request_sent.wait(timeout=0.001):
                        return index
            return None

        holder = await asyncio.to_thread(first_request)
        if holder is None:
            self.log.notes.append("pause_audit_holder: no audit request reached a replica")
        candidates = [holder] if holder is not None else list(range(len(paths)))
        replica = self.env.replicas[self.rng.choice(candidates)]
        replica.pause()
        await asyncio.sleep(self.rng.uniform(*HOLD_FAULT_S))
        replica.resume()

    async def cut_audit_network(self) -> None:
        """Drop the network between the apiserver (through HAProxy) and one replica, then restore it.

        The batch in flight on the cut path waits, as TCP retransmissions would; HAProxy's checks
        through the same path fail, so new batches go to the other replicas meanwhile.
        """
        path = self.env.relays.paths[self.rng.randrange(len(self.env.relays.paths))]
        path.cut()
        await asyncio.sleep(self.rng.uniform(*HOLD_FAULT_S))
        path.restore()

    # Kafka ---------------------------------------------------------------------------------------
    async def kill_broker(self) -> None:
        topic = TopicNames.for_prefix(self.env.topic_prefix).audit_facts
        leaders = Counter((await partition_leaders(self.env.kafka.bootstrap, topic)).values())
        node = self.env.kafka.node(leaders.most_common(1)[0][0])
        await asyncio.to_thread(node.kill)
        await asyncio.sleep(self.rng.uniform(5.0, 15.0))
        await asyncio.to_thread(node.start)

    # Git -----------------------------------------------------------------------------------------
    async def git_outage(self) -> None:
        self.env.git.refuse_for(GIT_OUTAGE_S)
        await asyncio.sleep(GIT_OUTAGE_S)

    async def foreign_push(self) -> None:
        """Somebody else pushes to a managed branch (outside the target path); it must survive."""
        branch = self.env.targets[self.rng.randrange(2)].branch
        path = f"docs/foreign-{len(self.log.foreign_files)}.md"
        clone = self.env.workdir / f"foreign-{len(self.log.foreign_files)}"
        url = f"{self.env.git.base_url}/{self.env.repo.name}"
        auth = ["-c", f"http.extraHeader=Authorization: {self.env.git.expected}"]
        identity = ["-c", "user.name=Foreign Pusher", "-c", "user.email=foreign@example.invalid"]

        def push() -> None:
            # The pipeline pushes to a busy branch every second or so: rebase and retry until it lands.
            git = ["git", "-C", str(clone), *auth, *identity]
            subprocess.run(
                ["git", *auth, "clone", "--quiet", "--branch", branch, url, str(clone)],
                check=True,
                capture_output=True,
            )
            (clone / path).parent.mkdir(parents=True, exist_ok=True)
            (clone / path).write_text("written by hand\n")
            subprocess.run([*git, "add", path], check=True)
            subprocess.run([*git, "commit", "--quiet", "-m", "a hand-made change"], check=True)
            for _ in range(FOREIGN_PUSH_ATTEMPTS):
                if (
                    subprocess.run(
                        [*git, "push", "--quiet", "origin", branch], capture_output=True
                    ).returncode
                    == 0
                ):
                    return
                subprocess.run([*git, "pull", "--quiet", "--rebase", "origin", branch], capture_output=True)
            raise AssertionError(f"the foreign push to {branch} never landed")

        await asyncio.to_thread(push)
        self.log.foreign_files.append((branch, path))

    # the control plane ----------------------------------------------------------------------------
    async def apiserver_restart(self) -> None:
        await asyncio.to_thread(self.env.plane.restart_apiserver)
