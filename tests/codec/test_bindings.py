"""Every record class's declared fields are its Avro record's fields, and the binding says why not.

The mapping is derived from the class (`pipeline.codec.binding`), so the class is where a field is
added; these tests find the `.avsc` record it must match by name and compare the two, sub-records
(`source.partition`) included. A record class that is not listed in `RECORDS` fails too, so a new
one cannot go unchecked. The failure paths: a value outside an enum, a union branch nobody
declared, a declaration the generator cannot honour.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
from dataclasses import dataclass
from typing import Any

import pytest

import pipeline.codec
from pipeline.codec import SCHEMA_DIR, DecodeError
from pipeline.codec.binding import AvroRecord, Wire, binding, camel
from pipeline.codec.branch_work import (
    CommitRequested,
    LateAuthor,
    Removal,
    ResyncBegin,
    ResyncChunk,
    ResyncEnd,
    TargetDeleted,
    WorkAuthor,
    WorkItem,
    Write,
)
from pipeline.codec.commit_request_result import RequestResult
from pipeline.codec.config_state import (
    ConfigObject,
    ConfigStateRecord,
    ItemProblemEntry,
    ObjectName,
    RuleSource,
)
from pipeline.codec.credentials_report import CredentialsReport
from pipeline.codec.dead_letter import DeadLetter, ReplayReceipt, SourceRef
from pipeline.codec.fact_batch import AuthorFact, FactBatch
from pipeline.codec.object_state import ObjectState
from pipeline.codec.stream_id import StreamId
from pipeline.codec.stream_report import ReportedStream, StreamReport
from pipeline.codec.target_result import TargetResult
from pipeline.codec.watch_claim import Claim
from pipeline.codec.watch_cursor import Cursor
from pipeline.codec.watch_event import (
    LiveEvent,
    SnapshotBegin,
    SnapshotChunk,
    SnapshotEnd,
    SnapshotObject,
    StreamHead,
    WatchRecord,
)
from tests.codec.cases import BODIES

#: record class -> (schema file, Avro record name); None for a class whose fields are spread into
#: others' records (it is checked through them).
RECORDS: dict[type, tuple[str, str] | None] = {
    WorkItem: ("branch_work", "BranchWork"),
    WorkAuthor: ("branch_work", "Author"),
    Write: ("branch_work", "Write"),
    ResyncBegin: ("branch_work", "ResyncBegin"),
    ResyncChunk: ("branch_work", "ResyncChunk"),
    ResyncEnd: ("branch_work", "ResyncEnd"),
    Removal: ("branch_work", "Removal"),
    TargetDeleted: ("branch_work", "TargetDeleted"),
    CommitRequested: ("branch_work", "CommitRequested"),
    LateAuthor: ("branch_work", "LateAuthor"),
    RequestResult: ("commit_request_result", "CommitRequestResult"),
    ConfigStateRecord: ("config_state", "ConfigState"),
    ConfigObject: ("config_state", "ObjectState"),
    RuleSource: ("config_state", "RuleOrigin"),
    ItemProblemEntry: ("config_state", "ItemProblem"),
    ObjectName: None,
    CredentialsReport: ("credentials_report", "CredentialsReport"),
    DeadLetter: ("dead_letter", "DeadLetter"),
    ReplayReceipt: ("dead_letter_replay", "DeadLetterReplay"),
    SourceRef: None,
    FactBatch: ("fact_batch", "FactBatch"),
    AuthorFact: ("fact_batch", "AuthorFact"),
    ObjectState: ("object_state", "ObjectState"),
    StreamReport: ("stream_report", "StreamReport"),
    ReportedStream: ("stream_report", "ReportedStream"),
    TargetResult: ("target_result", "TargetResult"),
    Claim: ("watch_claim", "WatchClaim"),
    Cursor: ("watch_cursor", "WatchCursor"),
    WatchRecord: ("watch_event", "WatchEvent"),
    StreamHead: None,
    LiveEvent: ("watch_event", "LiveEvent"),
    SnapshotBegin: ("watch_event", "SnapshotBegin"),
    SnapshotChunk: ("watch_event", "SnapshotChunk"),
    SnapshotObject: ("watch_event", "SnapshotObject"),
    SnapshotEnd: ("watch_event", "SnapshotEnd"),
}


def _schema_records(schema: str) -> dict[str, list[dict[str, Any]]]:
    """Every record of a schema file by its short name, with its fields (anonymous ones too)."""
    found: dict[str, list[dict[str, Any]]] = {}

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            if node.get("type") == "record":
                found.setdefault(node["name"].rsplit(".", 1)[-1], node["fields"])
                for field in node["fields"]:
                    walk(field["type"])
            elif node.get("type") in ("array", "map"):
                walk(node.get("items", node.get("values")))

    walk(json.loads((SCHEMA_DIR / f"{schema}.avsc").read_text(encoding="utf-8")))
    return found


def _record_fields(node: Any) -> list[str]:
    """The field names of a sub-record field's type (the record itself, or the record of a union)."""
    for candidate in node if isinstance(node, list) else [node]:
        if isinstance(candidate, dict) and candidate.get("type") == "record":
            return [field["name"] for field in candidate["fields"]]
    return []


def _bound_classes() -> set[type]:
    found: set[type] = set()
    for info in pkgutil.iter_modules(pipeline.codec.__path__):
        module = importlib.import_module(f"pipeline.codec.{info.name}")
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, AvroRecord) and value is not AvroRecord:
                found.add(value)
    return found


def test_every_record_class_is_checked() -> None:
    assert _bound_classes() - set(RECORDS) == set()


@pytest.mark.parametrize(
    ("record", "where"),
    [(record, where) for record, where in RECORDS.items() if where is not None],
    ids=lambda value: value.__name__ if isinstance(value, type) else "",
)
def test_fields_are_the_schema_fields(record: type, where: tuple[str, str]) -> None:
    schema, name = where
    avro = {field["name"]: field for field in _schema_records(schema)[name]}
    bound = binding(record).fields
    assert sorted(bound) == sorted(avro)
    for field, sub_fields in bound.items():
        if sub_fields:
            assert sorted(sub_fields) == sorted(_record_fields(avro[field]["type"])), field


def test_field_names_are_camel_case_unless_declared() -> None:
    assert camel("resource_version") == "resourceVersion"
    assert camel("observed_at_ms") == "observedAtMs"
    assert camel("uid") == "uid"


def test_an_unknown_enum_value_names_the_field() -> None:
    data = BODIES["target-deleted"].to_avro() | {"prune": "Sometimes"}
    with pytest.raises(DecodeError, match=r"TargetDeleted: unknown prune 'Sometimes'"):
        TargetDeleted.from_avro(data)


def test_an_unknown_union_branch_names_the_field() -> None:
    assert WorkItem.from_avro(_work_avro(), partition=1, offset=2).body == BODIES["commit-requested"]
    data = _work_avro() | {"body": ("reverser.router.Unheard", {})}
    with pytest.raises(DecodeError, match=r"WorkItem: unknown body 'reverser.router.Unheard'"):
        WorkItem.from_avro(data, partition=1, offset=2)


def test_local_fields_stay_off_the_wire_and_come_from_the_reader() -> None:
    data = _work_avro()
    assert "partition" not in data
    assert data["source"]["partition"] == 4
    item = WorkItem.from_avro(data, partition=7, offset=9)
    assert (item.partition, item.offset, item.source_partition) == (7, 9, 4)


def _work_avro() -> dict[str, Any]:
    item = WorkItem(
        0, 0, "p", "b", "path", StreamId("t", "c", "", "v1", "pods", ""), 5, BODIES["commit-requested"], 4, 6
    )
    return item.to_avro()


@dataclass(frozen=True, slots=True)
class _TooDeep(AvroRecord):
    value: int

    avro_fields = {"value": Wire("a.b.c")}


@dataclass(frozen=True, slots=True)
class _Clash(AvroRecord):
    source: int
    offset: int

    avro_fields = {"offset": "source.offset"}


@dataclass(frozen=True, slots=True)
class _Misnamed(AvroRecord):
    value: int

    avro_fields = {"valeu": "v"}


@pytest.mark.parametrize(
    ("record", "message"),
    [(_TooDeep, "one sub-record deep"), (_Clash, "both a field"), (_Misnamed, "names no field of it: valeu")],
)
def test_a_declaration_the_generator_cannot_honour_is_refused(record: type, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        binding(record)


def test_a_conversion_goes_both_ways() -> None:
    with pytest.raises(TypeError, match="both ways"):
        Wire(encode=str)
