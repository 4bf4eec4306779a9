"""Hypothesis strategies for any value an Avro schema admits, built from the `.avsc` itself.

The schema tests and the codec-format tests draw records from these, so a field added to a schema
shows up in the generated records without anyone listing it, and any path that forgets it fails.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

Json = Any

# Short and long (multi-byte varint length) strings, ASCII and not; no lone surrogates (not UTF-8).
_TEXT = st.one_of(st.just(""), st.text(max_size=24), st.text(min_size=60, max_size=90))
_SIMPLE: dict[str, st.SearchStrategy[Json]] = {
    "null": st.none(),
    "boolean": st.booleans(),
    "int": st.integers(-(2**31), 2**31 - 1),
    "long": st.integers(-(2**63), 2**63 - 1),
    "float": st.floats(width=32, allow_nan=False),
    "double": st.floats(allow_nan=False),
    "bytes": st.binary(max_size=48),
    "string": _TEXT,
}


def full_name(node: dict[str, Json], namespace: str) -> tuple[str, str]:
    """The full name of a named type and the namespace its children inherit."""
    name: str = node["name"]
    if "." in name:
        return name, name.rsplit(".", 1)[0]
    space = node.get("namespace", namespace)
    return (f"{space}.{name}" if space else name), space


def lookup(name: str, namespace: str, named: dict[str, Json]) -> Json:
    return named[name] if name in named else named[f"{namespace}.{name}"]


def branch_name(branch: Json, namespace: str) -> str | None:
    """The full name fastavro uses for a named union branch (None for primitives)."""
    if isinstance(branch, dict) and branch["type"] in {"record", "enum", "fixed"}:
        return full_name(branch, namespace)[0]
    return None


def strategy(
    schema: Json, namespace: str = "", named: dict[str, Json] | None = None
) -> st.SearchStrategy[Json]:
    """A hypothesis strategy for valid records of `schema`; record union branches are
    `(full name, record)` tuples, the form `Codec.decode` returns them in."""
    named = {} if named is None else named
    if isinstance(schema, str):
        if schema in _SIMPLE:
            return _SIMPLE[schema]
        return strategy(lookup(schema, namespace, named), namespace, named)
    if isinstance(schema, list):
        branches = []
        for branch in schema:
            inner = strategy(branch, namespace, named)
            if isinstance(branch, dict) and branch["type"] == "record":
                inner = st.tuples(st.just(full_name(branch, namespace)[0]), inner)
            branches.append(inner)
        return st.one_of(branches)
    kind = schema["type"]
    if kind == "record":
        full, space = full_name(schema, namespace)
        named[full] = schema
        return st.fixed_dictionaries({f["name"]: strategy(f["type"], space, named) for f in schema["fields"]})
    if kind == "enum":
        named[full_name(schema, namespace)[0]] = schema
        return st.sampled_from(schema["symbols"])
    if kind == "fixed":
        named[full_name(schema, namespace)[0]] = schema
        return st.binary(min_size=schema["size"], max_size=schema["size"])
    if kind == "array":
        return st.lists(strategy(schema["items"], namespace, named), max_size=3)
    if kind == "map":
        return st.dictionaries(st.text(max_size=8), strategy(schema["values"], namespace, named), max_size=3)
    return strategy(kind, namespace, named)


def field_names(schema: dict[str, Json]) -> list[str]:
    """The field names of a record schema, in order."""
    return [str(field["name"]) for field in schema["fields"]]


@st.composite
def damaged(draw: st.DrawFn, payloads: st.SearchStrategy[bytes]) -> bytes:
    """A payload from `payloads`, truncated, with a byte changed, bytes inserted or bytes appended:
    what a hand-written decoder must refuse or read exactly as fastavro does."""
    payload = bytearray(draw(payloads))
    how = draw(st.sampled_from(["truncate", "flip", "insert", "append"]))
    if how == "truncate":
        del payload[draw(st.integers(0, max(len(payload) - 1, 0))) :]
    elif how == "flip" and payload:
        payload[draw(st.integers(0, len(payload) - 1))] = draw(st.integers(0, 255))
    elif how == "insert":
        at = draw(st.integers(0, len(payload)))
        payload[at:at] = draw(st.binary(min_size=1, max_size=4))
    else:
        payload += draw(st.binary(min_size=1, max_size=4))
    return bytes(payload)
