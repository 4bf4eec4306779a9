"""Commit message lines: the one cleaner of every line, and per-target templates rendered with it.

Every line of a commit message the worker writes passes through `clean_line`: C0 and C1 controls,
DEL, the Unicode line and paragraph separators and the bidi embedding, override and isolate marks
become `?`, so nothing from the cluster can start a line (and with it a trailer such as
`Co-authored-by:`), hide text or make a commit that fsck-checking remotes reject. A line that git
would read as the end of the message (a `---` patch divider, the `# --- >8 ---` scissors line)
or as one of the worker's `Reverser-*` trailers gets a `?` in place of its first character.

Templates use `string.Template` syntax (`${author}`), which can only substitute the variables below
(no attribute access, no expressions). Each value is cleaned with `clean_line` before it is
substituted, so a value never adds a line and the rendered message has the lines of its template
whatever the cluster's names and usernames hold; `${objects}` is the one list, one line per
object. The `Reverser-*` trailers are appended by the worker after the rendered text, always.
Lives below `pipeline.config` so the configuration validates templates with the same rules the
worker renders them with.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from string import Template

__all__ = [
    "MESSAGE_VARIABLES",
    "TemplateError",
    "TemplateValue",
    "check_template",
    "clean_line",
    "clean_rendered",
    "render_body",
    "render_subject",
]

MESSAGE_VARIABLES = frozenset(
    {"operation", "resource", "api_version", "namespace", "name", "author", "count", "target", "objects"}
)
MAX_SUBJECT_CHARS = 200
# C0 controls, DEL, C1 controls, ALM, LRM/RLM, LRE/RLE/PDF/LRO/RLO, the line and paragraph
# separators and LRI/RLI/FSI/PDI.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2028\u2029\u2066-\u2069]")
# What git reads as the end of the message (a patch divider or the scissors line), and the
# worker's own trailer keys.
_NOT_TEXT = re.compile(r"---(?:\s|$)|# -+ >8 -+$|\s*reverser-[a-z0-9-]*\s*:", re.IGNORECASE)
_RESERVED_LINE = re.compile(r"^\s*reverser-[a-z0-9-]*\s*:", re.IGNORECASE)
# The template's own text: controls other than tab are dropped (the subject makes them spaces).
_TEMPLATE_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")

TemplateValue = str | tuple[str, ...]
"""A variable's value: one line of text, or (`${objects}`) a tuple of lines."""


class TemplateError(ValueError):
    """A template that names an unknown variable or is not valid `${name}` syntax."""


def _as_text(line: str) -> str:
    return "?" + line[1:] if _NOT_TEXT.match(line) else line


def clean_line(text: str) -> str:
    """`text` as one printable line git reads as message text (see the module docstring)."""
    return _as_text(_UNSAFE.sub("?", text))


def check_template(text: str) -> str:
    """`text` if every placeholder is a known variable, else TemplateError naming the problem."""
    template = Template(text)
    if not template.is_valid():
        raise TemplateError("invalid placeholder (use ${name}; write $$ for a literal $)")
    unknown = sorted(set(template.get_identifiers()) - MESSAGE_VARIABLES)
    if unknown:
        known = ", ".join(sorted(MESSAGE_VARIABLES))
        raise TemplateError(f"unknown variable(s) {', '.join(unknown)} (known: {known})")
    return text


def _substitute(text: str, values: Mapping[str, TemplateValue], between_lines: str) -> str:
    cleaned = {
        name: between_lines.join(map(clean_line, value)) if isinstance(value, tuple) else clean_line(value)
        for name, value in values.items()
    }
    return Template(text).safe_substitute(cleaned)


def render_subject(text: str, values: Mapping[str, TemplateValue]) -> str:
    """One line: the template's own line breaks and controls become spaces, `${objects}` is joined
    with spaces, runs of spaces are collapsed; capped at 200 characters."""
    rendered = _substitute(_TEMPLATE_CONTROL.sub(" ", text.replace("\n", " ")), values, " ")
    return _as_text(" ".join(rendered.split())[:MAX_SUBJECT_CHARS])


def render_body(text: str, values: Mapping[str, TemplateValue]) -> list[str]:
    """The body lines: one per template line (`${objects}` one per object), each checked by
    `clean_line`'s rules. A template line that reads as a Reverser trailer is dropped."""
    lines: list[str] = []
    for line in text.replace("\r", "").split("\n"):
        if _RESERVED_LINE.match(line):
            continue
        rendered = _substitute(_TEMPLATE_CONTROL.sub("", line), values, "\n")
        lines.extend(_as_text(part.rstrip()) for part in rendered.split("\n"))
    return lines


def clean_rendered(text: str) -> list[str]:
    """The lines of a message a Go template wrote whole (gitops-reverser's templates): the
    template's controls but tab are dropped, a line git would read as the message's end or as a
    `Reverser-*` trailer gets `?` first, and trailing blank lines go (the worker's trailers follow).
    Values were cleaned with `clean_line` before rendering, so they add no line."""
    lines = [_as_text(_TEMPLATE_CONTROL.sub("", line)) for line in text.replace("\r", "").split("\n")]
    while lines and not lines[-1].strip():
        lines.pop()
    return lines
