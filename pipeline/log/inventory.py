"""`reverser topics list|describe`: what the log holds for each of the pipeline's topics.

`check` answers "does it match what the pipeline needs"; these answer "what is there": partitions,
replicas, retention and cleanup, the topic's configuration and how far each partition has been
written (its end offset). They ask only through the `Log` seam (`describe_topics`, `end_offsets`),
so the embedded log and Kafka answer alike, and they write nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel

from pipeline.log import Log, TopicPartition
from pipeline.tables import aligned

__all__ = ["TopicInventory", "TopicState", "describe_lines", "gather", "list_table"]

#: What a cell shows for a topic the log does not have, or a configuration entry it does not set.
ABSENT = "-"


class TopicState(BaseModel):
    """One topic as the log reports it; `exists` false (and nothing else known) when it is missing."""

    topic: str
    exists: bool
    partitions: int = 0
    replication_factor: int = 0
    configs: dict[str, str] = {}
    #: Each partition's end offset (the next offset to be written), by partition number.
    end_offsets: dict[int, int] = {}

    @property
    def records_written(self) -> int:
        """The sum of the end offsets: how many offsets the topic has handed out (compaction and
        retention remove records, not offsets)."""
        return sum(self.end_offsets.values())


class TopicInventory(BaseModel):
    backend: str
    topics: list[TopicState]


async def gather(log: Log, names: Sequence[str]) -> TopicInventory:
    """The state of each topic in `names`, in that order."""
    described = await log.describe_topics(list(names))
    tps = [TopicPartition(d.name, p) for d in described.values() for p in range(d.partitions)]
    ends = await log.end_offsets(tps)
    states = []
    for name in names:
        description = described.get(name)
        if description is None:
            states.append(TopicState(topic=name, exists=False))
            continue
        states.append(
            TopicState(
                topic=name,
                exists=True,
                partitions=description.partitions,
                replication_factor=description.replication_factor,
                configs=dict(sorted(description.configs.items())),
                end_offsets={tp.partition: offset for tp, offset in ends.items() if tp.topic == name},
            )
        )
    return TopicInventory(backend=log.kind, topics=states)


def list_table(inventory: TopicInventory) -> str:
    """One line per topic: the settings an operator looks at first, and the offsets written."""
    rows = [("TOPIC", "PARTITIONS", "REPLICAS", "CLEANUP", "RETENTION_MS", "END_OFFSETS")]
    for t in inventory.topics:
        if not t.exists:
            rows.append((t.topic, "(missing)", ABSENT, ABSENT, ABSENT, ABSENT))
            continue
        rows.append(
            (
                t.topic,
                str(t.partitions),
                str(t.replication_factor),
                t.configs.get("cleanup.policy", ABSENT),
                t.configs.get("retention.ms", ABSENT),
                str(t.records_written),
            )
        )
    return aligned(rows)


def describe_lines(inventory: TopicInventory) -> str:
    """Each topic in full: its configuration entries, then every partition's end offset."""
    blocks = []
    for t in inventory.topics:
        if not t.exists:
            blocks.append(f"{t.topic}: (missing)")
            continue
        head = (
            f"{t.topic}: {t.partitions} partitions, replication {t.replication_factor} "
            f"({inventory.backend} log)"
        )
        configs = aligned([("CONFIG", "VALUE"), *sorted(t.configs.items())])
        ends = sorted(t.end_offsets.items())
        offsets = aligned([("PARTITION", "END_OFFSET"), *((str(p), str(o)) for p, o in ends)])
        blocks.append("\n".join((head, configs, offsets)))
    return "\n\n".join(blocks)
