"""The Go values a template sees, and how Go's `fmt` prints them.

gitops-reverser hands its templates Go structs, a `map[string]int` and a slice of structs with a
`String` method. A template's output depends on Go's rules for those shapes (a struct field that
does not exist is an error, a map prints as `map[k:v]` in key order, a `Stringer` prints through
its method), so the values are modelled as the Go shapes they are, not as Python dicts that would
print differently.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "GoByte",
    "GoMap",
    "GoSlice",
    "GoStruct",
    "GoValue",
    "RenderError",
    "format_value",
    "truth",
    "type_name",
]


class RenderError(ValueError):
    """A template that Go would refuse while executing (an unknown field, a bad comparison, ...)."""


@dataclass(frozen=True, slots=True)
class GoStruct:
    """A struct value: its Go type name, its fields in declaration order, and an optional `String`."""

    type: str
    fields: Mapping[str, GoValue]
    stringer: Callable[[], str] | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class GoMap:
    """A `map[string]int` (the only map GR's data holds)."""

    items: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class GoSlice:
    """A slice; `elem` is the Go name of its element type (for error messages and `%v`)."""

    elem: str
    items: Sequence[GoValue]


class GoByte(int):
    """A byte of a string (`index "abc" 0`): Go's uint8, which fmt names as such."""


GoValue = str | int | bool | GoStruct | GoMap | GoSlice


def type_name(value: GoValue) -> str:
    """The Go type name fmt writes in `%!d(string=x)`."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, GoByte):
        return "uint8"
    if isinstance(value, int):
        return "int"
    if isinstance(value, str):
        return "string"
    if isinstance(value, GoMap):
        return "map[string]int"
    if isinstance(value, GoSlice):
        return f"[]{value.elem}"
    return value.type


def truth(value: GoValue) -> bool:
    """Go template truth: false, 0, "" and empty maps and slices are false; a struct is true."""
    if isinstance(value, GoMap | GoSlice):
        return len(value.items) > 0
    if isinstance(value, GoStruct):
        return True
    return bool(value)


def format_value(value: GoValue) -> str:
    """`fmt.Sprint(value)` (`%v`): a Stringer through its method, composites in Go's layout."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | str):
        return str(value)
    if isinstance(value, GoMap):
        return "map[" + " ".join(f"{k}:{value.items[k]}" for k in sorted(value.items, key=_go_order)) + "]"
    if isinstance(value, GoSlice):
        return "[" + " ".join(format_value(item) for item in value.items) + "]"
    if value.stringer is not None:
        return value.stringer()
    return "{" + " ".join(format_value(v) for v in value.fields.values()) + "}"


def _go_order(key: str) -> bytes:
    """Go sorts string keys by their bytes."""
    return key.encode()
