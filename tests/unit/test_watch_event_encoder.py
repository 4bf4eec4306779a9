"""The hand-written `watch_event` encoder writes exactly fastavro's bytes, for every body variant."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.codec import WATCH_EVENT, codec
from pipeline.codec.avro_binary import write_long
from pipeline.codec.stream_id import StreamId
from pipeline.codec.watch_event import (
    HAND_WRITTEN,
    Body,
    EventType,
    LiveEvent,
    LiveFields,
    SnapshotBegin,
    SnapshotChunk,
    SnapshotEnd,
    SnapshotObject,
    StreamHead,
    WatchEventWriter,
    decode_watch_event,
    encode_body,
)
from pipeline.log.api import PendingRecord, Record

texts = (
    st.text(max_size=40)
    | st.text(max_size=300)
    | st.text(alphabet=st.characters(max_codepoint=127), max_size=70)
)
longs = st.integers(min_value=-(2**63), max_value=2**63 - 1)
ints = st.integers(min_value=-(2**31), max_value=2**31 - 1)
payloads = st.binary(max_size=400)
heads = st.builds(StreamHead, texts, st.builds(StreamId, texts, texts, texts, texts, texts, texts))
lives = st.builds(
    LiveEvent,
    type=st.sampled_from([t.value for t in EventType]),
    namespace=texts,
    name=texts,
    uid=texts,
    resource_version=texts,
    labels=st.dictionaries(texts, texts, max_size=6),
    deleting=st.booleans(),
    object_json=payloads,
)
objects = st.builds(SnapshotObject, texts, texts, texts, texts, payloads)
bodies: st.SearchStrategy[Body] = st.one_of(
    lives,
    st.builds(SnapshotBegin, longs, texts),
    st.builds(SnapshotChunk, longs, ints, st.lists(objects, max_size=80).map(tuple), texts),
    st.builds(SnapshotEnd, longs, ints, longs, texts, texts),
)


def test_the_current_schema_is_the_hand_written_one() -> None:
    """A new schema version must come with a new encoder (or it silently takes the slow path)."""
    assert codec(WATCH_EVENT).header[1] == HAND_WRITTEN


@given(heads, bodies, longs)
def test_hand_encoder_is_byte_identical_to_fastavro(head: StreamHead, body: Body, at_ms: int) -> None:
    writer = WatchEventWriter(head)
    assert writer.encode(body, at_ms) == writer.encode_generic(body, at_ms)


@given(heads, bodies, longs)
def test_what_is_written_decodes_to_what_was_given(head: StreamHead, body: Body, observed_at_ms: int) -> None:
    pending = WatchEventWriter(head).record(body, observed_at_ms)
    decoded = decode_watch_event(Record("t", 0, 0, 0, pending.key, pending.value, pending.headers))
    assert (decoded.head, decoded.observed_at_ms) == (head, observed_at_ms)
    same_labels = (
        isinstance(body, LiveEvent)
        and isinstance(decoded.body, LiveEvent)
        and dict(decoded.body.labels) == body.labels
    )
    assert decoded.body == body or same_labels


@given(longs)
def test_long_writer_matches_fastavro(value: int) -> None:
    """Zigzag varints at every size, including the one-byte table's edges."""
    assert encode_body(SnapshotBegin(value)) == b"\x02" + write_long(value) + b"\x00"
    # seven empty strings, observedAtMs 0 and the union branch come first; the empty RV last
    assert write_long(value) == codec(WATCH_EVENT).encode(_begin_envelope(value))[9:-1]


def _begin_envelope(epoch: int) -> dict[str, object]:
    empty = dict.fromkeys(("route", "cluster", "target", "group", "version", "resource", "scope"), "")
    body = {"epoch": epoch, "resourceVersion": ""}
    return {**empty, "observedAtMs": 0, "body": ("reverser.watch.SnapshotBegin", body)}


def test_an_unknown_event_type_is_refused_like_fastavro() -> None:
    event = LiveEvent("BOOKMARK", "", "", "", "", {}, False, b"")
    writer = WatchEventWriter(StreamHead("", StreamId("", "", "", "v1", "x", "")))
    with pytest.raises(KeyError):
        writer.encode(event, 0)
    with pytest.raises(ValueError, match="BOOKMARK"):
        writer.encode_generic(event, 0)


@given(heads, st.lists(st.tuples(bodies, st.sampled_from([0, 1, 1_764_000_000_000, -5])), max_size=8))
def test_one_writer_over_many_records_stays_identical(
    head: StreamHead, items: list[tuple[Body, int]]
) -> None:
    """The writer remembers the last timestamp's bytes: a repeated or changed one must not leak."""
    writer = WatchEventWriter(head)
    for body, at_ms in items:
        assert writer.encode(body, at_ms) == writer.encode_generic(body, at_ms)


def _fields(event: LiveEvent) -> LiveFields:
    return (
        event.type,
        event.namespace,
        event.name,
        event.uid,
        event.resource_version,
        event.labels,
        event.deleting,
        event.object_json,
    )


@given(heads, lives, longs, st.sampled_from([0, 63, 64, 8191, 8192, 70_000]))
def test_a_live_event_from_its_fields_is_the_live_event_record(
    head: StreamHead, event: LiveEvent, at_ms: int, payload_bytes: int
) -> None:
    """The watch writes a live event from a tuple of its fields, never building the `LiveEvent`:
    the same bytes as fastavro's, at payload lengths on each side of a varint's byte boundary."""
    event = LiveEvent(*_fields(event)[:-1], event.object_json + b"{" * payload_bytes)
    writer = WatchEventWriter(head)
    written = writer.live_record(_fields(event), at_ms)
    assert written.value == writer.encode_generic(event, at_ms)
    assert written == PendingRecord(writer.encode(event, at_ms), writer.key, writer.headers)


def test_a_live_event_with_long_or_non_ascii_identity_is_fastavros() -> None:
    """Names of 253 characters and non-ASCII text take more than one length byte or more bytes
    than characters; both must still be written as fastavro writes them."""
    head = StreamHead("r", StreamId("t", "c", "", "v1", "configmaps", "ns"))
    writer = WatchEventWriter(head)
    for fields in (
        ("MODIFIED", "ns", "n" * 253, "u" * 36, "9" * 20, {"k" * 63: "v" * 64}, True, b"{}"),
        ("ADDED", "\u00e9t\u00e9", "\u65e5\u672c", "\U0001f600", "", {"\u00e9": "\u00e8"}, False, b""),
        ("DELETED", "", "", "", "", {}, False, b"x" * 8192),
    ):
        assert writer.encode_live(fields, 5) == writer.encode_generic(LiveEvent(*fields), 5)


@pytest.mark.parametrize("value", [-65, -64, 63, 64, 65, 127, 128, 8191, 8192, 8193, 2**31, -(2**63)])
def test_long_writer_at_the_varint_boundaries(value: int) -> None:
    assert write_long(value) == codec(WATCH_EVENT).encode(_begin_envelope(value))[9:-1]
