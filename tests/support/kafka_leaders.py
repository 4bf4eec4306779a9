"""Which broker leads a partition, read from the cluster's own metadata (for killing the right one)."""

from __future__ import annotations

from aiokafka.admin import AIOKafkaAdminClient

__all__ = ["partition_leaders"]


async def partition_leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition number to the node id of its current leader (-1 while it has none)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await admin.start()
    try:
        (described,) = await admin.describe_topics([topic])
    finally:
        await admin.close()
    return {int(p["partition"]): int(p["leader"]) for p in described["partitions"]}
