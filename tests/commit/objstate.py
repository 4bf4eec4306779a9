"""Reading `<prefix>.object-state` back in the commit-worker tests: the first read and the raw records."""

from __future__ import annotations

from collections import Counter

from pipeline.codec.object_state import ObjectKey, ObjectState, decode_state
from pipeline.commit.consumer import load_object_state
from pipeline.commit.layout import canonical_path, normalize_target_path
from pipeline.commit.yamlrender import parse_object_json, render_object
from pipeline.config import Settings
from pipeline.log import open_log
from pipeline.log.api import Log, TopicPartition
from pipeline.log.topics import TopicNames
from tests.conformance.test_log_conformance import read_all


def state_topic(settings: Settings) -> str:
    return TopicNames.for_prefix(settings.log.topic_prefix).object_state


async def first_read(log: Log, settings: Settings, *targets: str) -> dict[ObjectKey, ObjectState]:
    states = await load_object_state(log, state_topic(settings), frozenset(targets or ("t1",)))
    return {s.key: s for s in states}


async def raw_keys(log: Log, settings: Settings) -> Counter[tuple[bytes, str]]:
    """How often each (key, resourceVersion) was written ("" for a tombstone), compaction aside."""
    topic = state_topic(settings)
    tps = [TopicPartition(topic, p) for p in range(await log.partitions_for(topic))]
    ends = await log.end_offsets(tps)
    found: Counter[tuple[bytes, str]] = Counter()
    for tp in tps:
        for record in await read_all(log, tp, 0, ends[tp]):
            assert record.key is not None
            version = "" if record.value is None else decode_state(record).resource_version
            found[(record.key, version)] += 1
    return found


async def read_back(settings: Settings) -> tuple[Counter[tuple[bytes, str]], dict[ObjectKey, ObjectState]]:
    """`raw_keys` and `first_read` of a log opened for the purpose (a worker process wrote it)."""
    log = open_log(settings)
    await log.start()
    try:
        return await raw_keys(log, settings), await first_read(log, settings)
    finally:
        await log.close()


def as_files(states: dict[ObjectKey, ObjectState]) -> dict[str, str]:
    """What the states render to in Git: path -> YAML, as the commit worker writes them."""
    out: dict[str, str] = {}
    for state in states.values():
        path = canonical_path(
            normalize_target_path(state.path), state.group, state.resource, state.namespace, state.name
        )
        rendered = render_object(parse_object_json(state.object_json))
        assert state.document == rendered, f"{path}: the stored document is the committed rendering"
        out[path] = rendered.decode()
    return out
