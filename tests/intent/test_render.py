"""An in-place edit checked against the real kustomize: the render moves exactly as the cluster did."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.intent.documents import IntentRefusal, RefusalReason, split_file
from pipeline.intent.edit import apply_changes, changes, load_document
from pipeline.intent.homes import ObjectKey, build_index
from pipeline.intent.render import render_verdict, rendered_objects
from tests.intent.kustomize import build, kustomize_path, write_tree

WEB = """\
# web tier; replicas are tuned by the on-call
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 2  # at least two for the PDB
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
        - name: web
          image: nginx:1.27
"""
CONFIG = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-config\ndata:\n  mode: fast\n"
APP = {
    "apps/shop/kustomization.yaml": b"namespace: shop\ncommonLabels:\n  team: storefront\n"
    b"resources:\n  - web.yaml\n  - config.yaml\n",
    "apps/shop/web.yaml": WEB.encode(),
    "apps/shop/config.yaml": CONFIG.encode(),
}
KEY = ObjectKey("apps", "Deployment", "shop", "web")


@pytest.fixture(scope="module")
def kustomize() -> Path:
    return kustomize_path()


def live(rendered: dict[str, Any], replicas: int) -> dict[str, Any]:
    """The cluster's object: what Flux applied, plus fields the apiserver adds."""
    applied: dict[str, Any] = yaml.safe_load(yaml.safe_dump(rendered))
    applied["metadata"]["uid"] = "0b1c"
    applied["spec"]["replicas"] = replicas
    return applied


def edited_tree(files: dict[str, bytes], path: str, before: Any, after: Any) -> dict[str, bytes]:
    index = build_index(files, "apps/shop")
    home = index.home_of(KEY)
    assert home is not None
    assert home.path == path
    file = split_file(files[path], path)
    document = load_document(file.documents[home.document].text, path)
    text = file.replaced(home.document, apply_changes(document, list(changes(before, after))))
    return {**files, path: file.encode(text)}


def test_a_replica_change_is_one_edited_line_and_renders_as_the_cluster_changed(
    kustomize: Path, tmp_path: Path
) -> None:
    write_tree(tmp_path / "before", APP)
    rendered_before = rendered_objects(build(kustomize, tmp_path / "before/apps/shop"))
    live_before = live(rendered_before[KEY], 2)
    live_after = live(rendered_before[KEY], 5)
    files = edited_tree(APP, "apps/shop/web.yaml", live_before, live_after)
    assert files["apps/shop/web.yaml"] == WEB.replace("replicas: 2  #", "replicas: 5  #").encode()
    write_tree(tmp_path / "after", files)
    rendered_after = rendered_objects(build(kustomize, tmp_path / "after/apps/shop"))
    assert render_verdict(rendered_before, rendered_after, KEY, (live_before, live_after)) is None


def test_an_edit_that_moves_another_object_is_refused(kustomize: Path, tmp_path: Path) -> None:
    write_tree(tmp_path / "before", APP)
    rendered_before = rendered_objects(build(kustomize, tmp_path / "before/apps/shop"))
    broken = {**APP, "apps/shop/config.yaml": CONFIG.replace("fast", "slow").encode()}
    write_tree(tmp_path / "after", broken)
    rendered_after = rendered_objects(build(kustomize, tmp_path / "after/apps/shop"))
    live_before = live(rendered_before[KEY], 2)
    verdict = render_verdict(rendered_before, rendered_after, KEY, (live_before, live_before))
    assert verdict is not None
    assert verdict.reason is RefusalReason.RENDER_MISMATCH
    assert "ConfigMap shop/web-config" in verdict.detail


def test_an_edit_that_renders_a_different_value_is_refused(kustomize: Path, tmp_path: Path) -> None:
    write_tree(tmp_path / "before", APP)
    rendered_before = rendered_objects(build(kustomize, tmp_path / "before/apps/shop"))
    wrong = {**APP, "apps/shop/web.yaml": WEB.replace("replicas: 2", "replicas: 4").encode()}
    write_tree(tmp_path / "after", wrong)
    rendered_after = rendered_objects(build(kustomize, tmp_path / "after/apps/shop"))
    live_before, live_after = live(rendered_before[KEY], 2), live(rendered_before[KEY], 5)
    verdict = render_verdict(rendered_before, rendered_after, KEY, (live_before, live_after))
    assert verdict is not None
    assert "different change" in verdict.detail


def test_a_label_the_kustomization_adds_is_not_written_into_the_file(kustomize: Path, tmp_path: Path) -> None:
    """The live object carries commonLabels' `team`; the change is to another field, so `team` stays
    where it lives, in the kustomization."""
    write_tree(tmp_path / "before", APP)
    rendered_before = rendered_objects(build(kustomize, tmp_path / "before/apps/shop"))
    assert rendered_before[KEY]["metadata"]["labels"] == {"team": "storefront"}
    web = rendered_before[KEY]
    files = edited_tree(APP, "apps/shop/web.yaml", live(web, 2), live(web, 3))
    assert b"team" not in files["apps/shop/web.yaml"]
    assert b"namespace" not in files["apps/shop/web.yaml"]


def test_a_refusal_is_an_exception_a_target_can_stall_with() -> None:
    refusal = render_verdict({}, {KEY: {}}, KEY, (None, None))
    assert isinstance(refusal, IntentRefusal)
    assert "still renders" in refusal.detail
