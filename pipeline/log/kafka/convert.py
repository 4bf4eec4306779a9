"""Conversions between aiokafka's types and the seam's: topic-partitions, headers, records."""

from __future__ import annotations

import contextlib
from typing import Any

from aiokafka import TopicPartition as KafkaTopicPartition

from pipeline.log.api import (
    Headers,
    Record,
    TopicPartition,
)


def kafka_tp(tp: TopicPartition) -> KafkaTopicPartition:
    return KafkaTopicPartition(tp.topic, tp.partition)


def our_tp(tp: KafkaTopicPartition) -> TopicPartition:
    return TopicPartition(tp.topic, tp.partition)


#: Distinct header tuples remembered by `_headers`; the cache is dropped whole when it fills up.
HEADER_CACHE_MAX = 1024
_header_cache: dict[Any, Headers] = {}


def to_headers(raw: Any) -> Headers:
    """aiokafka's headers as the seam's tuple, shared between records that carry equal headers.

    Nearly every record of a topic carries the same schema header: looking the tuple up costs a
    fraction of rebuilding it, and equal records then share one headers object in memory.
    """
    if not raw:
        return ()
    try:
        found = _header_cache.get(raw)
    except TypeError:  # an unhashable header value
        found = None
    if found is None:
        found = tuple((str(k), bytes(v)) for k, v in raw)
        if len(_header_cache) >= HEADER_CACHE_MAX:
            _header_cache.clear()
        with contextlib.suppress(TypeError):
            _header_cache[raw] = found
    return found


def to_record(message: Any) -> Record:
    return Record(
        message.topic,
        message.partition,
        message.offset,
        message.timestamp,
        message.key,
        message.value,
        to_headers(message.headers),
    )
