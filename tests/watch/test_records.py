"""Watch-event and cursor encoding: chunks stay under the topic limit, cursors round-trip."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.codec import SCHEMA_HEADER, WATCH_EVENT, DecodeError, codec
from pipeline.codec.stream_id import StreamId
from pipeline.codec.watch_cursor import Cursor, decode_cursor, encode_cursor
from pipeline.codec.watch_event import SnapshotObject
from pipeline.watch.records import RecordBuilder
from pipeline.watch.resolve import StreamSpec

SPEC = StreamSpec(
    StreamId("t1", "src", "apps", "v1", "deployments", "team-a"), "route-a", "Deployment", True, ""
)


def builder(limit: int) -> RecordBuilder:
    return RecordBuilder(SPEC, limit, lambda: 1_700_000_000_000)


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=40),
    limit=st.integers(4096 + 3200, 40_000),
)
def test_chunks_split_until_every_record_fits(sizes: list[int], limit: int) -> None:
    records = builder(limit)
    objects = [
        SnapshotObject("team-a", f"o{i}", f"uid-{i}", str(i), b"x" * size) for i, size in enumerate(sizes)
    ]
    chunks = records.chunks(7, 3, objects)
    decoded = [codec(WATCH_EVENT).decode(c.value, dict(c.headers)[SCHEMA_HEADER]) for c in chunks]
    assert all(records.fits(c) for c in chunks)
    assert [d["body"][1]["seq"] for d in decoded] == list(range(3, 3 + len(chunks)))
    names = [o["name"] for d in decoded for o in d["body"][1]["objects"]]
    assert names == [o.name for o in objects]


def test_live_record_carries_key_headers_and_identity() -> None:
    record = builder(1 << 20).live(
        "MODIFIED",
        {"namespace": "team-a", "name": "d1", "uid": "u1", "resourceVersion": "42", "labels": {"app": "x"}},
        True,
        b'{"kind":"Deployment"}',
    )
    headers = dict(record.headers)
    assert record.key == b"route-a:apps/deployments"
    assert headers["target"] == b"t1"
    assert headers["scope"] == b"team-a"
    decoded = codec(WATCH_EVENT).decode(record.value, headers[SCHEMA_HEADER])
    assert decoded["observedAtMs"] == 1_700_000_000_000
    name, body = decoded["body"]
    assert name == "reverser.watch.LiveEvent"
    assert body["deleting"] is True
    assert body["labels"] == {"app": "x"}
    assert (decoded["group"], decoded["version"], decoded["resource"]) == ("apps", "v1", "deployments")


def test_cursor_round_trip_and_garbage() -> None:
    cursor = Cursor(SPEC.cursor_key, SPEC.stream, "99", 5, 123)
    record = encode_cursor(cursor)
    assert record.key == b"t1/apps/deployments/team-a"
    assert decode_cursor(record.key, record.value, dict(record.headers)[SCHEMA_HEADER]) == cursor
    with pytest.raises(DecodeError):
        decode_cursor(record.key, b"\xff\xff", dict(record.headers)[SCHEMA_HEADER])
    with pytest.raises(DecodeError):
        decode_cursor(record.key, record.value, None)


def test_a_cursor_without_a_key_is_named_by_its_stream() -> None:
    """A keyless cursor (never written so) gets the key the watch stage looks its stream up by."""
    stream = StreamId("t1", "src", "", "v1", "configmaps", "")
    record = encode_cursor(Cursor("ignored", stream, "7", 1, 2))
    decoded = decode_cursor(None, record.value, dict(record.headers)[SCHEMA_HEADER])
    assert decoded == Cursor("t1//configmaps/", stream, "7", 1, 2)
    assert decoded.key == StreamSpec(stream, "route-a", "ConfigMap", True, "").cursor_key
