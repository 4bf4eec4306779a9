"""The Avro schemas and their codecs: round trips, typed decode failures, backward compatibility.

Records are generated from the schema files themselves (a hypothesis strategy and a deterministic
sample generator that visits every union branch and enum symbol), so a schema change is covered
without touching this file. The compatibility check decodes data written with every frozen
`schemas/history/<name>.v<N>.avsc` and with the previous committed version of `schemas/<name>.avsc`
using the current schema as the reader (Avro schema resolution, as a consumer mid-upgrade would).
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.codec import SCHEMA_DIR, SCHEMA_HEADER, Codec, DecodeError, codec, history_files
from tests.support.avro_values import branch_name, full_name, lookup, strategy

NAMES = sorted(path.stem for path in SCHEMA_DIR.glob("*.avsc"))
PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}

Json = Any


# generating records from a schema (the random ones: tests/support/avro_values.py) ---------------------


def sample(schema: Json, variant: int, namespace: str = "", named: dict[str, Json] | None = None) -> Json:
    """A deterministic valid record; `variant` picks the union branch, enum symbol and sizes."""
    if named is None:
        named = {}
        _collect_named(schema, namespace, named)
    if isinstance(schema, str):
        values: dict[str, Json] = {
            "null": None,
            "boolean": variant % 2 == 1,
            "int": -variant * 1_000_003,
            "long": variant * 10**15 + 7,
            "float": 0.5 * variant,
            "double": 0.25 * variant,
            "bytes": bytes(range(variant % 7)) + b"\xff",
            "string": f"sample-{variant}-\u00e9",
        }
        if schema in values:
            return values[schema]
        return sample(lookup(schema, namespace, named), variant, namespace, named)
    if isinstance(schema, list):
        branch = schema[variant % len(schema)]
        value = sample(branch, variant, namespace, named)
        if isinstance(branch, dict) and branch["type"] == "record":
            return (full_name(branch, namespace)[0], value)
        return value
    kind = schema["type"]
    if kind == "record":
        full, space = full_name(schema, namespace)
        named[full] = schema
        return {f["name"]: sample(f["type"], variant, space, named) for f in schema["fields"]}
    if kind == "enum":
        named[full_name(schema, namespace)[0]] = schema
        return schema["symbols"][variant % len(schema["symbols"])]
    if kind == "fixed":
        named[full_name(schema, namespace)[0]] = schema
        return bytes([variant % 256]) * schema["size"]
    if kind == "array":
        return [sample(schema["items"], variant + i, namespace, named) for i in range(variant % 3)]
    if kind == "map":
        return {f"k{i}": sample(schema["values"], variant + i, namespace, named) for i in range(variant % 3)}
    return sample(kind, variant, namespace, named)


def _collect_named(schema: Json, namespace: str, named: dict[str, Json]) -> None:
    """Every named type of `schema`, so a branch may refer to a type another branch defines."""
    if isinstance(schema, list):
        for branch in schema:
            _collect_named(branch, namespace, named)
        return
    if not isinstance(schema, dict):
        return
    kind = schema["type"]
    if kind in {"record", "enum", "fixed"}:
        full, space = full_name(schema, namespace)
        named[full] = schema
        for field in schema.get("fields", []):
            _collect_named(field["type"], space, named)
    elif kind == "array":
        _collect_named(schema["items"], namespace, named)
    elif kind == "map":
        _collect_named(schema["values"], namespace, named)
    else:
        _collect_named(kind, namespace, named)


def _widest_choice(schema: Json) -> int:
    """The largest union or enum in a schema, so samples(range(widest)) visits every branch."""
    if isinstance(schema, list):
        return max([len(schema), *(_widest_choice(b) for b in schema)])
    if isinstance(schema, dict):
        kind = schema["type"]
        if kind == "record":
            return max([1, *(_widest_choice(f["type"]) for f in schema["fields"])])
        if kind == "enum":
            return len(schema["symbols"])
        if kind == "array":
            return max(3, _widest_choice(schema["items"]))
        if kind == "map":
            return max(3, _widest_choice(schema["values"]))
    return 1


def samples(schema: Json) -> Iterator[Json]:
    for variant in range(_widest_choice(schema) + 2):
        yield sample(schema, variant)


def load_raw(path: Path) -> Json:
    return json.loads(path.read_text(encoding="utf-8"))


def write(schema: Json, record: Json) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(schema), record)
    return buffer.getvalue()


def incompatibilities(writer: Json, reader: Json) -> list[str]:
    """Why data written with `writer` cannot be read with `reader` (empty when it can)."""
    parsed_writer = fastavro.parse_schema(writer)
    parsed_reader = fastavro.parse_schema(reader)
    problems = []
    for variant, record in enumerate(samples(writer)):
        payload = write(writer, record)
        try:
            fastavro.schemaless_reader(io.BytesIO(payload), parsed_writer, parsed_reader)
        except Exception as exc:
            problems.append(f"sample {variant}: {type(exc).__name__}: {exc}")
    return problems


def released_versions() -> dict[str, str]:
    """File name -> sha256 of every released schema version (`schemas/history/RELEASED.json`)."""
    manifest = json.loads((SCHEMA_DIR / "history" / "RELEASED.json").read_text(encoding="utf-8"))
    released: dict[str, str] = manifest["released"]
    return released


# round trips ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_schema_round_trips(name: str, data: st.DataObject) -> None:
    record_codec = codec(name)
    record = data.draw(strategy(record_codec.current.raw), label="record")
    payload = record_codec.encode(record)
    assert record_codec.decode(payload, record_codec.header[1]) == record


_PRIMITIVE_OF = {type(None): "null", bool: "boolean", bytes: "bytes", str: "string"}


@pytest.mark.parametrize("name", NAMES)
def test_samples_visit_every_union_branch(name: str) -> None:
    """The compatibility check relies on the samples covering each branch of each top-level union."""
    raw = codec(name).current.raw
    namespace = raw.get("namespace", "")
    records = list(samples(raw))
    for field in raw["fields"]:
        if not isinstance(field["type"], list):
            continue
        branches = {branch_name(b, namespace) or b for b in field["type"]}
        seen = set()
        for record in records:
            value = record[field["name"]]
            seen.add(value[0] if isinstance(value, tuple) else _PRIMITIVE_OF[type(value)])
        assert seen == branches, field["name"]


def test_codec_header_names_schema_and_version() -> None:
    for name in NAMES:
        version = load_raw(SCHEMA_DIR / f"{name}.avsc")["version"]
        assert codec(name).header == (SCHEMA_HEADER, f"{name}/{version}".encode())


# undecodable payloads -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=200, deadline=None)
@given(payload=st.binary(max_size=256))
def test_random_bytes_decode_or_raise_decode_error(name: str, payload: bytes) -> None:
    record_codec = codec(name)
    try:
        record = record_codec.decode(payload, record_codec.header[1])
    except DecodeError:
        return
    # Random bytes can be a valid encoding by chance; then they must be exactly that encoding.
    assert record_codec.encode(record) == payload


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_truncated_payloads_raise_decode_error(name: str, data: st.DataObject) -> None:
    record_codec = codec(name)
    payload = record_codec.encode(data.draw(strategy(record_codec.current.raw)))
    cut = data.draw(st.integers(min_value=0, max_value=len(payload) - 1), label="cut")
    with pytest.raises(DecodeError):
        record_codec.decode(payload[:cut], record_codec.header[1])


@pytest.mark.parametrize("name", NAMES)
def test_trailing_bytes_raise_decode_error(name: str) -> None:
    record_codec = codec(name)
    payload = record_codec.encode(sample(record_codec.current.raw, 1))
    with pytest.raises(DecodeError, match="trailing bytes"):
        record_codec.decode(payload + b"\x00", record_codec.header[1])


@pytest.mark.parametrize("name", NAMES)
def test_missing_wrong_or_unknown_schema_header_raises_decode_error(name: str) -> None:
    record_codec = codec(name)
    payload = record_codec.encode(sample(record_codec.current.raw, 0))
    other = next(n for n in NAMES if n != name)
    with pytest.raises(DecodeError, match="no reverser-schema header"):
        record_codec.decode(payload, None)
    with pytest.raises(DecodeError, match="carries schema"):
        record_codec.decode(payload, f"{other}/1".encode())
    with pytest.raises(DecodeError, match="unknown schema version"):
        record_codec.decode(payload, f"{name}/99".encode())
    with pytest.raises(DecodeError, match="unknown schema version"):
        record_codec.decode(payload, f"{name}/x".encode())
    with pytest.raises(DecodeError, match="no value"):
        record_codec.decode(None, record_codec.header[1])


# backward compatibility ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_every_schema_has_a_frozen_version(name: str) -> None:
    versions = history_files(name)
    current = codec(name).current
    assert current.version in versions, (
        f"freeze schemas/{name}.avsc as schemas/history/{name}.v{current.version}.avsc"
    )
    assert load_raw(versions[current.version]) == current.raw, (
        f"schemas/{name}.avsc changed without a version bump; bump 'version' and freeze the new file"
    )


@pytest.mark.parametrize("name", NAMES)
def test_frozen_versions_decode_with_the_current_schema(name: str) -> None:
    current = codec(name)
    for version, path in sorted(history_files(name).items()):
        writer = load_raw(path)
        assert incompatibilities(writer, current.current.raw) == [], path.name
        for record in samples(writer):
            decoded = current.decode(write(writer, record), f"{name}/{version}".encode())
            assert isinstance(decoded, dict)


def test_released_schema_versions_never_change() -> None:
    """A released version is what old records on the log were written with: editing it in place
    would make the compatibility checks compare against a schema nobody wrote with."""
    released = released_versions()
    frozen = {path.name for name in NAMES for path in history_files(name).values()}
    assert frozen, "no frozen schema versions found"
    assert set(released) == frozen, "every file in schemas/history/ is listed in RELEASED.json"
    for file_name, digest in released.items():
        content = (SCHEMA_DIR / "history" / file_name).read_bytes()
        assert hashlib.sha256(content).hexdigest() == digest, f"released schema {file_name} was edited"


@pytest.mark.parametrize("name", NAMES)
def test_last_released_version_decodes_with_the_current_schema(name: str) -> None:
    versions = history_files(name)
    assert versions, f"schemas/{name}.avsc has no released version in schemas/history/"
    last = load_raw(versions[max(versions)])
    assert incompatibilities(last, codec(name).current.raw) == []


def test_the_compatibility_check_catches_a_breaking_change(tmp_path: Path) -> None:
    """A new field without a default cannot be read from old data: the check must say so."""
    writer = load_raw(SCHEMA_DIR / "watch_cursor.avsc")
    reader = json.loads(json.dumps(writer))
    reader["fields"].append({"name": "addedWithoutDefault", "type": "string"})
    assert incompatibilities(writer, reader)
    reader["fields"][-1]["default"] = ""
    assert incompatibilities(writer, reader) == []

    # And the codec resolves an older frozen version through the history directory.
    (tmp_path / "history").mkdir()
    reader["version"] = 2
    (tmp_path / "watch_cursor.avsc").write_text(json.dumps(reader), encoding="utf-8")
    (tmp_path / "history" / "watch_cursor.v1.avsc").write_text(json.dumps(writer), encoding="utf-8")
    upgraded = Codec("watch_cursor", tmp_path)
    old = sample(writer, 3)
    decoded = upgraded.decode(write(writer, old), b"watch_cursor/1")
    assert decoded == {**old, "addedWithoutDefault": ""}
    assert upgraded.header == (SCHEMA_HEADER, b"watch_cursor/2")
