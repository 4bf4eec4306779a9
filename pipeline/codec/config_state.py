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
from dataclasses import dataclass
from typing import Any

from pipeline.codec import CONFIG_STATE, SCHEMA_HEADER, DecodeError, codec
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


def settings_json(settings: ProviderSettings | TargetSettings | WatchRule | ClusterSettings) -> str:
    """`settings` as the record carries it: the JSON of the fields that differ from their defaults."""
    return settings.model_dump_json(exclude_defaults=True)


@dataclass(frozen=True, slots=True)
class ObjectName:
    """A custom resource as the record names it: kind, namespace ("" when cluster-wide), name."""

    kind: str
    namespace: str
    name: str

    def to_avro(self) -> dict[str, Any]:
        return {"kind": self.kind, "namespace": self.namespace, "name": self.name}

    @classmethod
    def from_avro(cls, data: dict[str, Any]) -> ObjectName:
        return cls(data["kind"], data["namespace"], data["name"])


@dataclass(frozen=True, slots=True)
class ConfigObject:
    """One custom resource's report: its generation, field errors `(path, message)`, unsupported fields."""

    object: ObjectName
    generation: int
    errors: tuple[tuple[str, str], ...]
    unsupported: tuple[str, ...]

    def to_avro(self) -> dict[str, Any]:
        return {
            **self.object.to_avro(),
            "generation": self.generation,
            "errors": [json.dumps([path, message]) for path, message in self.errors],
            "unsupported": list(self.unsupported),
        }

    @classmethod
    def from_avro(cls, data: dict[str, Any]) -> ConfigObject:
        errors: list[tuple[str, str]] = []
        for text in data["errors"]:
            pair = json.loads(text)
            if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair)):
                raise ValueError(f"field error {text!r} is not a [path, message] pair")
            errors.append((pair[0], pair[1]))
        return cls(ObjectName.from_avro(data), data["generation"], tuple(errors), tuple(data["unsupported"]))


@dataclass(frozen=True, slots=True)
class RuleSource:
    """Where rule number `rule` of `target` came from: an object and its `spec.rules[item]`."""

    target: str
    rule: int
    object: ObjectName
    item: int

    def to_avro(self) -> dict[str, Any]:
        return {"target": self.target, "rule": self.rule, **self.object.to_avro(), "item": self.item}

    @classmethod
    def from_avro(cls, data: dict[str, Any]) -> RuleSource:
        return cls(data["target"], data["rule"], ObjectName.from_avro(data), data["item"])


@dataclass(frozen=True, slots=True)
class ItemProblemEntry:
    """A rule item of an object that became no rule, with the reason and message shown to users."""

    object: ObjectName
    item: int
    resource: str
    reason: str
    message: str

    def to_avro(self) -> dict[str, Any]:
        return {
            **self.object.to_avro(),
            "item": self.item,
            "resource": self.resource,
            "reason": self.reason,
            "message": self.message,
        }

    @classmethod
    def from_avro(cls, data: dict[str, Any]) -> ItemProblemEntry:
        return cls(
            ObjectName.from_avro(data), data["item"], data["resource"], data["reason"], data["message"]
        )


@dataclass(frozen=True, slots=True)
class ConfigStateRecord:
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

    def to_avro(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "publishedAtMs": self.published_at_ms,
            "providers": [settings_json(p) for p in self.providers],
            "targets": [settings_json(t) for t in self.targets],
            "objects": [o.to_avro() for o in self.objects],
            "rules": [r.to_avro() for r in self.rules],
            "itemProblems": [p.to_avro() for p in self.item_problems],
            "clusters": [settings_json(c) for c in self.clusters],
        }

    @classmethod
    def from_avro(cls, data: dict[str, Any]) -> ConfigStateRecord:
        return cls(
            version=data["version"],
            published_at_ms=data["publishedAtMs"],
            providers=tuple(ProviderSettings.model_validate_json(p) for p in data["providers"]),
            targets=tuple(TargetSettings.model_validate_json(t) for t in data["targets"]),
            objects=tuple(ConfigObject.from_avro(o) for o in data["objects"]),
            rules=tuple(RuleSource.from_avro(r) for r in data["rules"]),
            item_problems=tuple(ItemProblemEntry.from_avro(p) for p in data["itemProblems"]),
            clusters=tuple(ClusterSettings.model_validate_json(c) for c in data["clusters"]),
        )


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
