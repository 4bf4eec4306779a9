"""Re-submitting dead letters to their own topics, at most once per failed record.

Only the topics a stage reads again take a replay (`TopicNames.replayable`): a letter naming any
other topic is refused, since a letter is data and one "from" the config topic would become a
configuration version.

A replay runs under the transactional id `<prefix>.dead-letter-replay`: starting it fences any other
replay still running and waits for its transaction to end, and only then is the dead-letter topic
read, so the receipts every earlier replay committed are seen. Each chosen record goes back to its
topic (same key, same headers, plus `reverser-replay`) in one transaction with a receipt per record
on the dead-letter topic: either both are visible or neither, so a record is never re-submitted
without its receipt, and a second replay of it is refused unless forced.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from pipeline.codec.dead_letter import (
    REPLAY_HEADER,
    ReplayReceipt,
    SourceRef,
    receipt_record,
    replay_header,
)
from pipeline.deadletter.book import Book, Entry
from pipeline.deadletter.reading import read_book
from pipeline.log.api import Log, PendingRecord, TopicNotFoundError
from pipeline.log.topics import TopicNames

__all__ = [
    "Refusal",
    "ReplayReport",
    "Replayed",
    "Selection",
    "SelectionError",
    "plan_replay",
    "replay_letters",
    "select",
    "transactional_id",
]


class SelectionError(ValueError):
    """The selection names no letter, or a letter that does not exist; `field` is the argument."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name


@dataclass(frozen=True, slots=True)
class Selection:
    """Which letters to replay: explicit offsets, or every pending one (optionally by stage/error)."""

    offsets: tuple[int, ...] = ()
    all_pending: bool = False
    stage: str | None = None
    error_class: str | None = None


@dataclass(frozen=True, slots=True)
class Refusal:
    offset: int
    reason: str


@dataclass(frozen=True, slots=True)
class Replayed:
    offset: int
    source: SourceRef
    partition: int | None = None
    new_offset: int | None = None


@dataclass(slots=True)
class ReplayReport:
    """What a replay did (or, refused or dry, would do); nothing is written when `refused` is set."""

    replayed: list[Replayed] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)
    # letters left out because another chosen letter stands for the same failed record
    duplicates: list[Refusal] = field(default_factory=list)
    written: bool = False


def transactional_id(prefix: str) -> str:
    """One id for every replay of a deployment: two replays at once fence each other."""
    return f"{prefix}.dead-letter-replay"


def select(book: Book, selection: Selection) -> list[Entry]:
    """The chosen letters in offset order; raises `SelectionError` naming the argument at fault."""
    if selection.offsets and selection.all_pending:
        raise SelectionError("--all-pending", "give dead-letter offsets or --all-pending, not both")
    if selection.offsets:
        if selection.stage is not None or selection.error_class is not None:
            raise SelectionError("--stage/--error-class", "filters apply to --all-pending only")
        chosen = []
        for offset in sorted(set(selection.offsets)):
            entry = book.entry(offset)
            if entry is None:
                raise SelectionError("OFFSET", f"no dead letter at offset {offset} of {book.topic}")
            chosen.append(entry)
        return chosen
    if not selection.all_pending:
        raise SelectionError("OFFSET", "give the dead-letter offsets to replay, or --all-pending")
    return [
        entry
        for entry in book.entries
        if entry.replayed is None
        and (selection.stage is None or entry.letter.stage == selection.stage)
        and (selection.error_class is None or entry.letter.error_class == selection.error_class)
    ]


def plan_replay(
    chosen: Iterable[Entry],
    topics: set[str],
    force: bool,
    report: ReplayReport,
    *,
    replayable: frozenset[str],
) -> list[Entry]:
    """Drop duplicates, and record why any chosen letter may not be replayed: `topics` are those
    of the chosen letters that exist, `replayable` the only ones a replay may write to
    (`TopicNames.replayable`)."""
    seen: dict[SourceRef, int] = {}
    planned = []
    for entry in chosen:
        letter = entry.letter
        first = seen.setdefault(letter.source, entry.offset)
        if first != entry.offset:
            report.duplicates.append(Refusal(entry.offset, f"the same record as letter {first}"))
            continue
        if entry.replayed is not None and not force:
            receipt = entry.replayed
            report.refused.append(
                Refusal(
                    entry.offset,
                    f"{letter.source} was already replayed (from letter {receipt.letter_offset}, "
                    f"by {receipt.by}); pass --force to re-submit it again",
                )
            )
        elif letter.source.topic not in replayable:
            report.refused.append(
                Refusal(
                    entry.offset,
                    f"topic {letter.source.topic} is not one a stage reads again (a replay writes only "
                    f"to {', '.join(sorted(replayable))})",
                )
            )
        elif letter.value is None:
            report.refused.append(Refusal(entry.offset, "the letter holds no value to re-submit"))
        elif letter.source.topic not in topics:
            report.refused.append(Refusal(entry.offset, f"topic {letter.source.topic} does not exist"))
        planned.append(entry)
    return planned


def _resubmission(entry: Entry) -> PendingRecord:
    letter = entry.letter
    headers = tuple((name, value) for name, value in letter.headers if name != REPLAY_HEADER)
    return PendingRecord(
        letter.value,
        key=letter.key,
        headers=(*headers, replay_header(entry.offset, letter.attempt)),
        # keyed records go where their key goes now (like every later record of that key)
        partition=None if letter.key is not None else letter.source.partition,
    )


async def _existing_topics(log: Log, names: Iterable[str]) -> set[str]:
    found = set()
    for name in set(names):
        try:
            await log.partitions_for(name)
        except TopicNotFoundError:
            continue
        found.add(name)
    return found


async def replay_letters(
    log: Log,
    prefix: str,
    selection: Selection,
    *,
    by: str,
    now_ms: int,
    force: bool = False,
    dry_run: bool = False,
) -> ReplayReport:
    """Re-submit the chosen letters' records in one transaction with their receipts.

    All or nothing: when any chosen letter is refused (already replayed, a topic no stage reads
    again, no value, topic gone),
    nothing is written and the report says why. Raises `SelectionError` for a bad selection and
    `LogError` when the log fails (then nothing was written either).
    """
    names = TopicNames.for_prefix(prefix)
    producer = log.transactional_producer(transactional_id(prefix))
    await producer.start()
    try:
        book = await read_book(log, names.dead_letter)
        chosen = select(book, selection)
        report = ReplayReport()
        topics = await _existing_topics(log, (entry.letter.source.topic for entry in chosen))
        planned = plan_replay(chosen, topics, force, report, replayable=names.replayable)
        if report.refused or not planned:
            return report
        if dry_run:
            report.replayed = [Replayed(e.offset, e.letter.source) for e in planned]
            return report
        appends: dict[str, list[PendingRecord]] = {}
        order: list[Entry] = []
        for topic in sorted({e.letter.source.topic for e in planned}):
            group = [e for e in planned if e.letter.source.topic == topic]
            appends[topic] = [_resubmission(e) for e in group]
            order.extend(group)
        appends[names.dead_letter] = [
            receipt_record(ReplayReceipt(e.offset, e.letter.source, e.letter.attempt, now_ms, by))
            for e in order
        ]
        results = await producer.commit(appends)
        report.written = True
        report.replayed = [
            Replayed(e.offset, e.letter.source, r.partition, r.offset)
            for e, r in zip(order, results[: len(order)], strict=True)
        ]
        return report
    finally:
        await producer.close()
