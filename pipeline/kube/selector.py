"""Kubernetes label selectors (`labels.Parse` semantics), parsed once when a collection fact is filed.

Python has no parser for the selector grammar the apiserver accepts in `?labelSelector=`, and the
collection-scope tier must select exactly the objects the apiserver deleted, so this module ports
the grammar, the key/value validation and the matching rules of apimachinery's `labels` package.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import Enum

__all__ = ["LabelSelector", "SelectorError", "parse_selector"]


class SelectorError(ValueError):
    """The selector text does not parse or names an invalid key or value."""


class _Op(Enum):
    IN = "in"
    NOT_IN = "notin"
    EQUALS = "="
    NOT_EQUALS = "!="
    EXISTS = "exists"
    NOT_EXISTS = "!"
    GREATER = ">"
    LESS = "<"


_SPECIAL = frozenset("=!(),<>")
_WHITESPACE = frozenset(" \t\r\n")
_OPERATOR_TOKENS = frozenset({"=", "==", "!=", "!", "(", ")", ",", ">", "<"})
_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1

# Token kinds produced by the lexer.
_IDENT = "ident"
_END = "end"


def _tokens(text: str) -> list[tuple[str, str]]:
    """Split selector text into (kind, literal) pairs; kind is `ident`, `end` or the operator itself."""
    out: list[tuple[str, str]] = []
    pos, size = 0, len(text)
    while True:
        while pos < size and text[pos] in _WHITESPACE:
            pos += 1
        if pos >= size:
            out.append((_END, ""))
            return out
        if text[pos] in _SPECIAL:
            # Longest run of special characters that is still a known operator (`!=`, `==`).
            best = ""
            end = pos
            while end < size and text[end] in _SPECIAL:
                candidate = text[pos : end + 1]
                if candidate in _OPERATOR_TOKENS:
                    best = candidate
                elif best:
                    break
                end += 1
            if not best:
                raise SelectorError(f"unexpected symbol {text[pos:end]!r}")
            out.append((best, best))
            pos += len(best)
            continue
        start = pos
        while pos < size and text[pos] not in _SPECIAL and text[pos] not in _WHITESPACE:
            pos += 1
        word = text[start:pos]
        out.append((word if word in ("in", "notin") else _IDENT, word))


def _validate_key(key: str) -> None:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        raise SelectorError(f"invalid label key prefix in {key!r}")
    if not name or len(name) > 63 or not _NAME.match(name):
        raise SelectorError(f"invalid label key {key!r}")


def _validate_value(key: str, value: str) -> None:
    if value and (len(value) > 63 or not _NAME.match(value)):
        raise SelectorError(f"invalid label value {value!r} for key {key!r}")


def _parse_int64(text: str) -> int | None:
    """Go's strconv.ParseInt(text, 10, 64): optional sign, decimal digits only, in range."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not digits.isascii() or not digits.isdigit():
        return None
    value = int(text)
    return value if _INT64_MIN <= value <= _INT64_MAX else None


class _Requirement:
    __slots__ = ("key", "number", "op", "values")

    def __init__(self, key: str, op: _Op, values: frozenset[str]) -> None:
        self.key = key
        self.op = op
        self.values = values
        self.number = 0
        _validate_key(key)
        if op in (_Op.GREATER, _Op.LESS):
            (only,) = values
            parsed = _parse_int64(only)
            if parsed is None:
                raise SelectorError(f"value of {key!r} must be an integer for '>' and '<'")
            self.number = parsed
        for value in values:
            _validate_value(key, value)

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.op
        if op is _Op.EQUALS or op is _Op.IN:
            return self.key in labels and labels[self.key] in self.values
        if op is _Op.NOT_EQUALS or op is _Op.NOT_IN:
            return self.key not in labels or labels[self.key] not in self.values
        if op is _Op.EXISTS:
            return self.key in labels
        if op is _Op.NOT_EXISTS:
            return self.key not in labels
        if self.key not in labels:
            return False
        actual = _parse_int64(labels[self.key])
        if actual is None:
            return False
        return actual > self.number if op is _Op.GREATER else actual < self.number


class LabelSelector:
    """A parsed selector: every requirement must match (an empty selector matches everything)."""

    __slots__ = ("_requirements", "text")

    def __init__(self, text: str, requirements: tuple[_Requirement, ...]) -> None:
        self.text = text
        self._requirements = requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(requirement.matches(labels) for requirement in self._requirements)

    def __repr__(self) -> str:
        return f"LabelSelector({self.text!r})"

    def match_expressions(self) -> list[dict[str, object]]:
        """The requirements as a Kubernetes `LabelSelector`'s matchExpressions, in selector order.

        Custom resources carry selectors in that structured form (docs/custom-resources.md);
        `>` and `<` have no structured spelling and raise SelectorError.
        """
        structured = {
            _Op.EQUALS: "In",
            _Op.IN: "In",
            _Op.NOT_EQUALS: "NotIn",
            _Op.NOT_IN: "NotIn",
            _Op.EXISTS: "Exists",
            _Op.NOT_EXISTS: "DoesNotExist",
        }
        out: list[dict[str, object]] = []
        for requirement in self._requirements:
            operator = structured.get(requirement.op)
            if operator is None:
                raise SelectorError(f"{requirement.key}: '>' and '<' have no matchExpressions form")
            entry: dict[str, object] = {"key": requirement.key, "operator": operator}
            if requirement.values:
                entry["values"] = sorted(requirement.values)
            out.append(entry)
        return out


class _Parser:
    __slots__ = ("pos", "tokens")

    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens = tokens
        self.pos = 0

    def peek(self, values: bool = True) -> tuple[str, str]:
        kind, literal = self.tokens[self.pos]
        if values and kind in ("in", "notin"):
            return _IDENT, literal
        return kind, literal

    def take(self, values: bool = True) -> tuple[str, str]:
        token = self.peek(values)
        self.pos += 1
        return token

    def selector(self) -> list[_Requirement]:
        requirements: list[_Requirement] = []
        while True:
            kind, literal = self.peek()
            if kind == _END:
                return requirements
            if kind not in (_IDENT, "!"):
                raise SelectorError(f"found {literal!r}, expected: !, identifier, or end of string")
            requirements.append(self.requirement())
            kind, literal = self.take()
            if kind == _END:
                return requirements
            if kind != ",":
                raise SelectorError(f"found {literal!r}, expected: ',' or end of string")
            if self.peek()[0] not in (_IDENT, "!"):
                raise SelectorError(f"found {self.peek()[1]!r}, expected: identifier after ','")

    def requirement(self) -> _Requirement:
        negated = False
        kind, literal = self.take()
        if kind == "!":
            negated = True
            kind, literal = self.take()
        if kind != _IDENT:
            raise SelectorError(f"found {literal!r}, expected: identifier")
        key = literal
        _validate_key(key)
        if negated:
            return _Requirement(key, _Op.NOT_EXISTS, frozenset())
        if self.peek()[0] in (_END, ","):
            return _Requirement(key, _Op.EXISTS, frozenset())
        kind, literal = self.take(values=False)
        if kind in ("in", "notin"):
            return _Requirement(key, _Op.IN if kind == "in" else _Op.NOT_IN, self.value_set())
        ops = {"=": _Op.EQUALS, "==": _Op.EQUALS, "!=": _Op.NOT_EQUALS, ">": _Op.GREATER, "<": _Op.LESS}
        op = ops.get(kind)
        if op is None:
            raise SelectorError(f"found {literal!r}, expected an operator (in, notin, =, ==, !=, >, <)")
        return _Requirement(key, op, frozenset((self.exact_value(),)))

    def exact_value(self) -> str:
        if self.peek()[0] in (_END, ","):
            return ""
        kind, literal = self.take()
        if kind != _IDENT:
            raise SelectorError(f"found {literal!r}, expected: identifier")
        return literal

    def value_set(self) -> frozenset[str]:
        kind, literal = self.take()
        if kind != "(":
            raise SelectorError(f"found {literal!r}, expected: '('")
        kind, literal = self.peek()
        if kind == ")":
            self.take()
            return frozenset(("",))
        if kind not in (_IDENT, ","):
            raise SelectorError(f"found {literal!r}, expected: ',', ')' or identifier")
        values: set[str] = set()
        while True:
            kind, literal = self.take()
            if kind == _IDENT:
                values.add(literal)
                following = self.peek()[0]
                if following == ",":
                    self.take()
                    if self.peek()[0] == ")":
                        values.add("")
                        break
                    continue
                if following == ")":
                    break
                raise SelectorError(f"found {self.peek()[1]!r}, expected: ',' or ')'")
            if kind == ",":
                values.add("")
                if self.peek()[0] == ")":
                    break
                continue
            raise SelectorError(f"found {literal!r}, expected: ',' or identifier")
        self.take()
        return frozenset(values)


def parse_selector(text: str) -> LabelSelector:
    """Parse `text` like the apiserver does; raises SelectorError when it would reject it."""
    return LabelSelector(text, tuple(_Parser(_tokens(text)).selector()))
