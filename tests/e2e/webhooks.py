"""The admission webhook configuration the tests register: the chart's, for the types they write."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

#: As the chart registers it (admissionWebhook.timeoutSeconds): a review the replica does not answer
#: in time is let through with no fact (failurePolicy Ignore).
ADMISSION_TIMEOUT_S = 5

#: The workloads' types: every write of a ConfigMap or Deployment (and a Deployment's scale).
WORKLOAD_RULES: tuple[dict[str, Any], ...] = (
    {
        "operations": ["CREATE", "UPDATE", "DELETE"],
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "resources": ["configmaps"],
    },
    {
        "operations": ["CREATE", "UPDATE", "DELETE"],
        "apiGroups": ["apps"],
        "apiVersions": ["v1"],
        "resources": ["deployments", "deployments/scale"],
    },
)


def admission_webhook(
    url: str,
    ca_bundle: bytes,
    rules: Sequence[dict[str, Any]] = WORKLOAD_RULES,
    timeout_s: int = ADMISSION_TIMEOUT_S,
) -> dict[str, Any]:
    """The ValidatingWebhookConfiguration the chart makes: the writes `rules` name reviewed, each
    allowed whatever happens."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "reverser-facts"},
        "webhooks": [
            {
                "name": "facts.reverser.invalid",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Ignore",
                "matchPolicy": "Equivalent",
                "timeoutSeconds": timeout_s,
                "clientConfig": {"url": url, "caBundle": base64.b64encode(ca_bundle).decode()},
                "rules": list(rules),
            }
        ],
    }
