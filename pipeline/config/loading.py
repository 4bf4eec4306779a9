"""Reading the file, applying the environment, and describing what is wrong in the file's own words."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError

from pipeline.config.environment import EnvOverrides, closest
from pipeline.config.errors import ConfigError
from pipeline.config.settings import Settings

#: The package's logger: the name warnings have always been logged under (docs/cli.md).
logger = logging.getLogger("pipeline.config")


def _model_at(path: tuple[str, ...]) -> type[BaseModel] | None:
    """The section model at a validation error's location (list indices skipped), if any."""
    model: type[BaseModel] = Settings
    for part in path:
        if part.isdigit():
            continue
        field = model.model_fields.get(part)
        if field is None:
            return None
        found = _model_in(field.annotation)
        if found is None:
            return None
        model = found
    return model


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds: itself, or the member of a list or an Optional."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


#: pydantic's prefixes of the messages that the validators wrote themselves.
_VALIDATOR_PREFIXES = ("Value error, ", "Assertion failed, ")
#: A validator's message that names the field it is about first: `targets.0.provider: unknown ...`.
_LEADING_PATH = re.compile(r"^(?P<path>[a-z_]+(?:\.[a-z0-9_]+)+): (?P<rest>.*)$", re.DOTALL)


def _describe(error: ValidationError, source: str, env: EnvOverrides) -> str:
    """Every error as `  <field path>: <plain message>`, in the words of this configuration rather
    than pydantic's (`(top level): Value error, targets.0.provider: ...` names no field)."""
    lines = [f"invalid configuration in {source}:"]
    for item in error.errors():
        loc = tuple(str(part) for part in item["loc"])
        message = str(item["msg"])
        for prefix in _VALIDATOR_PREFIXES:
            message = message.removeprefix(prefix)
        leading = _LEADING_PATH.match(message)
        if leading is not None:
            loc = (*loc, *leading["path"].split("."))
            message = leading["rest"]
        variable = env.source_of(loc)
        if item["type"] == "extra_forbidden":
            message = "unknown field" + _field_hint(loc, variable)
        message = env.redact(message)
        where = ".".join(loc) or "(top level)"
        lines.append(f"  {where}: {message}" + (f" (from {variable})" if variable else ""))
    return "\n".join(lines)


def _field_hint(loc: tuple[str, ...], variable: str | None) -> str:
    """` (did you mean X?)` for an unknown field: the nearest field of its section, spelled as the
    variable when an environment variable set it."""
    model = _model_at(loc[:-1]) if loc else None
    near = closest(loc[-1], list(model.model_fields)) if model is not None and loc else None
    if near is None:
        return ""
    if variable is not None:
        return f" (did you mean {EnvOverrides.variable([*loc[:-1], near])}?)"
    return f" (did you mean {near}?)"


def revalidate(settings: Settings, source: str) -> Settings:
    """`settings` checked again as a whole (after parts of it were replaced); raises ConfigError."""
    try:
        return Settings.model_validate(settings.model_dump())
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source, EnvOverrides({}))) from None


def load_settings(path: Path | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Read the file (if any), apply environment overrides, validate; raises ConfigError."""
    data: dict[str, Any] = {}
    source = "defaults"
    if path is not None:
        source = str(path)
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read configuration {path}: {exc.strerror}") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"configuration {path} is not valid YAML: {exc}") from exc
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"configuration {path}: the top level must be a mapping")
        data = loaded
    env = EnvOverrides(os.environ if environ is None else environ)
    for warning in env.unknown:
        logger.warning("%s", warning)
    data = _merge(data, env.tree)
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source, env)) from None
