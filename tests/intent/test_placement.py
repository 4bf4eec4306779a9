"""New objects placed by gitops-reverser's templates: rendering, the resolution order, refusals."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from pipeline.config import EncryptionSettings, TargetSettings
from pipeline.intent.homes import build_index
from pipeline.intent.placement import resolve
from pipeline.placement import (
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
    assert resolve(policy, CONFIGMAP, EMPTY, "clusters/prod") == expected
    assert resolve(policy, ROLE, EMPTY, "") == (
        f"rbac.authorization.k8s.io/v1/clusterroles/{CLUSTER_BUCKET}/viewer.yaml",
        PlacementSource.DEFAULT,
    )
    root = build_index({"apps/kustomization.yaml": b"resources: []\n"}, "apps")
    unset = compile_placement({}, None)
    beside = ("apps/configmap-web.yaml", PlacementSource.KUSTOMIZE_ROOT)
    assert resolve(unset, CONFIGMAP, root, "apps") == beside
    empty_root = b"resources: []\n"
    two_roots = build_index({"a/kustomization.yaml": empty_root, "b/kustomization.yaml": empty_root})
    assert resolve(unset, CONFIGMAP, two_roots, "") is None
    assert resolve(unset, CONFIGMAP, EMPTY, "") is None


def test_the_single_kustomization_takes_only_objects_it_renders_in_their_own_namespace() -> None:
    unset = compile_placement({}, None)
    own = build_index({"apps/kustomization.yaml": b"namespace: shop\nresources: []\n"}, "apps")
    assert resolve(unset, CONFIGMAP, own, "apps") == (
        "apps/configmap-web.yaml",
        PlacementSource.KUSTOMIZE_ROOT,
    )
    other = build_index({"apps/kustomization.yaml": b"namespace: billing\nresources: []\n"}, "apps")
    assert resolve(unset, CONFIGMAP, other, "apps") is None, "kustomize would render it into billing"


def test_a_bundling_default_is_refused_unless_secrets_have_their_own_route() -> None:
    with pytest.raises(PlacementError, match=r"add a spec\.placement\.byType entry for v1/secrets"):
        compile_placement({}, "all.yaml")
    policy = compile_placement({"v1/secrets": "{namespace}/secrets/{name}.yaml"}, "all.yaml")
    assert resolve(policy, SECRET, EMPTY, "") == ("shop/secrets/db.sops.yaml", PlacementSource.BY_TYPE)
    yml = compile_placement({"v1/secrets": "{namespace}/{name}.yml"}, None)
    assert resolve(yml, SECRET, EMPTY, "live") == ("live/shop/db.sops.yml", PlacementSource.BY_TYPE), (
        "a sensitive file always ends in .sops.yaml/.sops.yml, so the creation rules cover it"
    )
    with pytest.raises(PlacementError, match=r"byType\[v1/secrets\]"):
        compile_placement({"v1/secrets": "{namespace}/secrets.yaml"}, None)


def test_another_sensitive_type_never_falls_into_a_bundle() -> None:
    sealed = PlacedObject("example.com", "v1", "vaults", "Vault", "shop", "v", {}, sensitive=True)
    policy = compile_placement({"v1/secrets": "{namespace}/{name}.yaml"}, "all.yaml")
    with pytest.raises(PlacementError, match="sensitive"):
        resolve(policy, sealed, EMPTY, "")


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


@pytest.mark.parametrize(
    ("template", "named"),
    [
        ("{namespace}/../../etc/{name}.yaml", "leaves the target"),
        ("a/./{name}.yaml", "leaves the target"),
        ("//etc/{name}.yaml", "relative"),
        ("C:\\x\\{name}.yaml", "relative"),
        (".git/hooks/{name}.yaml", "Git's own files"),
        ("{namespace}/.github/{name}.yaml", "Git's own files"),
        ("{__class__}/{name}.yaml", "unknown variable {__class__}"),
        ("{name!r}.yaml", "unknown variable {name!r}"),
        ("{namespace:x}/{name}.yaml", "unknown variable {namespace:x}"),
        ("{{name}}.yaml", "unbalanced"),
        ("", "relative"),
    ],
)
def test_hostile_templates_are_refused_before_any_write(template: str, named: str) -> None:
    with pytest.raises(PlacementError) as refused:
        compile_placement({"v1/configmaps": template}, None)
    assert "spec.placement.byType[v1/configmaps]" in str(refused.value)
    assert named in str(refused.value)


def test_a_hostile_value_cannot_turn_a_template_into_a_path_outside_the_folder() -> None:
    template = compile_template("{label:team}/{name}.yaml", "t")
    for value in ("..", ".git"):
        hostile = PlacedObject("", "v1", "configmaps", "ConfigMap", "shop", "web", {"team": value})
        with pytest.raises(PlacementError, match="renders the segment"):
            template.render(hostile)
    slashed = PlacedObject("", "v1", "configmaps", "ConfigMap", "shop", "web", {"team": "a/../.."})
    with pytest.raises(PlacementError, match="renders the segment"):
        template.render(slashed)


def test_a_policy_without_templates_places_nothing_itself() -> None:
    assert not compile_placement({}, None).applies(CONFIGMAP)
    assert compile_placement({"v1/configmaps": "{name}.yaml"}, None).applies(CONFIGMAP)
    assert not compile_placement({"v1/configmaps": "{name}.yaml"}, None).applies(ROLE)


def test_a_targets_other_sensitive_types_are_never_bundled_by_its_templates() -> None:
    """Checked with the target's encryption settings, naming the field, before anything runs."""
    encryption = EncryptionSettings(
        age_recipients=["age1" + "q" * 58], sensitive_resources=["example.com/vaults"]
    )

    def target(placement: dict[str, Any]) -> TargetSettings:
        return TargetSettings(name="t1", provider="git", encryption=encryption, placement=placement)

    with pytest.raises(ValidationError, match=r"placement\.by_type\[example\.com/v1/vaults\]"):
        target({"by_type": {"example.com/v1/vaults": "{namespace}/vaults.yaml"}})
    with pytest.raises(ValidationError, match=r"placement\.default: .*example\.com/vaults"):
        target({"by_type": {"v1/secrets": "{namespace}/{name}.yaml"}, "default": "all.yaml"})
    fine = target(
        {
            "by_type": {
                "v1/secrets": "{namespace}/{name}.yaml",
                "example.com/v1/vaults": "v/{namespace}/{name}.yaml",
            },
            "default": "all.yaml",
        }
    )
    assert fine.placement_policy.default is not None
    unencrypted = TargetSettings(
        name="t1",
        provider="git",
        placement={"default": "{namespace}/all.yaml", "by_type": {"v1/secrets": "{namespace}/{name}.yaml"}},
    )
    assert unencrypted.placement_policy.by_type
