"""Reading back what a stage wrote to a topic."""

from __future__ import annotations

from pipeline.log.api import Log, Record, TopicPartition

__all__ = ["read_topic"]


async def read_topic(log: Log, topic: str) -> list[Record]:
    """Every record of `topic` from log-start up to the end offsets seen now, partition by partition."""
    count = await log.partitions_for(topic)
    tps = [TopicPartition(topic, p) for p in range(count)]
    ends = await log.end_offsets(tps)
    starts = await log.beginning_offsets(tps)
    wanted = {tp: end for tp, end in ends.items() if end > starts[tp]}
    records: list[Record] = []
    if not wanted:
        return records
    reader = log.reader()
    try:
        await reader.assign({tp: starts[tp] for tp in wanted})
        while any(reader.position(tp) < end for tp, end in wanted.items()):
            fetched = await reader.fetch(timeout_ms=500, max_records=1000)
            records.extend(
                r for r in fetched.records if r.offset < wanted[TopicPartition(r.topic, r.partition)]
            )
    finally:
        await reader.close()
    return sorted(records, key=lambda r: (r.partition, r.offset))
