"""A ClusterProvider's `Validated` condition, as gitops-reverser writes it: `InCluster` without a
kubeConfig, `Validated` for a usable Secret, GR's `KubeConfig...` reasons otherwise (Ready False
and Stalled True with them), `Unknown` for a Secret the API server would not give. The Secrets are
read from the watch-protocol test server over real HTTP (kube-apiserver cannot run in `make test`;
tests/e2e/test_remote_cluster_providers.py reads them from the real one)."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest

from pipeline.config import ClusterSettings
from pipeline.customresources.compile import ObjectReport, compile_resources
from pipeline.customresources.objects import CustomResource, Kind, ObjectRef
from pipeline.customresources.problems import FieldProblem
from pipeline.customresources.providervalidation import Validation, validate_providers
from pipeline.customresources.status import Observed, StatusWriter, cluster_provider_status
from pipeline.kube.client import KubeClient, open_client
from tests.customresources.test_attribution_mode import RecordingClient
from tests.watch.kube_server import FakeKubeApiServer, running_server

HOME = "reverser"
TOKEN = "s3cr3t-remote-token"


@pytest.fixture
async def kube() -> AsyncIterator[FakeKubeApiServer]:
    async with running_server() as server:
        yield server


def _provider(name: str, **spec: Any) -> CustomResource:
    return CustomResource(ObjectRef(Kind.CLUSTER_PROVIDER, "", name), spec, generation=3)


def _kubeconfig(**user: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "prod", "cluster": {"server": "https://prod.example:6443"}}],
        "users": [{"name": "mirror", "user": user or {"token": TOKEN}}],
        "contexts": [{"name": "prod", "context": {"cluster": "prod", "user": "mirror"}}],
        "current-context": "prod",
    }


def _secret(kube: FakeKubeApiServer, name: str, data: dict[str, Any]) -> None:
    encoded = {key: base64.b64encode(json.dumps(value).encode()).decode() for key, value in data.items()}
    kube.put(
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"namespace": HOME, "name": name}, "data": encoded}
    )


def _remote(name: str, secret: str, key: str | None = None) -> CustomResource:
    ref = {"name": secret, **({"key": key} if key else {})}
    return _provider(name, allowedNamespaces={"names": ["team-a"]}, kubeConfig={"secretRef": ref})


async def _validate(
    kube: FakeKubeApiServer, tmp_path: Path, *providers: CustomResource
) -> dict[str, Validation]:
    client = await open_client(ClusterSettings(name="home", kubeconfig=kube.kubeconfig(tmp_path)))
    try:
        return await validate_providers(client, providers, HOME)
    finally:
        await client.close()


async def test_each_provider_gets_gitops_reversers_reason(kube: FakeKubeApiServer, tmp_path: Path) -> None:
    _secret(kube, "good", {"value": _kubeconfig()})
    _secret(kube, "named", {"config": _kubeconfig()})
    _secret(kube, "wrong-key", {"kubeconfig": _kubeconfig()})
    _secret(kube, "exec", {"value": _kubeconfig(exec={"command": "aws"})})
    _secret(kube, "files", {"value": _kubeconfig(tokenFile="/var/run/secrets/token")})
    found = await _validate(
        kube,
        tmp_path,
        _provider("default", allowedNamespaces={"names": ["team-a"]}),
        _remote("good", "good"),
        _remote("named", "named", key="config"),
        _remote("missing", "absent"),
        _remote("wrong-key", "wrong-key"),
        _remote("exec", "exec"),
        _remote("files", "files"),
        _provider("configmap", kubeConfig={"configMapRef": {"name": "x"}}),
    )
    shown = {name: (v.status, v.reason) for name, v in found.items()}
    assert shown == {
        "default": ("True", "InCluster"),
        "good": ("True", "Validated"),
        "named": ("True", "Validated"),
        "missing": ("False", "KubeConfigSecretNotFound"),
        "wrong-key": ("False", "KubeConfigKeyNotFound"),
        "exec": ("False", "KubeConfigExecNotAllowed"),
        "files": ("False", "KubeConfigFileReferenceNotAllowed"),
        "configmap": ("False", "KubeConfigInvalid"),
    }
    assert found["good"].message == "kubeconfig Secret reverser/good validated"
    assert found["missing"].message == "Secret reverser/absent does not exist"
    assert all(TOKEN not in v.message for v in found.values())


async def test_a_secret_the_server_will_not_give_is_unknown(kube: FakeKubeApiServer, tmp_path: Path) -> None:
    _secret(kube, "good", {"value": _kubeconfig()})
    kube.tokens = {"someone-else"}  # the controller's own credentials are refused
    client = await open_client(ClusterSettings(name="home", kubeconfig=kube.kubeconfig(tmp_path)))
    try:
        found = await validate_providers(client, [_remote("good", "good")], HOME)
    finally:
        await client.close()
    assert (found["good"].status, found["good"].reason) == ("Unknown", "KubeConfigSecretUnreadable")


def _conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_a_failed_validation_stalls_the_provider() -> None:
    report = ObjectReport(ObjectRef(Kind.CLUSTER_PROVIDER, "", "prod"), 3)
    failed = Validation(
        "False", "KubeConfigExecNotAllowed", "Secret reverser/prod key value: user 'm' sets exec"
    )
    status = cluster_provider_status(report, failed)
    assert _conditions(status) == {
        "Ready": ("False", "KubeConfigExecNotAllowed"),
        "Reconciling": ("False", "Published"),
        "Stalled": ("True", "KubeConfigExecNotAllowed"),
        "Validated": ("False", "KubeConfigExecNotAllowed"),
    }
    assert all(c["observedGeneration"] == 3 for c in status["conditions"])
    assert status["conditions"][0]["message"] == failed.message


@pytest.mark.parametrize(
    ("validation", "ready", "validated"),
    [
        (Validation("True", "Validated", "kubeconfig Secret reverser/prod validated"), "True", "True"),
        (Validation("True", "InCluster", "no spec.kubeConfig"), "True", "True"),
        (None, "True", "Unknown"),
        (Validation("Unknown", "KubeConfigSecretUnreadable", "forbidden"), "False", "Unknown"),
    ],
)
def test_a_usable_or_unread_secret_does_not_stall(
    validation: Validation | None, ready: str, validated: str
) -> None:
    report = ObjectReport(ObjectRef(Kind.CLUSTER_PROVIDER, "", "prod"), 1)
    conditions = _conditions(cluster_provider_status(report, validation))
    assert conditions["Ready"][0] == ready
    assert conditions["Stalled"][0] == "False"
    assert conditions["Validated"][0] == validated


def test_a_refused_kubeconfig_field_is_validated_false() -> None:
    report = ObjectReport(
        ObjectRef(Kind.CLUSTER_PROVIDER, "", "home"),
        1,
        errors=[FieldProblem("spec.kubeConfig", "cluster home is where the custom resources are read from")],
    )
    conditions = _conditions(cluster_provider_status(report, Validation("True", "Validated", "ok")))
    assert conditions["Validated"] == ("False", "KubeConfigInvalid")
    assert conditions["Ready"] == ("False", "Invalid")
    assert conditions["Stalled"] == ("True", "Invalid")


async def test_the_status_writer_writes_validated_on_cluster_providers_only() -> None:
    objects = [
        _provider("default", allowedNamespaces={"names": ["team-a"]}),
        _remote("prod", "prod-kubeconfig"),
    ]
    compiled = compile_resources(objects, home_namespace=HOME)
    client = RecordingClient()
    writer = StatusWriter(cast(KubeClient, client))
    failed = Validation("False", "KubeConfigSecretNotFound", "Secret reverser/prod-kubeconfig does not exist")
    validations = {"default": Validation("True", "InCluster", "in cluster"), "prod": failed}
    await writer.write(compiled, {}, HOME, Observed(validations=validations))
    statuses = {path.split("/")[-2]: body["status"] for path, body in client.patches}
    assert _conditions(statuses["default"])["Validated"] == ("True", "InCluster")
    assert _conditions(statuses["prod"])["Validated"] == ("False", "KubeConfigSecretNotFound")
    assert _conditions(statuses["prod"])["Ready"] == ("False", "KubeConfigSecretNotFound")
    # a changed answer is written again, an unchanged one is not
    patched = await writer.write(compiled, {}, HOME, Observed(validations=validations))
    assert patched == 0
    healed = {**validations, "prod": Validation("True", "Validated", "kubeconfig Secret validated")}
    assert await writer.write(compiled, {}, HOME, Observed(validations=healed)) == 1
