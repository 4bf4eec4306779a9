"""Consumer groups on the embedded log: members, committed offsets, eager range rebalancing."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from prometheus_client import Counter

from pipeline.log.api import (
    Fetched,
    GroupConsumer,
    LogError,
    Membership,
    TopicPartition,
)
from pipeline.log.embedded.files import DAMAGED_FILES, group_offsets_of, previous_version, read_json
from pipeline.log.embedded.reading import Fetcher, fetch_records

if TYPE_CHECKING:
    from pipeline.log.embedded.log import EmbeddedLog

logger = logging.getLogger(__name__)


LISTENER_ERRORS = Counter(
    "reverser_log_embedded_listener_errors",
    "Rebalance listener callbacks that raised (logged; the rebalance went ahead).",
)


class GroupState:
    __slots__ = ("lock", "members", "name", "next_member", "offsets", "write_lock")

    def __init__(self, name: str, offsets: dict[TopicPartition, int]) -> None:
        self.name = name
        self.offsets = offsets
        self.members: list[EmbeddedGroupMember] = []
        self.lock = asyncio.Lock()
        # One write of the offsets file at a time (each in a thread), the newest offsets last.
        self.write_lock = asyncio.Lock()
        self.next_member = 0


class EmbeddedGroupMember(Fetcher, GroupConsumer):
    def __init__(self, log: EmbeddedLog, membership: Membership) -> None:
        super().__init__(log, membership)
        self._log = log
        self.assigned: set[TopicPartition] = set()
        self.position_map: dict[TopicPartition, int] = {}
        self.member_id = -1
        self.joined = False
        self.started = False
        self.closed = False
        self.rotation = 0
        self.waiter = None

    def positions(self) -> dict[TopicPartition, int]:
        """Positions of assigned partitions, initialised from committed offsets or the reset policy."""
        group = self._log.group(self.group_id)
        for tp in self.assigned:
            if tp not in self.position_map:
                committed = group.offsets.get(tp)
                if committed is None:
                    partition = self._log.partition(tp)
                    committed = partition.log_start if self.reset == "earliest" else partition.visible_offset
                self.position_map[tp] = committed
        return self.position_map

    async def start(self) -> None:
        if self.started:
            return
        if self.closed:
            raise LogError(f"group member of {self.group_id!r} is closed")
        self._log.require_started()
        group = self._log.group(self.group_id)
        async with group.lock:
            self.member_id = group.next_member
            group.next_member += 1
            group.members.append(self)
            self.started = True
            await rebalance(self._log, group)

    def assignment(self) -> set[TopicPartition]:
        return set(self.assigned)

    async def fetch(self, timeout_ms: int = 1000, max_records: int = 500) -> Fetched:
        self._check_active()
        return await fetch_records(self._log, self, timeout_ms, max_records)

    def _ensure_usable(self) -> None:
        self._check_active()

    async def _seek(self, tp: TopicPartition, offset: int) -> None:
        self.position_map[tp] = offset

    async def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        await self._log.persist_group_offsets(self.group_id, offsets)

    async def committed(self, tp: TopicPartition) -> int | None:
        self._log.require_started()
        return self._log.group(self.group_id).offsets.get(tp)

    async def _close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.wake()
        if not self.started or not self._log.started:
            return
        group = self._log.group(self.group_id)
        async with group.lock:
            if self in group.members:
                group.members.remove(self)
                self.assigned = set()
                if group.members:
                    await rebalance(self._log, group)

    def _check_active(self) -> None:
        if self.closed:
            raise LogError(f"group member of {self.group_id!r} is closed")
        if not self.started:
            raise LogError(f"group member of {self.group_id!r} is not started; call start() first")
        self._log.require_started()


async def tell(
    member: EmbeddedGroupMember,
    callback: Literal["on_partitions_revoked", "on_partitions_assigned"],
    partitions: set[TopicPartition],
) -> None:
    """Run a listener callback; like Kafka clients, a failing listener is logged, not fatal to the group."""
    if member.listener is None:
        return
    try:
        await getattr(member.listener, callback)(set(partitions))
    except Exception:
        LISTENER_ERRORS.inc()
        logger.exception("embedded log: %s of group %r failed", callback, member.group_id)


async def rebalance(log: EmbeddedLog, group: GroupState) -> None:
    """Eager range assignment like Kafka's: everyone gives up everything, then gets a share."""
    members = list(group.members)
    for member in members:
        if member.joined:
            await tell(member, "on_partitions_revoked", member.assigned)
    shares: dict[int, set[TopicPartition]] = {m.member_id: set() for m in members}
    topics = sorted({name for m in members for name in m.topics})
    for name in topics:
        topic = log.find_topic(name)
        if topic is None:
            continue
        subscribed = sorted((m for m in members if name in m.topics), key=lambda m: m.member_id)
        count = len(topic.partitions)
        per, extra = divmod(count, len(subscribed))
        first = 0
        for i, member in enumerate(subscribed):
            take = per + (1 if i < extra else 0)
            shares[member.member_id].update(TopicPartition(name, p) for p in range(first, first + take))
            first += take
    for member in members:
        member.assigned = shares[member.member_id]
        member.position_map.clear()
        member.joined = True
    for member in members:
        await tell(member, "on_partitions_assigned", member.assigned)
        member.wake()


def load_group_offsets(path: Path) -> dict[TopicPartition, int]:
    """A group's committed offsets; a damaged file is reported and replaced by its previous version.

    The previous version is at most one commit behind, so the group re-reads a little (which
    every stage tolerates); only when both are unreadable does it start from its reset policy.
    """
    try:
        return group_offsets_of(read_json(path))
    except FileNotFoundError:
        problem = "missing"
    except (OSError, ValueError) as exc:
        problem = str(exc)
        DAMAGED_FILES.labels("group").inc()
    previous = previous_version(path)
    try:
        offsets = group_offsets_of(read_json(previous))
    except (OSError, ValueError) as exc:
        logger.error(
            "embedded log: group offsets %s unreadable (%s) and no usable previous version (%s); "
            "the group starts from its reset policy",
            path,
            problem,
            exc,
        )
        return {}
    logger.error(
        "embedded log: group offsets %s unreadable (%s); recovered the previous commit from %s",
        path,
        problem,
        previous.name,
    )
    return offsets
