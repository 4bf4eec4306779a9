"""The Helm chart: `helm lint`, `helm template`, and the rendered configuration loaded by the service.

helm is built from the Go module proxy by `tests/deploy/build-helm.sh` (`make e2e` does it); these
tests skip, saying so, when it has not been built. Rendering goes through real helm so template
functions, the values schema and `fail` guards behave exactly as they will for an operator.
"""

from __future__ import annotations

import base64
import json
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from cryptography import x509

from pipeline.audit.server import AuditIngress
from pipeline.config import load_settings
from pipeline.doctor.audit_setup import initial_backoff_s
from tests.audit.conftest import Running, open_embedded, read_batches
from tests.audit.corpus import event_list
from tests.deploy.helm import BUILD_HELM, CHART, helm_path, run_helm
from tests.deploy.helm import render as render_chart

NAMESPACE = "reverser"
EVENT = {
    "stage": "ResponseComplete",
    "verb": "create",
    "user": {"username": "alice"},
    "objectRef": {"resource": "configmaps", "namespace": "ns", "name": "cm"},
}
PROVIDERS = ("--set-json", 'config.providers=[{"name":"git","url":"https://git.example.invalid/r.git"}]')


@pytest.fixture(scope="session")
def helm() -> Path:
    path = helm_path()
    if path is None:
        pytest.skip(f"helm is not built; run {BUILD_HELM.name} in tests/deploy (Go module proxy)")
    return path


def render(helm: Path, *args: str) -> list[dict[str, Any]]:
    return render_chart(helm, NAMESPACE, *args)


def refusal(helm: Path, *args: str) -> str:
    """helm's error output for values it must refuse (fails the test when it renders)."""
    result = run_helm(helm, "template", "rp", str(CHART), "--namespace", NAMESPACE, *args)
    assert result.returncode != 0, "helm rendered values it should have refused"
    return result.stderr


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def named(objects: list[dict[str, Any]], kind: str, suffix: str) -> dict[str, Any]:
    (found,) = [o for o in by_kind(objects, kind) if o["metadata"]["name"].endswith(suffix)]
    return found


def rendered_config(objects: list[dict[str, Any]], tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(named(objects, "ConfigMap", "pipeline")["data"]["config.yaml"])
    return path


def targets(*rules: dict[str, Any]) -> tuple[str, ...]:
    return (
        *PROVIDERS,
        "--set-json",
        "config.targets=" + json.dumps([{"name": "t", "provider": "git", "rules": list(rules)}]),
    )


def test_lint_is_clean_on_the_default_install(helm: Path) -> None:
    result = run_helm(helm, "lint", "--strict", str(CHART))
    assert result.returncode == 0, result.stdout + result.stderr


def test_defaults_render_every_part_of_the_deployment(helm: Path) -> None:
    objects = render(helm)
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == sorted(
        [
            "ConfigMap",
            "ConfigMap",
            "Deployment",
            "Job",
            "NetworkPolicy",
            # the `helm test` hook (templates/tests/service-test.yaml)
            "Pod",
            "PodDisruptionBudget",
            "Role",
            "RoleBinding",
            "Secret",
            "Secret",
            "Secret",
            "Service",
            "Service",
            "ServiceAccount",
        ]
    )
    assert not by_kind(objects, "ServiceMonitor")
    # no target rules, no read access to anything in the cluster
    assert not by_kind(objects, "ClusterRole")


def test_defaults_elect_a_watch_leader_with_the_lease_in_the_release_namespace(
    helm: Path, tmp_path: Path
) -> None:
    objects = render(helm)
    settings = load_settings(rendered_config(objects, tmp_path), environ={})
    (cluster,) = settings.clusters
    assert cluster.leader_election
    assert cluster.lease_namespace == NAMESPACE

    lease_role = named(objects, "Role", "-leases")
    assert lease_role["metadata"]["namespace"] == NAMESPACE
    create, named_rule = lease_role["rules"]
    assert create == {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]}
    assert named_rule["resourceNames"] == ["reverser-watch-default"]
    assert named_rule["verbs"] == ["get", "update", "patch"]
    binding = named(objects, "RoleBinding", "-leases")
    assert binding["metadata"]["namespace"] == NAMESPACE
    assert binding["subjects"][0]["namespace"] == NAMESPACE


def test_lease_roles_follow_configured_lease_names_and_namespaces(helm: Path) -> None:
    objects = render(
        helm,
        "--set-json",
        'config.clusters=[{"name":"a","in_cluster":true},'
        '{"name":"b","kubeconfig":"/k","lease_namespace":"ops","lease_name":"b-lease"}]',
    )
    roles = {r["metadata"]["namespace"]: r for r in by_kind(objects, "Role")}
    assert roles[NAMESPACE]["rules"][1]["resourceNames"] == ["reverser-watch-a"]
    assert roles["ops"]["rules"][1]["resourceNames"] == ["b-lease"]


def test_a_sharded_cluster_gets_its_shard_leases_and_the_roster_rule_only_where_it_elects(
    helm: Path, tmp_path: Path
) -> None:
    objects = render(
        helm,
        "--set-json",
        'config.clusters=[{"name":"a","in_cluster":true,"watch_shards":3},'
        '{"name":"b","kubeconfig":"/k","lease_namespace":"ops"}]',
    )
    roles = {
        r["metadata"]["namespace"]: r
        for r in by_kind(objects, "Role")
        if r["metadata"]["name"].endswith("-leases")
    }
    _create, named_rule, roster = roles[NAMESPACE]["rules"]
    assert named_rule["resourceNames"] == [f"reverser-watch-a-shard-{n}" for n in range(3)]
    assert roster == {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": ["list", "get", "update", "delete"],
    }
    assert len(roles["ops"]["rules"]) == 2  # an unsharded cluster's namespace: no roster rights
    settings = load_settings(rendered_config(objects, tmp_path), environ={})
    assert [c.watch_shards for c in settings.clusters] == [3, 1]


def test_custom_resources_get_the_controller_role_and_lease(helm: Path, tmp_path: Path) -> None:
    objects = render(
        helm,
        "--set-json",
        'config.clusters=[{"name":"a","in_cluster":true}]',
        "--set-json",
        'config.custom_resources={"enabled":true}',
    )
    role = named(objects, "ClusterRole", "-config")
    assert role["rules"][0]["resources"] == [
        "gitproviders",
        "gittargets",
        "watchrules",
        "clusterwatchrules",
        "commitrequests",
        "clusterproviders",
    ]
    assert role["rules"][1]["verbs"] == ["patch"]
    assert named(objects, "ClusterRoleBinding", "-config")["roleRef"]["name"] == role["metadata"]["name"]
    lease_role = named(objects, "Role", "-leases")
    assert lease_role["rules"][1]["resourceNames"] == ["reverser-watch-a", "reverser-config"]
    settings = load_settings(rendered_config(objects, tmp_path), environ={})
    assert settings.custom_resources.enabled
    defaults = render(helm)
    assert not [o for o in by_kind(defaults, "ClusterRole") if o["metadata"]["name"].endswith("-config")]


def _credential_roles(objects: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The git-credentials Roles by namespace, checked to be bound to the chart's service account."""
    roles = {
        o["metadata"]["namespace"]: o["rules"]
        for o in by_kind(objects, "Role")
        if o["metadata"]["name"].endswith("-git-credentials")
    }
    for binding in by_kind(objects, "RoleBinding"):
        if binding["metadata"]["name"].endswith("-git-credentials"):
            assert binding["roleRef"]["kind"] == "Role"
            assert binding["subjects"] == [
                {"kind": "ServiceAccount", "name": "rp-reverser-pipeline", "namespace": NAMESPACE}
            ]
    bound = {
        b["metadata"]["namespace"]
        for b in by_kind(objects, "RoleBinding")
        if b["metadata"]["name"].endswith("-git-credentials")
    }
    assert bound == set(roles), "every credentials Role is bound, in its own namespace"
    for rules in roles.values():
        assert all(rule["verbs"] == ["get"] for rule in rules), "get only: never list or watch"
    return roles


def test_git_credentials_get_only_the_secrets_of_the_namespaces_holding_providers(
    helm: Path, tmp_path: Path
) -> None:
    resources = (
        "--set-json",
        'config.clusters=[{"name":"a","in_cluster":true}]',
        "--set-json",
        'config.custom_resources={"enabled":true}',
    )
    # custom resources: a GitProvider may name any Secret of its namespace; by default the release's
    assert _credential_roles(render(helm, *resources)) == {
        "reverser": [
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
        ]
    }
    narrowed = _credential_roles(
        render(
            helm,
            *resources,
            "--set-json",
            'rbac.gitCredentials={"namespaces":["team-a","team-b"],"secretNames":["git-creds"],"configMapNames":["hosts"]}',
        )
    )
    assert sorted(narrowed) == ["team-a", "team-b"]
    assert narrowed["team-a"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["hosts"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["git-creds"], "verbs": ["get"]},
    ]
    assert _credential_roles(render(helm, *resources, "--set", "rbac.gitCredentials.enabled=false")) == {}
    elsewhere = render_chart(helm, "gitops", *resources)
    assert [
        r["metadata"]["namespace"]
        for r in by_kind(elsewhere, "Role")
        if "credentials" in r["metadata"]["name"]
    ] == ["gitops"], "the release namespace, which exists at install"
    home = render(helm, *resources, "--set", "config.custom_resources.namespace=platform")
    assert list(_credential_roles(home)) == ["platform"], "the controller's namespace when it is set"
    assert _credential_roles(render(helm)) == {}, "nothing without a provider that names a Secret"

    # a file's providers name theirs exactly
    providers = [
        {
            "name": "git",
            "url": "https://git.example.invalid/r.git",
            "credentials_secret": {"namespace": "git-auth", "name": "repo-creds"},
        },
        {
            "name": "ssh",
            "url": "ssh://git@git.example.invalid/r.git",
            "credentials_secret": {"namespace": "git-auth", "name": "ssh-creds"},
            "known_hosts_ref": {"namespace": "shared", "name": "git-hosts"},
            "signing": {"format": "ssh", "key_secret": {"namespace": "git-auth", "name": "signing-key"}},
        },
    ]
    objects = render(
        helm,
        "--set-json",
        "config.providers=" + json.dumps(providers),
        "--set-json",
        'config.targets=[{"name":"t","provider":"git","rules":[{"resources":["configmaps"],"namespaces":["a"]}]}]',
    )
    assert _credential_roles(objects) == {
        "git-auth": [
            {
                "apiGroups": [""],
                "resources": ["secrets"],
                "resourceNames": ["repo-creds", "signing-key", "ssh-creds"],
                "verbs": ["get"],
            }
        ],
        "shared": [
            {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["git-hosts"], "verbs": ["get"]}
        ],
    }
    settings = load_settings(rendered_config(objects, tmp_path), environ={})
    assert settings.provider("ssh").known_hosts_ref is not None


def test_turning_election_off_is_refused_with_several_replicas(helm: Path, tmp_path: Path) -> None:
    off = ("--set-json", 'config.clusters=[{"name":"default","in_cluster":true,"leader_election":false}]')
    assert "leader_election: false with replicaCount > 1" in refusal(helm, *off)

    objects = render(helm, *off, "--set", "replicaCount=1")
    settings = load_settings(rendered_config(objects, tmp_path), environ={})
    assert not settings.clusters[0].leader_election
    assert not [r for r in by_kind(objects, "Role") if r["metadata"]["name"].endswith("-leases")]


def test_rendered_configuration_is_accepted_by_the_service(helm: Path, tmp_path: Path) -> None:
    objects = render(
        helm,
        "--set",
        "auditWebhook.tls.clientCA.secretName=apiserver-ca",
        "--set-json",
        'config.audit.routes=[{"name":"default","allowed_identities":["kube-apiserver"]}]',
        *targets({"resources": ["configmaps"], "namespaces": ["a"]}),
    )
    path = rendered_config(objects, tmp_path)

    settings = load_settings(path, environ={})

    assert settings.metrics.addr == "0.0.0.0:9464"
    assert settings.audit.addr == "0.0.0.0:9444"
    assert str(settings.audit.tls.cert_file) == "/etc/reverser/audit-tls/tls.crt"
    assert str(settings.audit.tls.client_ca_file) == "/etc/reverser/audit-client-ca/ca.crt"
    assert settings.audit.routes[0].allowed_identities == ["kube-apiserver"]
    assert settings.clusters[0].in_cluster
    assert settings.targets[0].rules[0].resources == ["configmaps"]
    # the default hold covers the retry horizon of the recommended 1 s apiserver backoff
    assert initial_backoff_s(settings) == 1.0
    assert named(objects, "ConfigMap", "-topics")["data"] == named(objects, "ConfigMap", "pipeline")["data"]
    # the operator's own CA: the chart generates neither a client certificate nor the CA
    assert sorted(s["metadata"]["name"] for s in by_kind(objects, "Secret")) == [
        "rp-reverser-pipeline-audit-tls",
        "rp-reverser-pipeline-digest-key",
    ]
    pod = by_kind(objects, "Deployment")[0]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["audit-client-ca"]["secret"] == {
        "secretName": "apiserver-ca",
        "items": [{"key": "ca.crt", "path": "ca.crt"}],
    }


def test_deployment_probes_mounts_and_secrets(helm: Path) -> None:
    objects = render(
        helm,
        "--set",
        "auditWebhook.tls.secretName=audit-tls",
        "--set-json",
        'env=[{"name":"GIT_PASSWORD","valueFrom":{"secretKeyRef":{"name":"git","key":"password"}}}]',
    )
    (deployment,) = by_kind(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == ["run", "--config", "/etc/reverser/config.yaml"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    # a stopped pod leaves the audit Service within about 4 s (docs/deploy.md)
    readiness = container["readinessProbe"]
    assert (readiness["periodSeconds"], readiness["failureThreshold"]) == (2, 2)
    downward = {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert {"name": "POD_NAMESPACE", "valueFrom": downward} in container["env"]
    assert {
        "name": "GIT_PASSWORD",
        "valueFrom": {"secretKeyRef": {"name": "git", "key": "password"}},
    } in container["env"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["audit-tls"]["secret"]["secretName"] == "audit-tls"
    # the pods mount only the client CA of the generated client Secret, never the client's key
    assert volumes["audit-client-ca"]["secret"] == {
        "secretName": "rp-reverser-pipeline-audit-client",
        "items": [{"key": "client-ca.crt", "path": "client-ca.crt"}],
    }
    # a serving certificate of the operator's: the generated client Secret has no kubeconfig for it
    client = named(objects, "Secret", "-audit-client")
    assert sorted(client["data"]) == ["client-ca.crt", "tls.crt", "tls.key"]
    assert "checksum/config" in deployment["spec"]["template"]["metadata"]["annotations"]
    audit_service = named(objects, "Service", "-audit")
    assert audit_service["spec"]["ports"][0]["targetPort"] == "audit-webhook"


async def test_generated_certificates_let_the_apiserver_post_over_mutual_tls(
    helm: Path, tmp_path: Path
) -> None:
    """The default install's Secrets, used as the pod and the apiserver would use them: a real
    ingress serves the generated certificate and admits the generated client certificate only."""
    objects = render(helm)
    serving = {k: base64.b64decode(v) for k, v in named(objects, "Secret", "-audit-tls")["data"].items()}
    client = {k: base64.b64decode(v) for k, v in named(objects, "Secret", "-audit-client")["data"].items()}
    files = tmp_path / "tls"
    files.mkdir()
    for name, data in {**serving, "client-ca.crt": client["client-ca.crt"]}.items():
        (files / name).write_bytes(data)
    config = rendered_config(objects, tmp_path).read_text()
    for in_pod, here in (
        ("/etc/reverser/audit-tls", str(files)),
        ("/etc/reverser/audit-client-ca", str(files)),
        ("0.0.0.0:9444", "127.0.0.1:0"),
    ):
        config = config.replace(in_pod, here)
    config_path = tmp_path / "local.yaml"
    config_path.write_text(config)
    settings = load_settings(config_path, environ={}).model_copy(update={"workdir": tmp_path / "work"})
    assert settings.audit.routes[0].allowed_identities == ["kube-apiserver-audit"]

    kubeconfig = yaml.safe_load(client["webhook-default.kubeconfig"])
    server = kubeconfig["clusters"][0]["cluster"]
    assert server["server"] == "https://rp-reverser-pipeline-audit.reverser.svc:443/audit-webhook/default"
    user = kubeconfig["users"][0]["user"]
    (tmp_path / "ca.pem").write_bytes(base64.b64decode(server["certificate-authority-data"]))
    (tmp_path / "client.crt").write_bytes(base64.b64decode(user["client-certificate-data"]))
    (tmp_path / "client.key").write_bytes(base64.b64decode(user["client-key-data"]))
    cert = x509.load_pem_x509_certificate(serving["tls.crt"])
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "rp-reverser-pipeline-audit.reverser.svc" in names.get_values_for_type(x509.DNSName)

    log = await open_embedded(settings)
    ingress = AuditIngress(settings, log)
    await ingress.start()
    try:
        body = json.dumps(event_list([EVENT])).encode()
        url = f"https://127.0.0.1:{ingress.port}/audit-webhook/default"
        apiserver = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
        apiserver.load_cert_chain(tmp_path / "client.crt", tmp_path / "client.key")
        apiserver.check_hostname = False  # dialled by IP; the name is checked below
        stranger = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
        stranger.check_hostname = False
        async with aiohttp.ClientSession() as http:
            async with http.post(url, data=body, ssl=apiserver) as response:
                assert response.status == 200, await response.text()
            with pytest.raises(aiohttp.ClientError):
                async with http.post(url, data=body, ssl=stranger) as response:
                    await response.read()
        assert len(await read_batches(Running(ingress, log, settings))) == 1  # only the apiserver's
    finally:
        await ingress.stop()
        await log.close()


def test_webhook_needs_a_client_ca_or_tokens(helm: Path, tmp_path: Path) -> None:
    no_ca = ("--set", "auditWebhook.tls.clientCA.generate=false")
    message = refusal(helm, *no_ca)
    assert "/auditWebhook/tls/clientCA/secretName" in message
    assert "missing property 'bearer_tokens_env'" in message

    tokens = ("--set-json", 'config.audit.routes=[{"name":"default","bearer_tokens_env":["AUDIT_TOKEN"]}]')
    objects = render(helm, *no_ca, *tokens)
    settings = load_settings(rendered_config(objects, tmp_path), environ={})
    assert settings.audit.tls.client_ca_file is None
    assert settings.audit.routes[0].bearer_tokens_env == ["AUDIT_TOKEN"]

    one_route_without = (
        "--set-json",
        'config.audit.routes=[{"name":"a","bearer_tokens_env":["T"]},{"name":"b","allowed_identities":["x"]}]',
    )
    assert "anyOf" in refusal(helm, *no_ca, *one_route_without)
    # the operator's CA but no identity on a route: refused, naming the route
    message = refusal(helm, "--set", "auditWebhook.tls.clientCA.secretName=apiserver-ca")
    assert "config.audit.routes default: name the apiserver's client certificate identities" in message
    # no webhook, nothing to authenticate
    render(helm, *no_ca, "--set", "auditWebhook.enabled=false")


def test_network_policy_admits_only_the_webhook_and_metrics_ports(helm: Path) -> None:
    (policy,) = by_kind(render(helm), "NetworkPolicy")
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    webhook, metrics = policy["spec"]["ingress"]
    assert webhook == {"ports": [{"port": "audit-webhook", "protocol": "TCP"}]}
    assert metrics == {"ports": [{"port": "metrics", "protocol": "TCP"}], "from": [{"namespaceSelector": {}}]}

    narrowed = render(
        helm,
        "--set-json",
        'networkPolicy.auditWebhook.from=[{"ipBlock":{"cidr":"10.0.0.0/24"}}]',
        "--set-json",
        'networkPolicy.metrics.from=[{"namespaceSelector":{"matchLabels":{"name":"monitoring"}}}]',
    )
    (policy,) = by_kind(narrowed, "NetworkPolicy")
    webhook, metrics = policy["spec"]["ingress"]
    assert webhook["from"] == [{"ipBlock": {"cidr": "10.0.0.0/24"}}]
    assert metrics["from"] == [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]

    assert not by_kind(render(helm, "--set", "networkPolicy.enabled=false"), "NetworkPolicy")


def test_read_access_is_scoped_to_the_namespaces_the_rules_name(helm: Path) -> None:
    objects = render(
        helm,
        *targets(
            {"resources": ["configmaps", "apps/deployments"], "namespaces": ["team-a", "team-b"]},
            {"resources": ["networking.k8s.io/ingresses"], "namespaces": ["team-b"]},
            {"resources": ["rbac.authorization.k8s.io/clusterroles"]},
            {"resources": ["services"], "cluster_wide": True},
        ),
    )
    watch_roles = [r for r in by_kind(objects, "Role") if r["metadata"]["name"].endswith("-watch")]
    roles = {r["metadata"]["namespace"]: r for r in watch_roles}
    assert sorted(roles) == ["team-a", "team-b"]
    read = ["get", "list", "watch"]
    assert roles["team-a"]["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": read},
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": read},
        {"apiGroups": [""], "resources": ["namespaces"], "resourceNames": ["team-a"], "verbs": ["get"]},
    ]
    assert {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses"], "verbs": read} in roles["team-b"][
        "rules"
    ]
    bindings = [b for b in by_kind(objects, "RoleBinding") if b["metadata"]["name"].endswith("-watch")]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    assert all(b["subjects"][0]["namespace"] == NAMESPACE for b in bindings)

    (cluster_role,) = by_kind(objects, "ClusterRole")
    assert cluster_role["rules"] == [
        {"apiGroups": [""], "resources": ["services"], "verbs": read},
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": read},
    ]
    assert len(by_kind(objects, "ClusterRoleBinding")) == 1


def test_rules_of_remote_clusters_get_no_rbac_here_and_unknown_groups_are_refused(helm: Path) -> None:
    remote = render(
        helm,
        "--set-json",
        'config.clusters=[{"name":"far","kubeconfig":"/k"}]',
        *PROVIDERS,
        "--set-json",
        'config.targets=[{"name":"t","provider":"git","cluster":"far","rules":[{"resources":["configmaps"],"namespaces":["a"]}]}]',
    )
    assert not [r for r in by_kind(remote, "Role") if r["metadata"]["name"].endswith("-watch")]
    assert not by_kind(remote, "ClusterRole")

    message = refusal(helm, *targets({"resources": ["widgets"], "namespaces": ["a"]}))
    assert 'write "widgets" as group/resource' in message


def test_service_monitor_is_optional(helm: Path) -> None:
    objects = render(helm, "--set", "serviceMonitor.enabled=true")
    (monitor,) = by_kind(objects, "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "config.log.bootstrap_servers="], "replicaCount > 1 needs config.log.bootstrap_servers"),
        (["--set", "metrics.port=0"], "/metrics/port"),
        (["--set", "image.pullPolicy=Sometimes"], "/image/pullPolicy"),
        (["--set", "unknownKey=1"], "unknownKey"),
        (["--set", "networkPolicy.metrics.from=x"], "/networkPolicy/metrics/from"),
    ],
)
def test_bad_values_are_refused_with_a_reason(helm: Path, args: list[str], message: str) -> None:
    assert message in refusal(helm, *args)


def test_prometheus_rule_embeds_the_plain_rule_file(helm: Path) -> None:
    assert not by_kind(render(helm), "PrometheusRule")
    objects = render(
        helm, "--set", "prometheusRule.enabled=true", "--set", "prometheusRule.labels.release=kps"
    )
    (rule,) = by_kind(objects, "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kps"
    assert rule["spec"] == yaml.safe_load((CHART / "files" / "prometheus-rules.yaml").read_text())


def test_grafana_dashboard_configmap_carries_the_sidecar_label(helm: Path) -> None:
    def dashboards(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [o for o in by_kind(objects, "ConfigMap") if o["metadata"]["name"].endswith("-dashboard")]

    assert not dashboards(render(helm))
    (config_map,) = dashboards(render(helm, "--set", "grafanaDashboard.enabled=true"))
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads(config_map["data"]["reverser-pipeline.json"])
    assert shipped == json.loads((CHART / "files" / "grafana-dashboard.json").read_text())


def test_cert_manager_issues_the_audit_serving_certificate(helm: Path) -> None:
    objects = render(
        helm,
        "--set",
        "auditWebhook.tls.certManager.enabled=true",
        "--set",
        "auditWebhook.tls.certManager.issuerRef.name=cluster-ca",
        "--set",
        "auditWebhook.tls.certManager.issuerRef.kind=ClusterIssuer",
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
    assert not by_kind(render(helm), "Certificate")


def test_cert_manager_without_an_issuer_is_refused(helm: Path) -> None:
    result = run_helm(
        helm, "template", "rp", str(CHART), "--set", "auditWebhook.tls.certManager.enabled=true"
    )
    assert result.returncode != 0
    assert "certManager.issuerRef.name is required" in result.stderr
