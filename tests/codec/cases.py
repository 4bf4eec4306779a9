"""One fixed record of every kind the codecs write, with the encoder and decoder that own it.

`test_golden.py` pins the bytes each encodes to; the bytes were produced by the codecs as they
were before `pipeline.codec.binding` (hand-written dict mappings), so a binding that changed the
wire format in any field, order or union branch fails there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pipeline.codec import SCHEMA_HEADER
from pipeline.codec.branch_work import (
    CommitRequested,
    LateAuthor,
    Outcome,
    Removal,
    ResyncBegin,
    ResyncChunk,
    ResyncEnd,
    ResyncObject,
    TargetDeleted,
    WorkAuthor,
    WorkItem,
    Write,
    decode_work,
    work_record,
)
from pipeline.codec.commit_request_result import (
    RequestOutcome,
    RequestResult,
    decode_request_result,
    encode_request_result,
)
from pipeline.codec.config_state import (
    ConfigObject,
    ConfigStateRecord,
    ItemProblemEntry,
    ObjectName,
    RuleSource,
    decode_config_state,
    encode_config_state,
)
from pipeline.codec.credentials_report import CredentialsReport, decode_credentials, encode_credentials
from pipeline.codec.dead_letter import (
    ReplayReceipt,
    SourceRef,
    decode_letter,
    decode_receipt,
    letter_record,
    receipt_record,
)
from pipeline.codec.fact_batch import AuthorFact, FactBatch, decode_fact_batch, encode_fact_batch, fact_row
from pipeline.codec.object_state import ObjectState, decode_state, state_record
from pipeline.codec.stream_id import StreamId
from pipeline.codec.stream_report import ReportedStream, StreamReport, decode_report, encode_report
from pipeline.codec.target_result import PushOutcome, TargetResult, decode_result, encode_result
from pipeline.codec.watch_claim import Claim, decode_claim, encode_claim
from pipeline.codec.watch_cursor import Cursor, decode_cursor, encode_cursor
from pipeline.codec.watch_event import (
    EventType,
    LiveEvent,
    SnapshotBegin,
    SnapshotChunk,
    SnapshotEnd,
    SnapshotObject,
    StreamHead,
    WatchEventWriter,
    decode_watch_event,
)
from pipeline.config import ProviderSettings, TargetSettings
from pipeline.log.api import PendingRecord, Record
from pipeline.models import GroupResource
from pipeline.operation import Operation
from pipeline.prune import Prune

TOPIC = "golden"
PARTITION = 3
OFFSET = 41


@dataclass(frozen=True)
class Case:
    """A record (`value`), how it becomes a pending record, and what decoding that record yields."""

    name: str
    value: Any
    encode: Callable[[Any], PendingRecord]
    decode: Callable[[Record], Any]
    decoded: Any = None

    @property
    def expected(self) -> Any:
        return self.value if self.decoded is None else self.decoded


def as_read(pending: PendingRecord) -> Record:
    """`pending` as a consumer reads it back: at PARTITION/OFFSET of TOPIC."""
    return Record(TOPIC, PARTITION, OFFSET, 0, pending.key, pending.value, pending.headers)


AUTHOR = WorkAuthor(
    Outcome.RESOLVED, "alice", "Alice Ä", "alice@example.org", "audit", "user", 1_700_000_000_123
)
OBJECT_JSON = b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm"}}'
RESYNC_OBJECTS = (
    ResyncObject("ns", "a", "uid-a", "10", b"{}"),
    ResyncObject("", "b", "uid-b", "11", OBJECT_JSON),
)
BODIES = {
    "write": Write(Operation.UPDATE, "ns", "cm", "uid-1", "42", OBJECT_JSON, AUTHOR),
    "write-delete": Write(Operation.DELETE, "ns", "cm", "uid-1", "43", None, AUTHOR),
    "resync-begin": ResyncBegin(7, "100"),
    "resync-chunk": ResyncChunk(7, 2, RESYNC_OBJECTS),
    "resync-end": ResyncEnd(7, 3, 250, "101", (Removal("uid-x", "ns", "gone", AUTHOR),)),
    "resync-end-unattributed": ResyncEnd(7, 3, 250, "101", None),
    "target-deleted": TargetDeleted(Prune.ALWAYS, True, 12, "removed from the configuration"),
    "commit-requested": CommitRequested("ns", "save", "uid-cr", "save now", 30),
    "late-author": LateAuthor("UPDATE", "ns", "cm", "uid-1", "42", AUTHOR, 5, 9001, 1_700_000_100_000),
}


def _work(kind: str) -> WorkItem:
    return WorkItem(
        PARTITION,
        OFFSET,
        "github",
        "main",
        "clusters/a",
        StreamId("tgt", "cluster-a", "apps", "v1", "deployments", "ns"),
        1_700_000_000_999,
        BODIES[kind],
        source_partition=4,
        source_offset=77,
    )


HEAD = StreamHead("route-a", StreamId("tgt", "cluster-a", "apps", "v1", "deployments", "ns"))
WATCH_BODIES = {
    "live": LiveEvent(
        EventType.MODIFIED, "ns", "web", "uid-w", "55", {"app": "web", "tier": "front"}, False, OBJECT_JSON
    ),
    "live-deleting": LiveEvent(EventType.DELETED, "ns", "web", "uid-w", "56", {}, True, b"{}"),
    "snapshot-begin": SnapshotBegin(8, "200"),
    "snapshot-chunk": SnapshotChunk(8, 0, (SnapshotObject("ns", "a", "uid-a", "10", b"{}"),), since="150"),
    "snapshot-chunk-empty": SnapshotChunk(8, 1),
    "snapshot-end": SnapshotEnd(8, 2, 1, "201", since="150"),
}
WATCH_MS = 1_700_000_001_000


def _watch_case(kind: str) -> Case:
    body = WATCH_BODIES[kind]
    writer = WatchEventWriter(HEAD)
    return Case(
        f"watch_event/{kind}",
        body,
        lambda b: writer.record(b, WATCH_MS),
        lambda r: decode_watch_event(r).body,
    )


FACTS = FactBatch(
    "route-a",
    GroupResource("apps", "deployments"),
    [
        AuthorFact(
            "alice",
            "Alice",
            "alice@example.org",
            "update",
            "audit-1",
            "ns",
            "web",
            "uid-w",
            "55",
            1_700_000_000_000_000,
        ),
        AuthorFact(
            "system:serviceaccount:kube-system:gc",
            verb="deletecollection",
            namespace="ns",
            stage_timestamp_us=1_700_000_000_500_000,
            label_selector="app=web",
            uids=["u1", "u2"],
        ),
        AuthorFact("bob", uids=[]),
    ],
)

STATE = ObjectState(
    "tgt",
    "github",
    "main",
    "clusters/a",
    "cluster-a",
    "apps",
    "v1",
    "deployments",
    "ns",
    "web",
    "uid-w",
    "55",
    OBJECT_JSON,
    False,
    b"apiVersion: v1\n",
    AUTHOR,
    4,
    77,
    1_700_000_002_000,
)

CONFIG = ConfigStateRecord(
    version=12,
    published_at_ms=1_700_000_003_000,
    providers=(ProviderSettings(name="git", url="file:///srv/git"),),
    targets=(TargetSettings(name="t", provider="git", branch="main", path="p"),),
    objects=(
        ConfigObject(
            ObjectName("GitTarget", "ns", "t"), 3, (("spec.path", "must be relative"),), ("spec.x",)
        ),
    ),
    rules=(RuleSource("t", 0, ObjectName("WatchRule", "ns", "r"), 1),),
    item_problems=(
        ItemProblemEntry(ObjectName("WatchRule", "ns", "r"), 2, "widgets", "NotFound", "no such"),
    ),
)

FAILED = Record(
    "watch-events", 2, 17, 0, b"key", b"\x00\x01", ((SCHEMA_HEADER, b"watch_event/3"), ("x", b"y"))
)


def _letter(record: Record) -> PendingRecord:
    return letter_record(record, "router", ValueError("bad record"), 1_700_000_004_000)


def _decoded_letter(record: Record) -> Any:
    letter = decode_letter(record)
    return (
        letter.source,
        letter.stage,
        letter.error_class,
        letter.message,
        letter.key,
        letter.value,
        letter.schema,
        letter.headers,
        letter.time_ms,
        letter.attempt,
    )


CASES: tuple[Case, ...] = (
    *(Case(f"branch_work/{kind}", _work(kind), work_record, decode_work) for kind in BODIES),
    *(_watch_case(kind) for kind in WATCH_BODIES),
    Case(
        "fact_batch",
        FACTS,
        lambda b: PendingRecord(encode_fact_batch(b), headers=((SCHEMA_HEADER, b"fact_batch/1"),)),
        decode_fact_batch,
        ("route-a", "apps", "deployments", [fact_row(f) for f in FACTS.facts]),
    ),
    Case("object_state", STATE, state_record, decode_state),
    Case("config_state", CONFIG, encode_config_state, decode_config_state),
    Case(
        "commit_request_result",
        RequestResult(
            "ns",
            "save",
            "uid-cr",
            "tgt",
            "github",
            "main",
            RequestOutcome.COMMITTED,
            "abc123",
            1_700_000_005_000,
            "pushed",
        ),
        encode_request_result,
        decode_request_result,
    ),
    Case(
        "target_result",
        TargetResult("tgt", "github", "main", "abc123", PushOutcome.FAILED, 1_700_000_006_000, "rejected"),
        encode_result,
        decode_result,
    ),
    Case(
        "credentials_report",
        CredentialsReport(
            "github", False, "SecretMissing", "ns/creds", 1_700_000_007_000, "not found", "ssh-ed25519 AAAA"
        ),
        encode_credentials,
        decode_credentials,
    ),
    Case(
        "stream_report",
        StreamReport(
            "cluster-a",
            1_700_000_008_000,
            (
                ReportedStream("tgt/apps/deployments/ns", True, "Streaming"),
                ReportedStream("tgt//pods/", False, "Forbidden"),
            ),
        ),
        encode_report,
        decode_report,
    ),
    Case("watch_claim", Claim("cluster-a", "replica-1", True, 5_000), encode_claim, decode_claim),
    Case(
        "watch_cursor",
        Cursor(
            "tgt/apps/deployments/ns",
            StreamId("tgt", "cluster-a", "apps", "v1", "deployments", "ns"),
            "99",
            8,
            1_700_000_009_000,
        ),
        encode_cursor,
        lambda r: decode_cursor(r.key, r.value, r.header(SCHEMA_HEADER)),
    ),
    Case(
        "dead_letter",
        FAILED,
        _letter,
        _decoded_letter,
        (
            SourceRef("watch-events", 2, 17),
            "router",
            "ValueError",
            "bad record",
            b"key",
            b"\x00\x01",
            "watch_event/3",
            FAILED.headers,
            1_700_000_004_000,
            1,
        ),
    ),
    Case(
        "dead_letter_replay",
        ReplayReceipt(12, SourceRef("watch-events", 2, 17), 2, 1_700_000_010_000, "operator"),
        receipt_record,
        decode_receipt,
    ),
)
