"""Which consumer groups the monitor watches: allow and deny regular expressions.

Every selected group costs metric label sets and memory, so operators bound the cardinality
here. A group is selected when some allow pattern matches it and no deny pattern does
(`re.search` semantics: anchor with `^...$` for an exact name).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["GroupSelector"]


class GroupSelector:
    """Compiled allow/deny patterns; raises `re.error` naming the bad pattern at construction."""

    __slots__ = ("_allow", "_deny")

    def __init__(self, allow: Iterable[str], deny: Iterable[str] = ()) -> None:
        self._allow = tuple(_compile(pattern) for pattern in allow)
        self._deny = tuple(_compile(pattern) for pattern in deny)

    def __call__(self, group: str) -> bool:
        return any(p.search(group) for p in self._allow) and not any(p.search(group) for p in self._deny)


def _compile(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise re.error(f"invalid group pattern {pattern!r}: {exc}") from None
