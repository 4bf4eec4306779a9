"""The decisions of a dead-letter replay, without I/O: which letters a selection names, which of
them may be re-submitted and why not, and how attempts and replay headers are counted."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipeline.codec.dead_letter import (
    REPLAY_HEADER,
    DeadLetter,
    ReplayReceipt,
    SourceRef,
    attempt_of,
    decode_letter,
    letter_record,
    replay_header,
)
from pipeline.deadletter.book import Book, Entry
from pipeline.deadletter.replay import ReplayReport, Selection, SelectionError, plan_replay, select
from pipeline.log.api import Record
from pipeline.log.topics import TopicNames

WORK = "p.branch-work"
REPLAYABLE = TopicNames.for_prefix("p").replayable


def letter(
    offset: int, *, stage: str = "commit-worker", error: str = "DecodeError", value: bytes | None = b"v"
) -> DeadLetter:
    return DeadLetter(
        source=SourceRef(WORK, 3, offset),
        stage=stage,
        error_class=error,
        message="boom",
        key=b"git:main",
        value=value,
        schema="branch_work/2",
        headers=(),
        time_ms=1,
        attempt=1,
    )


def receipt(letter_offset: int, source_offset: int) -> ReplayReceipt:
    return ReplayReceipt(letter_offset, SourceRef(WORK, 3, source_offset), 1, 2, "ops@host")


BOOK = Book(
    "p.dead-letter",
    entries=[
        Entry(0, letter(10), None),
        Entry(1, letter(11, stage="router", error="DecodeError"), None),
        Entry(2, letter(12, error="UnknownProviderError"), receipt(2, 12)),
        Entry(4, letter(13, error="UnknownProviderError"), None),
        # the same failed record parked twice (redelivered before its offset was committed)
        Entry(5, letter(13, error="UnknownProviderError"), None),
        Entry(6, letter(14, value=None), None),
    ],
)


def offsets(entries: list[Entry]) -> list[int]:
    return [e.offset for e in entries]


def test_offsets_select_those_letters_in_offset_order() -> None:
    assert offsets(select(BOOK, Selection(offsets=(4, 0, 4)))) == [0, 4]


def test_all_pending_leaves_replayed_letters_out_and_filters() -> None:
    assert offsets(select(BOOK, Selection(all_pending=True))) == [0, 1, 4, 5, 6]
    assert offsets(select(BOOK, Selection(all_pending=True, stage="router"))) == [1]
    assert offsets(select(BOOK, Selection(all_pending=True, error_class="UnknownProviderError"))) == [4, 5]


@pytest.mark.parametrize(
    ("selection", "field", "message"),
    [
        (Selection(), "OFFSET", "give the dead-letter offsets to replay, or --all-pending"),
        (Selection(offsets=(3,)), "OFFSET", "no dead letter at offset 3 of p.dead-letter"),
        (Selection(offsets=(0,), all_pending=True), "--all-pending", "not both"),
        (Selection(offsets=(0,), error_class="DecodeError"), "--stage/--error-class", "--all-pending only"),
    ],
)
def test_bad_selections_name_the_argument(selection: Selection, field: str, message: str) -> None:
    with pytest.raises(SelectionError, match=message) as raised:
        select(BOOK, selection)
    assert raised.value.field == field
    assert str(raised.value).startswith(f"{field}: ")


def test_a_replayed_record_is_refused_unless_forced() -> None:
    chosen = select(BOOK, Selection(offsets=(2, 0)))
    report = ReplayReport()
    assert offsets(plan_replay(chosen, {WORK}, False, report, replayable=REPLAYABLE)) == [0, 2]
    assert [(r.offset, r.reason.split(" (")[0]) for r in report.refused] == [
        (2, f"{WORK}[3]@12 was already replayed")
    ]
    forced = ReplayReport()
    assert offsets(plan_replay(chosen, {WORK}, True, forced, replayable=REPLAYABLE)) == [0, 2]
    assert forced.refused == []


def test_two_letters_of_one_record_replay_it_once() -> None:
    report = ReplayReport()
    chosen = select(BOOK, Selection(offsets=(4, 5)))
    planned = plan_replay(chosen, {WORK}, False, report, replayable=REPLAYABLE)
    assert offsets(planned) == [4]
    assert [(d.offset, d.reason) for d in report.duplicates] == [(5, "the same record as letter 4")]
    assert report.refused == []


def test_a_letter_without_value_or_topic_is_refused() -> None:
    report = ReplayReport()
    plan_replay(select(BOOK, Selection(offsets=(6,))), {WORK}, False, report, replayable=REPLAYABLE)
    assert [(r.offset, r.reason) for r in report.refused] == [(6, "the letter holds no value to re-submit")]
    gone = ReplayReport()
    plan_replay(select(BOOK, Selection(offsets=(0,))), set(), False, gone, replayable=REPLAYABLE)
    assert [(r.offset, r.reason) for r in gone.refused] == [(0, f"topic {WORK} does not exist")]


@pytest.mark.parametrize("topic", ["p.config", "p.object-state", "p.dead-letter", "elsewhere.branch-work"])
def test_a_letter_naming_a_topic_no_stage_reads_again_is_refused_naming_it(topic: str) -> None:
    forged_letter = replace(letter(10), source=SourceRef(topic, 0, 1))
    forged = Book("p.dead-letter", entries=[Entry(0, forged_letter, None)])
    report = ReplayReport()
    plan_replay(select(forged, Selection(offsets=(0,))), {topic}, True, report, replayable=REPLAYABLE)
    assert [(r.offset, r.reason) for r in report.refused] == [
        (
            0,
            f"topic {topic} is not one a stage reads again (a replay writes only to p.branch-work, "
            "p.watch-events)",
        )
    ]


def test_attempts_count_replays_of_replays() -> None:
    first = Record(WORK, 0, 7, 0, b"k", b"v", (("reverser-schema", b"branch_work/2"),))
    assert attempt_of(first) == 1
    replayed = Record(WORK, 0, 9, 0, b"k", b"v", (*first.headers, replay_header(12, 1)))
    assert replayed.header(REPLAY_HEADER) == b"12:1"
    assert attempt_of(replayed) == 2
    assert attempt_of(Record(WORK, 0, 9, 0, b"k", b"v", ((REPLAY_HEADER, b"12:x"),))) == 1

    parked = letter_record(replayed, "commit-worker", KeyError("gone"), 123)
    decoded = decode_letter(Record("p.dead-letter", 0, 0, 0, parked.key, parked.value, parked.headers))
    assert decoded.attempt == 2
    assert decoded.source == SourceRef(WORK, 0, 9)
    assert decoded.error_class == "KeyError"
    assert decoded.message == "'gone'"
    assert decoded.headers == replayed.headers
    assert decoded.schema == "branch_work/2"
    assert decoded.time_ms == 123
