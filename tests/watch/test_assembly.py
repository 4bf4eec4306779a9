"""A watch session's snapshot assembly, decided without a cluster or a log (pipeline/watch/assembly.py)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.codec import SCHEMA_HEADER, WATCH_EVENT, codec
from pipeline.codec.stream_id import StreamId
from pipeline.codec.watch_event import SnapshotObject
from pipeline.log.api import PendingRecord
from pipeline.watch.assembly import SnapshotAssembly, next_epoch
from pipeline.watch.records import RecordBuilder
from pipeline.watch.resolve import StreamSpec

SPEC = StreamSpec(
    StreamId("t1", "src", "apps", "v1", "deployments", "team-a"), "route-a", "Deployment", True, ""
)
LIMIT = 16_384


def decode(record: PendingRecord) -> tuple[str, dict[str, object]]:
    assert record.value is not None
    name, body = codec(WATCH_EVENT).decode(record.value, dict(record.headers)[SCHEMA_HEADER])["body"]
    return name.rsplit(".", 1)[-1], body


def obj(i: int, size: int) -> SnapshotObject:
    return SnapshotObject("team-a", f"o{i}", f"uid-{i}", str(i), b"x" * size)


def test_epochs_grow_past_the_cursor_the_last_snapshot_and_follow_the_clock() -> None:
    assert next_epoch(None, 0, 1_000) == 1_000
    assert next_epoch(5_000, 0, 1_000) == 5_001, "an earlier process's epoch (from its cursor) is passed"
    assert next_epoch(None, 7_000, 1_000) == 7_001, "this stream's last epoch is passed"
    assert next_epoch(3, 2, 1_000) == 1_000


def test_an_empty_snapshot_is_only_its_end_marker() -> None:
    assembly = SnapshotAssembly(9, "list", "40", RecordBuilder(SPEC, LIMIT, lambda: 0))
    (end,) = assembly.end("77")
    body = {"epoch": 9, "chunks": 0, "objects": 0, "resourceVersion": "77", "since": "40"}
    assert decode(end) == ("SnapshotEnd", body)


@settings(max_examples=50, deadline=None)
@given(sizes=st.lists(st.integers(0, 6000), max_size=30))
def test_chunks_are_cut_at_the_budget_and_the_end_marker_counts_them(sizes: list[int]) -> None:
    builder = RecordBuilder(SPEC, LIMIT, lambda: 0)
    assembly = SnapshotAssembly(3, "watchlist", "5", builder)
    records: list[PendingRecord] = []
    for i, size in enumerate(sizes):
        item = obj(i, size)
        assert assembly.fits(item) == (item.size_estimate <= builder.chunk_budget)
        if assembly.fits(item):
            records += assembly.add(item)
            assert assembly.pending_bytes <= builder.chunk_budget
    records += assembly.end("42")
    decoded = [decode(r) for r in records]
    chunks = [body for name, body in decoded if name == "SnapshotChunk"]
    name, end = decoded[-1]
    assert name == "SnapshotEnd"
    assert [c["seq"] for c in chunks] == list(range(len(chunks)))
    kept = [f"o{i}" for i, size in enumerate(sizes) if obj(i, size).size_estimate <= builder.chunk_budget]
    assert [o["name"] for c in chunks for o in c["objects"]] == kept  # type: ignore[attr-defined]
    assert (end["epoch"], end["chunks"], end["objects"]) == (3, len(chunks), len(kept))
    assert all(builder.fits(r) for r in records)
