"""What became of one CommitRequest, as the commit worker reports it on the log.

Shared by the writer (the commit worker that owns the request's branch) and the reader (the
configuration controller, which writes the CommitRequest's status); they talk only through the
log. Written to the config topic under `commitrequest/<namespace>/<name>` (compacted: the newest
per request), next to the targets' `result/<target>` records.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from pipeline.codec import COMMIT_REQUEST_RESULT, SCHEMA_HEADER, codec
from pipeline.codec.binding import AvroRecord
from pipeline.log.api import PendingRecord, Record

__all__ = [
    "REQUEST_KEY_PREFIX",
    "RequestOutcome",
    "RequestResult",
    "decode_request_result",
    "encode_request_result",
]

REQUEST_KEY_PREFIX = b"commitrequest/"


class RequestOutcome(StrEnum):
    """Where a request ended: its commit is on the remote, nothing was open, or the push failed."""

    COMMITTED = "Committed"
    NOTHING_TO_COMMIT = "NothingToCommit"
    PUSH_FAILED = "PushFailed"


@dataclass(frozen=True, slots=True)
class RequestResult(AvroRecord):
    namespace: str
    name: str
    uid: str
    target: str
    provider: str
    branch: str
    outcome: RequestOutcome
    sha: str
    at_ms: int
    message: str = ""

    @property
    def terminal(self) -> bool:
        """Whether the request is done (a failed push is retried, so it is not)."""
        return self.outcome is not RequestOutcome.PUSH_FAILED


def encode_request_result(result: RequestResult) -> PendingRecord:
    key = REQUEST_KEY_PREFIX + f"{result.namespace}/{result.name}".encode()
    return codec(COMMIT_REQUEST_RESULT).record(result.to_avro(), key=key)


def decode_request_result(record: Record) -> RequestResult:
    """Raises DecodeError for a record that is not a commit-request result."""
    return RequestResult.from_avro(
        codec(COMMIT_REQUEST_RESULT).decode(record.value, record.header(SCHEMA_HEADER))
    )
