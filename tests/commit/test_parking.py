"""Where a parked provider's work waits and how it is read again: the decisions, without I/O."""

from __future__ import annotations

from pipeline.commit.parking import BranchKey, ParkedWork
from pipeline.log.api import TopicPartition

TP = TopicPartition("p.branch-work", 0)
OTHER = TopicPartition("p.branch-work", 1)
BAD = ("bad", "main")
BAD_DEV = ("bad", "dev")
GOOD = ("good", "main")


def _fetch(book: ParkedWork, tp: TopicPartition, records: list[tuple[int, BranchKey | None]]) -> list[int]:
    """The offsets of `records` (offset, branch) the worker takes."""
    return [offset for offset, key in records if book.wanted(tp, offset, key)]


def test_released_branches_are_read_again_from_their_first_waiting_record_only() -> None:
    book = ParkedWork()
    # the log: 3 good, 4 bad, 5 good, 6 bad/dev, 7 undecodable, 8 bad; fetched up to 9
    for offset, key in ((4, BAD), (6, BAD_DEV), (8, BAD)):
        book.hold(key, TP, offset)
    assert book.holds(BAD)
    assert book.waiting("bad") == 2
    assert book.seeks(lambda _: 9) == {}, "nothing released, nothing to read again"

    book.release("bad")
    assert book.holds(BAD), "a released branch holds its records until its re-read starts"
    assert book.seeks(lambda _: 9) == {TP: 4}
    assert not book.holds(BAD)
    log = [(3, GOOD), (4, BAD), (5, GOOD), (6, BAD_DEV), (7, None), (8, BAD), (9, GOOD), (10, None)]
    assert _fetch(book, TP, log) == [4, 6, 8, 9, 10], "the rest was handled before; 9 on is new"
    assert _fetch(book, TP, [(3, GOOD), (4, BAD)]) == [3, 4], "done: a later read is new again"


def test_a_second_release_during_a_re_read_repeats_no_record() -> None:
    book = ParkedWork()
    book.hold(("a", "main"), TP, 5)
    book.hold(("b", "main"), TP, 2)
    book.release("a")
    assert book.seeks(lambda _: 10) == {TP: 5}
    assert _fetch(book, TP, [(5, ("a", "main")), (6, GOOD)]) == [5]
    book.release("b")
    assert book.seeks(lambda _: 10) == {TP: 2}, "back to b's first record; a's 5 is not taken twice"
    log = [(2, ("b", "main")), (5, ("a", "main")), (7, ("a", "main")), (8, ("b", "main")), (10, GOOD)]
    assert _fetch(book, TP, log) == [2, 7, 8, 10]


def test_a_branch_parked_again_during_its_re_read_waits_from_its_next_record() -> None:
    book = ParkedWork()
    book.hold(BAD, TP, 1)
    book.release("bad")
    assert book.seeks(lambda _: 4) == {TP: 1}
    assert _fetch(book, TP, [(1, BAD)]) == [1]
    book.hold(BAD, TP, 3)  # the worker parked the provider again before record 3
    book.release("bad")
    assert book.seeks(lambda _: 4) == {TP: 3}
    assert _fetch(book, TP, [(1, BAD), (3, BAD), (4, GOOD)]) == [3, 4]


def test_revoked_partitions_are_forgotten_their_next_owner_reads_from_the_committed_offset() -> None:
    book = ParkedWork()
    book.hold(BAD, TP, 1)
    book.hold(BAD_DEV, OTHER, 7)
    book.release("bad")
    book.forget([TP])
    assert not book.holds(BAD)
    assert book.seeks(lambda _: 9) == {OTHER: 7}
    book.forget([OTHER])
    assert _fetch(book, OTHER, [(1, GOOD)]) == [1]
