"""Every default has one home, `pipeline/config/`; docs and the chart's values must agree with it.

The configuration tables in docs/ (`| \\`field\\` | default | meaning |`), sentences that name a
setting and its default (`` `audit.addr` (default `127.0.0.1:9444`) ``) and the chart's port and
topic-prefix values are read and compared with the pydantic defaults, so a default changed in one
place and not the others fails here instead of misleading an operator.
"""

from __future__ import annotations

import re
import types
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import pytest
import yaml
from pydantic import BaseModel

from pipeline.config import (
    AttributionSettings,
    AuditSettings,
    LogSettings,
    MetricsSettings,
    Settings,
    split_host_port,
)

ROOT = Path(__file__).resolve().parents[2]
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
VALUES = ROOT / "deploy" / "charts" / "reverser-pipeline" / "values.yaml"

# (document, model of its configuration table)
TABLES = [("docs/attribution.md", AttributionSettings), ("docs/audit-ingress.md", AuditSettings)]


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model a field holds (directly, optionally, or as list items)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (Union, types.UnionType, list):
        for arg in get_args(annotation):
            found = _model_of(arg)
            if found is not None:
                return found
    return None


def default_of(model: type[BaseModel], path: str) -> Any:
    """The default of `a.b` / `routes[].name` below `model`, as plain data."""
    head, _, rest = path.partition(".")
    listed = head.endswith("[]")
    field = model.model_fields[head.removesuffix("[]")]
    if rest:
        inner = _model_of(field.annotation)
        assert inner is not None, f"{path}: {head} holds no settings model"
        return default_of(inner, rest)
    assert not listed, path
    value = field.get_default(call_default_factory=True)
    if isinstance(value, list):
        return [v.model_dump(exclude_defaults=True) if isinstance(v, BaseModel) else v for v in value]
    return value


def documented(text: str) -> Any:
    """A default as the docs write it: `true`, 600, `127.0.0.1:9444`, none, `[{name: default}]`."""
    text = text.strip().strip("`")
    return None if text == "none" else yaml.safe_load(text)


def table_rows(document: str) -> list[tuple[str, str]]:
    """(field cell, default cell) of the first table whose header has a `default` column."""
    lines = (ROOT / document).read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"^\|[^|]*\| default \|", line))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows.append((cells[0], cells[1]))
    return rows


@pytest.mark.parametrize(("document", "model"), TABLES)
def test_configuration_tables_show_the_configured_defaults(document: str, model: type[BaseModel]) -> None:
    checked = 0
    for fields, default in table_rows(document):
        for path in re.findall(r"`([a-z_.\[\]]+)`", fields):
            if path.removesuffix("[]").split(".")[0].removesuffix("[]") not in model.model_fields:
                continue
            assert documented(default) == default_of(model, path), f"{document}: {path}"
            checked += 1
    assert checked >= len(model.model_fields) // 2, f"{document}: the table was not found"


SENTENCE = re.compile(r"`([a-z_]+\.[a-z_.]+)`(?:[^`\n]|`[^`\n]*`){0,60}?default `([^`]+)`")


def test_defaults_named_in_prose_are_the_configured_ones() -> None:
    found = []
    for path in DOCS:
        for setting, default in SENTENCE.findall(path.read_text(encoding="utf-8")):
            section = setting.split(".")[0]
            if section not in Settings.model_fields:
                continue
            assert documented(default) == default_of(Settings, setting), f"{path.name}: {setting}"
            found.append(setting)
    assert "audit.addr" in found
    assert "metrics.addr" in found


def test_the_charts_values_agree_with_the_configuration() -> None:
    values = yaml.safe_load(VALUES.read_text(encoding="utf-8"))
    assert values["metrics"]["port"] == split_host_port(MetricsSettings().addr)[1]
    assert values["auditWebhook"]["port"] == split_host_port(AuditSettings().addr)[1]
    assert values["config"]["log"]["topic_prefix"] == LogSettings().topic_prefix


def test_a_wrong_default_in_a_table_is_caught() -> None:
    assert documented("`true`") is True
    assert documented("none") is None
    assert default_of(AuditSettings, "routes") == [{"name": "default"}]
    assert default_of(AuditSettings, "tls.reload_interval_s") == 60.0
    assert documented("61") != default_of(AuditSettings, "tls.reload_interval_s")
