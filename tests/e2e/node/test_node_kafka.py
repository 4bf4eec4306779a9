"""The chart as a user runs it: 3 replicas, a real Kafka, the audit webhook, a Git remote, a real node.

The suite starts the project's KRaft broker (tests/integration/kafka) on the host at the CNI
bridge's address and advertises that address, so the pods reach it over the bridge; the Git
remote is a smart-HTTP server (`git http-backend`, basic auth) on the same address, its password
in a Secret the pods read through `env`. After `helm install --wait`, kube-apiserver is restarted
with the audit webhook kubeconfig the chart generated (its Secret `<release>-audit-client`), with
one change: there is no cluster DNS, so the server is the audit Service's ClusterIP (reached from
the host through kube-proxy's rules) and `tls-server-name` keeps the certificate check on the
Service's DNS name, the name the chart put in the serving certificate.

People's changes are ConfigMaps created as alice or bob (impersonation: the audit event names
them). Every check compares what the remote holds with the list of changes made: one commit per
change, authored by whoever made it, none lost, none twice, none extra. The module runs in order:
install and attribution, `helm test`, the PodDisruptionBudget, the Lease's RBAC, deletion of the
watch leader and a rolling `helm upgrade` with changes before, during and after, a liveness
restart, readiness following /readyz while the broker is down, and `helm test` failing for a
release with no pods. `kubectl` is not built here: the same API calls go through REST.
"""

from __future__ import annotations

import base64
import http.client
import itertools
import json
import os
import secrets
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.commit.httpgit import GitHttpServer
from tests.deploy.helm import CHART
from tests.e2e.cluster.controlplane import AUDIT_POLICY
from tests.e2e.gitremote import GitRemote
from tests.e2e.node.node import BRIDGE_IP, Node
from tests.integration.kafka.broker import KafkaBroker

pytestmark = [pytest.mark.e2e, pytest.mark.node]

RELEASE = "rp"
NAMESPACE = "reverser"
APPS = "apps"
FULLNAME = f"{RELEASE}-reverser-pipeline"
SERVICE_ACCOUNT = f"system:serviceaccount:{NAMESPACE}:{FULLNAME}"
LEASE = "reverser-watch-default"
SELECTOR = f"app.kubernetes.io/name=reverser-pipeline,app.kubernetes.io/instance={RELEASE}"
REPLICAS = 3
USERS = ("alice", "bob")
GIT_USER = "reverser"
WAIT_S = 240.0
# Changes made while a pod goes away come this often, so several land in every phase of it.
CHANGE_EVERY_S = 0.4
CHANGE_PREFIX = "change-"
EMPTY_EVENTS = json.dumps({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": []})


@dataclass
class Changes:
    """Every change made, in order: (ConfigMap name, the user who created it)."""

    node: Node
    made: list[tuple[str, str]] = field(default_factory=list)
    _counter: Iterator[int] = field(default_factory=itertools.count)

    def make(self) -> None:
        index = next(self._counter)
        name, user = f"{CHANGE_PREFIX}{index:04d}", USERS[index % len(USERS)]
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name},
            "data": {"i": str(index)},
        }
        self.node.api("POST", f"/api/v1/namespaces/{APPS}/configmaps", body, as_user=user)
        self.made.append((name, user))

    def make_many(self, count: int) -> None:
        for _ in range(count):
            self.make()


class Background:
    """Makes changes every CHANGE_EVERY_S on a thread until stopped (the "during" of a disruption)."""

    def __init__(self, changes: Changes) -> None:
        self.changes = changes
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(CHANGE_EVERY_S):
            try:
                self.changes.make()
            except (OSError, urllib.error.HTTPError) as exc:  # the apiserver refused: a test failure
                self.errors.append(exc)
                return

    def __enter__(self) -> Background:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        assert not self.errors, f"making changes failed: {self.errors}"


def configmap_of(path: str) -> str | None:
    """The name of a changed ConfigMap's file (whatever prefix the layout gives it), or None.

    Only the tests' own: the namespace's kube-root-ca.crt is mirrored too, by the first sync.
    """
    marker = f"{APPS}/configmaps/{CHANGE_PREFIX}"
    if marker not in path or not path.endswith(".yaml"):
        return None
    return path.rsplit("/", 1)[1].removesuffix(".yaml")


def history(remote: GitRemote) -> list[tuple[str, str, tuple[str, ...]]]:
    """(author, author email, ConfigMaps touched) of every pushed commit that touches a ConfigMap."""
    rows = []
    for commit in remote.commits():
        touched = tuple(n for n in (configmap_of(p) for _, p in commit.changes) if n is not None)
        if touched:
            rows.append((commit.author_name, commit.author_email, touched))
    return rows


def assert_mirrored(remote: GitRemote, changes: Changes) -> None:
    """Wait for every change, then: one commit each, its author, nothing lost, twice or extra."""
    expected = {name for name, _ in changes.made}

    def all_there(r: GitRemote) -> bool:
        return expected <= {n for _, _, touched in history(r) for n in touched}

    remote.wait_for(all_there, WAIT_S, f"{len(expected)} changes committed")
    rows = history(remote)
    assert all(len(touched) == 1 for _, _, touched in rows), [r for r in rows if len(r[2]) != 1]
    committed = [(touched[0], author) for author, _, touched in rows]
    assert sorted(committed) == sorted(changes.made), {
        "lost": sorted(set(changes.made) - set(committed)),
        "extra or misattributed": sorted(set(committed) - set(changes.made)),
        "twice": sorted({c for c in committed if committed.count(c) > 1}),
    }
    emails = {email for _, email, _ in rows}
    assert emails == {f"{user}@noreply.cluster.local" for user in {u for _, u in changes.made}}


def pods(node: Node) -> list[dict[str, Any]]:
    """The service's pods (the selector of the Deployment, Services and PodDisruptionBudget)."""
    items: list[dict[str, Any]] = node.api(
        "GET", f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={SELECTOR}"
    )["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def is_ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def wait_replicas_ready(node: Node, *, not_uids: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """Wait for REPLICAS Ready pods, none of them one of `not_uids`; returns them."""

    def settled() -> bool:
        current = pods(node)
        return (
            len(current) == REPLICAS
            and all(is_ready(p) for p in current)
            and not {p["metadata"]["uid"] for p in current} & not_uids
        )

    node.wait_for(f"{REPLICAS} Ready pods", settled, WAIT_S)
    return pods(node)


def lease_holder(node: Node) -> str:
    lease = node.api("GET", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{LEASE}")
    return str(lease.get("spec", {}).get("holderIdentity") or "")


def leader_pod(node: Node) -> str:
    """The pod holding the watch Lease (its identity is `<pod name>-<pid>-<random>`)."""
    holder = lease_holder(node)
    for pod in pods(node):
        if holder.startswith(pod["metadata"]["name"] + "-"):
            return str(pod["metadata"]["name"])
    return ""


def helm_run(helm: Path, node: Node, *args: str, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm), *args, "--namespace", NAMESPACE],
        capture_output=True, text=True, timeout=timeout_s, check=False,
        env={**os.environ, "KUBECONFIG": str(node.kubeconfig), "HELM_CACHE_HOME": str(node.workdir / "helm")},
    )  # fmt: skip


def call(
    node: Node, method: str, path: str, body: dict[str, Any] | None = None, *, as_user: str | None = None
) -> int:
    """The HTTP status of one API request (200 for any success)."""
    try:
        node.api(method, path, body, as_user=as_user)
    except urllib.error.HTTPError as exc:
        return exc.code
    return 200


# --- the release -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kafka(node: Node) -> Iterator[KafkaBroker]:
    """The KRaft broker on the host, listening on and advertising the bridge address."""
    broker = KafkaBroker(node.workdir / "kafka", host=BRIDGE_IP)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def remote(node: Node) -> Iterator[tuple[GitRemote, str, str]]:
    """(the bare remote, its smart-HTTP URL, the password) served on the bridge address."""
    root = node.workdir / "git"
    root.mkdir()
    bare = GitRemote(root / "mirror.git")
    password = secrets.token_urlsafe(24)
    with GitHttpServer(root, GIT_USER, password, host=BRIDGE_IP) as server:
        yield bare, f"{server.base_url}/mirror.git", password


@dataclass
class Release:
    changes: Changes
    remote: GitRemote
    values: Path


def _namespace(node: Node, name: str) -> None:
    node.api(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )


def _grant_users(node: Node) -> None:
    node.api(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "people-edit"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": u} for u in USERS],
        },
    )


def _point_audit_webhook_at_the_service(node: Node) -> None:
    """The chart's generated webhook kubeconfig, at the Service's ClusterIP, into kube-apiserver."""
    secret = node.api("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/{FULLNAME}-audit-client")
    kubeconfig = yaml.safe_load(base64.b64decode(secret["data"]["webhook-default.kubeconfig"]))
    service = node.api("GET", f"/api/v1/namespaces/{NAMESPACE}/services/{FULLNAME}-audit")
    (cluster,) = kubeconfig["clusters"]
    dns_name = f"{FULLNAME}-audit.{NAMESPACE}.svc"
    assert cluster["cluster"]["server"] == f"https://{dns_name}:443/audit-webhook/default"
    cluster["cluster"]["server"] = f"https://{service['spec']['clusterIP']}:443/audit-webhook/default"
    cluster["cluster"]["tls-server-name"] = dns_name
    path = node.workdir / "audit-webhook.kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig))
    path.chmod(0o600)
    policy = node.workdir / "audit-policy.yaml"
    policy.write_text(AUDIT_POLICY)
    node.restart_apiserver(
        [
            f"--audit-policy-file={policy}", f"--audit-webhook-config-file={path}",
            "--audit-webhook-mode=batch", "--audit-webhook-batch-max-wait=1s",
            "--audit-webhook-initial-backoff=1s", "--audit-webhook-version=audit.k8s.io/v1",
        ]
    )  # fmt: skip


@pytest.fixture(scope="module")
def release(
    node: Node, helm: Path, image_ref: str, kafka: KafkaBroker, remote: tuple[GitRemote, str, str]
) -> Release:
    bare, url, password = remote
    for name in (NAMESPACE, APPS):
        _namespace(node, name)
    _grant_users(node)
    node.api(
        "POST",
        f"/api/v1/namespaces/{NAMESPACE}/secrets",
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "git-credentials"},
         "stringData": {"username": GIT_USER, "password": password}},
    )  # fmt: skip
    repository, tag = image_ref.rsplit(":", 1)
    values = {
        "replicaCount": REPLICAS,
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        # Long enough for a clean stop, short enough that the liveness restart below stays quick.
        "terminationGracePeriodSeconds": 20,
        "config": {
            "log": {"bootstrap_servers": kafka.bootstrap},
            "attribution": {"grace_ms": 1000, "max_wait_ms": 15000},
            "providers": [
                {"name": "http", "url": url, "default_branch": "main", "username_env": "GIT_USERNAME",
                 "password_env": "GIT_PASSWORD", "allow_plain_http_credentials": True,
                 "commit_window_s": 0, "push_cooldown_s": 0.5},
            ],
            "targets": [
                {"name": "t", "provider": "http", "branch": "main", "cluster": "default",
                 "rules": [{"resources": ["configmaps"], "namespaces": [APPS]}]},
            ],
        },
        "env": [
            {"name": f"GIT_{key.upper()}", "valueFrom": {"secretKeyRef": {"name": "git-credentials",
                                                                          "key": key}}}
            for key in ("username", "password")
        ],
    }  # fmt: skip
    values_file = node.workdir / "values-kafka.yaml"
    values_file.write_text(json.dumps(values))
    installed = helm_run(
        helm, node, "install", RELEASE, str(CHART), "-f", str(values_file), "--wait", "--timeout", "8m"
    )
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-3000:]
    _point_audit_webhook_at_the_service(node)
    return Release(Changes(node), bare, values_file)


# --- the tests ---------------------------------------------------------------------------------


def test_three_replicas_on_kafka_commit_peoples_changes_attributed(node: Node, release: Release) -> None:
    running = wait_replicas_ready(node)
    for pod in running:
        (container,) = pod["spec"]["containers"]
        assert container["imagePullPolicy"] == "Never"
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert leader_pod(node), f"no pod holds the Lease: {lease_holder(node)!r}"
    release.changes.make_many(4)
    assert_mirrored(release.remote, release.changes)


def test_helm_test_passes_through_the_services(node: Node, helm: Path, release: Release) -> None:
    result = helm_run(helm, node, "test", RELEASE, "--logs", "--timeout", "3m")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "the release answers through its Services" in result.stdout


def test_the_audit_service_takes_only_the_apiservers_certificate_for_its_dns_name(
    node: Node, release: Release
) -> None:
    """From the host through the ClusterIP, as the apiserver connects: the generated client
    certificate is accepted, no certificate is refused, and the serving certificate holds the
    Service's DNS name and no other."""
    secret = node.api("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/{FULLNAME}-audit-client")
    directory = node.workdir / "audit-client"
    directory.mkdir(exist_ok=True)
    for key in ("ca.crt", "tls.crt", "tls.key"):
        (directory / key).write_bytes(base64.b64decode(secret["data"][key]))
    address = node.api("GET", f"/api/v1/namespaces/{NAMESPACE}/services/{FULLNAME}-audit")["spec"][
        "clusterIP"
    ]
    dns_name = f"{FULLNAME}-audit.{NAMESPACE}.svc"

    def post(*, client_certificate: bool, name: str = dns_name) -> int | str:
        """The status of an empty EventList posted to the route, or the TLS/connection error."""
        context = ssl.create_default_context(cafile=str(directory / "ca.crt"))
        if client_certificate:
            context.load_cert_chain(str(directory / "tls.crt"), str(directory / "tls.key"))
        connection = http.client.HTTPConnection(name, 443, timeout=15)
        try:
            connection.sock = context.wrap_socket(
                socket.create_connection((address, 443), timeout=15), server_hostname=name
            )
            connection.request(
                "POST", "/audit-webhook/default", EMPTY_EVENTS, {"Content-Type": "application/json"}
            )
            return connection.getresponse().status
        except (ssl.SSLError, ConnectionError) as exc:
            return type(exc).__name__
        finally:
            connection.close()

    assert post(client_certificate=True) == 200
    refused = post(client_certificate=False)
    # Refused in the TLS handshake (the ingress requires the certificate), whatever error the
    # client library names for the closed connection; never an HTTP answer.
    assert isinstance(refused, str), refused
    assert post(client_certificate=True, name=f"{FULLNAME}-audit.elsewhere.svc") == "SSLCertVerificationError"


def test_the_pdb_selects_only_the_service_pods_and_refuses_a_second_eviction(
    node: Node, release: Release
) -> None:
    pdb = node.api("GET", f"/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets/{FULLNAME}")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert "minAvailable" not in pdb["spec"]
    selected = ",".join(f"{k}={v}" for k, v in pdb["spec"]["selector"]["matchLabels"].items())
    matched = node.api("GET", f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={selected}")["items"]
    every = node.api("GET", f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
    owned = {
        p["metadata"]["name"]
        for p in every
        if any(o["kind"] == "ReplicaSet" for o in p["metadata"].get("ownerReferences", []))
        and not p["metadata"].get("deletionTimestamp")
    }
    others = {p["metadata"]["name"] for p in every} - owned
    assert others, "the test and topics pods should be there to be left out"
    assert {p["metadata"]["name"] for p in matched if not p["metadata"].get("deletionTimestamp")} == owned

    def budget_of_one() -> bool:
        status = node.api("GET", f"/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets/{FULLNAME}")
        return bool(status.get("status", {}).get("disruptionsAllowed") == 1)

    node.wait_for("the PDB allows one disruption", budget_of_one, WAIT_S)
    first, second, *_ = sorted(owned)
    before = {p["metadata"]["uid"] for p in pods(node)}

    def evict(name: str) -> int:
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": NAMESPACE},
        }
        return call(node, "POST", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/eviction", body)

    assert evict(first) in (200, 201)
    assert evict(second) == 429, "a second eviction while one pod is disrupted broke the budget"
    after = wait_replicas_ready(node)
    assert len({p["metadata"]["uid"] for p in after} - before) == 1
    release.changes.make_many(2)
    assert_mirrored(release.remote, release.changes)


def test_the_lease_is_taken_under_the_charts_role_and_refused_without_it(
    node: Node, release: Release
) -> None:
    lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{LEASE}"
    lease = node.api("GET", lease_path)
    assert leader_pod(node), lease

    def dry_run_update(user: str) -> int:
        """A dry-run update as `user`; the holder renews the Lease every few seconds, so a
        conflict (409: renewed since it was read) is read again and retried."""
        for _ in range(10):
            current = node.api("GET", lease_path)
            status = call(node, "PUT", f"{lease_path}?dryRun=All", current, as_user=user)
            if status != 409:
                return status
        return 409

    node.api(
        "POST",
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "outsider"}},
    )
    outsider = f"system:serviceaccount:{NAMESPACE}:outsider"
    assert call(node, "GET", lease_path, as_user=SERVICE_ACCOUNT) == 200
    assert dry_run_update(SERVICE_ACCOUNT) == 200
    assert call(node, "GET", lease_path, as_user=outsider) == 403
    assert dry_run_update(outsider) == 403
    other = {**lease, "metadata": {"name": "someone-elses", "namespace": NAMESPACE}}
    # `create` cannot be limited by name, but every other verb is: another Lease stays out of reach.
    assert call(node, "POST", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases?dryRun=All",
                other, as_user=SERVICE_ACCOUNT) == 200  # fmt: skip
    assert call(node, "GET", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/someone-elses",
                as_user=SERVICE_ACCOUNT) == 403  # fmt: skip
    assert call(node, "GET", f"/apis/coordination.k8s.io/v1/namespaces/{APPS}/leases/{LEASE}",
                as_user=SERVICE_ACCOUNT) == 403  # fmt: skip


def test_deleting_the_watch_leader_loses_duplicates_and_misattributes_nothing(
    node: Node, release: Release
) -> None:
    release.changes.make_many(3)
    leader = leader_pod(node)
    assert leader
    old_holder = lease_holder(node)
    with Background(release.changes):
        time.sleep(2)
        node.api("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{leader}")

        def taken_over() -> bool:
            holder = lease_holder(node)
            return bool(holder) and holder != old_holder and not holder.startswith(leader + "-")

        node.wait_for("another pod takes the Lease", taken_over, WAIT_S)
        wait_replicas_ready(node)
        time.sleep(2)
    release.changes.make_many(3)
    assert_mirrored(release.remote, release.changes)


def test_a_rolling_upgrade_loses_duplicates_and_misattributes_nothing(
    node: Node, helm: Path, release: Release
) -> None:
    release.changes.make_many(3)
    before = {p["metadata"]["uid"] for p in pods(node)}
    with Background(release.changes):
        upgraded = helm_run(
            helm, node, "upgrade", RELEASE, str(CHART), "-f", str(release.values),
            "--set", "podAnnotations.rolled=once", "--wait", "--timeout", "8m",
        )  # fmt: skip
        assert upgraded.returncode == 0, upgraded.stdout[-2000:] + upgraded.stderr[-3000:]
        wait_replicas_ready(node, not_uids=frozenset(before))
    for pod in pods(node):
        assert pod["metadata"]["annotations"]["rolled"] == "once"
    release.changes.make_many(3)
    assert_mirrored(release.remote, release.changes)


def test_a_pod_whose_healthz_stops_answering_is_restarted_by_the_kubelet(
    node: Node, release: Release
) -> None:
    """SIGSTOP of the container's process: /healthz gets no answer, the liveness probe fails.

    A stage that fails for good makes /healthz answer 503 but also ends the process within a
    second (pipeline/service/app.py), so only a hung process is left to the liveness probe itself.
    """
    leader = leader_pod(node)
    victim = next(p for p in pods(node) if p["metadata"]["name"] != leader)
    name = victim["metadata"]["name"]
    (status,) = victim["status"]["containerStatuses"]
    restarts = status["restartCount"]
    os.kill(node.container_pid(status["containerID"]), signal.SIGSTOP)

    def restarted() -> bool:
        pod = node.api("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")
        (current,) = pod["status"]["containerStatuses"]
        return bool(current["restartCount"] > restarts and is_ready(pod))

    node.wait_for(f"{name} restarted and Ready again", restarted, WAIT_S)
    events = node.api(
        "GET", f"/api/v1/namespaces/{NAMESPACE}/events?fieldSelector=involvedObject.name={name}"
    )["items"]
    assert any(e["reason"] == "Unhealthy" and "Liveness probe failed" in e["message"] for e in events), [
        (e["reason"], e["message"]) for e in events
    ]
    release.changes.make_many(2)
    assert_mirrored(release.remote, release.changes)


def test_pods_are_not_ready_while_readyz_fails_and_ready_after(
    node: Node, kafka: KafkaBroker, release: Release
) -> None:
    """Stopping the broker fails /readyz (the log does not answer): the kubelet takes every pod out
    of Ready and the audit Service's endpoints; the broker back, they return by themselves."""

    def readyz(pod: dict[str, Any]) -> int:
        """/readyz of the pod itself, from the host over the bridge (0: no answer at all)."""
        try:
            with urllib.request.urlopen(f"http://{pod['status']['podIP']}:9464/readyz", timeout=5) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            return 0

    def ready_endpoints() -> int:
        slices = node.api(
            "GET",
            f"/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices"
            f"?labelSelector=kubernetes.io/service-name={FULLNAME}-audit",
        )["items"]
        return sum(
            1 for s in slices for e in s.get("endpoints") or [] if e.get("conditions", {}).get("ready")
        )

    assert ready_endpoints() == REPLICAS
    kafka.stop()
    try:

        def all_unready() -> bool:
            current = pods(node)
            return bool(current) and not any(is_ready(p) for p in current) and ready_endpoints() == 0

        node.wait_for("every pod NotReady with the broker down", all_unready, WAIT_S)
        # A pod that restarted meanwhile does not answer yet; none answers 200.
        answers = [readyz(p) for p in pods(node) if p["status"].get("podIP")]
        assert 503 in answers, answers
        assert 200 not in answers, answers
    finally:
        kafka.start()
    running = wait_replicas_ready(node)
    assert all(readyz(p) == 200 for p in running)
    node.wait_for("the audit Service's endpoints ready", lambda: ready_endpoints() == REPLICAS, WAIT_S)
    release.changes.make_many(2)
    assert_mirrored(release.remote, release.changes)


def test_helm_test_fails_for_a_release_with_no_ready_pod(node: Node, helm: Path, release: Release) -> None:
    scale = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{FULLNAME}/scale"
    _scale(node, scale, 0)
    try:
        node.wait_for("no pods", lambda: not pods(node), WAIT_S)
        result = helm_run(helm, node, "test", RELEASE, "--logs", "--timeout", "2m")
        assert result.returncode != 0, result.stdout[-2000:]
        assert "readyz" in result.stdout + result.stderr
    finally:
        _scale(node, scale, REPLICAS)
    wait_replicas_ready(node)


def _scale(node: Node, path: str, replicas: int) -> None:
    current = node.api("GET", path)
    current["spec"]["replicas"] = replicas
    node.api("PUT", path, current)
