"""The dead-letter envelope: what a stage writes when it cannot decode or apply a record.

A letter keeps the failed record whole (topic, partition, offset, key, value, every header) with
the stage, the error's type and message, the time and the attempt, so an operator can see why it
failed and re-submit it unchanged after a fix (`pipeline.deadletter.replay`). A re-submitted record
carries the header `reverser-replay: <letter offset>:<attempt>`; if it fails again, its new letter
has attempt N+1, so a record that keeps failing is visible as such.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipeline.codec import DEAD_LETTER, DEAD_LETTER_REPLAY, SCHEMA_HEADER, codec
from pipeline.codec.binding import AvroRecord, Wire
from pipeline.log.api import Headers, PendingRecord, Record

__all__ = [
    "REPLAY_HEADER",
    "DeadLetter",
    "ReplayReceipt",
    "SourceRef",
    "attempt_of",
    "decode_letter",
    "decode_receipt",
    "is_receipt",
    "letter_record",
    "receipt_record",
    "replay_header",
]

REPLAY_HEADER = "reverser-replay"


def _headers_avro(headers: Headers) -> list[dict[str, str | bytes]]:
    return [{"name": name, "value": value} for name, value in headers]


def _headers_of_avro(headers: list[dict[str, Any]]) -> Headers:
    return tuple((header["name"], header["value"]) for header in headers)


@dataclass(frozen=True, slots=True, order=True)
class SourceRef(AvroRecord):
    """Where a failed record sat on its own topic: a record is replayed at most once per ref."""

    topic: str
    partition: int
    offset: int

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"


@dataclass(frozen=True, slots=True)
class DeadLetter(AvroRecord):
    """One decoded dead letter."""

    source: SourceRef
    stage: str
    error_class: str
    message: str
    key: bytes | None
    value: bytes | None
    schema: str | None
    headers: Headers
    time_ms: int
    attempt: int

    avro_fields = {
        "source": Wire(spread=True),
        "message": "reason",
        "headers": Wire(encode=_headers_avro, decode=_headers_of_avro),
    }


@dataclass(frozen=True, slots=True)
class ReplayReceipt(AvroRecord):
    """The record a dead letter stands for was re-submitted (written with the re-submission)."""

    letter_offset: int
    source: SourceRef
    attempt: int
    time_ms: int
    by: str

    avro_fields = {"source": Wire(spread=True)}


def replay_header(letter_offset: int, attempt: int) -> tuple[str, bytes]:
    """The header a replayed record carries: which letter it came from and that letter's attempt."""
    return (REPLAY_HEADER, f"{letter_offset}:{attempt}".encode())


def attempt_of(record: Record) -> int:
    """1 for a record that never failed before; the replayed letter's attempt + 1 for a replay."""
    raw = record.header(REPLAY_HEADER)
    if raw is None:
        return 1
    _, _, attempt = raw.decode("ascii", "replace").partition(":")
    try:
        return max(int(attempt), 0) + 1
    except ValueError:
        return 1


def letter_record(record: Record, stage: str, error: Exception, now_ms: int) -> PendingRecord:
    """The dead letter for `record`, keyed like the record (one partition, so order is kept anyway)."""
    schema = record.header(SCHEMA_HEADER)
    letter = DeadLetter(
        source=SourceRef(record.topic, record.partition, record.offset),
        stage=stage,
        error_class=type(error).__name__,
        message=str(error) or type(error).__name__,
        key=record.key,
        value=record.value,
        schema=None if schema is None else schema.decode("utf-8", "replace"),
        headers=record.headers,
        time_ms=now_ms,
        attempt=attempt_of(record),
    )
    return codec(DEAD_LETTER).record(letter.to_avro(), key=record.key)


def decode_letter(record: Record) -> DeadLetter:
    """Decode a dead letter of any schema version (v1 letters have no headers, time or attempt)."""
    return DeadLetter.from_avro(codec(DEAD_LETTER).decode(record.value, record.header(SCHEMA_HEADER)))


def receipt_record(receipt: ReplayReceipt) -> PendingRecord:
    return codec(DEAD_LETTER_REPLAY).record(receipt.to_avro())


def decode_receipt(record: Record) -> ReplayReceipt:
    return ReplayReceipt.from_avro(
        codec(DEAD_LETTER_REPLAY).decode(record.value, record.header(SCHEMA_HEADER))
    )


def is_receipt(record: Record) -> bool:
    """Receipts share the topic with letters; the schema header tells them apart."""
    schema = record.header(SCHEMA_HEADER)
    return schema is not None and schema.split(b"/", 1)[0] == DEAD_LETTER_REPLAY.encode()
