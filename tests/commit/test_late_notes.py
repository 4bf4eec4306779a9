"""Late authors as git notes on a real local bare remote (`pipeline.commit.notes`).

A change committed as `unknown (attribution unresolved)` whose fact came late gets a note naming
its author on the pushed commit, in `refs/notes/reverser-authors/<branch>`, and an object-state
record; the pushed history stays as it was, and a redelivered record writes nothing twice.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.codec import OBJECT_STATE, codec
from pipeline.codec.branch_work import LateAuthor, WorkAuthor, WorkItem, Write
from pipeline.codec.object_state import ObjectState
from pipeline.commit.identity import Identity
from pipeline.commit.notes import containing_commit, late_line, noted, parse_late_lines
from pipeline.log.api import PendingRecord
from tests.commit.helpers import ALICE, BOB, NOBODY, Work, cm, git, log_lines
from tests.commit.test_branch_worker import Harness

REF = "refs/notes/reverser-authors/main"


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    return Harness(tmp_path)


def late_for(w: Work, item: WorkItem, author: WorkAuthor = ALICE, *, delay_ms: int = 17_000) -> WorkItem:
    """The router's `LateAuthor` for the unresolved write `item` (same target, type and source)."""
    write = item.body
    assert isinstance(write, Write)
    body = LateAuthor(
        write.operation,
        write.namespace,
        write.name,
        write.uid,
        write.resource_version,
        author,
        item.partition,
        item.offset,
        item.observed_at_ms + delay_ms,
    )
    # the router copies the write's item (its source and observation time) onto the late record
    return dataclasses.replace(w._item(body), observed_at_ms=item.observed_at_ms)


def note_of(remote: Path, rev: str = "main") -> str:
    return git(remote, "notes", f"--ref={REF}", "show", rev)


async def test_a_late_fact_is_noted_on_the_pushed_commit_without_rewriting_it(h: Harness) -> None:
    w = Work()
    unresolved = w.create(cm("u"), NOBODY, rv="7")
    await h.feed(unresolved)
    await h.settle_time(5)
    before = git(h.remote, "rev-list", "main").split()
    assert log_lines(h.remote, fmt="%an") == ["unknown (attribution unresolved)"]

    late = late_for(w, unresolved)
    await h.feed(late)

    assert git(h.remote, "rev-list", "main").split() == before, "the pushed history is never rewritten"
    [named] = parse_late_lines(note_of(h.remote))
    assert (named.path, named.resource_version) == ("live/team-a/configmaps/u.yaml", "7")
    assert (named.name, named.email, named.username, named.tier) == (
        "Alice Example",
        "alice@example.com",
        "alice@example.com",
        "exact",
    )
    assert (late.partition, late.offset) in h.settled


async def test_a_redelivered_or_contradicting_late_record_writes_nothing_twice(h: Harness) -> None:
    w = Work()
    unresolved = w.create(cm("u"), NOBODY)
    await h.feed(unresolved)
    await h.settle_time(5)
    await h.feed(late_for(w, unresolved))
    notes_tip = git(h.remote, "rev-parse", REF).strip()
    # a redelivery (router retry, branch-work replay) and a later claim by someone else
    await h.feed(late_for(w, unresolved), late_for(w, unresolved, BOB))
    assert git(h.remote, "rev-parse", REF).strip() == notes_tip
    assert [n.username for n in parse_late_lines(note_of(h.remote))] == ["alice@example.com"]


async def test_a_new_owner_notes_on_top_of_the_pushed_notes(tmp_path: Path) -> None:
    """After a failover the next owner starts from the remote's notes ref, never from its own."""
    h = Harness(tmp_path)
    w = Work()
    first = w.create(cm("a"), NOBODY)
    await h.feed(first)
    await h.settle_time(5)
    await h.feed(late_for(w, first))
    second = w.create(cm("b"), NOBODY)
    await h.feed(second)
    await h.settle_time(5)
    h.worker = h.new_worker("other-clones")
    await h.feed(late_for(w, second, BOB))
    assert [n.name for n in parse_late_lines(note_of(h.remote, "main~1"))] == ["Alice Example"]
    assert [n.name for n in parse_late_lines(note_of(h.remote, "main"))] == ["Bob"]


async def test_a_late_author_closes_the_open_window_that_holds_its_write(h: Harness) -> None:
    w = Work()
    unresolved = w.create(cm("u"), NOBODY)
    await h.feed(unresolved)
    assert h.worker.window is not None
    await h.feed(late_for(w, unresolved))
    assert h.worker.window is None
    assert log_lines(h.remote, fmt="%an") == ["unknown (attribution unresolved)"]
    assert [n.name for n in parse_late_lines(note_of(h.remote))] == ["Alice Example"]


async def test_a_write_that_made_no_commit_gets_no_note(h: Harness) -> None:
    w = Work()
    await h.feed(w.create(cm("u"), ALICE))
    await h.settle_time(5)
    same = w.update(cm("u"), NOBODY, rv="2")  # the same content: no commit
    await h.feed(same)
    await h.settle_time(5)
    late = late_for(w, same, BOB)
    await h.feed(late)
    assert git(h.remote, "show-ref").count(REF) == 0, "no note is pushed for a change Git never showed"
    assert (late.partition, late.offset) in h.settled


async def test_the_object_state_record_names_the_late_author(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    states: list[PendingRecord] = []

    async def no_state(_targets: frozenset[str]) -> list[ObjectState]:
        return []

    h.worker = h.new_worker(load_state=no_state, on_state=states.extend)
    w = Work()
    unresolved = w.create(cm("u"), NOBODY, rv="7")
    await h.feed(unresolved)
    await h.settle_time(5)
    await h.feed(late_for(w, unresolved))
    await h.feed(late_for(w, unresolved))  # redelivered: the topic has it already
    decoded: list[dict[str, Any]] = [
        codec(OBJECT_STATE).decode(r.value, dict(r.headers).get("reverser-schema")) for r in states
    ]
    assert [(d["resourceVersion"], d["author"]["outcome"], d["author"]["username"]) for d in decoded] == [
        ("7", "UNRESOLVED", ""),
        ("7", "RESOLVED", "alice@example.com"),
    ]
    assert json.loads(decoded[0]["object"]) == json.loads(decoded[1]["object"]), "only the author changed"


# the pure cores -------------------------------------------------------------------------------

IDENTITY = Identity("Carol", "carol@example.com")


@given(st.lists(st.one_of(st.none(), st.tuples(st.integers(0, 1), st.integers(0, 40))), max_size=12))
def test_containing_commit_is_the_oldest_commit_at_or_after_the_offset(trailers: list[Any]) -> None:
    """Against a reference: offsets only grow along a branch, so sort them and pick by hand."""
    growing: list[tuple[int, int] | None] = []
    high = {0: -1, 1: -1}
    for found in trailers:
        if found is not None:
            high[found[0]] = max(high[found[0]], found[1])
            found = (found[0], high[found[0]])
        growing.append(found)
    history = [(f"c{i}", off) for i, off in reversed(list(enumerate(growing)))]
    at = (0, 20)
    expected = next(
        (f"c{i}" for i, off in enumerate(growing) if off is not None and off[0] == 0 and off[1] >= 20), None
    )
    assert containing_commit(history, at) == expected


@given(
    st.text(alphabet="abc-./", min_size=1, max_size=10),
    st.text(alphabet="0123456789", min_size=1, max_size=5),
)
def test_a_note_line_reads_back_and_is_added_once(name: str, rv: str) -> None:
    late = LateAuthor("UPDATE", "ns", "n", "uid", rv, ALICE, 0, 3, 0)
    line = late_line(f"live/{name}.yaml", late, IDENTITY, 12.34)
    [parsed] = parse_late_lines(line)
    assert (parsed.path, parsed.resource_version, parsed.name, parsed.delay_s) == (
        f"live/{name}.yaml",
        rv,
        "Carol",
        12.3,
    )
    once = noted("", line)
    assert once is not None
    assert noted(once, line) is None
    other = late_line(
        f"live/{name}.yaml", LateAuthor("UPDATE", "ns", "n", "uid", rv + "1", BOB, 0, 4, 0), IDENTITY, 1
    )
    assert parse_late_lines(noted(once, other) or "")[1].resource_version == rv + "1"


async def test_a_remote_outage_keeps_the_late_author_until_the_notes_are_pushed(h: Harness) -> None:
    w = Work()
    unresolved = w.create(cm("u"), NOBODY)
    await h.feed(unresolved)
    await h.settle_time(5)
    away = h.remote.with_name("remote-away.git")
    h.remote.rename(away)
    late = late_for(w, unresolved)
    await h.feed(late)
    assert (late.partition, late.offset) not in h.settled, "not settled while the note is not on the remote"
    away.rename(h.remote)
    await h.settle_time(60)  # past the push backoff: the next push notes it
    assert (late.partition, late.offset) in h.settled
    assert [n.name for n in parse_late_lines(note_of(h.remote))] == ["Alice Example"]
