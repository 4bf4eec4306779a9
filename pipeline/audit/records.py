"""Fact batches to `fact_batch` records that fit the topic's maximum message size.

A 10 MiB EventList can reduce to a multi-megabyte group for one type, and a record over
`max.message.bytes` fails on every retry, so the apiserver would resend the same batch forever
(design trap 30). An oversized group is therefore split into consecutive records for the same key
(same partition, order kept); facts are independent keyed data, so splitting changes nothing for
the reader. A single fact that still does not fit first loses its uid set (the index then falls
back to the collection's scope) and is dropped only if even that is too large.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from pipeline.audit.metrics import OVERSIZED_FACTS
from pipeline.codec import FACT_BATCH, Codec, codec
from pipeline.facts.model import AuthorFact, FactBatch
from pipeline.log.api import PendingRecord
from pipeline.models import stream_key

__all__ = ["RECORD_OVERHEAD_BYTES", "Built", "Encoded", "build_records", "encode_batch"]

# Room left under max.message.bytes for the record-batch header, key, headers and varints.
RECORD_OVERHEAD_BYTES = 1024


class Encoded(NamedTuple):
    """The payloads one group became (each with its fact count) and the facts that did not fit."""

    payloads: list[tuple[bytes, int]]
    dropped: list[AuthorFact]


def encode_batch(batch: FactBatch, max_payload_bytes: int, fact_codec: Codec | None = None) -> Encoded:
    """Encode one group, splitting it in halves until every payload fits."""
    writer = fact_codec or codec(FACT_BATCH)
    payload = writer.encode(batch.to_avro())
    if len(payload) <= max_payload_bytes:
        return Encoded([(payload, len(batch.facts))], [])
    facts = batch.facts
    if len(facts) > 1:
        middle = len(facts) // 2
        left = encode_batch(
            FactBatch(batch.route, batch.group_resource, facts[:middle]), max_payload_bytes, writer
        )
        right = encode_batch(
            FactBatch(batch.route, batch.group_resource, facts[middle:]), max_payload_bytes, writer
        )
        return Encoded(left.payloads + right.payloads, left.dropped + right.dropped)
    (fact,) = facts
    if fact.uids is not None:
        OVERSIZED_FACTS.labels("uids_dropped").inc()
        smaller = FactBatch(batch.route, batch.group_resource, [replace(fact, uids=None)])
        result = encode_batch(smaller, max_payload_bytes, writer)
        if result.dropped:
            return Encoded(result.payloads, [fact])
        return result
    OVERSIZED_FACTS.labels("dropped").inc()
    return Encoded([], [fact])


class Built(NamedTuple):
    """Records to append, the fact count of each, and the facts too large to publish."""

    records: list[PendingRecord]
    fact_counts: list[int]
    dropped: list[AuthorFact]


def build_records(batches: list[FactBatch], max_payload_bytes: int) -> Built:
    """One record per group (more when a group is split), keyed by `stream_key(route, gr)`."""
    writer = codec(FACT_BATCH)
    headers = (writer.header,)
    records: list[PendingRecord] = []
    counts: list[int] = []
    dropped: list[AuthorFact] = []
    for batch in batches:
        key = stream_key(batch.route, batch.group_resource)
        encoded = encode_batch(batch, max_payload_bytes, writer)
        for payload, count in encoded.payloads:
            records.append(PendingRecord(payload, key=key, headers=headers))
            counts.append(count)
        dropped.extend(encoded.dropped)
    return Built(records, counts, dropped)
