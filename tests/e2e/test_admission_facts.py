"""Attribution with no audit webhook: a real kube-apiserver calls the admission fact source.

The managed-cluster case (docs/audit-ingress.md, "Admission facts"): the control plane runs with
no audit backend at all, a ValidatingWebhookConfiguration points at `reverser run`'s ingress
(`/admission-webhook/<route>/<token>`, `failurePolicy: Ignore`), and several users and a service
account create, update, patch, scale and delete ConfigMaps and Deployments; two users change
one ConfigMap in turn; a `deletecollection` by label selector (which the apiserver admits object
by object as `DELETE` reviews) and an object held by a finalizer (deleted by one user, released by
a service account) complete the workload. Every single-writer change must be committed under its
author, by the `admission`, `delete_sticky` or `name` tier; a dry run and the finalizer's release
must make no commit. The accuracy table of docs/attribution.md comes from this run.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from pipeline.attribution import Tier
from tests.conftest import unique_prefix
from tests.e2e.cluster.controlplane import ControlPlane
from tests.e2e.gitremote import Commit, GitRemote
from tests.e2e.kube import ALICE, BOB, CAROL, FINALIZER_SA, grant_cluster_admin, kube_client
from tests.e2e.service_process import ServiceProcess, serving
from tests.e2e.webhooks import admission_webhook
from tests.support.net import free_port

pytestmark = pytest.mark.e2e

ROUTE = "managed"
NAMESPACE = "team-m"
TARGET_PATH = "clusters/managed"
WAIT_S = 90.0
TOKEN_ENV = "E2E_ADMISSION_TOKEN"
TOKEN = "e2e-admission-path-token-4f1c"
# One watch stream per (resource, namespace) of the target's rule.
STREAMS = 2
BATCH_LABEL = "batch"
FINALIZER = "reverser.test/hold"


@dataclass(frozen=True, slots=True)
class Env:
    plane: ControlPlane
    remote: GitRemote
    service: ServiceProcess


@pytest.fixture(scope="module")
def env(
    controlplane_bin_dir: Path, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Env]:
    workdir = tmp_path_factory.mktemp("admission")
    port = free_port()
    plane = ControlPlane(workdir / "plane", controlplane_bin_dir)  # no audit backend
    remote = GitRemote(workdir / "remote.git")
    os.environ[TOKEN_ENV] = TOKEN
    plane.start()
    try:
        # registered before the service listens: until it does, failurePolicy Ignore lets writes through
        asyncio.run(_prepare_cluster(plane, port))
        config = _service_config(workdir, plane, remote, kafka_bootstrap, port)
        with serving(workdir, config, snapshot_streams=STREAMS, timeout_s=WAIT_S) as service:
            yield Env(plane, remote, service)
    finally:
        plane.stop()
        os.environ.pop(TOKEN_ENV, None)


def _service_config(
    workdir: Path, plane: ControlPlane, remote: GitRemote, bootstrap: str, port: int
) -> dict[str, Any]:
    return {
        "workdir": str(workdir / "service"),
        "log": {"backend": "kafka", "bootstrap_servers": bootstrap, "topic_prefix": unique_prefix()},
        "metrics": {"addr": f"127.0.0.1:{free_port()}"},
        "audit": {
            "addr": f"127.0.0.1:{port}",
            # no client CA: a webhook call carries no client certificate; the path's token is checked
            "tls": {"cert_file": str(plane.pki.ingress_cert), "key_file": str(plane.pki.ingress_key)},
            "routes": [{"name": ROUTE, "bearer_tokens_env": [TOKEN_ENV]}],
            "admission": {"enabled": True},
        },
        "clusters": [{"name": ROUTE, "kubeconfig": str(plane.kubeconfig)}],
        "providers": [{"name": "local", "url": remote.url, "commit_window_s": 2.0, "push_cooldown_s": 0.5}],
        "targets": [
            {
                "name": "managed",
                "provider": "local",
                "path": TARGET_PATH,
                "cluster": ROUTE,
                "rules": [{"resources": ["configmaps", "apps/deployments"], "namespaces": [NAMESPACE]}],
            }
        ],
        "lag": {"enabled": False},
    }


async def _prepare_cluster(plane: ControlPlane, port: int) -> None:
    await grant_cluster_admin(plane.kubeconfig)
    webhook = admission_webhook(
        f"https://127.0.0.1:{port}/admission-webhook/{ROUTE}/{TOKEN}", plane.pki.ca.read_bytes()
    )
    async with kube_client(plane.kubeconfig) as api:
        await client.CoreV1Api(api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE))
        )
        await client.AdmissionregistrationV1Api(api).create_validating_webhook_configuration(webhook)
    # the apiserver's webhook informer picks the configuration up within moments; a probe ConfigMap
    # that reaches Git with its author named shows the whole path works before the workload starts
    # (see test_the_probe_was_named_by_admission)


def cm_path(name: str) -> str:
    return f"{TARGET_PATH}/{NAMESPACE}/configmaps/{name}.yaml"


def deploy_path(name: str) -> str:
    return f"{TARGET_PATH}/{NAMESPACE}/apps/deployments/{name}.yaml"


def deployment(name: str, image: str) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": image}]},
            },
        },
    }


def author_of(commit: Commit) -> tuple[str, set[str]]:
    tiers = {line.partition(" ")[0] for line in commit.trailers.get("Reverser-Attribution", [])}
    return commit.author_name, tiers


async def _settle_probe(env: Env) -> None:
    """Write probe ConfigMaps as bob until one is committed under bob's name: the webhook is live."""
    for attempt in range(30):
        name = f"probe-{attempt}"
        async with kube_client(env.plane.kubeconfig, BOB) as api:
            await client.CoreV1Api(api).create_namespaced_config_map(
                NAMESPACE, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data={"p": "1"})
            )
        path = cm_path(name)

        def committed(remote: GitRemote, path: str = path) -> bool:
            return path in remote.files()

        await asyncio.to_thread(env.remote.wait_for, committed, WAIT_S, name)
        commits = [c for c in env.remote.commits() if any(p == path for _, p in c.changes)]
        if commits and commits[-1].author_name == BOB:
            return
        await asyncio.sleep(1.0)
    raise AssertionError("the apiserver never called the admission webhook")


async def test_every_single_writer_change_is_named_without_an_audit_webhook(env: Env) -> None:
    await _settle_probe(env)
    since = env.remote.head()
    # a probe may have gone unresolved before the webhook was live; from here on none may
    unresolved_before = _unresolved(env)
    # (user, what, path): each change has one writer; the expected author is that writer
    expected: list[tuple[str, str, str]] = []
    async with kube_client(env.plane.kubeconfig, ALICE) as api:
        core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
        await core.create_namespaced_config_map(
            NAMESPACE, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="app"), data={"mode": "a"})
        )
        expected.append((ALICE, "create app", cm_path("app")))
        await apps.create_namespaced_deployment(NAMESPACE, deployment("web", "nginx:1.27"))
        expected.append((ALICE, "create web", deploy_path("web")))
        # a dry run is never stored, so it must never be anyone's commit
        await core.create_namespaced_config_map(
            NAMESPACE,
            client.V1ConfigMap(metadata=client.V1ObjectMeta(name="dry"), data={"x": "1"}),
            dry_run="All",
        )
    await asyncio.to_thread(env.remote.wait_for, lambda r: deploy_path("web") in r.files(), WAIT_S, "web")
    async with kube_client(env.plane.kubeconfig, BOB) as api:
        core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
        await core.patch_namespaced_config_map("app", NAMESPACE, {"data": {"mode": "b"}})
        expected.append((BOB, "patch app", cm_path("app")))
        await apps.patch_namespaced_deployment_scale("web", NAMESPACE, {"spec": {"replicas": 3}})
        expected.append((BOB, "scale web", deploy_path("web")))
    await asyncio.to_thread(
        env.remote.wait_for, lambda r: "replicas: 3" in r.files().get(deploy_path("web"), ""), WAIT_S, "scale"
    )
    # users take turns scaling one Deployment: each scale's fact names the version it made (its
    # predecessor and count), so a later scale's fact never shadows an earlier one's
    for user, replicas in ((ALICE, 4), (CAROL, 6), (ALICE, 2)):
        async with kube_client(env.plane.kubeconfig, user) as api:
            await client.AppsV1Api(api).patch_namespaced_deployment_scale(
                "web", NAMESPACE, {"spec": {"replicas": replicas}}
            )
        expected.append((user, f"scale web to {replicas}", deploy_path("web")))

        def scaled(remote: GitRemote, replicas: int = replicas) -> bool:
            return f"replicas: {replicas}" in remote.files().get(deploy_path("web"), "")

        await asyncio.to_thread(env.remote.wait_for, scaled, WAIT_S, f"scale to {replicas}")
    async with kube_client(env.plane.kubeconfig, FINALIZER_SA) as api:
        core = client.CoreV1Api(api)
        await core.create_namespaced_config_map(
            NAMESPACE, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="sa-made"), data={"k": "v"})
        )
        expected.append((FINALIZER_SA, "create sa-made", cm_path("sa-made")))
        await core.replace_namespaced_config_map(
            "app", NAMESPACE, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="app"), data={"mode": "c"})
        )
        expected.append((FINALIZER_SA, "update app", cm_path("app")))
    await asyncio.to_thread(
        env.remote.wait_for, lambda r: "mode: c" in r.files().get(cm_path("app"), ""), WAIT_S, "mode c"
    )
    async with kube_client(env.plane.kubeconfig, ALICE) as api:
        await client.CoreV1Api(api).delete_namespaced_config_map("sa-made", NAMESPACE)
        expected.append((ALICE, "delete sa-made", cm_path("sa-made")))
    await asyncio.to_thread(
        env.remote.wait_for, lambda r: cm_path("sa-made") not in r.files(), WAIT_S, "delete"
    )

    expected += await _shared_collection_and_finalizer(env)

    commits = env.remote.commits(since=since)
    assert not [c for c in commits if any(p == cm_path("dry") for _, p in c.changes)], (
        "a dry run was committed"
    )
    assert not [
        c
        for c in commits
        if c.author_name == FINALIZER_SA and any(p == cm_path("held") for _, p in c.changes)
    ], "the finalizer's release was committed"
    named_right, wrong, unknown = 0, [], []
    seen: dict[str, set[str]] = {}
    # each path's changes were made one after the other, each awaited: its commits follow them in order
    for path in dict.fromkeys(path for _, _, path in expected):
        changes = [(user, what) for user, what, p in expected if p == path]
        touching = [c for c in commits if any(p == path for _, p in c.changes)]
        assert len(touching) == len(changes), (path, changes, [(c.author_name, c.changes) for c in touching])
        for (user, what), commit in zip(changes, touching, strict=True):
            author, tiers = author_of(commit)
            if author == user:
                named_right += 1
                assert tiers <= {Tier.ADMISSION, Tier.DELETE_STICKY, Tier.SCALE}, (what, tiers)
                seen[what] = tiers
            elif author.startswith("unknown"):
                unknown.append(what)
            else:
                wrong.append((what, author))
    named_pct = 100.0 * named_right / len(expected)
    summary = (
        f"named right {named_right} of {len(expected)} ({named_pct:.1f}%), wrong {wrong}, unknown {unknown}"
    )
    print(f"\nadmission only: {summary}: {seen}")
    assert not wrong
    assert not unknown
    # every resolution of the run, those that made no commit included (the held object's later
    # removals, the barrier's events), found its fact: none was absent or a conflict
    assert _unresolved(env) == unresolved_before
    removals = env.service.metric_sum("reverser_attribution_resolutions_total", tier=Tier.DELETE_STICKY)
    assert removals >= 5, removals  # the counter is the one resolutions go to: sa-made, 3 batch, held
    # a version is named by its content (not merely by name), a scale by the version it made, a
    # delete by uid (a commit's trailers list the tiers of every change it holds: bob's patch and
    # scale share one)
    for what in ("create app", "create web", "patch app", "create sa-made", "update app"):
        assert Tier.ADMISSION in seen[what], (what, seen[what])
    for what in ("scale web", "scale web to 4", "scale web to 6", "scale web to 2"):
        assert Tier.SCALE in seen[what], (what, seen[what])
    for what in ("create shared", "bob updates shared", "carol updates shared"):
        assert Tier.ADMISSION in seen[what], (what, seen[what])
    # deletions by the object's uid: each collection member, and the held object at its first
    # Terminating observation (alice's intent), never the service account that released it
    for what in ("delete sa-made", *(f"deletecollection batch-{i}" for i in range(3)), "delete held"):
        assert seen[what] == {Tier.DELETE_STICKY}, (what, seen[what])


def _unresolved(env: Env) -> dict[str, float]:
    """Resolutions that named no one so far, per tier."""
    return {
        tier: env.service.metric_sum("reverser_attribution_resolutions_total", tier=tier)
        for tier in (Tier.ABSENT, Tier.CONFLICT)
    }


async def _wait_for(env: Env, done: Any, label: str) -> None:
    await asyncio.to_thread(env.remote.wait_for, done, WAIT_S, label)


async def _shared_collection_and_finalizer(env: Env) -> list[tuple[str, str, str]]:
    """Carol and bob take turns on one ConfigMap, bob deletes a labelled collection, alice deletes
    an object a finalizer holds and the service account releases it; then a barrier write.

    Returns the (user, what, path) changes, in order per path. The finalizer's release is not a
    change of the mirrored content (finalizers are not mirrored) and must make no commit; the
    deletion is committed at its first Terminating observation under alice, who asked for it
    (docs/attribution.md, "Removals are credited only to deletions").
    """
    expected: list[tuple[str, str, str]] = []
    batch = [f"batch-{i}" for i in range(3)]
    async with kube_client(env.plane.kubeconfig, CAROL) as api:
        core = client.CoreV1Api(api)
        await core.create_namespaced_config_map(
            NAMESPACE, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="shared"), data={"v": "one"})
        )
        expected.append((CAROL, "create shared", cm_path("shared")))
        for name in [*batch, "kept"]:
            labels = {BATCH_LABEL: "old" if name != "kept" else "new"}
            await core.create_namespaced_config_map(
                NAMESPACE,
                client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, labels=labels), data={"n": name}),
            )
            expected.append((CAROL, f"create {name}", cm_path(name)))
        await core.create_namespaced_config_map(
            NAMESPACE,
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name="held", finalizers=[FINALIZER]), data={"h": "1"}
            ),
        )
        expected.append((CAROL, "create held", cm_path("held")))
    names = ["shared", *batch, "kept", "held"]
    await _wait_for(env, lambda r: all(cm_path(n) in r.files() for n in names), "carol's creates")
    async with kube_client(env.plane.kubeconfig, BOB) as api:
        await client.CoreV1Api(api).patch_namespaced_config_map("shared", NAMESPACE, {"data": {"v": "two"}})
        expected.append((BOB, "bob updates shared", cm_path("shared")))
    await _wait_for(env, lambda r: "v: two" in r.files().get(cm_path("shared"), ""), "bob's turn")
    async with kube_client(env.plane.kubeconfig, CAROL) as api:
        await client.CoreV1Api(api).patch_namespaced_config_map("shared", NAMESPACE, {"data": {"v": "three"}})
        expected.append((CAROL, "carol updates shared", cm_path("shared")))
    await _wait_for(env, lambda r: "v: three" in r.files().get(cm_path("shared"), ""), "carol's turn")
    async with kube_client(env.plane.kubeconfig, BOB) as api:
        await client.CoreV1Api(api).delete_collection_namespaced_config_map(
            NAMESPACE, label_selector=f"{BATCH_LABEL}=old"
        )
        expected += [(BOB, f"deletecollection {name}", cm_path(name)) for name in batch]
    await _wait_for(env, lambda r: not any(cm_path(n) in r.files() for n in batch), "deletecollection")
    async with kube_client(env.plane.kubeconfig, ALICE) as api:
        await client.CoreV1Api(api).delete_namespaced_config_map("held", NAMESPACE)
        expected.append((ALICE, "delete held", cm_path("held")))
    await _wait_for(env, lambda r: cm_path("held") not in r.files(), "held terminating")
    async with kube_client(env.plane.kubeconfig, FINALIZER_SA) as api:
        core = client.CoreV1Api(api)
        await core.patch_namespaced_config_map("held", NAMESPACE, {"metadata": {"finalizers": None}})
        with pytest.raises(ApiException) as gone:
            await core.read_namespaced_config_map("held", NAMESPACE)
        assert gone.value.status == 404, "the release did not complete the deletion"
        # the barrier: ConfigMap events are one ordered stream and the branch one FIFO partition, so
        # once this create is committed, the release's events (and any commit of theirs) were handled
        await core.create_namespaced_config_map(
            NAMESPACE, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="last"), data={"k": "v"})
        )
        expected.append((FINALIZER_SA, "create last", cm_path("last")))
    await _wait_for(env, lambda r: cm_path("last") in r.files(), "barrier")
    assert cm_path("kept") in env.remote.files(), "the selector deleted an object it does not select"
    return expected
