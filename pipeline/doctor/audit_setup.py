"""What a cluster admin gives each kube-apiserver so its audit webhook posts to this service:
the audit policy, one webhook kubeconfig per route, and the flags (`reverser doctor --audit-setup`).

The policy logs the mutating verbs at RequestResponse because the ingress needs the request and
response bodies to name the object and its resourceVersion; reads, the apiserver's own writes and
lease/event chatter are left out, which is what keeps the webhook's volume small.
"""

from __future__ import annotations

import math
from pathlib import Path

import yaml
from pydantic import BaseModel

from pipeline.config import AuditRoute, Settings

__all__ = [
    "AUDIT_POLICY",
    "AuditSetup",
    "RouteSetup",
    "apiserver_flags",
    "audit_setup",
    "batch_max_wait_s",
    "initial_backoff_s",
    "render_setup",
    "route_url",
    "webhook_kubeconfig",
]

MUTATING_VERBS = ("create", "update", "patch", "delete", "deletecollection")
AUDIT_POLICY: dict[str, object] = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted"],
    "omitManagedFields": True,
    "rules": [
        {"level": "None", "users": ["system:apiserver"]},
        {
            "level": "None",
            "resources": [
                {"group": "coordination.k8s.io", "resources": ["leases"]},
                {"group": "", "resources": ["events"]},
                {"group": "events.k8s.io", "resources": ["events"]},
            ],
        },
        {"level": "RequestResponse", "verbs": list(MUTATING_VERBS)},
        {"level": "None"},
    ],
}
DEFAULT_CA_FILE = "/etc/kubernetes/reverser/ca.crt"
DEFAULT_CLIENT_CERT = "/etc/kubernetes/reverser/client.crt"
DEFAULT_CLIENT_KEY = "/etc/kubernetes/reverser/client.key"
POLICY_PATH = "/etc/kubernetes/reverser/audit-policy.yaml"
# The apiserver's default batch wait is 30 s; the resolver waits at most grace_ms for a fact, so the
# batch must arrive well within the grace window or events resolve before their facts are in.
MAX_BATCH_WAIT_S = 1.0
# The apiserver retries a failed batch 4 times (k8s.io/apiserver/pkg/util/webhook,
# DefaultRetryBackoffWithInitialDelay: x1.5 per wait, up to 20 % jitter): its waits add up to
# (1 + 1.5 + 2.25 + 3.375) x 1.2 = 9.75 initial backoffs. Its default backoff (10 s) makes that
# about 100 s, far beyond any attribution hold; 1 s keeps it near 10 s.
RETRY_WAITS_PER_INITIAL_BACKOFF = 9.75
MAX_INITIAL_BACKOFF_S = 1.0
MIN_INITIAL_BACKOFF_S = 0.1


class RouteSetup(BaseModel):
    route: str
    url: str
    kubeconfig_path: str
    kubeconfig: str
    flags: list[str]


class AuditSetup(BaseModel):
    policy_path: str
    policy: str
    routes: list[RouteSetup]


def route_url(base_url: str, route: str) -> str:
    return f"{base_url.rstrip('/')}/audit-webhook/{route}"


def batch_max_wait_s(settings: Settings) -> float:
    """At most a third of the grace window, and never above one second."""
    return max(0.1, min(MAX_BATCH_WAIT_S, settings.attribution.grace_ms / 3000))


def initial_backoff_s(settings: Settings) -> float:
    """The apiserver's first retry wait, chosen so that its whole retry horizon (every wait of a
    batch's retries plus one batch wait) ends within the attribution hold (`max_wait_ms`): a batch
    retried later than that explains a change already committed without an author. At most 1 s,
    at least 0.1 s, in tenths."""
    budget_s = settings.attribution.max_wait_ms / 1000 - batch_max_wait_s(settings)
    fitting = math.floor(budget_s / RETRY_WAITS_PER_INITIAL_BACKOFF * 10) / 10
    return max(MIN_INITIAL_BACKOFF_S, min(MAX_INITIAL_BACKOFF_S, fitting))


def webhook_kubeconfig(route: AuditRoute, url: str, ca_file: str) -> str:
    """The kubeconfig of `--audit-webhook-config-file` for one route.

    A route with bearer tokens gets a token placeholder naming the variable; otherwise a client
    certificate whose CN or SAN must be in `allowed_identities` (when that list is set).
    """
    user: dict[str, str]
    if route.bearer_tokens_env:
        user = {"token": f"<the value of {route.bearer_tokens_env[0]}>"}
    else:
        user = {"client-certificate": DEFAULT_CLIENT_CERT, "client-key": DEFAULT_CLIENT_KEY}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "reverser", "cluster": {"server": url, "certificate-authority": ca_file}}],
        "users": [{"name": "kube-apiserver", "user": user}],
        "contexts": [{"name": "default", "context": {"cluster": "reverser", "user": "kube-apiserver"}}],
        "current-context": "default",
    }
    text = yaml.safe_dump(config, sort_keys=False)
    if not route.bearer_tokens_env and route.allowed_identities:
        allowed = ", ".join(route.allowed_identities)
        text = f"# the client certificate's CN or a SAN must be one of: {allowed}\n" + text
    return text


def apiserver_flags(settings: Settings, kubeconfig_path: str, policy_path: str = POLICY_PATH) -> list[str]:
    return [
        f"--audit-policy-file={policy_path}",
        f"--audit-webhook-config-file={kubeconfig_path}",
        "--audit-webhook-mode=batch",
        f"--audit-webhook-batch-max-wait={batch_max_wait_s(settings):g}s",
        f"--audit-webhook-initial-backoff={initial_backoff_s(settings):g}s",
    ]


def audit_setup(settings: Settings, base_url: str, ca_file: str = DEFAULT_CA_FILE) -> AuditSetup:
    """Policy, kubeconfig and flags for every configured audit route."""
    routes = []
    for route in settings.audit.routes:
        path = str(Path("/etc/kubernetes/reverser") / f"audit-webhook-{route.name}.kubeconfig")
        url = route_url(base_url, route.name)
        routes.append(
            RouteSetup(
                route=route.name,
                url=url,
                kubeconfig_path=path,
                kubeconfig=webhook_kubeconfig(route, url, ca_file),
                flags=apiserver_flags(settings, path),
            )
        )
    return AuditSetup(
        policy_path=POLICY_PATH, policy=yaml.safe_dump(AUDIT_POLICY, sort_keys=False), routes=routes
    )


def render_setup(setup: AuditSetup, settings: Settings) -> str:
    """Human form: the policy, then per route the kubeconfig and the flags, each under a heading."""
    clusters = {c.route: c.name for c in settings.clusters}
    parts = [f"# {setup.policy_path} (the same on every apiserver)", setup.policy]
    for route in setup.routes:
        who = f" (cluster {clusters[route.route]})" if route.route in clusters else ""
        parts += [
            f"# {route.kubeconfig_path}: route {route.route}{who}, posts to {route.url}",
            route.kubeconfig,
            f"# kube-apiserver flags for route {route.route}",
            " \\\n".join(route.flags),
            "",
        ]
    return "\n".join(parts)
