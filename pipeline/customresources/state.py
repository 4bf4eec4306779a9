"""The effective configuration as it travels on `<prefix>.config` (Avro `config_state`).

One compacted topic, one partition, one key: the newest record is the configuration every replica
and every stage runs with, and a restarted process reads it back before it starts anything. The
record carries what `reverser watch-rules` and the status writer need as well: each object's
generation, errors and unsupported fields, and the object and item each rule came from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pipeline.codec import CONFIG_STATE, SCHEMA_HEADER, codec
from pipeline.config import ProviderSettings, Settings, TargetSettings
from pipeline.customresources.compile import (
    CompiledConfig,
    FieldProblem,
    ItemProblem,
    ObjectReport,
    RuleOrigin,
)
from pipeline.customresources.objects import Kind, ObjectRef
from pipeline.log.api import PendingRecord, Record

__all__ = ["CONFIG_KEY", "ConfigState", "decode_state", "encode_state"]

CONFIG_KEY = b"effective"


@dataclass(frozen=True, slots=True)
class ConfigState:
    """One published version of the effective configuration."""

    version: int
    published_at_ms: int
    compiled: CompiledConfig

    def settings(self, base: Settings) -> Settings:
        """`base` (the file: log, clusters, ...) with this version's providers and targets."""
        return self.compiled.settings(base)

    def same_content(self, compiled: CompiledConfig) -> bool:
        """Whether `compiled` would publish nothing new (so no version is spent on it)."""
        return _body(self.compiled) == _body(compiled)


def _ref(data: dict[str, Any]) -> ObjectRef:
    return ObjectRef(Kind(data["kind"]), data["namespace"], data["name"])


def _ref_fields(ref: ObjectRef) -> dict[str, Any]:
    return {"kind": ref.kind.value, "namespace": ref.namespace, "name": ref.name}


def _body(compiled: CompiledConfig) -> dict[str, Any]:
    return {
        "providers": [p.model_dump_json() for p in compiled.providers],
        "targets": [t.model_dump_json() for t in compiled.targets],
        "objects": [
            {
                **_ref_fields(ref),
                "generation": report.generation,
                "errors": [json.dumps([e.path, e.message]) for e in report.errors],
                "unsupported": list(report.unsupported),
            }
            for ref, report in sorted(compiled.reports.items())
        ],
        "rules": [
            {"target": target, "rule": index, **_ref_fields(origin.ref), "item": origin.item}
            for target, origins in sorted(compiled.origins.items())
            for index, origin in enumerate(origins)
        ],
        "itemProblems": [
            {
                **_ref_fields(p.ref),
                "item": p.item,
                "resource": p.resource,
                "reason": p.reason,
                "message": p.message,
            }
            for p in compiled.item_problems
        ],
    }


def encode_state(state: ConfigState) -> PendingRecord:
    state_codec = codec(CONFIG_STATE)
    value = state_codec.encode(
        {"version": state.version, "publishedAtMs": state.published_at_ms, **_body(state.compiled)}
    )
    return PendingRecord(value, key=CONFIG_KEY, headers=(state_codec.header,))


def decode_state(record: Record) -> ConfigState:
    """Raises DecodeError for a record that is not a config state."""
    data = codec(CONFIG_STATE).decode(record.value, record.header(SCHEMA_HEADER))
    reports: dict[ObjectRef, ObjectReport] = {}
    for item in data["objects"]:
        ref = _ref(item)
        errors = [FieldProblem(*json.loads(e)) for e in item["errors"]]
        reports[ref] = ObjectReport(ref, item["generation"], errors, list(item["unsupported"]))
    origins: dict[str, list[RuleOrigin]] = {}
    for item in data["rules"]:
        origins.setdefault(item["target"], []).append(RuleOrigin(_ref(item), item["item"]))
    compiled = CompiledConfig(
        providers=[ProviderSettings.model_validate_json(p) for p in data["providers"]],
        targets=[TargetSettings.model_validate_json(t) for t in data["targets"]],
        reports=reports,
        origins=origins,
        item_problems=[
            ItemProblem(_ref(p), p["item"], p["resource"], p["reason"], p["message"])
            for p in data["itemProblems"]
        ],
    )
    return ConfigState(data["version"], data["publishedAtMs"], compiled)
