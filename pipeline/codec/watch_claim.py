"""The `watch_claim` record (`schemas/watch_claim.avsc`): its one owner.

A watcher's heartbeat on the one-partition `watch-claims` topic, keyed by source cluster
(pipeline/watch/claims.py explains what the claims decide).
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.codec import SCHEMA_HEADER, WATCH_CLAIM, codec
from pipeline.codec.binding import AvroRecord
from pipeline.log.api import PendingRecord, Record

__all__ = ["Claim", "decode_claim", "encode_claim"]


@dataclass(frozen=True, slots=True)
class Claim(AvroRecord):
    """`identity` watches `cluster` and says so every `interval_ms`."""

    cluster: str
    identity: str
    leader_election: bool
    interval_ms: int


def encode_claim(claim: Claim) -> PendingRecord:
    return codec(WATCH_CLAIM).record(claim.to_avro(), key=claim.cluster.encode(), partition=0)


def decode_claim(record: Record) -> Claim:
    """Decode a claim record; raises `pipeline.codec.DecodeError` for anything unreadable."""
    return Claim.from_avro(codec(WATCH_CLAIM).decode(record.value, record.header(SCHEMA_HEADER)))
