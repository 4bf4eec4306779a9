"""The predecessor memory (pipeline.router.versions) and the scale key of a live event's query.

A scale's admission fact names the version it makes by the version before it; the router gives an
event that key only when it saw that version itself, on the same stream, since it last lost
partitions, and never guesses across a gap.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.attribution import FactIndex, IndexLimits, Resolver
from pipeline.codec.branch_work import Outcome
from pipeline.codec.fact_batch import AuthorFact
from pipeline.codec.stream_id import StreamId
from pipeline.codec.watch_event import (
    EventType,
    LiveEvent,
    SnapshotChunk,
    SnapshotObject,
    StreamHead,
    WatchRecord,
)
from pipeline.content.fastjson import canonical_json
from pipeline.content.key import content_key
from pipeline.content.scale import is_scale_key, parse_scale_key, replica_shape, scale_key, spec_replicas_json
from pipeline.models import GroupResource
from pipeline.router import versions
from pipeline.router.lookup import IndexLookup, query_for, snapshot_query
from pipeline.router.versions import Predecessors

DEPLOY = GroupResource("apps", "deployments")
CM = GroupResource("", "configmaps")


def head(gr: GroupResource = DEPLOY, route: str = "default") -> StreamHead:
    return StreamHead(route, StreamId("shop", "default", gr.group, "v1", gr.resource, "shop"))


def event(
    rv: str,
    *,
    uid: str = "d1",
    replicas: int | None = 2,
    kind: EventType = EventType.MODIFIED,
    gr: GroupResource = DEPLOY,
    route: str = "default",
    deleting: bool = False,
    partition: int = 0,
    offset: int = 0,
) -> WatchRecord:
    spec = {} if replicas is None else {"replicas": replicas}
    obj = {"metadata": {"name": "web", "namespace": "shop", "uid": uid}, "spec": spec}
    body = LiveEvent(kind, "shop", "web", uid, rv, {}, deleting, json.dumps(obj).encode())
    return WatchRecord(partition, offset, head(gr, route), 1_000, body)


def chunk(versions: dict[str, str], since: str = "", offset: int = 0) -> WatchRecord:
    objects = tuple(SnapshotObject("shop", "web", uid, rv, b"{}") for uid, rv in versions.items())
    return WatchRecord(0, offset, head(), 1_000, SnapshotChunk(1, 0, objects, since))


def test_each_event_gets_the_version_before_it_and_the_first_gets_none() -> None:
    memory = Predecessors()
    assert [memory.live(event(rv)) for rv in ("10", "11", "15")] == ["", "10", "11"]
    assert memory.live(event("15")) == "11", "a redelivered event keeps its predecessor"
    assert memory.live(event("11")) == "10", "and so does a re-read of an older one"
    assert memory.live(event("10")) == ""
    assert memory.live(event("12")) == "", "a version never admitted, older than the newest: none"
    assert memory.live(event("x16")) == "", "a version that does not compare: none"
    assert memory.live(event("16")) == "15", "and the memory is as it was"
    assert memory.live(event("7", uid="d2")) == "", "objects are apart"


def test_the_history_keeps_the_newest_eight_versions() -> None:
    memory = Predecessors()
    for rv in range(1, 12):
        memory.live(event(str(rv)))
    assert memory.live(event("5")) == "4"
    assert memory.live(event("4")) == "", "the oldest kept has no predecessor kept"
    assert memory.live(event("3")) == ""


def test_objects_on_other_routes_or_kinds_are_apart_and_unscalable_kinds_are_not_kept() -> None:
    memory = Predecessors()
    memory.live(event("10"))
    assert memory.live(event("11", route="other")) == ""
    assert memory.live(event("11", gr=CM)) == ""
    assert memory.live(event("12", gr=CM)) == "", "a ConfigMap has no scale"
    assert len(memory) == 2


def test_a_removal_forgets_and_gets_none() -> None:
    memory = Predecessors()
    memory.live(event("10"))
    assert memory.live(event("11", deleting=True)) == ""
    assert memory.live(event("12")) == ""
    memory.live(event("13"))
    assert memory.live(event("14", kind=EventType.DELETED)) == ""
    assert len(memory) == 0


def test_a_snapshot_chunk_gives_the_next_event_its_predecessor_but_not_backwards() -> None:
    memory = Predecessors()
    memory.snapshot(chunk({"d1": "20", "d2": "5"}, since="3"))
    assert memory.live(event("21")) == "20"
    memory.snapshot(chunk({"d1": "19"}))  # older than what the memory holds: kept as it was
    assert memory.live(event("22")) == "21"
    assert memory.live(event("6", uid="d2")) == "5"
    memory.snapshot(event("30"))  # not a chunk: nothing
    assert memory.live(event("23")) == "22"


def test_a_partition_taken_back_after_another_member_advanced_it_is_forgotten() -> None:
    memory = Predecessors()
    memory.live(event("10", offset=4))
    memory.live(event("20", uid="d2", partition=1, offset=7))
    memory.resume(0, 5)  # restarts right after what it admitted: nobody else admitted anything
    assert memory.live(event("11", offset=5)) == "10"
    memory.resume(0, 3)  # a retried transaction: re-reads what it admitted
    assert memory.live(event("11", offset=5)) == "10"
    memory.resume(2, 50)  # a partition it never admitted from: nothing to forget
    memory.resume(0, 9)  # another member admitted offsets 6 to 8 meanwhile
    assert memory.live(event("12", offset=9)) == ""
    assert memory.live(event("13", offset=10)) == "12"
    assert memory.live(event("21", uid="d2", partition=1, offset=8)) == "20", "other partitions stay"
    memory.resume(0, 11)
    assert memory.live(event("14", offset=11)) == "13", "what it admitted after the resume counts"


def test_starting_over_when_full(monkeypatch: pytest.MonkeyPatch) -> None:
    memory = Predecessors()
    monkeypatch.setattr(versions, "MAX_OBJECTS", 2)
    memory.live(event("11"))
    memory.live(event("1", uid="d2"))
    assert memory.live(event("12")) == "11", "a known object is updated in place"
    memory.live(event("1", uid="d3"))
    assert len(memory) == 1
    assert memory.live(event("13")) == ""


def test_the_memory_holds_its_cap_of_objects_and_starts_over_past_it() -> None:
    memory = Predecessors()
    for n in range(65_536):
        memory.live(event("1", uid=f"d{n}"))
    assert len(memory) == 65_536
    assert memory.live(event("2", uid="d0")) == "1"
    memory.live(event("1", uid="another"))
    assert len(memory) == 1


def test_the_query_carries_the_previous_version_only_for_a_write_with_a_count() -> None:
    found = query_for(event("11"), "10")
    assert (found.previous_rv, found.replicas) == ("10", 2)
    for found in (query_for(event("11")), query_for(event("11", replicas=None), "10")):
        assert (found.previous_rv, found.replicas) == ("", -1)
    assert query_for(event("11", deleting=True), "10").previous_rv == ""


def test_a_scale_key_is_told_apart_from_a_resource_version_and_a_content_key() -> None:
    assert is_scale_key(scale_key("41", 3))
    assert parse_scale_key(scale_key("41", 3)) == ("41", 3)
    assert parse_scale_key(scale_key("a:b", 3)) == ("a:b", 3)
    for value in (
        "41",
        content_key(b"{}"),
        "scale:41",
        "scale::3",
        "scale:41:x",
        "scale:41:-3",
        "scale:41:\u0663",
    ):
        assert not is_scale_key(value) or parse_scale_key(value) is None, value


def test_the_replica_count_is_read_only_from_an_integer() -> None:
    assert spec_replicas_json(b'{"spec":{"replicas":3}}') == 3
    for document in (
        b'{"spec":{"replicas":true}}',
        b'{"spec":{"replicas":"3"}}',
        b'{"spec":[]}',
        b"[]",
        b"\xff",
    ):
        assert spec_replicas_json(document) is None, document


@given(st.lists(st.integers(1, 50), min_size=1, max_size=30))
def test_a_predecessor_is_always_the_version_admitted_directly_before(stream: list[int]) -> None:
    """Model: the live events of one object in log order, re-reads and repeats included. The memory
    keeps the versions it accepted, each newer than the last (the newest few); an event newer than
    the last gets the last, one it kept gets the one kept before it, anything else gets none."""
    memory = Predecessors()
    accepted: list[int] = []
    for rv in stream:
        previous = memory.live(event(str(rv)))
        kept = accepted[-versions.HISTORY :]
        if rv in kept:
            at = kept.index(rv)
            assert previous == (str(kept[at - 1]) if at else "")
        elif not accepted or rv > accepted[-1]:
            assert previous == (str(accepted[-1]) if accepted else "")
            accepted.append(rv)
        else:
            assert previous == ""


async def test_successive_scales_through_the_lookup_and_a_late_fact_for_one_of_them() -> None:
    """The production lookup on a real index: each event of one Deployment gets its own scaler; a
    scale whose fact comes after the hold is named by the late watch with the key it had."""
    index = FactIndex(IndexLimits())
    lookup = IndexLookup(None, Resolver(index, grace_ms=0))  # type: ignore[arg-type]  # no follower needed
    for author, previous, replicas in (("alice", "10", 2), ("bob", "11", 3)):
        fact = AuthorFact(
            author, verb="update", name="web", uid="d1", resource_version=scale_key(previous, replicas)
        )
        index.apply("default", DEPLOY, [fact])
    first = await lookup.author_for(event("10", replicas=1))
    assert first.outcome == Outcome.UNRESOLVED, "a create with no fact"
    named = [await lookup.author_for(event(rv, replicas=n)) for rv, n in (("11", 2), ("12", 3), ("13", 4))]
    assert [(a.username, a.tier) for a in named[:2]] == [("alice", "scale"), ("bob", "scale")]
    assert named[2].outcome == Outcome.UNRESOLVED
    late = asyncio.ensure_future(lookup.late_author(query_for(event("13", replicas=4)), 5.0))
    await asyncio.sleep(0.05)
    index.apply(
        "default",
        DEPLOY,
        [AuthorFact("carol", verb="update", name="web", uid="d1", resource_version=scale_key("12", 4))],
    )
    found = await asyncio.wait_for(late, 5.0)
    assert found is not None
    assert (found.username, found.tier) == ("carol", "scale")


def test_the_resume_boundaries_are_what_this_member_admitted() -> None:
    memory = Predecessors()
    memory.live(event("10", offset=0))
    memory.resume(0, 2)  # one record past what it admitted: another member admitted offset 1
    assert memory.live(event("11", offset=2)) == ""
    memory.resume(0, 5)  # forgets again, and counts offset 4 as the last one admitted
    memory.live(event("12", offset=1))  # old records read back: what it admitted stays at 4
    memory.live(event("13", offset=1))
    memory.resume(0, 5)
    assert memory.live(event("13", offset=1)) == "12", "nothing past offset 4 was admitted elsewhere"
    memory.resume(0, 6)  # offset 5 was
    assert memory.live(event("14", offset=6)) == ""


def test_a_snapshot_chunk_counts_as_admitted_when_the_partition_resumes() -> None:
    memory = Predecessors()
    memory.snapshot(chunk({"d1": "20"}, offset=3))
    memory.resume(0, 9)  # offsets 4 to 8 were admitted by another member
    assert memory.live(event("21", offset=9)) == ""


def test_a_newer_snapshot_version_replaces_what_the_memory_held() -> None:
    memory = Predecessors()
    memory.live(event("10"))
    memory.snapshot(chunk({"d1": "20"}, since="10"))
    assert memory.live(event("21")) == "20"


def deployment(replicas: int, image: str = "web:1") -> bytes:
    """A Deployment's sanitized canonical JSON, as the watch mirrors it."""
    obj = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"image": image}]}}},
    }
    return canonical_json(obj)


def content_event(rv: str, replicas: int, image: str = "web:1", *, offset: int = 0) -> WatchRecord:
    body = LiveEvent(EventType.MODIFIED, "shop", "web", "d1", rv, {}, False, deployment(replicas, image))
    return WatchRecord(0, offset, head(), 1_000, body)


def content_chunk(objects: dict[str, tuple[str, bytes]], since: str = "", offset: int = 0) -> WatchRecord:
    snapshot = tuple(SnapshotObject("shop", "web", uid, rv, body) for uid, (rv, body) in objects.items())
    return WatchRecord(0, offset, head(), 1_000, SnapshotChunk(1, 0, snapshot, since))


def test_a_shape_ignores_the_count_and_nothing_else() -> None:
    assert replica_shape(deployment(2)) == replica_shape(deployment(7)) is not None
    assert replica_shape(deployment(2)) != replica_shape(deployment(2, image="web:2"))
    labelled = json.loads(deployment(2))
    labelled["metadata"]["labels"] = {"tier": "front"}
    assert replica_shape(canonical_json(labelled)) != replica_shape(deployment(2))
    moved = json.loads(deployment(2))
    moved["spec"]["paused"] = True
    assert replica_shape(canonical_json(moved)) != replica_shape(deployment(2))
    for document in (b'{"spec":{}}', b'{"spec":{"replicas":true}}', b"[]", b"\xff", b""):
        assert replica_shape(document) is None, document


def test_a_gap_snapshot_gets_the_version_before_it_only_when_the_count_alone_changed() -> None:
    memory = Predecessors()
    memory.live(content_event("10", 2))
    memory.snapshot(content_chunk({"d2": ("11", deployment(1))}))  # a baseline: remembered, no range
    gap = content_chunk({"d1": ("20", deployment(5)), "d2": ("21", deployment(4))}, since="15")
    assert memory.snapshot(gap) == {"d1": "10", "d2": "11"}
    assert memory.snapshot(gap) == {"d1": "10", "d2": "11"}, "a re-read chunk keeps its ranges"
    assert memory.live(content_event("22", 6)) == "20", "the next live event starts from the snapshot"
    changed = content_chunk({"d1": ("30", deployment(6, image="web:2"))}, since="25")
    assert memory.snapshot(changed) == {}, "the image changed in the gap: more than scales happened"
    assert memory.live(content_event("31", 6, image="web:2")) == "30"


def test_a_snapshot_with_no_gap_or_an_unknown_object_gets_no_range() -> None:
    memory = Predecessors()
    assert memory.snapshot(content_chunk({"d1": ("20", deployment(5))}, since="15")) == {}, "unknown"
    assert memory.snapshot(content_chunk({"d1": ("21", deployment(6))})) == {}, "a baseline: no gap"
    assert memory.snapshot(content_chunk({"d1": ("19", deployment(6))}, since="15")) == {}, "older"
    assert memory.snapshot(content_chunk({"": ("30", deployment(6))}, since="25")) == {}, "no uid"
    assert memory.snapshot(content_event("40", 3)) == {}, "not a chunk"


def test_a_gap_range_after_the_history_is_full_still_names_the_version_before() -> None:
    memory = Predecessors()
    for rv in range(10, 10 + versions.HISTORY):
        memory.live(content_event(str(rv), rv))
    last = str(9 + versions.HISTORY)
    assert memory.snapshot(content_chunk({"d1": ("90", deployment(3))}, since="50")) == {"d1": last}
    assert memory.snapshot(content_chunk({"d1": ("90", deployment(3))}, since="50")) == {"d1": last}


@given(
    st.lists(
        st.tuples(st.sampled_from(("live", "gap", "baseline")), st.integers(1, 4), st.sampled_from("ab")),
        min_size=1,
        max_size=25,
    )
)
def test_a_gap_range_is_given_exactly_when_the_shape_before_it_matches(
    steps: list[tuple[str, int, str]],
) -> None:
    """Model: one Deployment's records in log order, each a newer version with a count and an image.
    A gap chunk gets the version before it whenever the memory held one and the image (everything
    but the count) is the same as that version's; nothing else ever gets a range."""
    memory = Predecessors()
    kept: tuple[str, str] | None = None  # (version, image) the memory holds last
    for n, (how, replicas, image) in enumerate(steps):
        rv = str(100 + n)
        if how == "live":
            assert memory.live(content_event(rv, replicas, image)) == (kept[0] if kept else "")
        else:
            since = "99" if how == "gap" else ""
            found = memory.snapshot(content_chunk({"d1": (rv, deployment(replicas, image))}, since))
            vouched = how == "gap" and kept is not None and kept[1] == image
            assert found == ({"d1": kept[0]} if vouched and kept else {})
        kept = (rv, image)


async def test_a_scale_made_in_a_watch_gap_is_named_through_the_lookup() -> None:
    """The production lookup on a real index: a gap chunk whose object was only scaled gets the
    range, and the scale fact names it; an object whose image also changed stays unknown."""
    index = FactIndex(IndexLimits())
    lookup = IndexLookup(None, Resolver(index, grace_ms=0))  # type: ignore[arg-type]  # no follower needed
    await lookup.author_for(content_event("10", 2))
    index.apply(
        "default",
        DEPLOY,
        [AuthorFact("carol", verb="update", name="web", uid="d1", resource_version=scale_key("12", 5))],
    )
    [caught] = await lookup.catch_up(content_chunk({"d1": ("20", deployment(5))}, since="15"))
    assert (caught.author.username, caught.author.tier) == ("carol", "scale")
    index.apply(
        "default",
        DEPLOY,
        [AuthorFact("dave", verb="update", name="web", uid="d1", resource_version=scale_key("21", 6))],
    )
    [caught] = await lookup.catch_up(content_chunk({"d1": ("30", deployment(6, image="web:2"))}, since="25"))
    assert caught.author.outcome == Outcome.UNRESOLVED


async def test_a_gap_scale_whose_fact_comes_late_is_named_by_the_late_watch_with_its_range() -> None:
    index = FactIndex(IndexLimits())
    lookup = IndexLookup(None, Resolver(index, grace_ms=0))  # type: ignore[arg-type]  # no follower needed
    await lookup.author_for(content_event("10", 2))
    gap = content_chunk({"d1": ("20", deployment(5))}, since="15")
    [caught] = await lookup.catch_up(gap)
    assert caught.author.outcome == Outcome.UNRESOLVED
    late = asyncio.ensure_future(lookup.late_author(snapshot_query(gap, caught.obj), 5.0))
    await asyncio.sleep(0.05)
    fact = AuthorFact("erin", verb="update", name="web", uid="d1", resource_version=scale_key("14", 5))
    index.apply("default", DEPLOY, [fact])
    found = await asyncio.wait_for(late, 5.0)
    assert found is not None
    assert (found.username, found.tier) == ("erin", "scale")
