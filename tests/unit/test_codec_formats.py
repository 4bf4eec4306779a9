"""Every record format has one owner module in `pipeline/codec/`, and that module covers its schema.

The records are drawn from the `.avsc` files themselves (`tests/support/avro_values.py`), so a field
added to a schema appears here without being listed; each module's paths (dataclasses, hand-written
fast paths) must then carry it exactly as fastavro does, or these tests fail.
"""

from __future__ import annotations

import io
import json
import re
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.authormode import AttributionMode
from pipeline.codec import (
    BRANCH_WORK,
    CONFIG_STATE,
    CREDENTIALS_REPORT,
    DEAD_LETTER,
    DEAD_LETTER_REPLAY,
    FACT_BATCH,
    OBJECT_STATE,
    SCHEMA_DIR,
    SCHEMA_HEADER,
    STREAM_REPORT,
    TARGET_RESULT,
    WATCH_CLAIM,
    WATCH_CURSOR,
    WATCH_EVENT,
    DecodeError,
    codec,
)
from pipeline.codec.branch_work import ActorKind, decode_work, encode_work
from pipeline.codec.branch_work import Kind as WorkKind
from pipeline.codec.config_state import (
    CONFIG_KEY,
    ConfigStateRecord,
    decode_config_state,
    encode_config_state,
    settings_json,
)
from pipeline.codec.credentials_report import decode_credentials, encode_credentials
from pipeline.codec.dead_letter import decode_letter, decode_receipt, receipt_record
from pipeline.codec.fact_batch import (
    HAND_WRITTEN,
    ROW_FIELDS,
    FactBatch,
    decode_fact_batch,
    decode_fact_batch_v1,
    encode_fact_batch,
)
from pipeline.codec.object_state import HAND_WRITTEN as STATE_HAND_WRITTEN
from pipeline.codec.object_state import (
    ObjectState,
    decode_state,
    decode_state_v2,
    encode_state_v2,
    state_record,
)
from pipeline.codec.stream_report import decode_report, encode_report
from pipeline.codec.target_result import PushOutcome, decode_result, encode_result
from pipeline.codec.watch_claim import decode_claim, encode_claim
from pipeline.codec.watch_cursor import decode_cursor, encode_cursor
from pipeline.codec.watch_event import Kind as EventKind
from pipeline.codec.watch_event import WatchEventWriter, decode_watch_event
from pipeline.config import ClusterSettings, ProviderSettings, TargetSettings
from pipeline.log.api import Record
from pipeline.prune import Prune
from tests.support.avro_values import damaged, field_names, strategy

SLOW = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def records(name: str) -> st.SearchStrategy[dict[str, Any]]:
    """Records drawn from the schema, every author's `actorKind` (a string on the wire, a closed set
    in the records) one of `ActorKind`."""
    drawn = st.tuples(strategy(codec(name).current.raw), st.sampled_from(list(ActorKind)))
    return drawn.map(lambda pair: _with_actor_kind(pair[0], pair[1].value))


def _with_actor_kind(value: Any, kind: str) -> Any:
    """`value` with every `actorKind` in it set to `kind`."""
    if isinstance(value, dict):
        found = {key: _with_actor_kind(item, kind) for key, item in value.items()}
        return {**found, "actorKind": kind} if "actorKind" in value else found
    if isinstance(value, list | tuple):
        return type(value)(_with_actor_kind(item, kind) for item in value)
    return value


def read_back(name: str, record: dict[str, Any], key: bytes | None = None) -> Record:
    """`record` written by fastavro, as the log hands it to a reader."""
    writer = codec(name)
    return Record("topic", 0, 0, 0, key, writer.encode(record), (writer.header,))


def variants(name: str) -> set[str]:
    raw = codec(name).current.raw
    body = next(field for field in raw["fields"] if field["name"] == "body")
    return {f"{branch.get('namespace', raw['namespace'])}.{branch['name']}" for branch in body["type"]}


def test_the_fast_paths_are_written_for_the_current_fact_batch_version() -> None:
    assert codec(FACT_BATCH).header[1] == HAND_WRITTEN
    fact_fields = field_names(codec(FACT_BATCH).current.raw["fields"][3]["type"]["items"])
    assert [f for f in fact_fields if f in ROW_FIELDS] == list(ROW_FIELDS)


@SLOW
@given(records(FACT_BATCH))
def test_fact_batch_paths_agree_with_fastavro(record: dict[str, Any]) -> None:
    written = read_back(FACT_BATCH, record)
    batch = FactBatch.from_avro(record)
    assert batch.to_avro() == record
    assert encode_fact_batch(batch) == written.value
    rows = [tuple(fact[field] for field in ROW_FIELDS) for fact in record["facts"]]
    expected = (record["route"], record["group"], record["resource"], rows)
    assert written.value is not None
    assert decode_fact_batch_v1(written.value) == expected
    assert decode_fact_batch(written) == expected


def test_variant_names_are_the_schema_union() -> None:
    assert {kind.value for kind in EventKind} == variants(WATCH_EVENT)
    assert {kind.value for kind in WorkKind} == variants(BRANCH_WORK)


@SLOW
@given(records(WATCH_EVENT))
def test_watch_event_round_trips_every_field(record: dict[str, Any]) -> None:
    written = read_back(WATCH_EVENT, record)
    decoded = decode_watch_event(written)
    assert WatchEventWriter(decoded.head).record(decoded.body, decoded.observed_at_ms).value == written.value


def _with_prune(record: dict[str, Any], prune: str) -> dict[str, Any]:
    """`record` with its TargetDeleted's prune mode (a plain string on the wire) set to `prune`."""
    kind, body = record["body"]
    if kind != WorkKind.TARGET_DELETED:
        return record
    return {**record, "body": (kind, {**body, "prune": prune})}


@SLOW
@given(records(BRANCH_WORK), st.sampled_from(list(Prune)))
def test_branch_work_round_trips_every_field(record: dict[str, Any], prune: Prune) -> None:
    written = read_back(BRANCH_WORK, _with_prune(record, prune.value))
    assert encode_work(decode_work(written)) == written.value


@given(records(BRANCH_WORK), st.text(max_size=8).filter(lambda t: t not in set(Prune)))
def test_a_target_deleted_with_an_unknown_prune_mode_does_not_decode(
    record: dict[str, Any], mode: str
) -> None:
    """The prune mode is a string on the wire but a closed set: anything else is no record of ours."""
    body = {"prune": mode, "removeFiles": True, "configVersion": 1, "reason": "r"}
    record = {**record, "body": (WorkKind.TARGET_DELETED.value, body)}
    with pytest.raises(DecodeError, match="unknown prune"):
        decode_work(read_back(BRANCH_WORK, record))


@given(records(OBJECT_STATE), st.text(max_size=8).filter(lambda t: t not in set(ActorKind)))
def test_an_author_with_an_unknown_actor_kind_does_not_decode(record: dict[str, Any], kind: str) -> None:
    """The actor kind is a string on the wire but a closed set: both decoders refuse anything else."""
    record = _with_actor_kind(record, kind)
    written = read_back(OBJECT_STATE, record, b"t/g/r/n/o")
    assert written.value is not None
    with pytest.raises(DecodeError, match="actor"):
        decode_state_v2(written.value)
    with pytest.raises(DecodeError, match="actorKind"):
        ObjectState.from_avro(record)


@given(records(WATCH_CURSOR), st.binary(min_size=1, max_size=20))
def test_watch_cursor_round_trips_every_field(record: dict[str, Any], key: bytes) -> None:
    key = key.decode("utf-8", "replace").encode()
    written = read_back(WATCH_CURSOR, record, key)
    cursor = decode_cursor(written.key, written.value, written.header("reverser-schema"))
    assert encode_cursor(cursor).value == written.value


@given(records(WATCH_CLAIM))
def test_watch_claim_round_trips_every_field(record: dict[str, Any]) -> None:
    written = read_back(WATCH_CLAIM, record)
    assert encode_claim(decode_claim(written)).value == written.value


@given(records(DEAD_LETTER))
def test_dead_letter_decodes_every_field(record: dict[str, Any]) -> None:
    letter = decode_letter(read_back(DEAD_LETTER, record))
    read = {
        "topic": letter.source.topic,
        "partition": letter.source.partition,
        "offset": letter.source.offset,
        "stage": letter.stage,
        "reason": letter.message,
        "key": letter.key,
        "value": letter.value,
        "schema": letter.schema,
        "headers": [{"name": name, "value": value} for name, value in letter.headers],
        "errorClass": letter.error_class,
        "timeMs": letter.time_ms,
        "attempt": letter.attempt,
    }
    assert read == record


@given(records(DEAD_LETTER_REPLAY))
def test_replay_receipt_round_trips_every_field(record: dict[str, Any]) -> None:
    written = read_back(DEAD_LETTER_REPLAY, record)
    assert receipt_record(decode_receipt(written)).value == written.value


@given(records(OBJECT_STATE))
def test_object_state_round_trips_every_field(record: dict[str, Any]) -> None:
    state = ObjectState.from_avro(record)
    assert state.to_avro() == record


def test_the_object_state_fast_path_is_written_for_the_current_version() -> None:
    assert codec(OBJECT_STATE).header[1] == STATE_HAND_WRITTEN


@SLOW
@given(records(OBJECT_STATE))
def test_object_state_fast_path_agrees_with_fastavro(record: dict[str, Any]) -> None:
    state = ObjectState.from_avro(record)
    written = read_back(OBJECT_STATE, record, state.key.encode())
    assert written.value is not None
    assert decode_state_v2(written.value) == state
    assert decode_state(written) == state
    assert encode_state_v2(state) == written.value, "the hand-written writer writes fastavro's bytes"
    assert state_record(state).headers == written.headers


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damaged(records(OBJECT_STATE).map(codec(OBJECT_STATE).encode)))
def test_a_damaged_object_state_is_refused_or_read_exactly_as_fastavro_does(payload: bytes) -> None:
    try:
        got = decode_state_v2(payload)
    except DecodeError:
        return  # refusing is always safe: a rebuild warns and skips the record
    assert got == ObjectState.from_avro(codec(OBJECT_STATE).decode(payload, STATE_HAND_WRITTEN))


@given(records(TARGET_RESULT), st.sampled_from(list(PushOutcome)))
def test_target_result_round_trips_every_field(record: dict[str, Any], push: PushOutcome) -> None:
    written = read_back(TARGET_RESULT, {**record, "push": push.value})
    assert encode_result(decode_result(written)).value == written.value


def test_a_target_result_written_before_refusals_reads_as_not_stalled() -> None:
    """A v1 record (on the config topic from before the upgrade) decodes without a refusal."""
    v1 = fastavro.parse_schema(json.loads((SCHEMA_DIR / "history" / "target_result.v1.avsc").read_text()))
    fields = {
        "target": "t1",
        "provider": "git",
        "branch": "main",
        "commit": "abc",
        "push": "Succeeded",
        "atMs": 7,
        "message": "",
    }
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, v1, fields)
    record = Record(
        "config", 0, 0, 0, b"result/t1", buffer.getvalue(), ((SCHEMA_HEADER, b"target_result/1"),)
    )
    result = decode_result(record)
    assert result.push is PushOutcome.SUCCEEDED
    assert result.refusal is None


@given(records(TARGET_RESULT), st.text(max_size=8).filter(lambda t: t not in set(PushOutcome)))
def test_a_target_result_with_an_unknown_push_outcome_does_not_decode(
    record: dict[str, Any], push: str
) -> None:
    with pytest.raises(DecodeError, match="unknown push"):
        decode_result(read_back(TARGET_RESULT, {**record, "push": push}))


@given(records(CREDENTIALS_REPORT))
def test_credentials_report_round_trips_every_field(record: dict[str, Any]) -> None:
    written = read_back(CREDENTIALS_REPORT, record)
    assert encode_credentials(decode_credentials(written)).value == written.value


@given(records(STREAM_REPORT))
def test_stream_report_round_trips_every_field(record: dict[str, Any]) -> None:
    written = read_back(STREAM_REPORT, record)
    assert encode_report(decode_report(written)).value == written.value


PROVIDER_JSON = settings_json(ProviderSettings(name="git", url="file:///srv/git"))
TARGET_JSON = settings_json(TargetSettings(name="t", provider="git", branch="main", path="p"))
CLUSTER_JSON = settings_json(
    ClusterSettings.model_validate({"name": "remote", "kubeconfig_secret": {"namespace": "r", "name": "k"}})
)


@st.composite
def config_states(draw: st.DrawFn) -> dict[str, Any]:
    """A schema-drawn config state whose JSON-carried strings are what the writer puts there."""
    record = draw(records(CONFIG_STATE))
    pairs = st.tuples(st.text(), st.text()).map(lambda pair: json.dumps(list(pair)))
    record["providers"] = [PROVIDER_JSON] * len(record["providers"])
    record["targets"] = [TARGET_JSON] * len(record["targets"])
    record["clusters"] = [CLUSTER_JSON] * len(record["clusters"])
    for item in record["objects"]:
        item["errors"] = draw(st.lists(pairs, max_size=3))
    return record


@SLOW
@given(config_states())
def test_config_state_round_trips_every_field(record: dict[str, Any]) -> None:
    written = read_back(CONFIG_STATE, record, CONFIG_KEY)
    encoded = encode_config_state(decode_config_state(written))
    assert (encoded.key, encoded.value) == (CONFIG_KEY, written.value)


@pytest.mark.parametrize(
    ("field", "value", "names"),
    [
        ("providers", ['{"name": "git"}'], "url"),
        ("targets", ["not json"], "Invalid JSON"),
        ("objects", "an error that is no pair", "[path, message]"),
    ],
)
def test_config_state_entries_that_do_not_validate_raise_decode_error(
    field: str, value: Any, names: str
) -> None:
    record: dict[str, Any] = {
        "version": 1,
        "publishedAtMs": 0,
        "providers": [PROVIDER_JSON],
        "targets": [TARGET_JSON],
        "objects": [],
        "rules": [],
        "itemProblems": [],
    }
    if field == "objects":
        error = json.dumps(value)
        name = {"kind": "GitTarget", "namespace": "n", "name": "t"}
        value = [{**name, "generation": 1, "errors": [error], "unsupported": []}]
    record[field] = value
    with pytest.raises(DecodeError, match=re.escape(names)):
        decode_config_state(read_back(CONFIG_STATE, record, CONFIG_KEY))


def test_a_config_record_carries_only_what_differs_from_the_defaults() -> None:
    """An older replica forbids fields it does not know: a record that uses no new field must not
    name one, or a rolling upgrade would stop every older replica at its first config version."""
    target = TargetSettings(name="t", provider="git", branch="main", path="p")
    state = ConfigStateRecord(
        version=3,
        published_at_ms=0,
        providers=(ProviderSettings(name="git", url="file:///srv/git"),),
        targets=(target, target.model_copy(update={"attribution": AttributionMode.CONFIGURED_AUTHOR})),
        objects=(),
        rules=(),
        item_problems=(),
    )
    written = read_back(CONFIG_STATE, state.to_avro(), CONFIG_KEY)
    plain, configured = (json.loads(t) for t in state.to_avro()["targets"])
    assert set(plain) == {"name", "provider", "branch", "path"}
    assert configured["attribution"] == "configured-author"
    assert decode_config_state(written) == state
