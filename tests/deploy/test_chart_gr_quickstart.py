"""The chart's gitops-reverser quickstart, watched-type RBAC modes, age key Secret access and digest
key, rendered by real helm (tests/deploy/build-helm.sh), like tests/deploy/test_chart.py.

The starter objects are compared with gitops-reverser's own quickstart samples
(tests/corpus/gitops-reverser/samples/, provenance in its README), and checked by
`reverser config check` against the configuration the chart renders.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.cli import main
from tests.deploy.test_chart import NAMESPACE, by_kind, helm, named, refusal, render, rendered_config

__all__ = ["helm"]

SAMPLES = Path(__file__).resolve().parents[1] / "corpus" / "gitops-reverser" / "samples"
URL = "git@github.com:YOUR_USERNAME/my-k8s-audit.git"
QUICKSTART = ("--set", "quickstart.enabled=true", "--set", f"quickstart.gitProvider.url={URL}")
GR_RULE = {"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch"]}


def _sample(name: str) -> dict[str, Any]:
    (document,) = yaml.safe_load_all((SAMPLES / name).read_text())
    assert isinstance(document, dict)
    return document


def _rules(objects: list[dict[str, Any]], kind: str, suffix: str, namespace: str | None = None) -> list[Any]:
    found = [
        o
        for o in by_kind(objects, kind)
        if o["metadata"]["name"].endswith(suffix)
        and (namespace is None or o["metadata"].get("namespace") == namespace)
    ]
    assert len(found) == 1, f"{kind} *{suffix} in {namespace}: {len(found)}"
    rules: list[Any] = found[0]["rules"]
    return rules


def test_quickstart_values_install_grs_starter_objects(
    helm: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objects = render(helm, *QUICKSTART)
    rendered = {o["kind"]: o for o in objects if o.get("apiVersion") == "configbutler.ai/v1alpha3"}
    assert sorted(rendered) == ["GitProvider", "GitTarget", "WatchRule"]
    for kind, sample in (
        ("GitProvider", "quickstart-gitprovider.yaml"),
        ("GitTarget", "quickstart-gittarget.yaml"),
        ("WatchRule", "quickstart-watchrule.yaml"),
    ):
        expected = _sample(sample)
        if kind == "GitProvider":
            expected["spec"].pop("push")  # the commit window is the pipeline's default, 5 s, too
        assert rendered[kind]["spec"] == expected["spec"], kind
        assert (rendered[kind]["metadata"]["name"], rendered[kind]["metadata"]["namespace"]) == (
            expected["metadata"]["name"],
            "default",
        )
    # the controller runs in the objects' namespace, and the objects pass its own check
    config = rendered_config(objects, tmp_path)
    resources = tmp_path / "resources.yaml"
    resources.write_text(yaml.safe_dump_all(list(rendered.values())))
    assert main(["config", "check", str(resources), "--config", str(config)]) == 0, capsys.readouterr().out
    settings = yaml.safe_load(config.read_text())
    assert settings["custom_resources"] == {"enabled": True, "namespace": "default"}
    assert "reverser-config" in _rules(objects, "Role", "-leases")[1]["resourceNames"]
    assert by_kind(objects, "ClusterRole"), "the controller's ClusterRole"


def test_quickstart_needs_its_repository_url(helm: Path) -> None:
    assert "quickstart.gitProvider.url is required" in refusal(helm, "--set", "quickstart.enabled=true")


def test_quickstart_secrets_are_granted_by_name_in_its_namespace_only(helm: Path) -> None:
    objects = render(helm, *QUICKSTART)
    assert _rules(objects, "Role", "-git-credentials", "default") == [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["git-creds"], "verbs": ["get"]}
    ]
    assert _rules(objects, "Role", "-age-keys", "default") == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["sops-age-key"],
            "verbs": ["get", "update"],
        },
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
    ]
    # nothing lists or watches Secrets, and nothing reads them outside the quickstart's namespace
    for role in by_kind(objects, "Role") + by_kind(objects, "ClusterRole"):
        for rule in role["rules"]:
            if "secrets" in rule["resources"]:
                assert not {"list", "watch"} & set(rule["verbs"]), role["metadata"]["name"]
                assert role["metadata"].get("namespace") == "default", role["metadata"]["name"]
    without_generation = render(helm, *QUICKSTART, "--set", "rbac.ageKeys.generate=false")
    assert _rules(without_generation, "Role", "-age-keys", "default") == [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["sops-age-key"], "verbs": ["get"]}
    ]


def test_age_key_namespaces_named_in_values_get_their_own_roles(helm: Path) -> None:
    objects = render(
        helm,
        "--set-json",
        'rbac.ageKeys={"namespaces":["team-a","team-b"],"secretNames":["keys"],"generate":false}',
    )
    for namespace in ("team-a", "team-b"):
        assert _rules(objects, "Role", "-age-keys", namespace) == [
            {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["keys"], "verbs": ["get"]}
        ]
        binding = next(
            b
            for b in by_kind(objects, "RoleBinding")
            if b["metadata"]["name"].endswith("-age-keys") and b["metadata"]["namespace"] == namespace
        )
        assert binding["subjects"][0]["namespace"] == NAMESPACE
    assert not [r for r in by_kind(render(helm), "Role") if r["metadata"]["name"].endswith("-age-keys")]


def test_watch_types_any_is_grs_read_everything_and_the_default_reads_nothing_more(helm: Path) -> None:
    assert _rules(render(helm, "--set", "rbac.watchTypes.mode=any"), "ClusterRole", "-watch-types") == [
        GR_RULE
    ]
    selected = render(
        helm,
        "--set",
        "rbac.watchTypes.mode=selected",
        "--set-json",
        'rbac.watchTypes.selected=[{"apiGroups":[""],"resources":["configmaps"]},{"apiGroups":["apps"],"resources":["deployments"]}]',
    )
    assert _rules(selected, "ClusterRole", "-watch-types") == [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch"]},
    ]
    for objects in (render(helm), render(helm, *QUICKSTART)):
        assert not [
            r for r in by_kind(objects, "ClusterRole") if r["metadata"]["name"].endswith("-watch-types")
        ]
    assert "rbac.watchTypes.selected" in refusal(helm, "--set", "rbac.watchTypes.mode=selected")
    assert "mode" in refusal(helm, "--set", "rbac.watchTypes.mode=everything")


def _digest_env(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (workload,) = by_kind(objects, kind)
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    (env,) = [e for e in container["env"] if e["name"] == "REVERSER_SECRETS_DIGEST_KEY"]
    found: dict[str, Any] = env["valueFrom"]["secretKeyRef"]
    return found


def test_every_pod_gets_the_digest_key_generated_once_and_kept(helm: Path) -> None:
    objects = render(helm)
    secret = named(objects, "Secret", "-digest-key")
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert len(base64.b64decode(secret["data"]["digest-key"])) == 64
    assert _digest_env(objects, "Deployment") == {"name": secret["metadata"]["name"], "key": "digest-key"}
    embedded = render(helm, "--set", "config.log.backend=embedded", "--set", "replicaCount=1")
    assert _digest_env(embedded, "StatefulSet")["name"].endswith("-digest-key")
    # taken from a Secret of the user's: nothing generated
    own = render(
        helm, "--set", "secretsDigestKey.existingSecret=my-digest", "--set", "secretsDigestKey.key=k"
    )
    assert not [s for s in by_kind(own, "Secret") if s["metadata"]["name"].endswith("-digest-key")]
    assert _digest_env(own, "Deployment") == {"name": "my-digest", "key": "k"}


def test_quickstart_clusters_take_grs_default_mode_unless_they_name_one(helm: Path, tmp_path: Path) -> None:
    """gitops-reverser commits as the configured author unless attribution is switched on; its
    quickstart sets up no audit webhook. A cluster that names its mode keeps it."""
    config = rendered_config(render(helm, *QUICKSTART), tmp_path)
    (cluster,) = yaml.safe_load(config.read_text())["clusters"]
    assert cluster["attribution"] == "configured-author"
    named_mode = (
        "--set-json",
        'config.clusters=[{"name":"default","in_cluster":true,"attribution":"audit"}]',
    )
    config = rendered_config(render(helm, *QUICKSTART, *named_mode), tmp_path)
    (cluster,) = yaml.safe_load(config.read_text())["clusters"]
    assert cluster["attribution"] == "audit"
    config = rendered_config(render(helm), tmp_path)  # without the quickstart: this project's default
    (cluster,) = yaml.safe_load(config.read_text())["clusters"]
    assert "attribution" not in cluster
