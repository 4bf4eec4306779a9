"""The chart's admission fact source (`admissionWebhook`), rendered by the real helm.

What the apiserver is told to call must be what the pods serve: the same route, the token of the
Secret in the path, the serving certificate's CA, and a webhook that can never block a write.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from pipeline.config import load_settings
from tests.deploy.test_chart import NAMESPACE, by_kind, helm, named, refusal, render, rendered_config

__all__ = ["helm"]

ON = ("--set", "admissionWebhook.enabled=true", "--set", "auditWebhook.tls.clientCA.generate=false")


def _webhook(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (configuration,) = by_kind(objects, "ValidatingWebhookConfiguration")
    (webhook,) = configuration["webhooks"]
    return dict(webhook)


def test_off_by_default(helm: Path) -> None:
    objects = render(helm)
    assert not by_kind(objects, "ValidatingWebhookConfiguration")
    assert not [s for s in by_kind(objects, "Secret") if s["metadata"]["name"].endswith("admission-token")]


def test_on_it_observes_writes_and_can_never_block_them(helm: Path, tmp_path: Path) -> None:
    objects = render(helm, *ON)
    webhook = _webhook(objects)
    assert webhook["failurePolicy"] == "Ignore"
    assert webhook["sideEffects"] == "None"
    assert webhook["admissionReviewVersions"] == ["v1"]
    assert webhook["timeoutSeconds"] == 5
    assert webhook["rules"] == [
        {
            "operations": ["CREATE", "UPDATE", "DELETE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["configmaps"],
        }
    ]
    service = webhook["clientConfig"]["service"]
    assert (service["name"], service["namespace"], service["port"]) == (
        "rp-reverser-pipeline-audit",
        NAMESPACE,
        443,
    )
    # the path's token is the Secret's, which the pods get as the route's token
    token = base64.b64decode(named(objects, "Secret", "admission-token")["data"]["token"]).decode()
    assert len(token) == 48
    assert service["path"] == f"/admission-webhook/default/{token}"
    (deployment,) = by_kind(objects, "Deployment")
    env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["REVERSER_ADMISSION_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "rp-reverser-pipeline-admission-token",
        "key": "token",
    }
    # the apiserver trusts the serving certificate by the CA the chart generated with it
    serving = named(objects, "Secret", "audit-tls")["data"]
    assert webhook["clientConfig"]["caBundle"] == serving["ca.crt"]
    # the configuration the pods read turns the endpoint on and takes the token on that route
    config = rendered_config(objects, tmp_path)
    settings = load_settings(config)
    assert settings.audit.admission.enabled
    assert settings.audit.tls.client_ca_file is None
    [route] = settings.audit.routes
    assert route.bearer_tokens_env == ["REVERSER_ADMISSION_TOKEN"]


def test_with_custom_resources_it_also_observes_commit_request_creates(helm: Path) -> None:
    # the fact of a CommitRequest's create names its submitter (docs/custom-resources.md)
    webhook = _webhook(render(helm, *ON, "--set-json", 'config.custom_resources={"enabled":true}'))
    assert webhook["rules"][-1] == {
        "operations": ["CREATE"],
        "apiGroups": ["configbutler.ai"],
        "apiVersions": ["v1alpha3"],
        "resources": ["commitrequests"],
    }
    assert len(webhook["rules"]) == 2


def test_cert_manager_injects_the_ca_and_an_own_certificate_needs_its_ca(helm: Path) -> None:
    managed = (
        "--set",
        "auditWebhook.tls.certManager.enabled=true",
        "--set",
        "auditWebhook.tls.certManager.issuerRef.name=ca",
    )
    objects = render(helm, *ON, *managed)
    (configuration,) = by_kind(objects, "ValidatingWebhookConfiguration")
    assert configuration["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": f"{NAMESPACE}/rp-reverser-pipeline-audit"
    }
    assert "caBundle" not in _webhook(objects)["clientConfig"]
    own = ("--set", "auditWebhook.tls.secretName=my-tls")
    assert "admissionWebhook.caBundle" in refusal(helm, *ON, *own)
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    objects = render(helm, *ON, *own, "--set-string", f"admissionWebhook.caBundle={pem}")
    assert base64.b64decode(_webhook(objects)["clientConfig"]["caBundle"]).decode() == pem


def test_what_could_not_work_is_refused_by_name(helm: Path) -> None:
    # a listener demanding client certificates refuses every review: the apiserver sends none
    assert "auditWebhook.tls.clientCA.generate: false" in refusal(
        helm, "--set", "admissionWebhook.enabled=true"
    )
    assert "needs auditWebhook.enabled" in refusal(helm, *ON, "--set", "auditWebhook.enabled=false")
    assert "admissionWebhook.route prod is not one of config.audit.routes (default)" in refusal(
        helm, *ON, "--set", "admissionWebhook.route=prod"
    )
    assert "admissionWebhook.rules" in refusal(helm, *ON, "--set-json", "admissionWebhook.rules=[]")
    assert "additional properties 'operations' not allowed" in refusal(
        helm,
        *ON,
        "--set-json",
        'admissionWebhook.rules=[{"apiGroups":[""],"apiVersions":["v1"],"resources":["pods"],"operations":["CONNECT"]}]',
    )
