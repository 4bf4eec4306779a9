"""Which object-state records one branch still has to write: the key-level check behind "exactly once".

The commit worker writes `<prefix>.object-state` after a push, then commits its branch-work
offsets, so a crash in between redelivers work whose state may already be on the topic. The book
holds, per object key of the branch's targets, the branch-work position of the newest record
written (loaded from the topic at sync, then kept up to date), and refuses any record at or
before it: a redelivery, a replay of an older version, or a re-listed object at the version the
topic already has writes nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from pipeline.codec.branch_work import Outcome
from pipeline.codec.object_state import ObjectKey, ObjectState, state_record, tombstone_record
from pipeline.log.api import PendingRecord

__all__ = ["StateBook"]

Mark = tuple[int, int]


@dataclass(frozen=True, slots=True)
class _Entry:
    """Held for every object of the branch for as long as its worker runs: the position as two
    fields, not a tuple of its own (`mark` builds it when asked)."""

    partition: int
    offset: int
    resource_version: str
    removed: bool
    # whether the current record names an author (a late author never replaces one)
    named: bool = False

    @property
    def mark(self) -> Mark:
        return (self.partition, self.offset)


def _named(state: ObjectState) -> bool:
    return state.author.outcome == Outcome.RESOLVED


def _held(key: ObjectKey) -> ObjectKey:
    """`key` as the book holds it: its target, group, resource and namespace, a handful of values
    each decoded afresh from every record, as one string per value (the name stays the record's,
    which the worker's home index shares)."""
    return ObjectKey(
        sys.intern(key.target),
        sys.intern(key.group),
        sys.intern(key.resource),
        sys.intern(key.namespace),
        key.name,
    )


class StateBook:
    """The newest object-state record per key of one branch's targets, as positions and versions."""

    __slots__ = ("_entries",)

    def __init__(self, known: Iterable[ObjectState] = ()) -> None:
        self._entries: dict[ObjectKey, _Entry] = {
            _held(s.key): _Entry(s.partition, s.offset, s.resource_version, False, _named(s)) for s in known
        }

    def __len__(self) -> int:
        return sum(not e.removed for e in self._entries.values())

    def upsert(self, state: ObjectState) -> PendingRecord | None:
        """The record that makes `state` current, or None when the topic already has it or newer."""
        mark = (state.partition, state.offset)
        key = state.key
        entry = self._entries.get(key)
        if entry is not None and (
            entry.mark >= mark or (not entry.removed and entry.resource_version == state.resource_version)
        ):
            return None
        # a key already held stays (the dict keeps it); a new one is held with shared strings
        self._entries[key if entry is not None else _held(key)] = _Entry(
            *mark, state.resource_version, False, _named(state)
        )
        return state_record(state, key)

    def reauthor(self, state: ObjectState) -> PendingRecord | None:
        """The record naming a late author of the current version, or None when that version is not
        current any more (changed or removed since) or its record already names an author."""
        mark = (state.partition, state.offset)
        key = state.key
        entry = self._entries.get(key)
        if (
            entry is None
            or entry.removed
            or entry.mark >= mark
            or entry.resource_version != state.resource_version
            or entry.named
        ):
            return None
        self._entries[key] = _Entry(*mark, state.resource_version, False, True)
        return state_record(state, key)

    def remove(self, key: ObjectKey, mark: Mark) -> PendingRecord | None:
        """The tombstone for `key`, or None when it is absent, already removed, or changed later."""
        entry = self._entries.get(key)
        if entry is None or entry.removed or entry.mark >= mark:
            return None
        self._entries[key] = _Entry(*mark, entry.resource_version, True)
        return tombstone_record(key)

    def target_keys(self, target: str) -> Iterator[ObjectKey]:
        """Current keys of every type of one target."""
        return (k for k, e in self._entries.items() if not e.removed and k.target == target)

    def live_keys(self, target: str, group: str, resource: str, namespace: str | None) -> Iterator[ObjectKey]:
        """Current keys of one type of one target, in one namespace or (None) in every scope."""
        for key, entry in self._entries.items():
            if (
                not entry.removed
                and key.target == target
                and key.group == group
                and key.resource == resource
                and (namespace is None or key.namespace == namespace)
            ):
                yield key
