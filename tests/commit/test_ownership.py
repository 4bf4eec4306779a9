"""Which files a sweep may delete (pipeline/commit/ownership.py): only the object its path names."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.commit.ownership import holds_its_object
from pipeline.commit.yamlrender import render_object

PATH = "live/team-a/configmaps/web.yaml"


def configmap(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "team-a"}}


def test_the_rendered_object_at_its_own_path_is_ours() -> None:
    assert holds_its_object(render_object(configmap("web")), PATH)
    sealed = (
        b"apiVersion: v1\nkind: Secret\nmetadata:\n  name: web\n"
        b"data:\n  k: ENC[AES256_GCM,data:x]\nsops:\n  version: 3.9.0\n"
    )
    assert holds_its_object(sealed, "live/team-a/secrets/web.sops.yaml")


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"data: [not, closed\n", "does not parse"),
        (b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n\tname: web\n", "tab indentation"),
        (render_object(configmap("web")) + b"---\n" + render_object(configmap("x")), "two documents"),
        (render_object(configmap("other")), "another object's name"),
        (b"kind: ConfigMap\n", "a fragment without apiVersion or name"),
        (b"- apiVersion: v1\n", "not a mapping"),
        (b"\xff\xfe\x00k\x00", "not UTF-8"),
        (b"a: &x [*x]\n", "a recursive alias"),
        (b"", "empty"),
    ],
)
def test_anything_else_at_an_objects_path_is_a_users_file(content: bytes, why: str) -> None:
    assert not holds_its_object(content, PATH), why


def test_a_file_that_is_not_a_document_path_is_never_ours() -> None:
    assert not holds_its_object(render_object(configmap("web")), "live/team-a/configmaps/web.yml")


@given(st.binary(max_size=256))
def test_no_content_makes_it_raise(content: bytes) -> None:
    assert holds_its_object(content, PATH) in (True, False)
