"""`reverser config check` names the field the user wrote, in gitops-reverser's spelling, for errors
the shared pydantic models find (whose own field names are this project's file settings)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.cli import main

OBJECTS: list[dict[str, Any]] = [
    {
        "apiVersion": "configbutler.ai/v1alpha3",
        "kind": "GitProvider",
        "metadata": {"name": "example-provider", "namespace": "default"},
        "spec": {"url": "https://git.example.com/team/state.git", "allowedBranches": ["*"]},
    },
    {
        "apiVersion": "configbutler.ai/v1alpha3",
        "kind": "GitTarget",
        "metadata": {"name": "example-target", "namespace": "default"},
        "spec": {"providerRef": {"name": "example-provider"}, "branch": "main", "path": "live"},
    },
]


@pytest.mark.parametrize(
    ("index", "spec", "expected"),
    [
        (
            0,
            {"commit": {"signing": {"secretRef": {"name": "Bad_Name"}}}},
            "spec.commit.signing.secretRef.name: String should match",
        ),
        (
            0,
            {"push": {"commitWindow": "-5s"}},
            "spec.push.commitWindow: '-5s' is negative",
        ),
        (
            1,
            {
                "encryption": {
                    "provider": "sops",
                    "age": {"enabled": True, "recipients": {"publicKeys": ["age1x"]}},
                }
            },
            "spec.encryption.age.recipients.publicKeys[0]: String should match",
        ),
        (
            1,
            {"encryption": {"provider": "sops", "age": {"enabled": True}}},
            "spec.encryption: Value error, encryption needs age_recipients",
        ),
        (
            1,
            {
                "encryption": {
                    "provider": "sops",
                    "age": {"enabled": True, "recipients": {"extractFromSecret": True}},
                    "secretRef": {"name": "Bad_Name"},
                }
            },
            "spec.encryption.secretRef.name: String should match",
        ),
    ],
)
def test_errors_name_the_field_the_user_wrote(
    index: int, spec: dict[str, Any], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objects = copy.deepcopy(OBJECTS)
    objects[index]["spec"].update(spec)
    path = tmp_path / "resources.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    assert main(["config", "check", str(path), "--namespace", "default"]) == 1
    out = capsys.readouterr().out
    label = f"{objects[index]['kind']} default/{objects[index]['metadata']['name']}"
    assert f"{label}: error: {expected}" in out, out
    assert "spec.pipeline" not in out
