"""In-place edits checked with the real kustomize (`targets[].kustomize.render: on`).

Each test pushes a real layout as a foreign user, runs live changes through the `BranchWorker`
with the kustomize that scripts/build-kustomize.sh builds, and checks the exact bytes of each
commit and `kustomize build` of every touched folder before and after it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from pipeline.codec.target_result import PushOutcome, TargetResult
from pipeline.intent.homes import ObjectKey
from pipeline.intent.render import rendered_objects
from tests.commit.helpers import Work, cm, files, git
from tests.commit.test_in_place import (
    FLUX_MONOREPO,
    MULTI,
    MULTI_PATH,
    changed_paths,
    harness,
    refusals,
    web,
)
from tests.intent.kustomize import build, kustomize_path, write_tree

DEPLOYMENTS = {"group": "apps", "resource": "deployments", "scope": "prod"}


@pytest.fixture(scope="module")
def kustomize() -> Path:
    return kustomize_path()


def render(kustomize: Path, where: Path, tree: dict[str, str], folder: str) -> dict[ObjectKey, Any]:
    """`kustomize build` of `folder` in the branch's `tree`, as objects."""
    write_tree(where, {path: data.encode() for path, data in tree.items()})
    return rendered_objects(build(kustomize, where / folder))


def diff(remote: Path) -> list[str]:
    """The changed lines of the tip commit, without the diff's headers."""
    lines = git(remote, "diff", "--unified=0", "main~1", "main").splitlines()
    return [line for line in lines if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def builds(outcome: str) -> float:
    labels = {"target": "t1", "outcome": outcome}
    return REGISTRY.get_sample_value("reverser_commit_kustomize_builds_total", labels) or 0.0


def on(kustomize: Path, **more: Any) -> dict[str, Any]:
    return {"kustomize": {"render": "on", "binary": str(kustomize), **more}}


async def test_an_image_change_renders_in_its_overlay_only(kustomize: Path, tmp_path: Path) -> None:
    h, parked = harness(tmp_path, FLUX_MONOREPO, target_path="apps", **on(kustomize))
    w = Work(path="apps")
    await h.feed(*w.snapshot(1, [web("prod")], rv="10", **DEPLOYMENTS))
    before = files(h.remote)
    ok = builds("ok")

    await h.feed(w.update(web("prod", "nginx:1.26"), rv="11", **DEPLOYMENTS))
    await h.settle_time()
    assert parked.items == []
    assert changed_paths(h.remote) == ["apps/overlays/prod/kustomization.yaml"]
    assert diff(h.remote) == ["+images:", "+  - name: nginx", "+    newTag: '1.26'"]
    assert builds("ok") == ok + 2, "the prod overlay, before and after; staging reads no written file"

    after = files(h.remote)
    prod = "apps/overlays/prod"
    was, now = (render(kustomize, tmp_path / n, t, prod) for n, t in (("b", before), ("a", after)))
    key = ObjectKey("apps", "Deployment", "prod", "web")
    assert set(was) == set(now) == {key}
    image = now[key]["spec"]["template"]["spec"]["containers"][0].pop("image")
    assert image == "nginx:1.26"
    assert was[key]["spec"]["template"]["spec"]["containers"][0].pop("image") == "nginx:1.25"
    assert was == now, "nothing but the image moved"
    staging = "apps/overlays/staging"
    assert render(kustomize, tmp_path / "sb", before, staging) == render(
        kustomize, tmp_path / "sa", after, staging
    )


SHOP_KUSTOMIZATION = """\
# the shop's config, applied by Argo CD
namespace: team-a
resources:
  - settings.yaml
"""
SHOP_SETTINGS = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: shop-settings
  labels:
    team: shop
data:
  currency: EUR # never changes
"""
SHOP = {"shop/kustomization.yaml": SHOP_KUSTOMIZATION, "shop/settings.yaml": SHOP_SETTINGS}


async def test_a_new_file_joins_resources_and_leaves_it_when_it_empties(
    kustomize: Path, tmp_path: Path
) -> None:
    h, parked = harness(tmp_path, SHOP, target_path="shop", **on(kustomize))
    w = Work(path="shop")
    await h.feed(w.create(cm("promotions", banner="spring"), rv="2"))
    await h.settle_time()
    assert parked.items == []
    assert changed_paths(h.remote) == ["shop/configmap-promotions.yaml", "shop/kustomization.yaml"]
    assert diff(h.remote) == [
        "+apiVersion: v1",
        "+kind: ConfigMap",
        "+metadata:",
        "+  name: promotions",
        "+  namespace: team-a",
        "+data:",
        "+  banner: spring",
        "+  - configmap-promotions.yaml",
    ]
    added = files(h.remote)
    promotions = ObjectKey("", "ConfigMap", "team-a", "promotions")
    was = render(kustomize, tmp_path / "b", SHOP, "shop")
    now = render(kustomize, tmp_path / "a", added, "shop")
    assert set(now) - set(was) == {promotions}
    assert now[promotions]["data"] == {"banner": "spring"}
    assert {k: v for k, v in now.items() if k != promotions} == was

    await h.feed(w.delete("promotions", rv="3"))
    await h.settle_time()
    assert parked.items == []
    assert changed_paths(h.remote) == ["shop/configmap-promotions.yaml", "shop/kustomization.yaml"]
    assert diff(h.remote)[-1] == "-  - configmap-promotions.yaml"
    assert files(h.remote) == SHOP, "the folder is byte for byte what the user pushed"
    assert render(kustomize, tmp_path / "c", files(h.remote), "shop") == was


async def test_a_change_kustomize_would_override_is_refused_and_writes_nothing(
    kustomize: Path, tmp_path: Path
) -> None:
    """`commonLabels` puts the label back on every build: writing the cluster's value into the
    document would change nothing the cluster sees, so the render check refuses it."""
    layout = {**SHOP, "shop/kustomization.yaml": SHOP_KUSTOMIZATION + "commonLabels:\n  team: shop\n"}
    results: list[TargetResult] = []
    h, parked = harness(tmp_path, layout, target_path="shop", results=results, **on(kustomize))
    w = Work(path="shop")
    live = cm("shop-settings", currency="EUR")
    live["metadata"]["labels"] = {"team": "shop"}
    await h.feed(*w.snapshot(1, [live], rv="10", scope="team-a"))
    tip = git(h.remote, "rev-parse", "main")
    mismatches = refusals("RenderMismatch")

    relabelled = cm("shop-settings", currency="EUR")
    relabelled["metadata"]["labels"] = {"team": "billing"}
    await h.feed(w.update(relabelled, rv="11"))
    await h.settle_time()
    assert git(h.remote, "rev-parse", "main") == tip
    assert files(h.remote) == layout
    assert refusals("RenderMismatch") == mismatches + 1
    (item, error), *_ = parked.items
    assert item.offset == w.offset - 1
    assert "RenderMismatch: kustomize build shop: ConfigMap team-a/shop-settings renders a different" in str(
        error
    )
    stalled = results[-1].refusal
    assert stalled is not None
    assert (stalled.reason, stalled.file) == ("RenderMismatch", "shop/kustomization.yaml")

    # a change the render does carry still goes through afterwards, and the target is not stalled
    await h.feed(w.update({**relabelled, "data": {"currency": "CHF"}}, rv="12"))
    await h.settle_time()
    await h.settle_time()
    assert changed_paths(h.remote) == ["shop/settings.yaml"]
    assert diff(h.remote) == ["-  currency: EUR # never changes", "+  currency: CHF # never changes"]
    assert results[-1].push is PushOutcome.SUCCEEDED
    assert results[-1].refusal is None


async def test_render_on_without_the_binary_refuses_by_name(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-kustomize")
    h, parked = harness(tmp_path, SHOP, target_path="shop", kustomize={"render": "on", "binary": missing})
    w = Work(path="shop")
    failed = refusals("RenderFailed")
    await h.feed(w.create(cm("promotions", banner="spring"), rv="2"))
    await h.settle_time()
    assert files(h.remote) == SHOP
    assert refusals("RenderFailed") == failed + 1
    (_, error), *_ = parked.items
    assert "RenderFailed" in str(error)
    assert missing in str(error)


async def test_a_folder_that_does_not_build_is_refused_before_any_write(
    kustomize: Path, tmp_path: Path
) -> None:
    """The user's overlay lists a file that is not there: kustomize fails before the edit."""
    layout = {**SHOP, "shop/kustomization.yaml": SHOP_KUSTOMIZATION + "  - missing.yaml\n"}
    h, parked = harness(tmp_path, layout, target_path="shop", **on(kustomize))
    w = Work(path="shop")
    await h.feed(w.update(cm("shop-settings", currency="CHF"), rv="2"))
    await h.settle_time()
    assert files(h.remote) == layout
    (_, error), *_ = parked.items
    assert "RenderFailed" in str(error)
    assert "kustomize build shop fails before the edit" in str(error)
    assert "missing.yaml" in str(error)


@pytest.mark.parametrize(
    ("field", "text"),
    [
        ("configMapGenerator", "configMapGenerator:\n  - name: extra\n    literals: [a=b]\n"),
        ("components", "components:\n  - ../components/tls\n"),
        ("namePrefix", "namePrefix: shop-\n"),
        ("replacements", "replacements:\n  - path: replacement.yaml\n"),
        ("helmCharts", "helmCharts:\n  - name: redis\n"),
        ("patchesJson6902", "patchesJson6902:\n  - path: p.json\n    target: {kind: ConfigMap}\n"),
        (
            "patches",
            "patches:\n  - patch: '[{op: add, path: /data/x, value: y}]'\n    target: {kind: ConfigMap}\n",
        ),
        ("vars", "vars:\n  - name: X\n    objref: {kind: ConfigMap, name: shop-settings, apiVersion: v1}\n"),
        ("transformers", "transformers:\n  - labeller.yaml\n"),
        ("https://github.com", "  - https://github.com/acme/base?ref=v1\n"),
    ],
)
async def test_unmodelled_kustomize_features_are_refused_by_name_before_writing(
    kustomize: Path, tmp_path: Path, field: str, text: str
) -> None:
    layout = {**SHOP, "shop/kustomization.yaml": SHOP_KUSTOMIZATION + text}
    results: list[TargetResult] = []
    h, parked = harness(tmp_path, layout, target_path="shop", results=results, **on(kustomize))
    w = Work(path="shop")
    await h.feed(w.update(cm("shop-settings", currency="CHF"), rv="2"))
    await h.settle_time()
    assert files(h.remote) == layout
    (_, error), *_ = parked.items
    assert "UnsupportedKustomization" in str(error)
    assert "shop/kustomization.yaml" in str(error)
    assert field in str(error)
    (stalled,) = results
    assert stalled.refusal is not None
    assert (stalled.refusal.reason, stalled.refusal.file) == (
        "UnsupportedKustomization",
        "shop/kustomization.yaml",
    )
    assert stalled.push is PushOutcome.NONE


APP_KUSTOMIZATION = """\
# podinfo for team-a: the release job bumps images and replicas here
namespace: team-a
resources:
  - deployment.yaml
images:
  - name: nginx
    newTag: "1.25"
replicas:
  - name: web
    count: 2
"""
APP = {
    "web/kustomization.yaml": APP_KUSTOMIZATION,
    "web/deployment.yaml": FLUX_MONOREPO["apps/base/deployment.yaml"],
}


async def test_images_and_replicas_are_written_where_the_value_lives(kustomize: Path, tmp_path: Path) -> None:
    """The kustomization's `images:`/`replicas:` entries override the document on every build, so
    the change goes into them, and the document keeps its bytes."""
    h, parked = harness(tmp_path, APP, target_path="web", **on(kustomize))
    w = Work(path="web")
    deployments = {"group": "apps", "resource": "deployments", "scope": "team-a"}
    live = web("team-a", "nginx:1.25")
    live["spec"]["replicas"] = 2
    await h.feed(*w.snapshot(1, [live], rv="10", **deployments))
    assert files(h.remote) == APP

    scaled = web("team-a", "nginx:1.25")
    scaled["spec"]["replicas"] = 3
    await h.feed(w.update(scaled, rv="11", **deployments))
    await h.settle_time()
    assert parked.items == []
    assert changed_paths(h.remote) == ["web/kustomization.yaml"]
    assert diff(h.remote) == ["-    count: 2", "+    count: 3"]

    bumped = web("team-a", "nginx:1.26")
    bumped["spec"]["replicas"] = 3
    await h.feed(w.update(bumped, rv="12", **deployments))
    await h.settle_time()
    assert parked.items == []
    assert diff(h.remote) == ['-    newTag: "1.25"', '+    newTag: "1.26"']
    tree = files(h.remote)
    assert tree["web/deployment.yaml"] == APP["web/deployment.yaml"]
    now = render(kustomize, tmp_path / "a", tree, "web")
    was = render(kustomize, tmp_path / "b", APP, "web")
    key = ObjectKey("apps", "Deployment", "team-a", "web")
    assert (now[key]["spec"]["replicas"], was[key]["spec"]["replicas"]) == (3, 2)
    images = [obj[key]["spec"]["template"]["spec"]["containers"][0].pop("image") for obj in (now, was)]
    assert images == ["nginx:1.26", "nginx:1.25"]
    now[key]["spec"]["replicas"] = 2
    assert now == was, "nothing else moved"


async def test_a_build_that_does_not_finish_in_time_is_refused(tmp_path: Path) -> None:
    """A stand-in binary that never answers: the real kustomize cannot be made to hang on a local
    folder, and the timeout is what protects the worker from one that does."""
    hung = tmp_path / "hung-kustomize"
    hung.write_text("#!/bin/sh\nexec sleep 60\n")
    hung.chmod(0o755)
    h, parked = harness(
        tmp_path,
        SHOP,
        target_path="shop",
        kustomize={"render": "on", "binary": str(hung), "timeout_s": 0.5},
    )
    w = Work(path="shop")
    timeouts = builds("timeout")
    await h.feed(w.update(cm("shop-settings", currency="CHF"), rv="2"))
    await h.settle_time()
    assert files(h.remote) == SHOP
    assert builds("timeout") == timeouts + 1
    (_, error), *_ = parked.items
    assert "RenderFailed" in str(error)
    assert "took longer than 0.5s (targets[].kustomize.timeout_s)" in str(error)


async def test_one_document_of_a_commented_multi_document_file_is_edited_and_renders(
    kustomize: Path, tmp_path: Path
) -> None:
    layout = {
        "live/kustomization.yaml": "resources:\n  - team-a/config.yaml\n",
        MULTI_PATH: MULTI,
    }
    h, parked = harness(tmp_path, layout, **on(kustomize))
    w = Work()
    await h.feed(w.update(cm("app-settings", level="debug", region="eu-1"), rv="2"))
    await h.settle_time()
    assert parked.items == []
    assert changed_paths(h.remote) == [MULTI_PATH]
    assert diff(h.remote) == ["-  level: info", "+  level: debug"]
    was = render(kustomize, tmp_path / "b", layout, "live")
    now = render(kustomize, tmp_path / "a", files(h.remote), "live")
    key = ObjectKey("", "ConfigMap", "team-a", "app-settings")
    assert (was[key]["data"]["level"], now[key]["data"]["level"]) == ("info", "debug")
    now[key]["data"]["level"] = "info"
    assert now == was, "the other document renders as before"
