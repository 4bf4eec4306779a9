"""New objects placed by gitops-reverser's templates: rendering, the resolution order, refusals."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.intent.homes import build_index
from pipeline.intent.placement import (
    CLUSTER_BUCKET,
    UNLABELLED_BUCKET,
    PlacedObject,
    PlacementError,
    PlacementSource,
    compile_placement,
    compile_template,
)

CONFIGMAP = PlacedObject("", "v1", "configmaps", "ConfigMap", "shop", "web", {"team": "store"})
SECRET = PlacedObject("", "v1", "secrets", "Secret", "shop", "db", {}, sensitive=True)
ROLE = PlacedObject("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", "", "viewer", {})
EMPTY = build_index({})
FULL = "{groupPath}/{version}/{resource}/{namespace}/{name}.yaml"


@pytest.mark.parametrize(
    ("template", "obj", "path"),
    [
        ("{namespace}/configmaps.yaml", CONFIGMAP, "shop/configmaps.yaml"),
        (FULL, CONFIGMAP, "v1/configmaps/shop/web.yaml"),
        (FULL, ROLE, f"rbac.authorization.k8s.io/v1/clusterroles/{CLUSTER_BUCKET}/viewer.yaml"),
        ("{namespace|_global}/{name}.yaml", ROLE, "_global/viewer.yaml"),
        ("{namespace|}/{name}.yaml", ROLE, "viewer.yaml"),
        ("{label:team}/{name}.yaml", CONFIGMAP, "store/web.yaml"),
        ("{label:app}/{name}.yaml", CONFIGMAP, f"{UNLABELLED_BUCKET}/web.yaml"),
        ("{label:app|misc}/{kind}-{name}.yaml", CONFIGMAP, "misc/ConfigMap-web.yaml"),
        ("{scope}/{apiVersion}/{name}{sensitiveSuffix}", SECRET, "namespaced/v1/db.sops.yaml"),
    ],
)
def test_templates_render_like_gitops_reverser(template: str, obj: PlacedObject, path: str) -> None:
    assert compile_template(template, "t").render(obj) == path


@pytest.mark.parametrize(
    ("template", "named"),
    [
        ("{namespace}/{name}", "extension"),
        ("/abs/{name}.yaml", "relative"),
        ("../{name}.yaml", "leaves the target"),
        ("{nme}.yaml", "unknown variable {nme}"),
        ("{name|x}.yaml", "only {namespace} and {label:key} take a |fallback"),
        ("{namespace|../up}/{name}.yaml", "fallback"),
        ("{namespace|" + "x" * 64 + "}/{name}.yaml", "fallback"),
        ("{label:}/{name}.yaml", "label key"),
        ("{name.yaml", "unbalanced"),
    ],
)
def test_templates_that_are_refused_name_the_fault(template: str, named: str) -> None:
    with pytest.raises(PlacementError, match=r"spec\.placement\.default") as refused:
        compile_template(template, "spec.placement.default")
    assert named in str(refused.value)


def test_by_type_wins_then_default_then_the_single_kustomization_then_canonical() -> None:
    policy = compile_placement(
        {"v1/configmaps": "{namespace}/configmaps.yaml", "v1/secrets": "{namespace}/secret-{name}.yaml"},
        "{groupPath}/{version}/{resource}/{namespace}/{name}.yaml",
    )
    expected = ("clusters/prod/shop/configmaps.yaml", PlacementSource.BY_TYPE)
    assert policy.resolve(CONFIGMAP, EMPTY, "clusters/prod") == expected
    assert policy.resolve(ROLE, EMPTY, "") == (
        f"rbac.authorization.k8s.io/v1/clusterroles/{CLUSTER_BUCKET}/viewer.yaml",
        PlacementSource.DEFAULT,
    )
    root = build_index({"apps/kustomization.yaml": b"resources: []\n"}, "apps")
    unset = compile_placement({}, None)
    beside = ("apps/configmap-web.yaml", PlacementSource.KUSTOMIZE_ROOT)
    assert unset.resolve(CONFIGMAP, root, "apps") == beside
    empty_root = b"resources: []\n"
    two_roots = build_index({"a/kustomization.yaml": empty_root, "b/kustomization.yaml": empty_root})
    assert unset.resolve(CONFIGMAP, two_roots, "") is None
    assert unset.resolve(CONFIGMAP, EMPTY, "") is None


def test_the_single_kustomization_takes_only_objects_it_renders_in_their_own_namespace() -> None:
    unset = compile_placement({}, None)
    own = build_index({"apps/kustomization.yaml": b"namespace: shop\nresources: []\n"}, "apps")
    assert unset.resolve(CONFIGMAP, own, "apps") == (
        "apps/configmap-web.yaml",
        PlacementSource.KUSTOMIZE_ROOT,
    )
    other = build_index({"apps/kustomization.yaml": b"namespace: billing\nresources: []\n"}, "apps")
    assert unset.resolve(CONFIGMAP, other, "apps") is None, "kustomize would render it into billing"


def test_a_bundling_default_is_refused_unless_secrets_have_their_own_route() -> None:
    with pytest.raises(PlacementError, match="add a byType entry for v1/secrets"):
        compile_placement({}, "all.yaml")
    policy = compile_placement({"v1/secrets": "{namespace}/secrets/{name}.yaml"}, "all.yaml")
    assert policy.resolve(SECRET, EMPTY, "") == ("shop/secrets/db.yaml", PlacementSource.BY_TYPE)
    with pytest.raises(PlacementError, match=r"byType\[v1/secrets\]"):
        compile_placement({"v1/secrets": "{namespace}/secrets.yaml"}, None)


def test_another_sensitive_type_never_falls_into_a_bundle() -> None:
    sealed = PlacedObject("example.com", "v1", "vaults", "Vault", "shop", "v", {}, sensitive=True)
    policy = compile_placement({"v1/secrets": "{namespace}/{name}.yaml"}, "all.yaml")
    with pytest.raises(PlacementError, match="sensitive"):
        policy.resolve(sealed, EMPTY, "")


def test_a_by_type_key_must_name_a_type() -> None:
    with pytest.raises(PlacementError, match="configmaps"):
        compile_placement({"configmaps": "x.yaml"}, None)


segment = st.text("abcdefghij-.", min_size=1, max_size=12).filter(lambda s: s not in (".", ".."))


@given(segment, segment, segment)
def test_a_rendered_path_never_leaves_the_folder(namespace: str, name: str, label: str) -> None:
    obj = PlacedObject("", "v1", "configmaps", "ConfigMap", namespace, name, {"team": label})
    path = compile_template("{label:team}/{namespace}/{name}.yaml", "t").render(obj)
    assert not path.startswith("/")
    assert ".." not in path.split("/")
    assert path.endswith(f"{name}.yaml")
