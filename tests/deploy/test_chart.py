"""The Helm chart: `helm lint`, `helm template`, and the rendered configuration loaded by the service.

helm is built from the Go module proxy by `tests/deploy/build-helm.sh` (`make e2e` does it); these
tests skip, saying so, when it has not been built. Rendering goes through real helm so template
functions, the values schema and `fail` guards behave exactly as they will for an operator.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.config import load_settings
from tests.deploy.helm import BUILD_HELM, CHART, REQUIRED, helm_path, run_helm
from tests.deploy.helm import render as render_chart


@pytest.fixture(scope="session")
def helm() -> Path:
    path = helm_path()
    if path is None:
        pytest.skip(f"helm is not built; run {BUILD_HELM.name} in tests/deploy (Go module proxy)")
    return path


def render(helm: Path, *args: str) -> list[dict[str, Any]]:
    return render_chart(helm, "reverser", *args)


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def test_lint_is_clean(helm: Path) -> None:
    result = run_helm(helm, "lint", "--strict", str(CHART), *REQUIRED)
    assert result.returncode == 0, result.stdout + result.stderr


def test_defaults_render_every_part_of_the_deployment(helm: Path) -> None:
    objects = render(helm, *REQUIRED)
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == sorted(
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "ConfigMap",
            "Deployment",
            "Job",
            "PodDisruptionBudget",
            "Role",
            "RoleBinding",
            "Service",
            "Service",
            "ServiceAccount",
        ]
    )
    assert not by_kind(objects, "ServiceMonitor")


def test_rendered_configuration_is_accepted_by_the_service(helm: Path, tmp_path: Path) -> None:
    objects = render(
        helm,
        *REQUIRED,
        "--set",
        "auditWebhook.tls.clientCA.secretName=apiserver-ca",
        "--set-json",
        'config.providers=[{"name":"git","url":"https://git.example.invalid/r.git","password_env":"GIT_PASSWORD"}]',
        "--set-json",
        'config.targets=[{"name":"t","provider":"git","rules":[{"resources":["configmaps"],"namespaces":["a"]}]}]',
    )
    (config_map,) = [
        o for o in by_kind(objects, "ConfigMap") if not o["metadata"]["name"].endswith("-topics")
    ]
    path = tmp_path / "config.yaml"
    path.write_text(config_map["data"]["config.yaml"])

    settings = load_settings(path, environ={})

    assert settings.metrics.addr == "0.0.0.0:9464"
    assert settings.audit.addr == "0.0.0.0:9444"
    assert str(settings.audit.tls.cert_file) == "/etc/reverser/audit-tls/tls.crt"
    assert str(settings.audit.tls.client_ca_file) == "/etc/reverser/audit-client-ca/ca.crt"
    assert settings.clusters[0].in_cluster
    assert settings.targets[0].rules[0].resources == ["configmaps"]
    (topics_config,) = [o for o in by_kind(objects, "ConfigMap") if o["metadata"]["name"].endswith("-topics")]
    assert topics_config["data"] == config_map["data"]


def test_deployment_probes_mounts_and_secrets(helm: Path) -> None:
    objects = render(
        helm,
        *REQUIRED,
        "--set-json",
        'env=[{"name":"GIT_PASSWORD","valueFrom":{"secretKeyRef":{"name":"git","key":"password"}}}]',
    )
    (deployment,) = by_kind(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == ["run", "--config", "/etc/reverser/config.yaml"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert {
        "name": "GIT_PASSWORD",
        "valueFrom": {"secretKeyRef": {"name": "git", "key": "password"}},
    } in container["env"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["audit-tls"]["secret"]["secretName"] == "audit-tls"
    assert "checksum/config" in deployment["spec"]["template"]["metadata"]["annotations"]
    (audit_service,) = [s for s in by_kind(objects, "Service") if s["metadata"]["name"].endswith("-audit")]
    assert audit_service["spec"]["ports"][0]["targetPort"] == "audit-webhook"


def test_rbac_follows_the_watched_resources(helm: Path) -> None:
    objects = render(
        helm,
        *REQUIRED,
        "--set-json",
        'rbac.watchedResources=[{"apiGroups":["networking.k8s.io"],"resources":["ingresses"]}]',
    )
    (cluster_role,) = by_kind(objects, "ClusterRole")
    rules = cluster_role["rules"]
    assert {
        "apiGroups": ["networking.k8s.io"],
        "resources": ["ingresses"],
        "verbs": ["get", "list", "watch"],
    } in rules
    assert all("configmaps" not in r.get("resources", []) for r in rules)
    assert any("/apis/*" in r.get("nonResourceURLs", []) for r in rules)
    (role,) = by_kind(objects, "Role")
    assert role["rules"][0]["resources"] == ["leases"]


def test_service_monitor_is_optional(helm: Path) -> None:
    objects = render(helm, *REQUIRED, "--set", "serviceMonitor.enabled=true")
    (monitor,) = by_kind(objects, "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "auditWebhook.tls.secretName is required"),
        (
            [*REQUIRED, "--set", "config.log.bootstrap_servers="],
            "replicaCount > 1 needs config.log.bootstrap_servers",
        ),
        ([*REQUIRED, "--set", "metrics.port=0"], "/metrics/port"),
        ([*REQUIRED, "--set", "image.pullPolicy=Sometimes"], "/image/pullPolicy"),
        ([*REQUIRED, "--set", "unknownKey=1"], "unknownKey"),
    ],
)
def test_bad_values_are_refused_with_a_reason(helm: Path, args: list[str], message: str) -> None:
    result = run_helm(helm, "template", "rp", str(CHART), *args)
    assert result.returncode != 0
    assert message in result.stderr


def test_prometheus_rule_embeds_the_plain_rule_file(helm: Path) -> None:
    assert not by_kind(render(helm, *REQUIRED), "PrometheusRule")
    objects = render(
        helm, *REQUIRED, "--set", "prometheusRule.enabled=true", "--set", "prometheusRule.labels.release=kps"
    )
    (rule,) = by_kind(objects, "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kps"
    assert rule["spec"] == yaml.safe_load((CHART / "files" / "prometheus-rules.yaml").read_text())


def test_grafana_dashboard_configmap_carries_the_sidecar_label(helm: Path) -> None:
    def dashboards(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [o for o in by_kind(objects, "ConfigMap") if o["metadata"]["name"].endswith("-dashboard")]

    assert not dashboards(render(helm, *REQUIRED))
    (config_map,) = dashboards(render(helm, *REQUIRED, "--set", "grafanaDashboard.enabled=true"))
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads(config_map["data"]["reverser-pipeline.json"])
    assert shipped == json.loads((CHART / "files" / "grafana-dashboard.json").read_text())


def test_cert_manager_issues_the_audit_serving_certificate(helm: Path) -> None:
    objects = render(
        helm,
        "--set", "auditWebhook.tls.certManager.enabled=true",
        "--set", "auditWebhook.tls.certManager.issuerRef.name=cluster-ca",
        "--set", "auditWebhook.tls.certManager.issuerRef.kind=ClusterIssuer",
    )
    (certificate,) = by_kind(objects, "Certificate")
    (deployment,) = by_kind(objects, "Deployment")
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    secret = "rp-reverser-pipeline-audit-tls"
    assert volumes["audit-tls"]["secret"]["secretName"] == certificate["spec"]["secretName"] == secret
    assert "rp-reverser-pipeline-audit.reverser.svc" in certificate["spec"]["dnsNames"]
    issuer = {"name": "cluster-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    assert certificate["spec"]["issuerRef"] == issuer
    assert "server auth" in certificate["spec"]["usages"]
    assert not by_kind(render(helm, *REQUIRED), "Certificate")


def test_cert_manager_without_an_issuer_is_refused(helm: Path) -> None:
    result = run_helm(
        helm, "template", "rp", str(CHART), "--set", "auditWebhook.tls.certManager.enabled=true"
    )
    assert result.returncode != 0
    assert "certManager.issuerRef.name is required" in result.stderr
