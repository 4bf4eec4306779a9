"""A live change applied to a user's YAML document as the smallest edit that expresses it.

The document is loaded with ruamel.yaml's round-trip loader, which keeps comments, key order,
quoting and block styles; only the values the change touches are set or removed, and the document
is dumped again. That is lossless only when the document survives a load and dump unchanged, which
depends on its indentation style: `load_document` tries the indentation styles people use and
refuses the document (NotRoundTripSafe) when none reproduces it byte for byte, so an edit can
never reformat what it did not change.

The change is the difference between the object before and after (`changes`), not the object
after: a file that leaves out a field the live object has (a default the apiserver filled in, a
namespace a kustomization supplies) keeps leaving it out unless the change is to that field.
Anchors and aliases (an edit through one would change the other), explicit tags and duplicate
keys are refused rather than guessed at.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq, TaggedScalar
from ruamel.yaml.constructor import DuplicateKeyError
from ruamel.yaml.error import CommentMark, YAMLError
from ruamel.yaml.scalarstring import (
    DoubleQuotedScalarString,
    FoldedScalarString,
    LiteralScalarString,
    SingleQuotedScalarString,
)
from ruamel.yaml.tokens import CommentToken

from pipeline.intent.documents import IntentRefusal, RefusalReason

__all__ = [
    "SERVER_FIELDS",
    "Change",
    "ChangeKind",
    "LoadedDocument",
    "apply_changes",
    "changes",
    "held_changes",
    "holds",
    "load_document",
    "plain",
    "user_changes",
]

Path = tuple[str | int, ...]

# (mapping indent, sequence indent, sequence dash offset): ruamel's default, then the style of
# `kubectl`/kustomize output (dashes flush with the parent key), then deeper variants seen in repos.
_INDENT_STYLES = ((2, 2, 0), (2, 4, 2), (4, 4, 2), (4, 6, 4), (4, 4, 0), (3, 3, 0))
_WIDTH = 1 << 16


class ChangeKind(StrEnum):
    SET = "set"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class Change:
    """One edit: set the value at `path` (creating missing mappings on the way) or delete it."""

    kind: ChangeKind
    path: Path
    value: Any = None


def plain(value: Any) -> Any:
    """A loaded YAML value as plain dicts, lists and scalars (ruamel's string subclasses become str)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, str):
        return str(value)
    return value


def changes(before: Any, after: Any, path: Path = ()) -> Iterator[Change]:
    """The edits that turn `before` into `after`: per key for mappings, per item for lists of the
    same length, else the whole value."""
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        for key, value in after.items():
            if key not in before:
                yield Change(ChangeKind.SET, (*path, key), value)
            else:
                yield from changes(before[key], value, (*path, key))
        for key in before:
            if key not in after:
                yield Change(ChangeKind.DELETE, (*path, key))
        return
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after) and before != after:
        for index, (old, new) in enumerate(zip(before, after, strict=True)):
            yield from changes(old, new, (*path, index))
        return
    if before != after or type(before) is not type(after):
        yield Change(ChangeKind.SET, path, after)


SERVER_FIELDS = frozenset(
    {("metadata", "resourceVersion"), ("metadata", "generation"), ("metadata", "managedFields")}
)
"""Fields the apiserver moves on every write: never part of what a person changed."""


def user_changes(before: Any, after: Any) -> list[Change]:
    """`changes(before, after)` without the fields the apiserver moves on its own."""
    return [c for c in changes(before, after) if c.path[:2] not in SERVER_FIELDS]


def holds(value: Any, path: Path) -> bool:
    """Whether `value` has a value at `path` (a key of a mapping or an index of a list per step)."""
    for key in path:
        if isinstance(key, int):
            if not isinstance(value, list) or key >= len(value):
                return False
        elif not isinstance(value, Mapping) or key not in value:
            return False
        value = value[key]
    return True


def held_changes(held: Any, after: Any) -> list[Change]:
    """The edits for a live object whose version before the change is not known (a first change
    after a restart, or a create of an object a file already holds): only values the document
    already holds are updated. Fields it leaves out stay out (a default the apiserver filled in, a
    label a kustomization adds), nothing is removed (a key the live object lacks may be one the
    render removes), and the namespace is never written (the home was found by it, and a
    kustomization may be what sets it)."""
    return [
        c
        for c in user_changes(held, after)
        if c.kind is ChangeKind.SET and holds(held, c.path) and c.path != ("metadata", "namespace")
    ]


@dataclass(slots=True)
class LoadedDocument:
    """A document loaded for editing, with the loader configured to dump it back exactly."""

    data: CommentedMap
    yaml: YAML

    def dump(self) -> str:
        out = io.StringIO()
        self.yaml.dump(self.data, out)
        return out.getvalue()


def _round_trip_yaml(style: tuple[int, int, int]) -> YAML:
    yaml = YAML(typ="rt", pure=True)
    yaml.preserve_quotes = True
    yaml.width = _WIDTH
    mapping, sequence, offset = style
    yaml.indent(mapping=mapping, sequence=sequence, offset=offset)
    return yaml


def _check_tree(data: Any, where: str) -> None:
    """Refuses anchors, aliases and explicit tags, read off the loaded tree (ruamel keeps them on
    the nodes) so the document is parsed once."""
    seen: set[int] = set()
    stack = [data]
    while stack:
        node = stack.pop()
        anchor = getattr(node, "anchor", None)
        if getattr(anchor, "value", None):
            raise IntentRefusal(RefusalReason.ANCHORS, f"{where}: anchors and aliases are not edited")
        if isinstance(node, TaggedScalar) or getattr(getattr(node, "tag", None), "value", None):
            raise IntentRefusal(RefusalReason.TAGS, f"{where}: explicit tags are not edited")
        if isinstance(node, CommentedMap | CommentedSeq):
            if id(node) in seen:
                raise IntentRefusal(RefusalReason.ANCHORS, f"{where}: anchors and aliases are not edited")
            seen.add(id(node))
            stack.extend(node.values() if isinstance(node, CommentedMap) else node)
            if isinstance(node, CommentedMap):
                stack.extend(node.keys())


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def load_document(text: str, where: str = "<document>") -> LoadedDocument:
    """`text` loaded for a lossless edit; raises IntentRefusal when it cannot be edited without loss.

    The document is parsed once; each indentation style is tried by dumping it."""
    try:
        data = _round_trip_yaml(_INDENT_STYLES[0]).load(io.StringIO(text))
    except DuplicateKeyError as exc:
        raise IntentRefusal(RefusalReason.DUPLICATE_KEY, f"{where}: {_first_line(exc)}") from None
    except (YAMLError, ValueError, RecursionError) as exc:
        # ValueError: a scalar its tag cannot hold (`2024-02-30`, `!!int x`); RecursionError:
        # collections nested a few hundred deep, which the pure-Python loader walks recursively
        raise IntentRefusal(RefusalReason.INVALID_YAML, f"{where}: {_first_line(exc)}") from None
    if not isinstance(data, CommentedMap):
        raise IntentRefusal(RefusalReason.NOT_A_MAPPING, f"{where}: the document is not a mapping")
    _check_tree(data, where)
    for style in _INDENT_STYLES:
        loaded = LoadedDocument(data, _round_trip_yaml(style))
        if loaded.dump() == text:
            return loaded
    raise IntentRefusal(
        RefusalReason.NOT_ROUND_TRIP,
        f"{where}: its layout does not survive a YAML round trip (indentation or line style)",
    )


def _styled(old: Any, new: Any) -> Any:
    """`new` in the style of the value it replaces: a quoted string stays quoted, a block scalar
    stays a block scalar while it has several lines; a new multi-line string becomes a block."""
    if isinstance(new, Mapping | list):
        styled = (
            CommentedMap((k, _styled(None, v)) for k, v in new.items())
            if isinstance(new, Mapping)
            else CommentedSeq(_styled(None, v) for v in new)
        )
        if not styled:
            styled.fa.set_flow_style()  # `{}` / `[]` on the key's line; block style has no empty form
        return styled
    if not isinstance(new, str):
        return new
    multiline = "\n" in new
    if multiline and not _blockable(new):
        return DoubleQuotedScalarString(new)
    if isinstance(old, LiteralScalarString | FoldedScalarString) and multiline:
        return type(old)(new)
    if isinstance(old, DoubleQuotedScalarString | SingleQuotedScalarString) and not multiline:
        return type(old)(new)
    if multiline and all(not line.endswith((" ", "\t")) for line in new.split("\n")):
        return LiteralScalarString(new)
    return new


def _blockable(text: str) -> bool:
    """Whether a block scalar can hold `text` in a document edited in place.

    Text ending in several line breaks, or made of line breaks only, needs keep chomping (`|+`),
    and a kept block takes in the blank lines that follow it in the file (the ones before the
    next key's comment): the value read back would grow. Such text is written double-quoted.
    """
    body = text.rstrip("\n")
    return bool(body) and len(text) - len(body) <= 1


def _container(node: Any, key: str | int) -> bool:
    if isinstance(key, int):
        return isinstance(node, Sequence) and not isinstance(node, str) and 0 <= key < len(node)
    return isinstance(node, Mapping)


def _set(root: CommentedMap, path: Path, value: Any) -> None:
    node: Any = root
    for depth, key in enumerate(path[:-1]):
        if not _container(node, key):
            raise IntentRefusal(RefusalReason.NOT_A_MAPPING, f"cannot reach {_dotted(path[: depth + 1])}")
        child = node[key] if isinstance(key, int) or key in node else None
        if child is None or not _container(child, path[depth + 1]):
            # the document lacks this branch (or holds another shape there): write it whole
            node[key] = _styled(child, _nested(path, depth + 1, value))
            return
        node = child
    last = path[-1]
    if not _container(node, last) and not (isinstance(last, str) and isinstance(node, Mapping)):
        raise IntentRefusal(RefusalReason.NOT_A_MAPPING, f"cannot reach {_dotted(path)}")
    old = node[last] if isinstance(last, int) or last in node else None
    node[last] = _styled(old, value)


def _nested(path: Path, start: int, value: Any) -> Any:
    """`value` wrapped in the mappings `path[start:]` names."""
    for key in reversed(path[start:]):
        if isinstance(key, int):
            raise IntentRefusal(RefusalReason.NOT_A_MAPPING, f"no list item {_dotted(path)} to set")
        value = {key: value}
    return value


def _delete(root: CommentedMap, path: Path) -> None:
    node: Any = root
    for key in path[:-1]:
        if not _container(node, key) or (isinstance(key, str) and key not in node):
            return
        node = node[key]
    last = path[-1]
    if not _container(node, last) or (isinstance(last, str) and last not in node):
        return
    if not isinstance(node, MutableMapping | CommentedSeq):
        return
    if isinstance(node, CommentedMap) and isinstance(last, str):
        _keep_following_comments(node, last)
    del node[last]
    if not node and isinstance(node, CommentedMap | CommentedSeq):
        node.fa.set_flow_style()


def _comment_after(container: Any, key: Any) -> tuple[Any, Any]:
    """Where ruamel keeps the comment lines that follow `key`'s value: on that key, or on the last
    item inside the value when the value is a non-empty mapping or list."""
    value = container[key]
    while isinstance(value, CommentedMap | CommentedSeq) and len(value):
        container, key = value, (next(reversed(value)) if isinstance(value, CommentedMap) else len(value) - 1)
        value = container[key]
    return container, key


def _keep_following_comments(node: CommentedMap, key: str) -> None:
    """Before `key` is deleted, move the comment lines after it (which describe the next key) to the
    key before it, or before the mapping when it is the first key, so they outlive the deletion."""
    holder, slot = _comment_after(node, key)
    entry = holder.ca.items.get(slot)
    where = _comment_slot(holder)
    token = entry[where] if entry and len(entry) > where else None
    if token is None or "\n" not in token.value:
        return
    carried = token.value.split("\n", 1)[1]
    if not carried.strip():
        return
    keys = list(node)
    position = keys.index(key)
    if position == 0:
        start = node.ca.comment
        tokens = start[1] if start and len(start) > 1 and start[1] else []
        tokens.append(CommentToken(carried, CommentMark(0), None))
        node.ca.comment = [start[0] if start else None, tokens]
        return
    holder, slot = _comment_after(node, keys[position - 1])
    where = _comment_slot(holder)
    entry = holder.ca.items.setdefault(slot, [None, None, None, None])
    while len(entry) <= where:
        entry.append(None)
    if entry[where] is None:
        entry[where] = CommentToken("\n" + carried, CommentMark(0), None)
    else:
        entry[where].value += carried


def _comment_slot(holder: Any) -> int:
    """The index of the end-of-item comment in ruamel's comment entry: 0 for a list item, 2 for a key."""
    return 0 if isinstance(holder, CommentedSeq) else 2


def _dotted(path: Path) -> str:
    return ".".join(f"[{k}]" if isinstance(k, int) else k for k in path) or "<root>"


def apply_changes(document: LoadedDocument, edits: Sequence[Change]) -> str:
    """The document's text with `edits` applied and everything else kept."""
    if not edits:
        return document.dump()
    for edit in edits:
        if not edit.path:
            raise IntentRefusal(RefusalReason.NOT_A_MAPPING, "a change replaces the whole document")
        if edit.kind is ChangeKind.SET:
            _set(document.data, edit.path, edit.value)
        else:
            _delete(document.data, edit.path)
    return document.dump()
