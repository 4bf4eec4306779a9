"""The content digest of every object a watch stream wrote, held in about 16 bytes per object.

A stream drops an update whose content equals what the log already holds for its uid, so it keeps
one digest per watched object for as long as it runs (issue 32's memory budget). As a dict of the
uid's string and the SHA-256 digest's bytes that was about 250 bytes per object, a tenth of a
first sync's memory per object. Here an object is one slot of 16 bytes in a flat array (load at
most three quarters): its key, 64 bits of the uid's string hash, and the first 64 bits of its
content digest.

What the shortening risks: two uids whose keys are equal share a slot, so one's digest is
compared with the other's content: that writes an unchanged update again (harmless), and drops a
changed one only if the two 64-bit content digests are equal too. Two versions of one object
whose 64-bit content digests are equal make the second look unchanged: a chance of 2^-64 per
update, far below any failure the pipeline otherwise survives, so it is accepted.

The slots are split over 256 tables by the key's low byte, each grown on its own, so growing the
table of a million objects re-inserts a few thousand keys at a time, never the whole stream's.
"""

from __future__ import annotations

from array import array

__all__ = ["DigestTable", "short_digest", "uid_key"]

_MASK64 = (1 << 64) - 1
_SHARD_BITS = 8
_SHARDS = 1 << _SHARD_BITS
_FIRST_SLOTS = 8
_EMPTY = 0


def uid_key(uid: str) -> int:
    """The 64-bit key a uid is held under (never 0, the empty slot's)."""
    return (hash(uid) & _MASK64) or 1


def short_digest(digest: bytes) -> int:
    """The first 64 bits of a content digest, as held."""
    return int.from_bytes(digest[:8], "little")


class _Shard:
    """One open-addressing table: slot i is `keys_values[2i]` (0: empty) and `keys_values[2i+1]`;
    linear probing from the key's slot, deletion by shifting the probe run back (no tombstones)."""

    __slots__ = ("count", "mask", "slots")

    def __init__(self, size: int) -> None:
        self.slots = array("Q", bytes(16 * size))
        self.mask = size - 1
        self.count = 0

    def find(self, key: int) -> int:
        """The slot holding `key`, or the empty slot where it would go."""
        slots, mask = self.slots, self.mask
        i = (key >> _SHARD_BITS) & mask
        while True:
            held = slots[2 * i]
            if held in (key, _EMPTY):
                return i
            i = (i + 1) & mask

    def put(self, key: int, value: int) -> None:
        slots, mask = self.slots, self.mask
        i = (key >> _SHARD_BITS) & mask
        while True:
            held = slots[2 * i]
            if held == key:
                break
            if held == _EMPTY:
                slots[2 * i] = key
                self.count += 1
                break
            i = (i + 1) & mask
        slots[2 * i + 1] = value

    def remove(self, i: int) -> None:
        """Empty slot `i`, moving back every key after it in its run that may not stay past the gap."""
        slots, mask = self.slots, self.mask
        j = i
        while True:
            j = (j + 1) & mask
            key = slots[2 * j]
            if key == _EMPTY:
                break
            home = (key >> _SHARD_BITS) & mask
            # the key stays when its home lies cyclically in (i, j]: a probe from there reaches it
            if (home - i - 1) & mask < (j - i) & mask:
                continue
            slots[2 * i] = key
            slots[2 * i + 1] = slots[2 * j + 1]
            i = j
        slots[2 * i] = _EMPTY
        slots[2 * i + 1] = 0
        self.count -= 1

    def grown(self) -> _Shard:
        """A shard of twice the slots holding the same keys."""
        bigger = _Shard(2 * (self.mask + 1))
        slots = self.slots
        for i in range(0, len(slots), 2):
            if slots[i] != _EMPTY:
                bigger.put(slots[i], slots[i + 1])
        return bigger


class DigestTable:
    """uid -> the short digest of its content on the log (`short_digest`), for one stream."""

    __slots__ = ("_shards",)

    def __init__(self) -> None:
        # created on a first key: a stream of a few objects holds a few small tables
        self._shards: list[_Shard | None] = [None] * _SHARDS

    def __len__(self) -> int:
        return sum(s.count for s in self._shards if s is not None)

    def get(self, uid: str) -> int | None:
        key = (hash(uid) & _MASK64) or 1  # uid_key, inlined: once per watch event
        shard = self._shards[key & (_SHARDS - 1)]
        if shard is None:
            return None
        slots, mask = shard.slots, shard.mask
        i = (key >> _SHARD_BITS) & mask
        while True:
            held = slots[2 * i]
            if held == key:
                return slots[2 * i + 1]
            if held == _EMPTY:
                return None
            i = (i + 1) & mask

    def put(self, uid: str, digest: int) -> None:
        key = (hash(uid) & _MASK64) or 1  # uid_key, inlined: once per acknowledged event
        at = key & (_SHARDS - 1)
        shard = self._shards[at]
        if shard is None:
            shard = self._shards[at] = _Shard(_FIRST_SLOTS)
        slots, mask = shard.slots, shard.mask
        i = (key >> _SHARD_BITS) & mask
        # an update of a held key (the steady state) replaces its digest in place
        while True:
            held = slots[2 * i]
            if held == key:
                slots[2 * i + 1] = digest
                return
            if held == _EMPTY:
                break
            i = (i + 1) & mask
        if 4 * (shard.count + 1) > 3 * (mask + 1):
            grown = self._shards[at] = shard.grown()
            grown.put(key, digest)  # slots move as the table grows: probe it anew
            return
        slots[2 * i] = key  # the empty slot the probe ended on
        slots[2 * i + 1] = digest
        shard.count += 1

    def discard(self, uid: str) -> None:
        key = uid_key(uid)
        shard = self._shards[key & (_SHARDS - 1)]
        if shard is None:
            return
        i = shard.find(key)
        if shard.slots[2 * i] != _EMPTY:
            shard.remove(i)

    def clear(self) -> None:
        self._shards = [None] * _SHARDS
