"""Applying a live change to a user's document: the smallest edit, every untouched byte kept.

The model is plain data: applying `changes(before, after)` to a document whose value is `before`
must give a document whose value is `after`, with the comments, order and quoting of what did
not change left as they were.
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from pipeline.intent.documents import IntentRefusal, RefusalReason, split_file
from pipeline.intent.edit import Change, ChangeKind, apply_changes, changes, load_document, plain

DEPLOYMENT = """\
# the storefront's web tier
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web  # keep this name: the Service selects on it
  labels:
    app: "web"
spec:
  replicas: 2
  template:
    spec:
      containers:
        - name: web
          image: 'nginx:1.27'
          args: ["--port", "8080"]
"""

keys = st.text("abcdefgh", min_size=1, max_size=4)
scalars = st.one_of(
    st.integers(-5, 5),
    st.booleans(),
    st.text("abc xyz:#-\n'\"", max_size=12),
    st.none(),
)
present = scalars.filter(lambda v: v is not None)
# shaped like Kubernetes objects: lists hold scalars or mappings, never lists or nulls
mappings = st.recursive(
    st.dictionaries(keys, scalars, max_size=3),
    lambda inner: st.dictionaries(
        keys,
        st.one_of(scalars, inner, st.lists(st.one_of(present, inner), max_size=3)),
        max_size=3,
    ),
    max_leaves=12,
)
values = st.one_of(scalars, mappings, st.lists(present, max_size=3))
objects = st.dictionaries(keys, values, min_size=1, max_size=5)


def dumped(value: Any, style: tuple[int, int, int]) -> str:
    yaml = YAML(typ="rt", pure=True)
    mapping, sequence, offset = style
    yaml.indent(mapping=mapping, sequence=sequence, offset=offset)
    yaml.width = 1 << 16
    out = io.StringIO()
    yaml.dump(value, out)
    return out.getvalue()


def with_comments(text: str) -> str:
    """`text` with a comment line before every top-level key, as people annotate files."""
    top_level = (line for line in text.rstrip("\n").split("\n"))
    return "".join(
        f"# about {line.split(':')[0]}\n{line}\n" if line[:1].strip() and ":" in line else f"{line}\n"
        for line in top_level
    )


PROPERTY = settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow], deadline=None)


@PROPERTY
@given(objects, objects, st.sampled_from([(2, 2, 0), (2, 4, 2)]))
# A value of line breaks only needs a kept block (`|+`), which took in the blank line before the
# next key's comment: "\n" read back as "\n\n". Such values are written double-quoted.
@example(before={"b": 0, "a": None}, after={"b": "\n"}, style=(2, 2, 0))
@example(before={"b": 0, "a": None}, after={"b": "x\n\n"}, style=(2, 4, 2))
def test_a_change_applied_gives_the_new_object_and_keeps_untouched_comments(
    before: dict[str, Any], after: dict[str, Any], style: tuple[int, int, int]
) -> None:
    text = with_comments(dumped(before, style))
    document = load_document(text)
    assert plain(document.data) == before
    edited = apply_changes(document, list(changes(before, after)))
    assert plain(YAML(typ="safe", pure=True).load(edited)) == after
    for key in before:
        if key in after and before[key] == after[key]:
            assert f"# about {key}\n" in edited


@PROPERTY
@given(objects, st.sampled_from([(2, 2, 0), (2, 4, 2)]))
def test_no_change_is_no_byte_changed(value: dict[str, Any], style: tuple[int, int, int]) -> None:
    text = with_comments(dumped(value, style))
    assert apply_changes(load_document(text), list(changes(value, value))) == text


def test_a_replica_change_edits_one_line_and_keeps_quotes_comments_and_flow_lists() -> None:
    document = load_document(DEPLOYMENT)
    before = plain(document.data)
    after = {**before, "spec": {**before["spec"], "replicas": 5}}
    edited = apply_changes(document, list(changes(before, after)))
    assert edited == DEPLOYMENT.replace("replicas: 2", "replicas: 5")


def test_a_changed_quoted_value_stays_quoted() -> None:
    document = load_document(DEPLOYMENT)
    edit = Change(ChangeKind.SET, ("spec", "template", "spec", "containers", 0, "image"), "nginx:1.28")
    assert apply_changes(document, [edit]) == DEPLOYMENT.replace("'nginx:1.27'", "'nginx:1.28'")


def test_a_field_the_file_leaves_out_stays_out_unless_it_changes() -> None:
    """The live object has a namespace a kustomization supplies: the file keeps omitting it."""
    document = load_document(DEPLOYMENT)
    in_file = plain(document.data)
    live_before = {**in_file, "metadata": {**in_file["metadata"], "namespace": "shop"}}
    live_after = {**live_before, "metadata": {**live_before["metadata"], "annotations": {"a": "b"}}}
    edited = apply_changes(document, list(changes(live_before, live_after)))
    assert "namespace" not in edited
    assert "annotations:\n    a: b\n" in edited


def test_a_new_multi_line_value_is_written_as_a_block() -> None:
    document = load_document("data:\n  k: v\n")
    edited = apply_changes(document, [Change(ChangeKind.SET, ("data", "k"), "line 1\nline 2\n")])
    assert edited == "data:\n  k: |\n    line 1\n    line 2\n"


def test_deleting_a_key_removes_only_that_key() -> None:
    text = "metadata:\n  labels:\n    a: '1'  # first\n    b: '2'\n"
    edited = apply_changes(load_document(text), [Change(ChangeKind.DELETE, ("metadata", "labels", "b"))])
    assert edited == "metadata:\n  labels:\n    a: '1'  # first\n"


def test_a_document_edited_inside_a_file_leaves_the_other_documents_byte_for_byte() -> None:
    first = "# config\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata:\n  x:   '1'\n"
    third = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n    name: c\n"
    file = split_file(f"{first}---\n{DEPLOYMENT}---\n{third}".encode())
    document = load_document(file.documents[1].text)
    edit = Change(ChangeKind.SET, ("spec", "replicas"), 3)
    text = file.replaced(1, apply_changes(document, [edit]))
    assert text == f"{first}---\n{DEPLOYMENT.replace('replicas: 2', 'replicas: 3')}---\n{third}"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("base: &b {a: 1}\nother: *b\n", RefusalReason.ANCHORS),
        ("a: !Ref thing\n", RefusalReason.TAGS),
        ("a: 1\na: 2\n", RefusalReason.DUPLICATE_KEY),
        ("a:\n\t- b\n", RefusalReason.INVALID_YAML),
        ("a: [1, 2\n", RefusalReason.INVALID_YAML),
        ("day: 2024-02-30\n", RefusalReason.INVALID_YAML),
        ("a: " + "[" * 400 + "]" * 400 + "\n", RefusalReason.INVALID_YAML),
        ("- a\n- b\n", RefusalReason.NOT_A_MAPPING),
        ("plain scalar\n", RefusalReason.NOT_A_MAPPING),
        ("a:\n     b: 1\n     c:\n       - d\n", RefusalReason.NOT_ROUND_TRIP),
        ("a:    1\n", RefusalReason.NOT_ROUND_TRIP),
    ],
)
def test_documents_that_cannot_be_edited_without_loss_are_refused_by_name(
    text: str, reason: RefusalReason
) -> None:
    with pytest.raises(IntentRefusal) as refused:
        load_document(text, "apps/web.yaml")
    assert refused.value.reason is reason
    assert refused.value.detail.startswith("apps/web.yaml")


def test_even_core_tags_are_refused_since_an_edit_would_drop_them() -> None:
    with pytest.raises(IntentRefusal) as refused:
        load_document("a: !!str 1\n")
    assert refused.value.reason is RefusalReason.TAGS


def test_a_change_through_a_scalar_the_document_holds_is_refused() -> None:
    document = load_document("spec: none\n")
    with pytest.raises(IntentRefusal, match=r"spec\.x\.\[0\]"):
        apply_changes(document, [Change(ChangeKind.SET, ("spec", "x", 0), 1)])
