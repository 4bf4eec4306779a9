"""Whether a provider's credentials from its Secret work, as the commit worker reports it on the log.

Shared by the writer (the commit worker, on whichever replica owns the provider's branches) and
the reader (the configuration controller), which talk only through the log. With custom resources
the GitProvider's `Ready` condition shows it; the record goes to the config topic (key
`credentials/<provider>`, compacted: the newest per provider). It names the Secret and its keys,
never a value.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.codec import CREDENTIALS_REPORT, SCHEMA_HEADER, codec
from pipeline.codec.binding import AvroRecord
from pipeline.log.api import PendingRecord, Record

__all__ = ["CREDENTIALS_KEY_PREFIX", "CredentialsReport", "decode_credentials", "encode_credentials"]

CREDENTIALS_KEY_PREFIX = b"credentials/"


@dataclass(frozen=True, slots=True)
class CredentialsReport(AvroRecord):
    provider: str
    ok: bool
    reason: str  # empty when ok, else a `pipeline.gitcredentials.CredentialsReason`
    secret: str  # namespace/name
    at_ms: int
    message: str = ""
    #: the public half of the signing key from the provider's signing Secret (never the private one)
    signing_public_key: str = ""


def encode_credentials(report: CredentialsReport) -> PendingRecord:
    return codec(CREDENTIALS_REPORT).record(
        report.to_avro(), key=CREDENTIALS_KEY_PREFIX + report.provider.encode()
    )


def decode_credentials(record: Record) -> CredentialsReport:
    """Raises DecodeError for a record that is not a credentials report."""
    data = codec(CREDENTIALS_REPORT).decode(record.value, record.header(SCHEMA_HEADER))
    return CredentialsReport.from_avro(data)
