"""Per-target commit message templates: which variables exist, how a template is checked and rendered.

Templates use `string.Template` syntax (`${author}`), which can only substitute the variables below
(no attribute access, no expressions). Rendered text is cleaned so a template can never write a
trailer line or smuggle control characters: the `Reverser-*` trailers are appended by the worker
after the rendered text, always. Lives below `pipeline.config` so the configuration validates
templates with the same rules the worker renders them with.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from string import Template

__all__ = ["MESSAGE_VARIABLES", "TemplateError", "check_template", "render_body", "render_subject"]

MESSAGE_VARIABLES = frozenset(
    {"operation", "resource", "api_version", "namespace", "name", "author", "count", "target", "objects"}
)
MAX_SUBJECT_CHARS = 200
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_RESERVED_LINE = re.compile(r"^\s*reverser-[a-z0-9-]*\s*:", re.IGNORECASE)


class TemplateError(ValueError):
    """A template that names an unknown variable or is not valid `${name}` syntax."""


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


def render_subject(text: str, values: Mapping[str, str]) -> str:
    """One line: newlines and control characters become spaces, capped at 200 characters."""
    rendered = Template(text).safe_substitute(values)
    line = " ".join(_CONTROL.sub(" ", rendered).split())
    return line[:MAX_SUBJECT_CHARS]


def render_body(text: str, values: Mapping[str, str]) -> list[str]:
    """Body lines without control characters and without any line that reads as a Reverser trailer."""
    rendered = _CONTROL.sub("", Template(text).safe_substitute(values).replace("\r", ""))
    return [line.rstrip() for line in rendered.split("\n") if not _RESERVED_LINE.match(line)]
