"""The base every configuration section derives from, and the field rules several sections share."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Protocol, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, WithJsonSchema

# A Kubernetes namespace (an RFC 1123 DNS label) and an object name (a DNS subdomain).
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
OBJECT_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"


def closed_set(values: type[StrEnum]) -> WithJsonSchema:
    """The schema of a field typed by a StrEnum: its values inline, as a Literal's would be.

    The enum owns the set; helm reads the schema without `$defs`, so the values are written in
    place (no title, no description taken from the enum's docstring).
    """
    return WithJsonSchema({"enum": [member.value for member in values], "type": "string"})


class Section(BaseModel):
    # A field's docstring is its description: `reverser config schema` prints them.
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class _Named(Protocol):
    @property
    def name(self) -> str: ...


_NamedT = TypeVar("_NamedT", bound=_Named)


def unique_names(what: str) -> AfterValidator:
    """The check of a list field whose entries are referred to by name (`what` says of what):
    no two may share one."""

    def check(entries: list[_NamedT]) -> list[_NamedT]:
        names = [entry.name for entry in entries]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate {what} names: {', '.join(duplicates)}")
        return entries

    return AfterValidator(check)


def check_pattern(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
    return pattern
