"""The last commit and push of each target, and the newest change of it the commit worker refused
to write, as the commit worker reports them on the log.

Shared by the writer (the commit worker) and the reader (the configuration controller), which
talk only through the log. With custom resources the GitTarget's status shows them; the commit
worker may run on any replica, so it writes them to the config topic (key `result/<target>`,
compacted: the newest per target) and the controller, which follows it, patches the status.

A refusal rides on the same record rather than a key of its own: the newest record per target then
says both what was pushed and whether a change waits for the user to fix the folder, so compaction
can never keep a stale refusal beside a newer push that cleared it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pipeline.codec import SCHEMA_HEADER, TARGET_RESULT, codec
from pipeline.codec.binding import AvroRecord, Wire
from pipeline.log.api import PendingRecord, Record

__all__ = [
    "RESULT_KEY_PREFIX",
    "PushOutcome",
    "TargetRefusal",
    "TargetResult",
    "decode_result",
    "encode_result",
]

RESULT_KEY_PREFIX = b"result/"


class PushOutcome(StrEnum):
    """What the push of a target's newest commit did (the GitTarget status shows it)."""

    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    # the worker reports a refusal of the target before it pushed any of its commits
    NONE = "None"


@dataclass(frozen=True, slots=True)
class TargetRefusal:
    """A change the commit worker refused to write (its records wait on the dead-letter topic):
    the reason, the file and the object (`<kind> <namespace>/<name>`), never the file's content."""

    reason: str
    file: str
    object: str
    at_ms: int


def _refusal_avro(refusal: TargetRefusal | None) -> dict[str, Any] | None:
    if refusal is None:
        return None
    return {"reason": refusal.reason, "file": refusal.file, "object": refusal.object, "atMs": refusal.at_ms}


def _refusal_of(data: tuple[str, dict[str, Any]] | None) -> TargetRefusal | None:
    """The codec reads a union's record as `(record name, fields)`."""
    if data is None:
        return None
    _, refused = data
    return TargetRefusal(refused["reason"], refused["file"], refused["object"], refused["atMs"])


@dataclass(frozen=True, slots=True)
class TargetResult(AvroRecord):
    target: str
    provider: str
    branch: str
    commit: str
    push: PushOutcome
    at_ms: int
    message: str = ""
    refusal: TargetRefusal | None = None

    avro_fields = {"refusal": Wire(encode=_refusal_avro, decode=_refusal_of)}


def encode_result(result: TargetResult) -> PendingRecord:
    return codec(TARGET_RESULT).record(result.to_avro(), key=RESULT_KEY_PREFIX + result.target.encode())


def decode_result(record: Record) -> TargetResult:
    """Raises DecodeError for a record that is not a target result."""
    return TargetResult.from_avro(codec(TARGET_RESULT).decode(record.value, record.header(SCHEMA_HEADER)))
