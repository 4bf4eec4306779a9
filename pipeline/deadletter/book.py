"""The dead-letter topic read whole: every letter with whether its record was replayed.

Letters and replay receipts share `<prefix>.dead-letter` (one partition, so "offset" names a letter
unambiguously). A record counts as replayed once a receipt names its source (topic, partition,
offset), whichever letter the receipt came from: the commit worker can park one record twice when
a crash redelivers it before its offset was committed, and the two letters must not be replayed
twice between them.

Pure: `book_of` builds the book from records `pipeline.deadletter.reading` fetched.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.codec import DecodeError
from pipeline.codec.dead_letter import (
    DeadLetter,
    ReplayReceipt,
    SourceRef,
    decode_letter,
    decode_receipt,
    is_receipt,
)
from pipeline.log.api import Record

__all__ = ["Book", "Entry", "Unreadable", "book_of"]


@dataclass(frozen=True, slots=True)
class Entry:
    """One letter at `offset` of the dead-letter topic, and the receipt of its record's replay."""

    offset: int
    letter: DeadLetter
    replayed: ReplayReceipt | None


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A record on the dead-letter topic that is neither a letter nor a receipt this version reads."""

    offset: int
    error: str


@dataclass(slots=True)
class Book:
    """Everything on the dead-letter topic up to the end offsets seen when reading started."""

    topic: str
    entries: list[Entry] = field(default_factory=list)
    unreadable: list[Unreadable] = field(default_factory=list)
    # records retention deleted before they were read (the oldest letters are gone)
    lost: int = 0

    def entry(self, offset: int) -> Entry | None:
        for entry in self.entries:
            if entry.offset == offset:
                return entry
        return None

    def offsets(self) -> list[int]:
        return [entry.offset for entry in self.entries]


def book_of(topic: str, records: list[Record], lost: int) -> Book:
    """The book of the records read from the dead-letter topic, in offset order: letters matched
    with the receipts of their replays, and what this version cannot read."""
    book = Book(topic, lost=lost)
    letters: list[tuple[int, DeadLetter]] = []
    receipts: dict[SourceRef, ReplayReceipt] = {}
    for record in records:
        try:
            if is_receipt(record):
                receipt = decode_receipt(record)
                receipts.setdefault(receipt.source, receipt)
            else:
                letters.append((record.offset, decode_letter(record)))
        except DecodeError as exc:
            book.unreadable.append(Unreadable(record.offset, str(exc)))
    book.entries = [Entry(offset, letter, receipts.get(letter.source)) for offset, letter in letters]
    return book
