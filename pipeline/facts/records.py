"""Fact batches to `fact_batch` records that fit the topic's maximum message size.

A 10 MiB EventList can reduce to a multi-megabyte group for one type, and a record over
`max.message.bytes` fails on every retry, so the apiserver would resend the same batch forever
(docs/audit-ingress.md, "Records"). An oversized group is therefore split into consecutive records
for the same key (same partition, order kept); facts are independent keyed data, so splitting
changes nothing for the reader. A single fact that still does not fit first loses its uid set (the
index then falls back to the collection's scope) and is dropped only if even that is too large.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from prometheus_client import Counter

from pipeline.codec import FACT_BATCH, Codec, codec
from pipeline.codec.fact_batch import AuthorFact, FactBatch, encode_fact_batch
from pipeline.log.api import PendingRecord, max_value_bytes
from pipeline.models import stream_key

__all__ = ["Built", "Encoded", "build_records", "encode_batch"]

# Named for the ingress that owns most of these facts; `reverser resolve` counts here too.
OVERSIZED_FACTS = Counter(
    "reverser_audit_oversized_facts_total",
    "Facts too large for one record: uid set dropped (uids_dropped) or fact dropped (dropped).",
    ["action"],
)


class Encoded(NamedTuple):
    """The payloads one group became, in fact order, and the facts that did not fit."""

    payloads: list[bytes]
    dropped: list[AuthorFact]


def encode_batch(batch: FactBatch, max_payload_bytes: int, fact_codec: Codec | None = None) -> Encoded:
    """Encode one group, splitting it in halves until every payload fits."""
    writer = fact_codec or codec(FACT_BATCH)
    payload = encode_fact_batch(batch, writer)
    if len(payload) <= max_payload_bytes:
        return Encoded([payload], [])
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
    """Records to append and the facts too large to publish."""

    records: list[PendingRecord]
    dropped: list[AuthorFact]


def build_records(batches: list[FactBatch], max_message_bytes: int) -> Built:
    """One record per group (more when a group is split), keyed by `stream_key(route, gr)`.

    Each record's value is split to fit `max_message_bytes` with its key, headers and the log's
    per-record overhead (`pipeline.log.api.max_value_bytes`).
    """
    writer = codec(FACT_BATCH)
    headers = (writer.header,)
    records: list[PendingRecord] = []
    dropped: list[AuthorFact] = []
    for batch in batches:
        key = stream_key(batch.route, batch.group_resource)
        encoded = encode_batch(batch, max_value_bytes(max_message_bytes, key, headers), writer)
        records.extend(PendingRecord(payload, key=key, headers=headers) for payload in encoded.payloads)
        dropped.extend(encoded.dropped)
    return Built(records, dropped)
