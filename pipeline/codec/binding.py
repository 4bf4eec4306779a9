"""A record class's Avro mapping, derived from its field declarations instead of written out twice.

Every record on the log is a slotted dataclass (or, nested in one, a NamedTuple) whose fields are
the Avro record's fields. Writing `to_avro` and `from_avro` by hand spelled each field three times
(the class, the dict it becomes, the constructor call it is read back by), and a field added to
one of them but not the others was a silent wire change. Here the class is the one declaration:
a class derives from `AvroRecord`, and its mapping follows from each field's name and type.

- The Avro name is the field's name in camelCase (`resource_version` -> `resourceVersion`);
  `avro_fields` names the exceptions (`Wire`): another name, a path into an anonymous
  sub-record (`"source.partition"`), a nested record whose fields sit flat in this one
  (`spread`), a field that is not on the wire at all (`local`: a record's own log position),
  or a pair of conversions for a field whose wire form is not its value (JSON, headers).
- The type says the rest: a `StrEnum` is checked on the way in (a `DecodeError` naming the field),
  a nested `AvroRecord` (alone, in a tuple or list, optional) goes through its own mapping, a
  tuple becomes an Avro array, a union of records that carry a `kind` becomes the Avro union
  `(record name, fields)`.

The two functions are generated as Python source once per class (as `dataclasses` does for
`__init__`), so a mapping costs what the hand-written dict literal cost; the Avro binary fast
paths of the hot records (`avro_binary`) stay where the benchmarks show they pay.
`tests/codec/test_bindings.py` checks every mapping against its `.avsc`, and
`tests/codec/test_golden.py` pins the bytes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar, Final, Self, cast

from pipeline.codec import DecodeError

__all__ = ["AvroRecord", "Binding", "Wire", "binding"]

#: a function from a field's value to its wire form, or back
Convert = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class Wire:
    """How one field travels when its camelCase name and its type do not say it all.

    `name` is the Avro field name, or a dotted path into an anonymous sub-record. `spread` puts a
    nested record's fields in this record. `local` keeps the field off the wire (`from_avro` takes
    it as a keyword). `encode`/`decode` convert a field whose wire form is not its value.
    """

    name: str = ""
    spread: bool = False
    local: bool = False
    encode: Convert | None = None
    decode: Convert | None = None

    def __post_init__(self) -> None:
        if (self.encode is None) != (self.decode is None):
            raise TypeError("a Wire converts both ways: give encode and decode, or neither")


class AvroRecord:
    """Base of a record class whose `to_avro`/`from_avro` are derived from its fields."""

    __slots__ = ()

    #: the fields that do not travel under their camelCase name as their type says
    avro_fields: ClassVar[Mapping[str, Wire | str]] = {}

    def to_avro(self) -> dict[str, Any]:
        """The record as fastavro writes it."""
        encoded: dict[str, Any] = binding(type(self)).encode(self)
        return encoded

    @classmethod
    def from_avro(cls, data: Mapping[str, Any], **local: Any) -> Self:
        """The record from fastavro's dict; `local` gives the fields that are not on the wire."""
        return cast(Self, binding(cls).decode(data, **local))


@dataclass(frozen=True, slots=True)
class Binding:
    """A record class's generated mapping, and the Avro fields it reads and writes."""

    record: type
    encode: Convert
    decode: Callable[..., Any]
    #: Avro field name -> the field names of its anonymous sub-record (empty for a plain field)
    fields: Mapping[str, tuple[str, ...]]


_BINDINGS: Final[dict[type, Binding]] = {}


def binding(record: type) -> Binding:
    """The mapping of `record` (an `AvroRecord` dataclass), generated on first use."""
    found = _BINDINGS.get(record)
    if found is None:
        found = _BINDINGS[record] = _Generator(record).binding()
    return found


def camel(name: str) -> str:
    """`resource_version` -> `resourceVersion`: the Avro spelling of a field name."""
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _field_names(record: type) -> tuple[str, ...]:
    if dataclasses.is_dataclass(record):
        return tuple(f.name for f in dataclasses.fields(record))
    names = getattr(record, "_fields", None)  # a NamedTuple
    if names is None:
        raise TypeError(f"{record.__qualname__} is neither a dataclass nor a NamedTuple")
    return tuple(names)


def _declared(record: type) -> Mapping[str, Wire | str]:
    """`record.avro_fields`, refused when it names a field the record does not have."""
    declared: Mapping[str, Wire | str] = getattr(record, "avro_fields", {})
    unknown = sorted(set(declared) - set(_field_names(record)))
    if unknown:
        raise TypeError(f"{record.__qualname__}.avro_fields names no field of it: {', '.join(unknown)}")
    return declared


def _is_record(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, AvroRecord)


def _enum_decoder(enum: type[StrEnum], where: str) -> Convert:
    def decode(value: str) -> StrEnum:
        try:
            return enum(value)
        except ValueError:
            raise DecodeError(f"{where} {value!r}") from None

    return decode


def _union_decoder(members: Mapping[str, Convert], where: str) -> Convert:
    def decode(value: tuple[str, Mapping[str, Any]]) -> Any:
        kind, data = value
        found = members.get(kind)
        if found is None:
            raise DecodeError(f"{where} {kind!r}")
        return found(data)

    return decode


def _union_encoder(members: Mapping[type, Convert]) -> Convert:
    def encode(value: Any) -> tuple[str, dict[str, Any]]:
        return (value.kind.value, members[type(value)](value))

    return encode


class _Generator:
    """Writes the source of one record's two mapping functions and compiles it."""

    def __init__(self, record: type) -> None:
        self.record = record
        self.env: dict[str, Any] = {}
        self.depth = 0

    def ref(self, value: Any) -> str:
        """A name for `value` in the generated functions' globals."""
        name = f"_g{len(self.env)}"
        self.env[name] = value
        return name

    def binding(self) -> Binding:
        entries: list[tuple[tuple[str, ...], str]] = []
        args: list[str] = []
        locals_: list[str] = []
        for field in _field_names(self.record):
            args.append(self.field(self.record, field, "o", entries, locals_))
        tree = _tree(entries)
        source = (
            f"def encode(o):\n    return {_literal(tree)}\n"
            f"def decode(d, {''.join(f'{n}, ' for n in locals_)}):\n"
            f"    return {self.ref(self.record)}({', '.join(args)})\n"
        )
        namespace: dict[str, Any] = {}
        exec(compile(source, f"<avro binding of {self.record.__qualname__}>", "exec"), self.env, namespace)
        fields = {
            key: tuple(k for k, _ in value) if isinstance(value, list) else () for key, value in tree.items()
        }
        return Binding(self.record, namespace["encode"], namespace["decode"], fields)

    def field(
        self,
        owner: type,
        field: str,
        obj: str,
        entries: list[tuple[tuple[str, ...], str]],
        locals_: list[str],
    ) -> str:
        """Add `owner.field`'s wire entries (read from `obj`); return the expression that decodes it."""
        declared = _declared(owner).get(field, "")
        wire = Wire(declared) if isinstance(declared, str) else declared
        tp = typing.get_type_hints(owner)[field]
        if wire.local:
            locals_.append(field)
            return field
        if wire.spread:
            inner = [self.field(tp, name, f"{obj}.{field}", entries, locals_) for name in _field_names(tp)]
            return f"{self.ref(tp)}({', '.join(inner)})"
        path = tuple((wire.name or camel(field)).split("."))
        value = f"{obj}.{field}"
        read = "d" + "".join(f"[{name!r}]" for name in path)
        where = f"{owner.__qualname__}: unknown {'.'.join(path)}"
        if wire.encode is not None and wire.decode is not None:
            entries.append((path, f"{self.ref(wire.encode)}({value})"))
            return f"{self.ref(wire.decode)}({read})"
        entries.append((path, self.encoder(tp, value)))
        return self.decoder(tp, read, where)

    def encoder(self, tp: Any, value: str) -> str:
        """The expression that writes `value`, of type `tp`, as fastavro takes it."""
        if _is_record(tp):
            return f"{self.ref(binding(tp).encode)}({value})"
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin in (typing.Union, types.UnionType):
            present = [a for a in args if a is not type(None)]
            if len(present) < len(args):
                inner = self.encoder(present[0], value)
                return value if inner == value else f"(None if {value} is None else {inner})"
            return f"{self.ref(_union_encoder({m: binding(m).encode for m in present}))}({value})"
        if origin in (tuple, list):
            with self.nested() as item:
                inner = self.encoder(args[0], item)
            if inner != item:
                return f"[{inner} for {item} in {value}]"
            return f"list({value})" if origin is tuple else value
        if origin in (Mapping, dict):
            return f"dict({value})"
        return value

    def decoder(self, tp: Any, read: str, where: str) -> str:
        """The expression that turns fastavro's `read` back into a `tp` (`where` names it in errors)."""
        if _is_record(tp):
            return f"{self.ref(binding(tp).decode)}({read})"
        if isinstance(tp, type) and issubclass(tp, StrEnum):
            return f"{self.ref(_enum_decoder(tp, where))}({read})"
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin in (typing.Union, types.UnionType):
            present = [a for a in args if a is not type(None)]
            if len(present) < len(args):
                inner = self.decoder(present[0], read, where)
                return read if inner == read else f"(None if {read} is None else {inner})"
            members = {m.kind.value: binding(m).decode for m in present}
            return f"{self.ref(_union_decoder(members, where))}({read})"
        if origin in (tuple, list):
            with self.nested() as item:
                inner = self.decoder(args[0], item, where)
            if inner != item:
                return f"{origin.__name__}([{inner} for {item} in {read}])"
            return f"tuple({read})" if origin is tuple else read
        return read

    @contextlib.contextmanager
    def nested(self) -> Iterator[str]:
        """A fresh comprehension variable for one level of nesting."""
        self.depth += 1
        try:
            yield f"v{self.depth}"
        finally:
            self.depth -= 1


#: Avro field name -> the expression that writes it, or the (name, expression) pairs of a sub-record
Tree = dict[str, str | list[tuple[str, str]]]


def _tree(entries: list[tuple[tuple[str, ...], str]]) -> Tree:
    """Group the entries by their first name: a path of two names is a field of a sub-record."""
    tree: Tree = {}
    for path, expression in entries:
        if len(path) == 1:
            tree[path[0]] = expression
            continue
        if len(path) != 2:
            raise TypeError(f"{'.'.join(path)}: a path goes one sub-record deep")
        group = tree.setdefault(path[0], [])
        if isinstance(group, str):
            raise TypeError(f"{path[0]} is both a field and a sub-record")
        group.append((path[1], expression))
    return tree


def _literal(tree: Tree) -> str:
    """The dict display that builds the record (a sub-record as a nested display)."""
    parts = []
    for key, value in tree.items():
        if isinstance(value, list):
            value = "{" + ", ".join(f"{name!r}: {expression}" for name, expression in value) + "}"
        parts.append(f"{key!r}: {value}")
    return "{" + ", ".join(parts) + "}"
