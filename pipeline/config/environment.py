"""`REVERSER_*` environment overrides as a settings tree, and their values kept out of messages."""

from __future__ import annotations

import difflib
import re
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, SecretStr

from pipeline.config.errors import ConfigError
from pipeline.config.settings import Settings
from pipeline.logoutput import LOG_FORMAT_VARIABLE, LOG_LEVEL_VARIABLE

ENV_PREFIX = "REVERSER_"
#: `REVERSER_*` variables that are the command line's, not settings: neither read nor warned about.
_COMMAND_LINE_VARIABLES = frozenset({LOG_LEVEL_VARIABLE, LOG_FORMAT_VARIABLE})
#: How close a single-segment `REVERSER_*` name must be to a top-level field to be taken for its typo
#: (others, like the test harness's `REVERSER_NO_SKIPS`, belong to other tools and are left alone).
_TYPO_CUTOFF = 0.8
#: How close an unknown name must be to a known one to be suggested ("did you mean ...?").
_SUGGEST_CUTOFF = 0.6


_TEXT_TYPES: tuple[type, ...] = (str, Path, SecretStr)


def _is_text(annotation: Any) -> bool:
    """Whether a field takes a string: str, Path, SecretStr, a Literal of strings, or Optional of one."""
    if get_origin(annotation) is Literal:
        return all(isinstance(value, str) for value in get_args(annotation))
    if get_origin(annotation) in (Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        return bool(members) and all(_is_text(member) for member in members)
    return isinstance(annotation, type) and issubclass(annotation, _TEXT_TYPES)


def _is_text_field(path: list[str]) -> bool:
    """Whether `path` (lower-cased env segments) names a string field of Settings."""
    model: type[BaseModel] = Settings
    for depth, part in enumerate(path):
        field = model.model_fields.get(part)
        if field is None:
            return False
        if depth == len(path) - 1:
            return _is_text(field.annotation)
        annotation = field.annotation
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return False
        model = annotation
    return False


def closest(given: str, known: list[str], cutoff: float = _SUGGEST_CUTOFF) -> str | None:
    matches = difflib.get_close_matches(given, known, n=1, cutoff=cutoff)
    return matches[0] if matches else None


class EnvOverrides:
    """The `REVERSER_*` variables as a settings tree, remembering which variable set which field.

    A variable in the setting syntax (`REVERSER_<SECTION>__...`) whose section is unknown, or a
    one-word one that is a near miss of a top-level field, is a typo that would otherwise be
    ignored in silence: it is warned about, with the nearest setting's variable."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.tree: dict[str, Any] = {}
        self.sources: dict[tuple[str, ...], tuple[str, str]] = {}
        self.unknown: list[str] = []
        sections = list(Settings.model_fields)
        for name, raw in sorted(environ.items()):
            if not name.startswith(ENV_PREFIX):
                continue
            path = [part.lower() for part in name[len(ENV_PREFIX) :].split("__")]
            if name in _COMMAND_LINE_VARIABLES:
                continue
            if path[0] not in Settings.model_fields:
                nested = len(path) > 1
                near = closest(path[0], sections, _SUGGEST_CUTOFF if nested else _TYPO_CUTOFF)
                if nested or near is not None:
                    hint = f" (did you mean {self.variable([near, *path[1:]])}?)" if near else ""
                    self.unknown.append(f"environment variable {name} names no setting and is ignored{hint}")
                continue
            node = self.tree
            for part in path[:-1]:
                node = node.setdefault(part, {})
            node[path[-1]] = self._value(name, path, raw)
            self.sources[tuple(path)] = (name, raw)

    @staticmethod
    def variable(path: list[str]) -> str:
        """The variable that sets the field at `path`."""
        return ENV_PREFIX + "__".join(part.upper() for part in path)

    @staticmethod
    def _value(name: str, path: list[str], raw: str) -> Any:
        if not raw or _is_text_field(path):
            return raw
        try:
            return yaml.safe_load(raw)
        except yaml.YAMLError:
            raise ConfigError(f"environment variable {name}: not a valid YAML value") from None

    def source_of(self, loc: tuple[str, ...]) -> str | None:
        """The variable that set the field at `loc` (or a section holding it), if one did."""
        return next((n for path, (n, _) in self.sources.items() if loc[: len(path)] == path), None)

    def redact(self, message: str) -> str:
        """`message` with every override's value taken out where it stands whole (not inside a word:
        a value `x` must not turn "Extra inputs" into a riddle)."""
        for name, raw in self.sources.values():
            if raw:
                message = re.sub(rf"(?<!\w){re.escape(raw)}(?!\w)", f"<value of {name}>", message)
        return message
