"""A consumer-group member on Kafka: aiokafka's group protocol, explicit commits only."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka import errors as kafka_errors

from pipeline.log.api import (
    Fetched,
    GroupConsumer,
    LogError,
    LogUnavailableError,
    Membership,
    TopicPartition,
)
from pipeline.log.kafka.clients import ISOLATION_LEVEL, start_client, stop_client
from pipeline.log.kafka.convert import kafka_tp, our_tp
from pipeline.log.kafka.errors import ERRORS
from pipeline.log.kafka.read import fetch_round

if TYPE_CHECKING:
    from pipeline.log.kafka.log import KafkaLog


#: How long `start()` of a group member waits for its first assignment.
GROUP_JOIN_TIMEOUT_MS = 60_000


class _RebalanceBridge(ConsumerRebalanceListener):  # type: ignore[misc]
    """Forwards aiokafka's rebalance callbacks to the seam's listener, in our TopicPartition type."""

    def __init__(self, member: KafkaGroupMember) -> None:
        self._member = member

    async def on_partitions_revoked(self, revoked: Any) -> None:
        # The partitions stay committable inside the listener (the generation is still valid).
        self._member._read_to.clear()
        self._member._quiet.clear()
        try:
            if self._member.listener is not None:
                await self._member.listener.on_partitions_revoked({our_tp(tp) for tp in revoked})
        finally:
            self._member._assigned = set()

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self._member._record_membership()
        ours = {our_tp(tp) for tp in assigned}
        self._member._assigned = ours
        self._member._quiet = dict.fromkeys(ours, -1)
        if self._member.listener is not None:
            await self._member.listener.on_partitions_assigned(set(ours))
        self._member._joined.set()


class KafkaGroupMember(GroupConsumer):
    """A consumer-group member: aiokafka's group protocol, explicit commits only."""

    def __init__(self, owner: KafkaLog, membership: Membership) -> None:
        super().__init__(owner, membership)
        self._log = owner
        self._consumer: AIOKafkaConsumer | None = None
        self._assigned: set[TopicPartition] = set()
        self._joined = asyncio.Event()
        self._closed = False
        # per partition: (offset after the last record returned, client position after that fetch)
        self._read_to: dict[TopicPartition, tuple[int, int]] = {}
        # per assigned partition that returned no record since its assignment: the client's
        # position after the last fetch (-1 before one was read)
        self._quiet: dict[TopicPartition, int] = {}

    async def start(self) -> None:
        if self._consumer is not None:
            return
        if self._closed:
            raise LogError(f"group member of {self.group_id!r} is closed")
        for topic in self.topics:
            await self._log.partitions_for(topic)
        options = self._log.client_options()

        def factory() -> AIOKafkaConsumer:
            return AIOKafkaConsumer(
                **options,
                group_id=self.group_id,
                enable_auto_commit=False,
                auto_offset_reset="none",
                isolation_level=ISOLATION_LEVEL,
                heartbeat_interval_ms=min(1000, self._log.settings.session_timeout_ms // 3),
                session_timeout_ms=self._log.settings.session_timeout_ms,
            )

        # Subscribed only once started: aiokafka's start() of a subscribed consumer also waits
        # for the group join, which takes as long as the other members need to hand their
        # partitions over; that wait is bounded by GROUP_JOIN_TIMEOUT_MS below, not by the
        # per-request retry budget of `connect` (under which a new member gave up and exited).
        consumer = await self._log.connect("connect group member", factory, start_client)
        self._consumer = consumer
        try:
            consumer.subscribe(list(self.topics), listener=_RebalanceBridge(self))
            await self._await_first_assignment(consumer)
        except BaseException:
            await self.close()
            raise

    async def _await_first_assignment(self, consumer: AIOKafkaConsumer) -> None:
        """Drive the join until the listener has seen the first assignment (bounded)."""
        try:
            async with asyncio.timeout(GROUP_JOIN_TIMEOUT_MS / 1000):
                await self._joined.wait()
        except TimeoutError as exc:
            ERRORS.labels("unavailable").inc()
            raise LogUnavailableError(
                f"group {self.group_id!r}: no partition assignment within {GROUP_JOIN_TIMEOUT_MS} ms"
            ) from exc

    def _record_membership(self) -> None:
        """Remember this member's id for the next run of this replica (after a crash)."""
        incarnation = self._log.incarnation
        coordinator = getattr(self._consumer, "_coordinator", None)  # aiokafka keeps it private
        member_id = getattr(coordinator, "member_id", "")
        if incarnation is not None and isinstance(member_id, str):
            incarnation.joined(self.group_id, member_id)

    def assignment(self) -> set[TopicPartition]:
        return set(self._assigned)

    def _ensure_usable(self) -> None:
        self._active()

    def _active(self) -> AIOKafkaConsumer:
        if self._closed:
            raise LogError(f"group member of {self.group_id!r} is closed")
        if self._consumer is None:
            raise LogError(f"group member of {self.group_id!r} is not started; call start() first")
        return self._consumer

    async def fetch(self, timeout_ms: int = 1000, max_records: int = 500) -> Fetched:
        consumer = self._active()
        fetched, next_offsets = await fetch_round(self._log, consumer, timeout_ms, max_records, self.reset)
        for ktp, offset in next_offsets.items():
            tp = our_tp(ktp)
            self._read_to[tp] = (offset, offset)
            self._quiet.pop(tp, None)
        for tp, (returned, _) in list(self._read_to.items()):
            if tp not in self._assigned:
                del self._read_to[tp]
                continue
            # Transaction markers (and aborted records) after the last record move the position on.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(0.1):
                    position = int(await consumer.position(kafka_tp(tp)))
                    self._read_to[tp] = (returned, max(returned, position))
        for tp in list(self._quiet):
            if tp not in self._assigned:
                del self._quiet[tp]
                continue
            with contextlib.suppress(Exception):
                async with asyncio.timeout(0.1):
                    self._quiet[tp] = int(await consumer.position(kafka_tp(tp)))
        return fetched

    def committable(self, offsets: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        result = dict(offsets)
        for tp, offset in offsets.items():
            returned, position = self._read_to.get(tp, (-1, -1))
            if offset == returned:
                result[tp] = position
        return result

    def quiet_positions(self) -> dict[TopicPartition, int]:
        return {tp: position for tp, position in self._quiet.items() if position >= 0}

    async def _seek(self, tp: TopicPartition, offset: int) -> None:
        consumer = self._active()
        try:
            consumer.seek(kafka_tp(tp), offset)
        except kafka_errors.IllegalStateError as exc:
            raise self._not_assigned(tp) from exc
        self._read_to.pop(tp, None)
        if tp in self._quiet:
            # what was read before the seek says nothing of what follows it: known at the next fetch
            self._quiet[tp] = -1

    async def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        consumer = self._active()
        try:
            await self._log.retrier.run(
                "commit", lambda: consumer.commit({kafka_tp(tp): offset for tp, offset in offsets.items()})
            )
        except LogUnavailableError:
            raise
        except LogError as exc:
            raise LogError(f"commit for group {self.group_id!r} rejected: {exc}") from exc

    async def committed(self, tp: TopicPartition) -> int | None:
        consumer = self._active()
        offset = await self._log.retrier.run("committed", lambda: consumer.committed(kafka_tp(tp)))
        return int(offset) if offset is not None and offset >= 0 else None

    async def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        consumer, self._consumer = self._consumer, None
        self._assigned = set()
        if consumer is not None:
            with contextlib.suppress(Exception):
                await stop_client(consumer)  # sends LeaveGroup: nothing left to expel after a restart
            if self._log.incarnation is not None:
                self._log.incarnation.left(self.group_id)
