"""`<prefix>.config` records of the effective configuration (Avro `config_state`).

One compacted topic, one partition, one key (`effective`): the newest record is the configuration
every replica and every stage runs with. This module owns the record's wire form: its field names,
that providers, targets and clusters travel as the JSON of the configuration file's entries (validated by
the same models when read back), and that a field error travels as the JSON pair
`[path, message]`. The configuration controller maps its compiled configuration to and from
`ConfigStateRecord` (pipeline/customresources/state.py); adding a field touches the `.avsc` and
this module.

A provider's or target's JSON leaves out every field at its default (`settings_json`). The models
forbid unknown fields, so during a rolling upgrade a replica of the older release reads a newer
replica's record as long as the configuration uses nothing the older release lacks; a field it
does not know makes it refuse that version (keeping the previous one) instead of misreading it.
Version 2 added `clusters` (ClusterProviders' clusters); a replica of a release that reads only
version 1 refuses every version 2 record the same way until it is upgraded.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from pipeline.codec import CONFIG_STATE, SCHEMA_HEADER, DecodeError, codec
from pipeline.codec.binding import AvroRecord, Wire
from pipeline.config import ClusterSettings, ProviderSettings, TargetSettings, WatchRule
from pipeline.log.api import PendingRecord, Record

__all__ = [
    "CONFIG_KEY",
    "ConfigObject",
    "ConfigStateRecord",
    "ItemProblemEntry",
    "ObjectName",
    "RuleSource",
    "decode_config_state",
    "encode_config_state",
    "settings_json",
]

CONFIG_KEY = b"effective"

_Settings = TypeVar("_Settings", ProviderSettings, TargetSettings, ClusterSettings)


def settings_json(settings: ProviderSettings | TargetSettings | WatchRule | ClusterSettings) -> str:
    """`settings` as the record carries it: the JSON of the fields that differ from their defaults."""
    return settings.model_dump_json(exclude_defaults=True)


def _settings_json(entries: tuple[ProviderSettings | TargetSettings | ClusterSettings, ...]) -> list[str]:
    return [settings_json(entry) for entry in entries]


def _settings_of(model: type[_Settings]) -> Callable[[list[str]], tuple[_Settings, ...]]:
    """Read entries back through their model (a pydantic ValidationError is a ValueError)."""

    def decode(entries: list[str]) -> tuple[_Settings, ...]:
        return tuple(model.model_validate_json(entry) for entry in entries)

    return decode


def _errors_json(errors: tuple[tuple[str, str], ...]) -> list[str]:
    """A field error travels as the JSON pair `[path, message]`."""
    return [json.dumps([path, message]) for path, message in errors]


def _errors_of_json(texts: list[str]) -> tuple[tuple[str, str], ...]:
    errors: list[tuple[str, str]] = []
    for text in texts:
        pair = json.loads(text)
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair)):
            raise ValueError(f"field error {text!r} is not a [path, message] pair")
        errors.append((pair[0], pair[1]))
    return tuple(errors)


@dataclass(frozen=True, slots=True)
class ObjectName(AvroRecord):
    """A custom resource as the record names it: kind, namespace ("" when cluster-wide), name."""

    kind: str
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class ConfigObject(AvroRecord):
    """One custom resource's report: its generation, field errors `(path, message)`, unsupported fields."""

    object: ObjectName
    generation: int
    errors: tuple[tuple[str, str], ...]
    unsupported: tuple[str, ...]

    avro_fields = {
        "object": Wire(spread=True),
        "errors": Wire(encode=_errors_json, decode=_errors_of_json),
    }


@dataclass(frozen=True, slots=True)
class RuleSource(AvroRecord):
    """Where rule number `rule` of `target` came from: an object and its `spec.rules[item]`."""

    target: str
    rule: int
    object: ObjectName
    item: int

    avro_fields = {"object": Wire(spread=True)}


@dataclass(frozen=True, slots=True)
class ItemProblemEntry(AvroRecord):
    """A rule item of an object that became no rule, with the reason and message shown to users."""

    object: ObjectName
    item: int
    resource: str
    reason: str
    message: str

    avro_fields = {"object": Wire(spread=True)}


@dataclass(frozen=True, slots=True)
class ConfigStateRecord(AvroRecord):
    """One published version of the effective configuration, as it is on the log."""

    version: int
    published_at_ms: int
    providers: tuple[ProviderSettings, ...]
    targets: tuple[TargetSettings, ...]
    objects: tuple[ConfigObject, ...]
    rules: tuple[RuleSource, ...]
    item_problems: tuple[ItemProblemEntry, ...]
    #: v2: the clusters ClusterProviders change or add (a v1 record has none)
    clusters: tuple[ClusterSettings, ...] = ()

    avro_fields = {
        "providers": Wire(encode=_settings_json, decode=_settings_of(ProviderSettings)),
        "targets": Wire(encode=_settings_json, decode=_settings_of(TargetSettings)),
        "clusters": Wire(encode=_settings_json, decode=_settings_of(ClusterSettings)),
    }


def encode_config_state(state: ConfigStateRecord) -> PendingRecord:
    """The record that makes `state` the effective configuration (key `effective`)."""
    return codec(CONFIG_STATE).record(state.to_avro(), key=CONFIG_KEY)


def decode_config_state(record: Record) -> ConfigStateRecord:
    """Raises DecodeError for a record that is not a config state, or whose entries do not validate."""
    data = codec(CONFIG_STATE).decode(record.value, record.header(SCHEMA_HEADER))
    try:
        return ConfigStateRecord.from_avro(data)
    except ValueError as exc:  # a pydantic ValidationError or a malformed field error is one too
        raise DecodeError(f"{CONFIG_STATE}: {exc}") from exc
