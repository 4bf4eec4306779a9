"""`reverser config schema` prints the configuration's JSON schema with every field described."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pipeline.cli import main


def undescribed(schema: dict[str, Any]) -> list[str]:
    """`Model.field` of every property, in every model of the schema, that has no description."""
    models = {"Settings": schema, **schema.get("$defs", {})}
    return [
        f"{model}.{name}"
        for model, body in models.items()
        for name, field in body.get("properties", {}).items()
        if not str(field.get("description", "")).strip()
    ]


def test_the_schema_documents_every_field(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["title"] == "Settings"
    assert {"log", "audit", "attribution", "targets"} <= set(schema["properties"])
    assert undescribed(schema) == []
    addr = schema["$defs"]["AuditSettings"]["properties"]["addr"]
    assert addr["default"] == "127.0.0.1:9444"
    assert "HOST:PORT" in addr["description"]


def test_a_field_without_a_description_is_found() -> None:
    schema = {"properties": {"a": {"description": "x"}}, "$defs": {"M": {"properties": {"b": {}}}}}
    assert undescribed(schema) == ["M.b"]
