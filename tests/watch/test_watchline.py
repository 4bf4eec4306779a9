"""A plain stream's watch lines decoded to `pipeline.content.watchline`'s shapes write the same
records, byte for byte, as the whole line parsed by the standard library did.

The objects are generated with what the shapes skip (`managedFields`, `status`, unknown fields)
and the values that tell JSON parsers apart: unicode and lone surrogates, integers beyond 64 bits,
floats small and large, nested lists, empty maps, keys that need escapes; the bench's own lines
are checked too.
"""

from __future__ import annotations

import json
import math
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.bench_watch import _updates
from pipeline.codec.watch_event import LiveEvent
from pipeline.content.sanitize import content_hash, is_terminating, sanitize, sanitized_json
from pipeline.content.watchline import WatchLine, WatchMetadata, WatchObject, decode_watch_line
from pipeline.watch.records import RecordBuilder, live_fields, snapshot_object
from tests.watch.test_records import SPEC
from tests.watch.test_sanitize import TOP_LEVEL_ORDER

AT_MS = 1_700_000_000_000
# the metadata fields the watch stream reads (pipeline/watch/stream.py, records.py) besides sanitize's
STREAM_METADATA = {"uid", "resourceVersion", "deletionTimestamp"}

keys = st.text(max_size=6) | st.sampled_from(['"', "\\", "\n", "\x00", "\u2028", "\ud800", "é", "key\t"])
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.floats(min_value=-1e-3, max_value=1e-3)
    | st.sampled_from([math.nan, math.inf, 1e308, 5e-324, -0.0])
    | st.text(max_size=10)
)
values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4),
    max_leaves=16,
)
string_maps = st.dictionaries(
    st.sampled_from(["app", "kro.run/owned", "kubectl.kubernetes.io/x", "kcp.io/cluster"]) | keys,
    st.text(max_size=6),
    max_size=4,
)
metadata = st.fixed_dictionaries(
    {},
    optional={
        "name": st.text(max_size=6) | values,
        "namespace": st.text(max_size=6),
        "labels": string_maps | values,
        "annotations": string_maps | values,
        "uid": st.text(max_size=6),
        "resourceVersion": st.text(max_size=6) | st.integers(),
        "deletionTimestamp": st.none() | st.just("2026-01-01T00:00:00Z"),
        "generation": st.integers(),
        "managedFields": st.lists(values, max_size=3),
        "creationTimestamp": st.none(),
    },
)
objects = st.fixed_dictionaries(
    {},
    optional={
        "apiVersion": st.sampled_from(["v1", "apps/v1"]) | values,
        "kind": st.sampled_from(["Service", "Pod", "ConfigMap", "Status"]) | values,
        "metadata": metadata | values,
        "spec": st.dictionaries(st.sampled_from(["clusterIP", "nodeName", "ports"]) | keys, values) | values,
        "status": values,
        "data": st.dictionaries(keys, st.text(max_size=12)) | values,
        "type": values,
        "code": st.integers(0, 600) | values,
        "immutable": st.booleans(),
        "x-unknown": values,
    },
)
events = st.fixed_dictionaries(
    {"type": st.sampled_from(["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]) | values},
    optional={"object": objects | values, "extra": values},
)


def _meta(obj: Any) -> dict[str, Any]:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return meta if isinstance(meta, dict) else {}


def _written(event: Any) -> tuple[Any, ...]:
    """Everything a plain stream derives from a decoded event: what it reads, the sanitized
    bytes, their digest, the live record and the snapshot entry (what `_handle` and
    `_add_to_snapshot` write)."""
    if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
        return ("undecodable", isinstance(event, dict) and "object" in event)
    obj = event["object"]
    meta = _meta(obj)
    read: tuple[Any, ...] = (event.get("type"), obj.get("code"), obj.get("reason"), obj.get("message"))
    read += tuple(repr(meta.get(key)) for key in sorted(STREAM_METADATA | {"annotations"}))
    try:
        canonical = sanitized_json(sanitize(obj))
    except UnicodeEncodeError:  # a lone surrogate: refused alike
        return (*read, "unencodable")
    deleting = is_terminating(obj)
    builder = RecordBuilder(SPEC, 1 << 30, lambda: AT_MS)
    try:
        record = builder.live("MODIFIED", meta, deleting, canonical).value
    except UnicodeEncodeError:
        record = b"unencodable metadata"
    try:
        entry = repr(snapshot_object(meta, canonical))
    except UnicodeEncodeError:
        entry = "unencodable metadata"
    return (*read, canonical, content_hash(canonical, deleting), record, entry)


def _line(event: Any) -> bytes:
    return json.dumps(event).encode("utf-8", "surrogatepass")


@settings(max_examples=400, deadline=None)
@given(events)
def test_shaped_decoding_writes_what_the_whole_line_wrote(event: dict[str, Any]) -> None:
    line = _line(event)
    assert _written(decode_watch_line(line)) == _written(json.loads(line))


def test_the_bench_lines_write_the_same_records() -> None:
    for n, obj in enumerate(_updates()[:300]):
        cast(dict[str, Any], obj["metadata"])["resourceVersion"] = str(1000 + n)
        line = _line({"type": "MODIFIED", "object": obj})
        shaped = decode_watch_line(line)
        assert "managedFields" not in shaped["object"]["metadata"]
        assert _written(shaped) == _written(json.loads(line))


def test_live_records_match_the_schema_encoder() -> None:
    """The hand-written live record equals fastavro's, for a shaped event of the bench."""
    obj = _updates()[0]
    shaped = decode_watch_line(_line({"type": "MODIFIED", "object": obj}))["object"]
    fields = live_fields("MODIFIED", shaped["metadata"], False, sanitized_json(sanitize(shaped)))
    builder = RecordBuilder(SPEC, 1 << 20, lambda: AT_MS)
    writer = builder._writer
    assert writer.encode_live(fields, AT_MS) == writer.encode_generic(LiveEvent(*fields), AT_MS)


@pytest.mark.parametrize(
    "line",
    [
        b'{"type": "MODIFIED", "object": {"metadata": null, "data": {"a": NaN}}}',
        b'{"type": "MODIFIED", "object": {"metadata": [1], "spec": {"n": 1e400}}}',
        b'{"type": "MODIFIED", "object": {"metadata": {"name": "\\ud800"}, "status": {}}}',
        json.dumps({"type": "ADDED", "object": {"metadata": {"name": "\u00e9"}}}).encode("utf-16"),
        b'\xef\xbb\xbf{"type": "ADDED", "object": {"kind": "ConfigMap"}}',
    ],
)
def test_lines_the_shapes_refuse_come_back_whole(line: bytes) -> None:
    """What msgspec or the shape refuses is parsed by the standard library, every field kept."""
    decoded = decode_watch_line(line)
    assert repr(decoded) == repr(json.loads(line))


def test_broken_lines_are_refused_as_before() -> None:
    for line in (b'{"type": "ADDED", "object": ', b"{'type': 1}", b"\xff\xfe{"):
        with pytest.raises((json.JSONDecodeError, UnicodeDecodeError)):
            decode_watch_line(line)


def test_the_shapes_hold_the_allowlist_and_what_the_stream_reads() -> None:
    assert WatchLine.__optional_keys__ == {"type", "object"}
    assert WatchObject.__optional_keys__ == set(TOP_LEVEL_ORDER) | {"code"}
    assert WatchMetadata.__optional_keys__ == {"name", "namespace", "labels", "annotations"} | STREAM_METADATA
