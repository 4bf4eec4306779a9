"""Executing a parsed template against Go values, with Go's rules for fields, truth and printing.

The rules that decide bytes are Go's, as gitops-reverser renders with `missingkey=error`: a field
a struct lacks and a key a map lacks are errors; a printed value goes through `fmt.Sprint` (a
`Stringer` through its `String`); `and`/`or` return an operand and stop early; `eq` compares
basic values of one kind; `print` puts a space between operands when neither is a string;
`printf` takes the verbs `%s %d %v %%` with a width and `-`, and writes `%!d(string=x)` for a
value its verb does not format, as Go does. Anything else raises RenderError.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import partial

from pipeline.gotemplate.parse import (
    Action,
    Command,
    Dot,
    Field,
    Function,
    If,
    Literal,
    Node,
    Pipeline,
    Range,
    Text,
    Variable,
    With,
)
from pipeline.gotemplate.values import (
    GoByte,
    GoMap,
    GoSlice,
    GoStruct,
    GoValue,
    RenderError,
    format_value,
    truth,
    type_name,
)

__all__ = ["execute"]

_MAX_OUTPUT = 64 * 1024
_VERB = re.compile(r"%(-?)([0-9]*)([a-zA-Z%])")


class _Scope:
    def __init__(self, root: GoValue) -> None:
        self.frames: list[dict[str, GoValue]] = [{"$": root}]

    def get(self, name: str) -> GoValue:
        for frame in reversed(self.frames):
            if name in frame:
                return frame[name]
        raise RenderError(f"undefined variable {name}")


class _Output(list[str]):
    """The output so far, capped: a `range` in a `range` over a large window cannot run away."""

    size = 0


def execute(nodes: Sequence[Node], data: GoValue) -> str:
    """The template's output for `data` (RenderError where Go would fail to execute)."""
    out = _Output()
    _run(nodes, data, _Scope(data), out)
    return "".join(out)


def _emit(out: _Output, text: str) -> None:
    out.append(text)
    out.size += len(text)
    if out.size > _MAX_OUTPUT:
        raise RenderError(f"the message is longer than {_MAX_OUTPUT} characters")


def _run(nodes: Sequence[Node], dot: GoValue, scope: _Scope, out: _Output) -> None:
    for node in nodes:
        if isinstance(node, Text):
            _emit(out, node.text)
        elif isinstance(node, Action):
            value = _pipeline(node.pipeline, dot, scope)
            if node.pipeline.declare:
                scope.frames[-1][node.pipeline.declare[0]] = value
            else:
                _emit(out, format_value(value))
        elif isinstance(node, If | With):
            scope.frames.append({})
            try:
                value = _pipeline(node.pipeline, dot, scope)
                if node.pipeline.declare:
                    scope.frames[-1][node.pipeline.declare[0]] = value
                if truth(value):
                    _run(node.body, value if isinstance(node, With) else dot, scope, out)
                else:
                    _run(node.orelse, dot, scope, out)
            finally:
                scope.frames.pop()
        else:
            _range(node, dot, scope, out)


def _range(node: Range, dot: GoValue, scope: _Scope, out: _Output) -> None:
    scope.frames.append({})
    try:
        value = _pipeline(node.pipeline, dot, scope)
        pairs: list[tuple[GoValue, GoValue]]
        if isinstance(value, GoSlice):
            pairs = [(i, item) for i, item in enumerate(value.items)]
        elif isinstance(value, GoMap):
            pairs = [(k, value.items[k]) for k in sorted(value.items, key=str.encode)]
        else:
            raise RenderError(f"range can't iterate over {format_value(value)}")
        if not pairs:
            _run(node.orelse, dot, scope, out)
            return
        names = node.pipeline.declare
        for key, item in pairs:
            scope.frames.append({})
            if len(names) == 1:
                scope.frames[-1][names[0]] = item
            elif len(names) == 2:
                scope.frames[-1][names[0]] = key
                scope.frames[-1][names[1]] = item
            try:
                _run(node.body, item, scope, out)
            finally:
                scope.frames.pop()
    finally:
        scope.frames.pop()


def _pipeline(pipeline: Pipeline, dot: GoValue, scope: _Scope) -> GoValue:
    value: GoValue | None = None
    for command in pipeline.commands:
        value = _command(command, dot, scope, value)
    if value is None:
        raise RenderError("missing value for command")
    return value


def _command(command: Command, dot: GoValue, scope: _Scope, piped: GoValue | None) -> GoValue:
    head = command.args[0]
    if isinstance(head, Function):
        thunks: list[Callable[[], GoValue]] = [partial(_operand, arg, dot, scope) for arg in command.args[1:]]
        if piped is not None:
            thunks.append(lambda: piped)
        return _call(head.name, thunks)
    if piped is not None:
        raise RenderError("can't give argument to non-function")
    return _operand(head, dot, scope)


def _operand(arg: object, dot: GoValue, scope: _Scope) -> GoValue:
    if isinstance(arg, Literal):
        return arg.value
    if isinstance(arg, Dot):
        return dot
    if isinstance(arg, Variable):
        return scope.get(arg.name)
    if isinstance(arg, Pipeline):
        return _pipeline(arg, dot, scope)
    if isinstance(arg, Field):
        base = dot if arg.base is None else _operand(arg.base, dot, scope)
        for name in arg.names:
            base = _field(base, name)
        return base
    raise RenderError(f"unexpected {arg!r}")


def _field(value: GoValue, name: str) -> GoValue:
    if isinstance(value, GoStruct):
        if name in value.fields:
            return value.fields[name]
        if name == "String" and value.stringer is not None:
            return value.stringer()
        raise RenderError(f"can't evaluate field {name} in type {value.type}")
    if isinstance(value, GoMap):
        if name not in value.items:
            raise RenderError(f'map has no entry for key "{name}"')
        return value.items[name]
    raise RenderError(f"can't evaluate field {name} in type {type_name(value)}")


def _call(name: str, args: list[Callable[[], GoValue]]) -> GoValue:
    if name in ("and", "or"):
        if not args:
            raise RenderError(f"wrong number of args for {name}: want at least 1 got 0")
        value: GoValue = False
        for thunk in args:
            value = thunk()
            if truth(value) != (name == "and"):
                return value
        return value
    values = [thunk() for thunk in args]
    if name == "not":
        _arity(name, values, 1)
        return not truth(values[0])
    if name == "len":
        _arity(name, values, 1)
        return _len(values[0])
    if name == "index":
        if not values:
            raise RenderError("wrong number of args for index: want at least 1 got 0")
        return _index(values[0], values[1:])
    if name == "print":
        return _sprint(values)
    if name == "println":
        return " ".join(map(format_value, values)) + "\n"
    if name == "printf":
        if not values or not isinstance(values[0], str):
            raise RenderError("printf needs a format string")
        return _sprintf(values[0], values[1:])
    if name in ("eq", "ne"):
        if len(values) < 2:
            raise RenderError(f"wrong number of args for {name}: want at least 2 got {len(values)}")
        if name == "ne":
            _arity(name, values, 2)
            return not _equal(values[0], values[1])
        return any(_equal(values[0], other) for other in values[1:])
    _arity(name, values, 2)
    return _less(name, values[0], values[1])


def _arity(name: str, values: list[GoValue], want: int) -> None:
    if len(values) != want:
        raise RenderError(f"wrong number of args for {name}: want {want} got {len(values)}")


def _len(value: GoValue) -> int:
    if isinstance(value, str):
        return len(value.encode())
    if isinstance(value, GoMap | GoSlice):
        return len(value.items)
    raise RenderError(f"len of type {type_name(value)}")


def _index(value: GoValue, keys: list[GoValue]) -> GoValue:
    for key in keys:
        if isinstance(value, GoSlice | str) and isinstance(key, int) and not isinstance(key, bool):
            size = len(value.items) if isinstance(value, GoSlice) else len(value.encode())
            if not 0 <= key < size:
                raise RenderError(f"index out of range: {key}")
            value = value.items[key] if isinstance(value, GoSlice) else GoByte(value.encode()[key])
        elif isinstance(value, GoMap) and isinstance(key, str):
            value = value.items.get(key, 0)
        else:
            raise RenderError(f"can't index item of type {type_name(value)}")
    return value


def _basic(value: GoValue) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, str):
        return "string"
    raise RenderError(f"non-comparable type {type_name(value)}")


def _equal(left: GoValue, right: GoValue) -> bool:
    if _basic(left) != _basic(right):
        raise RenderError("incompatible types for comparison")
    return left == right


def _less(name: str, left: GoValue, right: GoValue) -> bool:
    kind = _basic(left)
    if kind != _basic(right):
        raise RenderError("incompatible types for comparison")
    if kind == "bool":
        raise RenderError("invalid type for comparison")
    if isinstance(left, str) and isinstance(right, str):
        a, b = left.encode(), right.encode()
        return _ordered(name, (a > b) - (a < b))
    if isinstance(left, int) and isinstance(right, int):
        return _ordered(name, (left > right) - (left < right))
    raise RenderError("incompatible types for comparison")


def _ordered(name: str, sign: int) -> bool:
    """`lt`/`le`/`gt`/`ge` from the sign of the comparison (Go orders strings by their bytes)."""
    return {"lt": sign < 0, "le": sign <= 0, "gt": sign > 0, "ge": sign >= 0}[name]


def _sprint(values: list[GoValue]) -> str:
    """`fmt.Sprint`: a space between two operands when neither is a string."""
    parts: list[str] = []
    for i, value in enumerate(values):
        if i and not isinstance(value, str) and not isinstance(values[i - 1], str):
            parts.append(" ")
        parts.append(format_value(value))
    return "".join(parts)


def _sprintf(fmt: str, args: list[GoValue]) -> str:
    out: list[str] = []
    pos = 0
    used = 0
    while pos < len(fmt):
        start = fmt.find("%", pos)
        if start < 0:
            out.append(fmt[pos:])
            break
        out.append(fmt[pos:start])
        match = _VERB.match(fmt, start)
        if match is None:
            raise RenderError(f"printf format {fmt[start : start + 3]!r} is not supported (use %s, %d, %v)")
        left, width, verb = match.groups()
        pos = match.end()
        if verb == "%":
            out.append("%")
            continue
        if verb not in "sdv":
            raise RenderError(f"printf verb %{verb} is not supported (use %s, %d, %v)")
        if used >= len(args):
            out.append(f"%!{verb}(MISSING)")
            continue
        value = args[used]
        used += 1
        out.append(_verb(verb, value, left == "-", int(width or 0)))
    if used < len(args):
        extra = ", ".join(f"{type_name(v)}={format_value(v)}" for v in args[used:])
        out.append(f"%!(EXTRA {extra})")
    return "".join(out)


def _verb(verb: str, value: GoValue, left: bool, width: int) -> str:
    """One operand as fmt writes it: composites element by element, the width on each leaf, a
    Stringer through `String` for `%s`/`%v`, and a leaf the verb does not take as
    `%!d(string=x)` (the width applied inside)."""
    if isinstance(value, GoMap):
        pairs = (
            f"{_verb(verb, k, left, width)}:{_verb(verb, value.items[k], left, width)}"
            for k in sorted(value.items, key=str.encode)
        )
        return "map[" + " ".join(pairs) + "]"
    if isinstance(value, GoSlice):
        return "[" + " ".join(_verb(verb, item, left, width) for item in value.items) + "]"
    if isinstance(value, GoStruct):
        if value.stringer is not None and verb in "sv":
            return _pad(value.stringer(), left, width)
        return "{" + " ".join(_verb(verb, v, left, width) for v in value.fields.values()) + "}"
    text = _pad(format_value(value), left, width)
    fits = verb == "v" or ((verb == "s") == isinstance(value, str) and not isinstance(value, bool))
    return text if fits else f"%!{verb}({type_name(value)}={text})"


def _pad(text: str, left: bool, width: int) -> str:
    if len(text) >= width:
        return text
    fill = " " * (width - len(text))
    return text + fill if left else fill + text
