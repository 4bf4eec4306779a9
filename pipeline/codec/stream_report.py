"""The watch streams a cluster's leader runs, as the watch stage reports them on the config topic.

Shared by the writer (the watch stage, on whichever replica leads the cluster) and the reader (the
configuration controller), which talk only through the log. With custom resources a rule's
`Reconciling` condition stays True until every stream it resolved to is running; the controller
learns that from these records (key `streams/<cluster>`, compacted: the newest per cluster).
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.codec import SCHEMA_HEADER, STREAM_REPORT, codec
from pipeline.codec.binding import AvroRecord
from pipeline.log.api import PendingRecord, Record

__all__ = ["REPORT_KEY_PREFIX", "ReportedStream", "StreamReport", "decode_report", "encode_report"]

REPORT_KEY_PREFIX = b"streams/"


@dataclass(frozen=True, slots=True, order=True)
class ReportedStream(AvroRecord):
    """One stream: its identity (`StreamSpec.identity`), whether it streams, and its state."""

    stream: str
    running: bool
    state: str


@dataclass(frozen=True, slots=True)
class StreamReport(AvroRecord):
    cluster: str
    at_ms: int
    streams: tuple[ReportedStream, ...]

    def running(self) -> frozenset[str]:
        return frozenset(s.stream for s in self.streams if s.running)


def encode_report(report: StreamReport) -> PendingRecord:
    return codec(STREAM_REPORT).record(report.to_avro(), key=REPORT_KEY_PREFIX + report.cluster.encode())


def decode_report(record: Record) -> StreamReport:
    """Raises DecodeError for a record that is not a stream report."""
    return StreamReport.from_avro(codec(STREAM_REPORT).decode(record.value, record.header(SCHEMA_HEADER)))
