"""The deploy files against a real kube-apiserver: every object passes server-side validation.

`helm lint` and YAML parsing cannot tell a misspelt field or a wrong type from a right one; the
apiserver can. Each object is created with `dryRun=All` and strict field validation (admission and
schema validation run, unknown fields are errors, nothing is stored), except namespaces, which must
exist for their objects to be checked.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client, utils
from kubernetes_asyncio.client.exceptions import ApiException

from tests.deploy.helm import BUILD_HELM, CHART, helm_path, render
from tests.e2e.cluster.controlplane import ControlPlane
from tests.e2e.kube import kube_client

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
REDPANDA = ROOT / "deploy" / "redpanda" / "kubernetes"
RELEASE_NAMESPACE = "reverser"


async def _create_all(kubeconfig: Path, objects: list[dict[str, Any]]) -> list[str]:
    """Create namespaces for real and everything else with dry run; returns `Kind/name` created."""
    created = []
    async with kube_client(kubeconfig) as api:
        namespaces = {o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"}
        namespaces |= {o["metadata"]["namespace"] for o in objects if "namespace" in o["metadata"]}
        for name in sorted(namespaces):
            try:
                await client.CoreV1Api(api).create_namespace(
                    client.V1Namespace(metadata=client.V1ObjectMeta(name=name))
                )
            except ApiException as exc:
                if exc.status != 409:
                    raise
        for obj in objects:
            if obj["kind"] == "Namespace":
                continue
            try:
                await utils.create_from_dict(
                    api, obj, namespace=RELEASE_NAMESPACE, dry_run="All", field_validation="Strict"
                )
            except utils.FailToCreateError as exc:
                raise AssertionError(f"{obj['kind']}/{obj['metadata']['name']} refused: {exc}") from exc
            created.append(f"{obj['kind']}/{obj['metadata']['name']}")
    return created


def test_redpanda_manifests_are_valid(plane: ControlPlane) -> None:
    kustomization = yaml.safe_load((REDPANDA / "kustomization.yaml").read_text())
    objects = [
        doc
        for name in kustomization["resources"]
        for doc in yaml.safe_load_all((REDPANDA / name).read_text())
        if doc
    ]

    created = asyncio.run(_create_all(plane.kubeconfig, objects))

    assert "StatefulSet/redpanda" in created
    assert "Job/reverser-topics" in created
    assert "PodDisruptionBudget/redpanda" in created


def test_rendered_chart_is_valid(plane: ControlPlane) -> None:
    helm = helm_path()
    if helm is None:
        pytest.skip(f"helm is not built; run {BUILD_HELM}")
    # With the Grafana dashboard ConfigMap too (the PrometheusRule and Certificate need CRDs this
    # bare apiserver does not have; tests/deploy/test_chart.py checks their rendering).
    objects = render(
        helm,
        RELEASE_NAMESPACE,
        "--set",
        "grafanaDashboard.enabled=true",
        "--set-json",
        'config.targets=[{"name":"t","provider":"git","rules":[{"resources":["configmaps"],"namespaces":["team-a"]},'
        '{"resources":["rbac.authorization.k8s.io/clusterroles"]}]}]',
        "--set-json",
        'config.providers=[{"name":"git","url":"https://git.example.invalid/r.git"}]',
    )
    for obj in objects:
        if obj["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            obj["metadata"].setdefault("namespace", RELEASE_NAMESPACE)

    created = asyncio.run(_create_all(plane.kubeconfig, objects))

    assert "Deployment/rp-reverser-pipeline" in created
    assert "Job/rp-reverser-pipeline-topics" in created
    assert "NetworkPolicy/rp-reverser-pipeline" in created
    assert created.count("Role/rp-reverser-pipeline-watch") == 1  # in team-a only
    assert "ClusterRole/rp-reverser-pipeline-watch" in created
    assert "Role/rp-reverser-pipeline-leases" in created
    assert "Secret/rp-reverser-pipeline-audit-client" in created
    assert "ConfigMap/rp-reverser-pipeline-dashboard" in created


def test_helm_installs_and_uninstalls_the_chart(plane: ControlPlane, tmp_path: Path) -> None:
    helm = helm_path()
    if helm is None:
        pytest.skip(f"helm is not built; run {BUILD_HELM}")
    env = {
        **os.environ,
        "KUBECONFIG": str(plane.kubeconfig),
        "HELM_CACHE_HOME": str(tmp_path / "cache"),
        "HELM_CONFIG_HOME": str(tmp_path / "config"),
        "HELM_DATA_HOME": str(tmp_path / "data"),
    }
    # Hooks are skipped: the topics Job would wait for a kubelet that this control plane lacks.
    installed = subprocess.run(
        [
            str(helm),
            "install",
            "rp",
            str(CHART),
            "-n",
            "installed",
            "--create-namespace",
            "--no-hooks",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert installed.returncode == 0, installed.stderr
    assert "STATUS: deployed" in installed.stdout
    assert "route: default" in installed.stdout

    async def deployment_replicas() -> int:
        async with kube_client(plane.kubeconfig) as api:
            deployment = await client.AppsV1Api(api).read_namespaced_deployment(
                "rp-reverser-pipeline", "installed"
            )
            replicas: int = deployment.spec.replicas
            return replicas

    assert asyncio.run(deployment_replicas()) == 2
    uninstalled = subprocess.run(
        [str(helm), "uninstall", "rp", "-n", "installed"], capture_output=True, text=True, env=env
    )
    assert uninstalled.returncode == 0, uninstalled.stderr
