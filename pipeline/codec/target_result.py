"""The last commit and push of each target, as the commit worker reports them on the log.

Shared by the writer (the commit worker) and the reader (the configuration controller), which
talk only through the log. With custom resources the GitTarget's status shows them; the commit
worker may run on any replica, so it writes them to the config topic (key `result/<target>`,
compacted: the newest per target) and the controller, which follows it, patches the status.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from pipeline.codec import SCHEMA_HEADER, TARGET_RESULT, codec
from pipeline.codec.binding import AvroRecord
from pipeline.log.api import PendingRecord, Record

__all__ = ["RESULT_KEY_PREFIX", "PushOutcome", "TargetResult", "decode_result", "encode_result"]

RESULT_KEY_PREFIX = b"result/"


class PushOutcome(StrEnum):
    """What the push of a target's newest commit did (the GitTarget status shows it)."""

    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


@dataclass(frozen=True, slots=True)
class TargetResult(AvroRecord):
    target: str
    provider: str
    branch: str
    commit: str
    push: PushOutcome
    at_ms: int
    message: str = ""


def encode_result(result: TargetResult) -> PendingRecord:
    return codec(TARGET_RESULT).record(result.to_avro(), key=RESULT_KEY_PREFIX + result.target.encode())


def decode_result(record: Record) -> TargetResult:
    """Raises DecodeError for a record that is not a target result."""
    return TargetResult.from_avro(codec(TARGET_RESULT).decode(record.value, record.header(SCHEMA_HEADER)))
