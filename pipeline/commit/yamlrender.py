"""Deterministic, byte-stable YAML for Kubernetes objects, following gopkg.in/yaml.v3's layout.

Git diffs are only readable when the same object always renders to the same bytes and a one-field
change touches one line. Top-level keys go `apiVersion`, `kind`, `metadata`, then byte order (Go's
`sort.Strings`); nested maps use yaml.v3's natural sort; sequences sit indented under their key; no
line wrapping. A scalar that would not read back as the same string is quoted.
"""

from __future__ import annotations

import functools
import json
import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

__all__ = ["RenderError", "natural_key_less", "render_object", "sorted_natural"]

_FIRST_KEYS = ("apiVersion", "kind", "metadata")
_INDENT = "  "
_ALWAYS_INDICATORS = frozenset("#,[]{}&*!|>'\"%@`")
_UNREADABLE = object()


class RenderError(ValueError):
    """The object holds a value YAML for Kubernetes cannot carry (e.g. a non-string map key)."""


def _is_letter(ch: str) -> bool:
    return unicodedata.category(ch).startswith("L")


def natural_key_less(a: str, b: str) -> bool:
    """yaml.v3's `keyList.Less` for two string keys: runs of digits compare numerically."""
    digits = False
    for i in range(min(len(a), len(b))):
        ca, cb = a[i], b[i]
        if ca == cb:
            digits = ca.isdecimal()
            continue
        al, bl = _is_letter(ca), _is_letter(cb)
        if al and bl:
            return ca < cb
        if al or bl:
            return al if digits else bl
        an = bn = 0
        if ca == "0" or cb == "0":
            j = i - 1
            while j >= 0 and a[j].isdecimal():
                if a[j] != "0":
                    an = bn = 1
                    break
                j -= 1
        ai = i
        while ai < len(a) and a[ai].isdecimal():
            an = an * 10 + int(a[ai])
            ai += 1
        bi = i
        while bi < len(b) and b[bi].isdecimal():
            bn = bn * 10 + int(b[bi])
            bi += 1
        if an != bn:
            return an < bn
        if ai != bi:
            return ai < bi
        return ca < cb
    return len(a) < len(b)


class _NaturalKey:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __lt__(self, other: _NaturalKey) -> bool:
        if natural_key_less(self.text, other.text):
            return True
        if natural_key_less(other.text, self.text):
            return False
        return self.text < other.text


def sorted_natural(keys: Sequence[str]) -> list[str]:
    """Keys in yaml.v3's natural order.

    The same few key sets (an object's `metadata`, a container, a label set) come back in object
    after object, and each sort calls a Python comparison per pair: short sets are remembered
    (`_CACHED_KEY_SETS` of at most `_CACHED_SET_KEYS` keys of at most `_CACHED_KEY_CHARS`
    characters, so the cache stays under a few MiB whatever the objects hold).
    """
    if len(keys) <= _CACHED_SET_KEYS and all(type(k) is str and len(k) <= _CACHED_KEY_CHARS for k in keys):
        return list(_sorted_natural_cached(tuple(keys)))
    return sorted(keys, key=_NaturalKey)


_CACHED_KEY_SETS = 2048
_CACHED_SET_KEYS = 16
_CACHED_KEY_CHARS = 63


@functools.lru_cache(maxsize=_CACHED_KEY_SETS)
def _sorted_natural_cached(keys: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(sorted(keys, key=_NaturalKey))


def _top_level_order(keys: Sequence[str]) -> list[str]:
    first = [k for k in _FIRST_KEYS if k in keys]
    rest = sorted((k for k in keys if k not in _FIRST_KEYS), key=lambda k: k.encode("utf-8"))
    return first + rest


def _printable(ch: str) -> bool:
    """YAML's printable set minus tab and the line breaks, which every style handles on its own."""
    code = ord(ch)
    if code in (0x85, 0xFEFF, 0x2028, 0x2029):
        return False
    return (
        0x20 <= code <= 0x7E
        or 0xA0 <= code <= 0xD7FF
        or 0xE000 <= code <= 0xFFFD
        or 0x10000 <= code <= 0x10FFFF
    )


#: A character outside `_printable`'s set: one regular-expression scan of a value instead of a
#: Python call per character (a 1 KiB value is checked in microseconds)
_UNPRINTABLE = re.compile(
    "[^\u0020-\u007e\u00a0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]"
)


def _all_printable(text: str) -> bool:
    """Whether every character of `text` is `_printable`."""
    return _UNPRINTABLE.search(text) is None


def _has_indicator(text: str) -> bool:
    """libyaml's block-context analysis: would a plain scalar be misread as structure? The first
    character may be an indicator (`?`, `:`, `-` when a space or the end follows); after it, `: `,
    a final `:` and ` #` are."""
    if not text:
        return False
    first = text[0]
    if first in _ALWAYS_INDICATORS or (first in "?:-" and text[1:2] in ("", " ")):
        return True
    rest = text[1:]
    return ": " in rest or rest.endswith(":") or " #" in text


#: The two scalar caches below remember at most this many texts each, and only texts of at most
#: `_CACHED_TEXT_CHARS` characters (253: the longest Kubernetes name): their memory stays bounded
#: (a few MiB) whatever the rendered objects hold; a longer value (a ConfigMap's file, a
#: certificate) is decided each time it is rendered, as it would rarely be seen twice: with
#: libyaml's parser (`_READER`), about 40 us for 1 KiB instead of 1.1 ms with the pure-Python one.
_CACHED_TEXTS = 16384
_CACHED_TEXT_CHARS = 253
#: libyaml's parser with PyYAML's safe resolver (the same types as `yaml.safe_load`), when built
_READER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _read_back(text: str) -> object:
    """What a YAML reader makes of `text` written plain as a map value (a sentinel if unreadable)."""
    return _read_back_cached(text) if len(text) <= _CACHED_TEXT_CHARS else _read_back_uncached(text)


def _read_back_uncached(text: str) -> object:
    try:
        loaded = yaml.load(f"k: {text}\n", Loader=_READER)
    except (yaml.YAMLError, ValueError):
        # ValueError: a scalar its resolved type cannot hold (`2024-02-30` as a timestamp)
        return _UNREADABLE
    return loaded.get("k", _UNREADABLE) if isinstance(loaded, dict) else _UNREADABLE


#: Texts a plain scalar carries character for character: no space, quote, escape or indicator
#: can occur in them, so the only question left is which type the reader's implicit resolver gives
#: them. Names, numbers, versions and ids are nearly all of this shape, and answering from the
#: resolver's regular expressions instead of parsing a document saves tens of microseconds each.
_SIMPLE = re.compile(r"[A-Za-z0-9._/+-][A-Za-z0-9._/:+-]*")
_RESOLVER: Any = yaml.resolver.Resolver()
_STR_TAG = "tag:yaml.org,2002:str"
#: Types whose every resolved text constructs without error (an `_` may leave a number without
#: digits, `0b_`, so numbers with one are read back whole); timestamps can name no day (`2024-02-30`)
_ALWAYS_CONSTRUCTED = frozenset({"tag:yaml.org,2002:bool", "tag:yaml.org,2002:null"})
_NUMBERS = frozenset({"tag:yaml.org,2002:int", "tag:yaml.org,2002:float"})


def _simple_type(text: str) -> bool | None:
    """For a `_SIMPLE` text whose reading is certain: whether plain reads it back as itself (True)
    or as another type (False); None when only reading it back can tell."""
    tag = _RESOLVER.resolve(yaml.ScalarNode, text, (True, False))
    if tag == _STR_TAG:
        return True
    if tag in _ALWAYS_CONSTRUCTED or (tag in _NUMBERS and "_" not in text):
        return False
    return None


def _plain_ok(text: str) -> bool:
    if _SIMPLE.fullmatch(text) is not None:
        # without spaces, quotes or unprintable characters only these structural checks can fail
        if text == "-" or text.endswith(":") or text.startswith(("---", "...")):
            return False
        known = _simple_type(text)
        return known if known is not None else _read_back(text) == text
    if not text or text != text.strip(" ") or text.startswith(("---", "...")):
        return False
    if not _all_printable(text) or _has_indicator(text):
        return False
    return _read_back(text) == text


def _resolves_elsewhere(text: str) -> bool:
    """yaml.v3 double-quotes strings that plain would read as another type (`"true"`, `"1"`)."""
    known = _simple_type(text) if _SIMPLE.fullmatch(text) is not None else None
    if known is not None:
        return not known
    value = _read_back(text)
    return value is not _UNREADABLE and not isinstance(value, (str, list, dict))


def _double_quoted(text: str) -> str:
    out = ['"']
    for ch in text:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif not _printable(ch):
            code = ord(ch)
            if code <= 0xFF:
                out.append(f"\\x{code:02X}")
            elif code <= 0xFFFF:
                out.append(f"\\u{code:04X}")
            else:
                out.append(f"\\U{code:08X}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _scalar_inline(text: str) -> str:
    """`text` as a plain, single- or double-quoted scalar, as yaml.v3 writes it."""
    return _scalar_inline_cached(text) if len(text) <= _CACHED_TEXT_CHARS else _scalar_inline_uncached(text)


def _scalar_inline_uncached(text: str) -> str:
    if _plain_ok(text):
        return text
    if text and not _resolves_elsewhere(text) and _all_printable(text):
        return "'" + text.replace("'", "''") + "'"
    return _double_quoted(text)


_read_back_cached = functools.lru_cache(maxsize=_CACHED_TEXTS)(_read_back_uncached)
_scalar_inline_cached = functools.lru_cache(maxsize=_CACHED_TEXTS)(_scalar_inline_uncached)


def _block_ok(text: str) -> bool:
    if text.startswith(("\n", " ")):
        return False
    return all(not line.endswith(" ") and _all_printable(line) for line in text.split("\n"))


def _literal(text: str, indent: str) -> list[str]:
    if text.endswith("\n\n") or text == "\n":
        chomp = "+"
    elif text.endswith("\n"):
        chomp = ""
    else:
        chomp = "-"
    body = text[:-1] if text.endswith("\n") else text
    lines = [f"|{chomp}"]
    for line in body.split("\n"):
        lines.append(f"{indent}{line}" if line else "")
    return lines


def _float(value: float) -> str:
    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    text = repr(value)
    if "e" in text and "." not in text.split("e")[0]:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}.0e{exponent}"
    return text


def _leaf(value: Any) -> str | None:
    """Inline text of a leaf value, or None for maps, lists and multi-line strings."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, str):
        if "\n" in value and _block_ok(value):
            return None
        return _scalar_inline(value)
    if isinstance(value, Mapping):
        return "{}" if not value else None
    if isinstance(value, (list, tuple)):
        return "[]" if not value else None
    raise RenderError(f"cannot render a value of type {type(value).__name__}")


def _key(key: Any) -> str:
    if not isinstance(key, str):
        raise RenderError(f"map key {key!r} is not a string")
    return _scalar_inline(key)


def _emit_map(value: Mapping[str, Any], indent: str, out: list[str], order: list[str]) -> None:
    for key in order:
        item = value[key]
        head = f"{indent}{_key(key)}:"
        leaf = _leaf(item)
        if leaf is not None:
            out.append(f"{head} {leaf}")
        elif isinstance(item, str):
            lines = _literal(item, indent + _INDENT)
            out.append(f"{head} {lines[0]}")
            out.extend(lines[1:])
        elif isinstance(item, Mapping):
            out.append(head)
            _emit_map(item, indent + _INDENT, out, sorted_natural(list(item)))
        else:
            out.append(head)
            _emit_seq(item, indent + _INDENT, out)


def _emit_seq(items: Sequence[Any], indent: str, out: list[str]) -> None:
    inner = indent + _INDENT
    for item in items:
        leaf = _leaf(item)
        if leaf is not None:
            out.append(f"{indent}- {leaf}")
        elif isinstance(item, str):
            lines = _literal(item, inner)
            out.append(f"{indent}- {lines[0]}")
            out.extend(lines[1:])
        else:
            nested: list[str] = []
            if isinstance(item, Mapping):
                _emit_map(item, inner, nested, sorted_natural(list(item)))
            else:
                _emit_seq(item, inner, nested)
            out.append(f"{indent}- {nested[0][len(inner) :]}")
            out.extend(nested[1:])


def render_object(obj: Mapping[str, Any]) -> bytes:
    """The canonical YAML bytes of one (already sanitized) object; `status` is never written."""
    if not isinstance(obj, Mapping):
        raise RenderError("a Kubernetes object must be a map")
    keys = [k for k in obj if k != "status"]
    for key in keys:
        if not isinstance(key, str):
            raise RenderError(f"map key {key!r} is not a string")
    out: list[str] = []
    _emit_map(obj, "", out, _top_level_order(keys))
    if not out:
        return b"{}\n"
    return ("\n".join(out) + "\n").encode("utf-8")


def parse_object_json(raw: bytes, name: str | None = None) -> dict[str, Any]:
    """Decode the sanitized object JSON carried in branch work; raises RenderError when it is not a map.

    `name` is the work record's own name for the object: where `metadata.name` equals it, the
    object holds that string instead of the JSON's equal copy, so the worker's home index and its
    object-state book, which both keep an object's name for as long as the worker runs, share one
    string per object (issue 32's memory budget).
    """
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RenderError(f"object is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise RenderError("object JSON is not a map")
    if name is not None:
        metadata = value.get("metadata")
        if isinstance(metadata, dict) and metadata.get("name") == name:
            metadata["name"] = name
    return value
