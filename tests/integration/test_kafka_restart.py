"""A replica SIGKILLed and restarted on its workdir takes its group partitions back at once.

Without the incarnation record the restarted member's join waits until the broker expires the dead
member's session; here that session is 120 s, longer than a member waits for its first assignment
(`GROUP_JOIN_TIMEOUT_MS`, 60 s), so the restart fails unless the dead member is expelled. The dead
run is a real process, killed with SIGKILL.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from pipeline.config import LogSettings
from pipeline.incarnation import Incarnation
from pipeline.log import TopicPartition, TopicSpec
from pipeline.log.kafka import KafkaLog
from tests.conftest import unique_prefix

pytestmark = pytest.mark.kafka

SESSION_TIMEOUT_MS = 120_000
JOINED_TIMEOUT_S = 90

# One run of the replica: its group member joins, says so, and waits to be killed.
_RUN = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from pipeline.config import LogSettings
    from pipeline.incarnation import Incarnation
    from pipeline.log.kafka import KafkaLog

    async def main() -> None:
        bootstrap, prefix, workdir, group, topic = sys.argv[1:]
        log = KafkaLog(LogSettings(
            backend="kafka", bootstrap_servers=bootstrap, topic_prefix=prefix, session_timeout_ms=120_000
        ))
        log.incarnation = Incarnation.claim(Path(workdir))
        await log.start()
        member = log.group_consumer(group, [topic])
        await member.start()
        print("joined", len(member.assignment()), flush=True)
        await asyncio.sleep(600)

    asyncio.run(main())
    """
)


def _run_and_kill(argv: list[str]) -> None:
    """Start the replica's run, wait until its member has joined, then SIGKILL it."""
    dead = subprocess.Popen(
        [sys.executable, "-c", _RUN, *argv],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    try:
        assert dead.stdout is not None
        assert dead.stdout.readline().split() == ["joined", "2"]
    finally:
        dead.send_signal(signal.SIGKILL)
        dead.wait(JOINED_TIMEOUT_S)


def _expelled() -> float:
    return REGISTRY.get_sample_value("reverser_log_kafka_group_members_expelled_total") or 0.0


async def test_a_restarted_replica_expels_its_dead_member_instead_of_waiting_out_the_session(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix = unique_prefix()
    topic, group, workdir = f"{prefix}.work", f"{prefix}-commit", tmp_path / "work"
    settings = LogSettings(
        backend="kafka",
        bootstrap_servers=kafka_bootstrap,
        topic_prefix=prefix,
        session_timeout_ms=SESSION_TIMEOUT_MS,
    )
    log = KafkaLog(settings)
    await log.start()
    try:
        await log.create_topics([TopicSpec(topic, partitions=2)])
        await asyncio.to_thread(_run_and_kill, [kafka_bootstrap, prefix, str(workdir), group, topic])

        incarnation = Incarnation.claim(workdir)
        assert incarnation is not None, "the killed run released the workdir"
        restarted = KafkaLog(settings)
        restarted.incarnation = incarnation
        before = _expelled()
        await restarted.start()  # expels the dead run's member as soon as it is connected
        try:
            member = restarted.group_consumer(group, [topic])
            await member.start()  # LogUnavailableError after 60 s without the expulsion
            assert member.assignment() == {TopicPartition(topic, 0), TopicPartition(topic, 1)}
            assert _expelled() == before + 1
        finally:
            await restarted.close()
            incarnation.close()
    finally:
        await log.close()


async def test_a_member_the_group_already_dropped_is_not_an_error(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix = unique_prefix()
    topic, group = f"{prefix}.work", f"{prefix}-router"
    first = Incarnation.claim(tmp_path)
    assert first is not None
    first.joined(group, "consumer-gone-0000")  # a member id the coordinator never knew
    first.close()
    incarnation = Incarnation.claim(tmp_path)
    assert incarnation is not None
    log = KafkaLog(LogSettings(backend="kafka", bootstrap_servers=kafka_bootstrap, topic_prefix=prefix))
    log.incarnation = incarnation
    before = _expelled()
    await log.start()
    try:
        await log.create_topics([TopicSpec(topic, partitions=1)])
        member = log.group_consumer(group, [topic])
        await member.start()
        assert member.assignment() == {TopicPartition(topic, 0)}
        assert _expelled() == before
    finally:
        await log.close()
        incarnation.close()
