"""Planning a live change in real layouts, checked with the real kustomize where a folder renders.

Layouts: a Flux monorepo (a base two overlays share), an Argo CD app folder with a kustomization,
and a plain folder of multi-document files with comments.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from pipeline.intent.documents import IntentRefusal, RefusalReason
from pipeline.intent.homes import ObjectKey, build_index
from pipeline.intent.plan import EditKind, IntentPlan, plan_change, plan_new_file, split_image
from pipeline.intent.render import render_verdict, rendered_objects
from tests.intent.kustomize import build, kustomize_path, write_tree

BASE_WEB = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 1
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
        - name: web
          image: ghcr.io/shop/web:1.0
"""
PROD = """\
# production: three replicas, pinned image
namespace: prod
resources:
  - ../../base/web
images:
  - name: ghcr.io/shop/web
    newTag: "1.4"   # bumped by the release job
"""
MONOREPO = {
    "apps/base/web/kustomization.yaml": b"resources:\n  - deployment.yaml\n",
    "apps/base/web/deployment.yaml": BASE_WEB.encode(),
    "apps/overlays/prod/kustomization.yaml": PROD.encode(),
    "apps/overlays/staging/kustomization.yaml": b"namespace: staging\nresources:\n  - ../../base/web\n",
}
WEB_PROD = ObjectKey("apps", "Deployment", "prod", "web")


@pytest.fixture(scope="module")
def kustomize() -> Path:
    return kustomize_path()


def configmap(name: str, namespace: str, data: dict[str, str]) -> dict[str, Any]:
    metadata = {"name": name, "namespace": namespace}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}


def apply(files: dict[str, bytes], plan: IntentPlan) -> dict[str, bytes]:
    result = dict(files)
    for write in plan.writes:
        if write.data is None:
            del result[write.path]
        else:
            result[write.path] = write.data
    return result


def renders(kustomize: Path, root: Path, files: dict[str, bytes], folder: str) -> dict[ObjectKey, Any]:
    write_tree(root, files)
    return rendered_objects(build(kustomize, root / folder))


def live_change(rendered: dict[str, Any], edit: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    before = copy.deepcopy(rendered)
    before["metadata"]["resourceVersion"] = "41"
    after = copy.deepcopy(before)
    edit(after)
    after["metadata"]["resourceVersion"] = "42"
    return before, after


def test_an_image_change_in_one_environment_goes_into_that_overlay(kustomize: Path, tmp_path: Path) -> None:
    folder = "apps/overlays/prod"
    rendered = renders(kustomize, tmp_path / "a", MONOREPO, folder)
    assert rendered[WEB_PROD]["spec"]["template"]["spec"]["containers"][0]["image"] == "ghcr.io/shop/web:1.4"

    def bump(obj: dict[str, Any]) -> None:
        obj["spec"]["template"]["spec"]["containers"][0]["image"] = "ghcr.io/shop/web:1.5"

    live = live_change(rendered[WEB_PROD], bump)
    plan = plan_change(build_index(MONOREPO, "apps"), MONOREPO, WEB_PROD, live)
    assert plan is not None
    assert plan.kind is EditKind.OVERLAY_ENTRY
    files = apply(MONOREPO, plan)
    assert files["apps/overlays/prod/kustomization.yaml"] == PROD.replace('"1.4"', '"1.5"').encode()
    assert files["apps/base/web/deployment.yaml"] == MONOREPO["apps/base/web/deployment.yaml"]
    after = renders(kustomize, tmp_path / "b", files, folder)
    assert render_verdict(rendered, after, WEB_PROD, live) is None
    staging = "apps/overlays/staging"
    untouched = renders(kustomize, tmp_path / "d", MONOREPO, staging)
    assert renders(kustomize, tmp_path / "c", files, staging) == untouched


def test_a_replica_change_adds_the_overlay_entry(kustomize: Path, tmp_path: Path) -> None:
    folder = "apps/overlays/prod"
    rendered = renders(kustomize, tmp_path / "a", MONOREPO, folder)
    live = live_change(rendered[WEB_PROD], lambda obj: obj["spec"].__setitem__("replicas", 3))
    plan = plan_change(build_index(MONOREPO, "apps"), MONOREPO, WEB_PROD, live)
    assert plan is not None
    files = apply(MONOREPO, plan)
    text = files["apps/overlays/prod/kustomization.yaml"].decode()
    assert text.startswith(PROD)
    assert text.endswith("replicas:\n  - name: web\n    count: 3\n")
    assert render_verdict(rendered, renders(kustomize, tmp_path / "b", files, folder), WEB_PROD, live) is None


def test_any_other_change_to_a_shared_base_is_refused_before_writing() -> None:
    rendered = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "prod"},
        "spec": {"replicas": 1, "paused": False},
    }
    live = live_change(rendered, lambda obj: obj["spec"].__setitem__("paused", True))
    with pytest.raises(IntentRefusal) as refused:
        plan_change(build_index(MONOREPO, "apps"), MONOREPO, WEB_PROD, live)
    assert refused.value.reason is RefusalReason.SHARED_BASE
    assert "apps/base/web/deployment.yaml" in refused.value.detail


ARGO_APP = {
    "shop/kustomization.yaml": b"namespace: shop\nresources:\n  - config.yaml\n  - web.yaml\n",
    "shop/config.yaml": b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shop-config\n"
    b"data:\n  mode: fast\n",
    "shop/web.yaml": BASE_WEB.encode(),
}


def test_deleting_the_only_object_of_a_file_removes_the_file_and_its_resources_entry(
    kustomize: Path, tmp_path: Path
) -> None:
    key = ObjectKey("", "ConfigMap", "shop", "shop-config")
    rendered = renders(kustomize, tmp_path / "a", ARGO_APP, "shop")
    plan = plan_change(build_index(ARGO_APP, "shop"), ARGO_APP, key, (rendered[key], None))
    assert plan is not None
    assert plan.kind is EditKind.REMOVED_FILE
    files = apply(ARGO_APP, plan)
    assert "shop/config.yaml" not in files
    assert files["shop/kustomization.yaml"] == b"namespace: shop\nresources:\n  - web.yaml\n"
    after = renders(kustomize, tmp_path / "b", files, "shop")
    assert render_verdict(rendered, after, key, (rendered[key], None)) is None


def test_a_new_file_is_registered_with_the_kustomization_of_its_folder(
    kustomize: Path, tmp_path: Path
) -> None:
    key = ObjectKey("", "ConfigMap", "shop", "extra")
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra\ndata:\n  a: b\n"
    before = renders(kustomize, tmp_path / "a", ARGO_APP, "shop")
    plan = plan_new_file(build_index(ARGO_APP, "shop"), ARGO_APP, "shop/extra.yaml", text)
    assert plan.kind is EditKind.NEW_FILE
    files = apply(ARGO_APP, plan)
    assert files["shop/kustomization.yaml"].endswith(b"  - web.yaml\n  - extra.yaml\n")
    after = renders(kustomize, tmp_path / "b", files, "shop")
    live = configmap("extra", "shop", {"a": "b"})
    assert render_verdict(before, after, key, (None, live)) is None


MULTI = """\
# team configuration, one file
apiVersion: v1
kind: ConfigMap
metadata:
  name: a
  namespace: team
data:
  x: "1"
---
# b is read by the batch jobs
apiVersion: v1
kind: ConfigMap
metadata:
  name: b
  namespace: team
data:
  y: "2"
"""


def test_in_a_multi_document_file_only_the_changed_document_moves() -> None:
    files = {"team/all.yaml": MULTI.encode()}
    index = build_index(files)
    key = ObjectKey("", "ConfigMap", "team", "b")
    before = configmap("b", "team", {"y": "2"})
    after = copy.deepcopy(before)
    after["data"]["y"] = "3"
    plan = plan_change(index, files, key, (before, after))
    assert plan is not None
    assert apply(files, plan)["team/all.yaml"] == MULTI.replace('y: "2"', 'y: "3"').encode()
    removed = plan_change(index, files, key, (before, None))
    assert removed is not None
    assert removed.kind is EditKind.REMOVED_DOCUMENT
    assert apply(files, removed)["team/all.yaml"] == MULTI.split("---\n")[0].encode()


def test_without_the_object_before_only_values_the_document_holds_are_updated() -> None:
    """A first change after a cold start: the apiserver's defaults, a label a kustomization adds
    and keys the live object lacks are not taken for changes."""
    files = {"team/all.yaml": MULTI.encode()}
    live = configmap("b", "other", {"y": "3", "z": "new"})
    live["metadata"]["labels"] = {"added-by": "kustomize"}
    plan = plan_change(build_index(files), files, ObjectKey("", "ConfigMap", "team", "b"), (None, live))
    assert plan is not None
    assert apply(files, plan)["team/all.yaml"] == MULTI.replace('y: "2"', 'y: "3"').encode()


def test_an_object_without_a_home_has_no_plan() -> None:
    files = {"team/all.yaml": MULTI.encode()}
    assert plan_change(build_index(files), files, ObjectKey("", "ConfigMap", "team", "c"), (None, {})) is None


@pytest.mark.parametrize(
    ("image", "parts"),
    [
        ("nginx", ("nginx", "", "")),
        ("nginx:1.27", ("nginx", "1.27", "")),
        ("registry:5000/team/app", ("registry:5000/team/app", "", "")),
        ("registry:5000/team/app:2", ("registry:5000/team/app", "2", "")),
        ("app@sha256:ab", ("app", "", "sha256:ab")),
    ],
)
def test_image_references_split_like_kustomize_reads_them(image: str, parts: tuple[str, str, str]) -> None:
    assert split_image(image) == parts
