"""Go's `path.Match` globs, in time linear in the pattern times the name, never backtracking.

A GitProvider's `allowedBranches` and the platform's tenant namespace patterns are written by
people as gitops-reverser's Go code reads them: `*` is any run of characters but `/`, `?` one
character but `/`, `[a-z]`/`[^a-z]` a class, `\\` escapes. Translating such a glob to a Python
regular expression backtracks: `*a*a*a*a*a*a*a*a*a*b` against 40 characters took 34 s. Go's own
algorithm does not: a chunk between stars matches a fixed number of characters, so the leftmost
place it matches is as good as any later one and is never revisited. This module is that
algorithm; a malformed pattern raises GlobError wherever it is malformed, not only when a name
happens to reach the bad part (Go reports some only then).
"""

from __future__ import annotations

__all__ = ["GlobError", "check_glob", "glob_match"]


class GlobError(ValueError):
    """A pattern Go's `path.Match` refuses (`ErrBadPattern`); the message says where."""


def _scan_chunk(pattern: str) -> tuple[bool, str, str]:
    """(a star precedes it, the chunk up to the next star outside a class, the rest)."""
    stripped = pattern.lstrip("*")
    star = len(stripped) != len(pattern)
    in_class = False
    index = 0
    while index < len(stripped):
        char = stripped[index]
        if char == "\\":
            index += 1
        elif char == "[":
            in_class = True
        elif char == "]":
            in_class = False
        elif char == "*" and not in_class:
            break
        index += 1
    index = min(index, len(stripped))
    return star, stripped[:index], stripped[index:]


def _class_char(chunk: str, at: int) -> tuple[str, int]:
    """One character of a class (`\\x` escapes) and the index after it; GlobError if there is none."""
    if at >= len(chunk) or chunk[at] in "-]":
        raise GlobError("character class is malformed")
    if chunk[at] == "\\":
        at += 1
        if at >= len(chunk):
            raise GlobError("pattern ends in an escape")
    at += 1
    if at >= len(chunk):
        raise GlobError("character class is not closed")
    return chunk[at - 1], at


def _match_chunk(chunk: str, name: str, start: int) -> int | None:
    """The index in `name` after `chunk` matched at `start`, or None; the whole chunk is checked."""
    at = 0
    position = start
    failed = False
    while at < len(chunk):
        if not failed and position >= len(name):
            failed = True
        char = chunk[at]
        if char == "[":
            current = "" if failed else name[position]
            if not failed:
                position += 1
            at += 1
            negated = at < len(chunk) and chunk[at] == "^"
            if negated:
                at += 1
            matched = False
            ranges = 0
            while True:
                if at < len(chunk) and chunk[at] == "]" and ranges > 0:
                    at += 1
                    break
                low, at = _class_char(chunk, at)
                high = low
                if chunk[at] == "-":
                    high, at = _class_char(chunk, at + 1)
                if low <= current <= high and current:
                    matched = True
                ranges += 1
            if matched == negated:
                failed = True
        elif char == "?":
            if not failed:
                failed = name[position] == "/"
                position += 1
            at += 1
        else:
            if char == "\\":
                at += 1
                if at >= len(chunk):
                    raise GlobError("pattern ends in an escape")
            if not failed:
                failed = chunk[at] != name[position]
                position += 1
            at += 1
    return None if failed else position


def check_glob(pattern: str) -> str:
    """`pattern` if Go's `path.Match` accepts it, else GlobError."""
    rest = pattern
    while rest:
        _, chunk, rest = _scan_chunk(rest)
        _match_chunk(chunk, "", 0)
    return pattern


def glob_match(pattern: str, name: str) -> bool:
    """Whether `name` matches `pattern` as Go's `path.Match` says; GlobError for a bad pattern.

    At most len(pattern) * (len(name) + 1) character comparisons.
    """
    check_glob(pattern)
    rest = pattern
    position = 0
    while rest:
        star, chunk, rest = _scan_chunk(rest)
        if star and not chunk:
            return "/" not in name[position:]
        last = not rest
        end = _match_chunk(chunk, name, position)
        if end is not None and (end == len(name) or not last):
            position = end
            continue
        if not star:
            return False
        skip = position
        found = False
        while skip < len(name) and name[skip] != "/":
            end = _match_chunk(chunk, name, skip + 1)
            skip += 1
            if end is not None and not (last and end < len(name)):
                position = end
                found = True
                break
        if not found:
            return False
    return position == len(name)
