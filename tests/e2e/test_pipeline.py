"""End to end: people change a real cluster, and the Git history says who did what.

One module-scoped environment: a real Kafka broker, etcd + kube-apiserver posting audit batches over
mutual TLS to the pipeline's ingress, `reverser run` (ingress, watch, resolver/router, commit
worker) in its own process, and a bare Git remote. alice, bob and a service account act through
impersonation; each test ends by reading the pushed history: files, deletions, one commit per
window per author, and the author and attribution tier in the trailers.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from pipeline.commit.consumer import load_object_state
from pipeline.config import Settings
from pipeline.log import open_log
from pipeline.log.topics import TopicNames
from tests.conftest import unique_prefix
from tests.e2e.cluster.controlplane import ControlPlane
from tests.e2e.cluster.pki import AUDIT_CLIENT_CN
from tests.e2e.gitremote import Commit, GitRemote
from tests.e2e.kube import ALICE, BOB, FINALIZER_SA, grant_cluster_admin, kube_client
from tests.e2e.service_process import ServiceProcess, serving
from tests.support.net import free_port
from tests.support.wait import wait_for

pytestmark = pytest.mark.e2e

ROUTE = "e2e"
NAMESPACE = "team-a"
TARGET_PATH = "clusters/e2e"
CM_DIR = f"{TARGET_PATH}/{NAMESPACE}/configmaps"
DEPLOY_DIR = f"{TARGET_PATH}/{NAMESPACE}/apps/deployments"
COMMIT_WINDOW_S = 3.0
WAIT_S = 90.0
FINALIZER = "e2e.reverser.invalid/hold"
OFFSET = re.compile(r"^\d+:\d+$")
# One watch stream per (resource, namespace) of the target's rule.
STREAMS = 2


@dataclass(frozen=True, slots=True)
class Env:
    plane: ControlPlane
    remote: GitRemote
    service: ServiceProcess

    @property
    def kubeconfig(self) -> Path:
        return self.plane.kubeconfig


@pytest.fixture(scope="module")
def env(
    controlplane_bin_dir: Path,
    kafka_bootstrap: str,
    tmp_path_factory: pytest.TempPathFactory,
    audit_port: int,
) -> Iterator[Env]:
    workdir = tmp_path_factory.mktemp("pipeline")
    plane = ControlPlane(
        workdir / "plane", controlplane_bin_dir, f"https://127.0.0.1:{audit_port}/audit-webhook/{ROUTE}"
    )
    remote = GitRemote(workdir / "remote.git")
    plane.start()
    try:
        asyncio.run(_prepare_cluster(plane.kubeconfig))
        config = _service_config(workdir, plane, remote, kafka_bootstrap, audit_port)
        with serving(workdir, config, snapshot_streams=STREAMS, timeout_s=WAIT_S) as service:
            yield Env(plane, remote, service)
    finally:
        plane.stop()


def _service_config(
    workdir: Path, plane: ControlPlane, remote: GitRemote, bootstrap: str, audit_port: int
) -> dict[str, Any]:
    return {
        "workdir": str(workdir / "service"),
        "log": {"backend": "kafka", "bootstrap_servers": bootstrap, "topic_prefix": unique_prefix()},
        "metrics": {"addr": f"127.0.0.1:{free_port()}"},
        "audit": {
            "addr": f"127.0.0.1:{audit_port}",
            "tls": {
                "cert_file": str(plane.pki.ingress_cert),
                "key_file": str(plane.pki.ingress_key),
                "client_ca_file": str(plane.pki.ca),
            },
            "routes": [{"name": ROUTE, "allowed_identities": [AUDIT_CLIENT_CN]}],
        },
        "clusters": [{"name": ROUTE, "kubeconfig": str(plane.kubeconfig)}],
        "providers": [
            {
                "name": "local",
                "url": remote.url,
                "default_branch": "main",
                "commit_window_s": COMMIT_WINDOW_S,
                "push_cooldown_s": 0.5,
            }
        ],
        "targets": [
            {
                "name": "e2e",
                "provider": "local",
                "branch": "main",
                "path": TARGET_PATH,
                "cluster": ROUTE,
                "rules": [{"resources": ["configmaps", "apps/deployments"], "namespaces": [NAMESPACE]}],
            }
        ],
        "lag": {"enabled": False},
    }


async def _prepare_cluster(kubeconfig: Path) -> None:
    await grant_cluster_admin(kubeconfig)
    async with kube_client(kubeconfig) as api:
        await client.CoreV1Api(api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE))
        )


def cm_path(name: str) -> str:
    return f"{CM_DIR}/{name}.yaml"


def cm(name: str, data: dict[str, str], labels: dict[str, str] | None = None) -> client.V1ConfigMap:
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, labels=labels), data=data)


async def wait_until(env: Env, what: str, predicate: Callable[[GitRemote], bool]) -> None:
    await asyncio.to_thread(env.remote.wait_for, predicate, WAIT_S, what)


async def processed_past(env: Env, marker: str) -> str:
    """Write a marker ConfigMap (as Bob, so it closes any open window) and wait for its commit.

    Work reaches the branch in order, so once the marker is on the remote every change made
    before it has been committed or dropped: the positive signal before checking that something
    did not happen. Returns the marker's path.
    """
    async with kube_client(env.kubeconfig, BOB) as api:
        await client.CoreV1Api(api).create_namespaced_config_map(NAMESPACE, cm(marker, {"marker": "1"}))
    path = cm_path(marker)
    await wait_until(env, marker, lambda r: path in r.files())
    return path


def touching(commits: list[Commit], *paths: str) -> list[Commit]:
    """Commits that changed any of `paths` (or anything under a path ending in `/`)."""
    return [
        c
        for c in commits
        if any(
            p == path or (path.endswith("/") and p.startswith(path)) for _, p in c.changes for path in paths
        )
    ]


def assert_authored(commit: Commit, user: str, tiers: set[str]) -> None:
    """The author is `user`, and every attribution trailer names `user` with one of `tiers`."""
    assert commit.author_name == user, commit
    attributions = commit.trailers.get("Reverser-Attribution", [])
    assert attributions, f"no attribution trailer in {commit.message!r}"
    for line in attributions:
        tier, _, who = line.partition(" ")
        assert who == user, f"{line!r} in {commit.message!r}"
        assert tier in tiers, f"{line!r} in {commit.message!r}"
    offsets = commit.trailers.get("Reverser-Offset", [])
    assert len(offsets) == 1, commit.message
    assert OFFSET.match(offsets[0]), commit.message


def file_yaml(remote: GitRemote, path: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(remote.files()[path])
    return loaded


async def test_alice_creates_and_updates_configmaps_in_one_commit(env: Env) -> None:
    since = env.remote.head()
    async with kube_client(env.kubeconfig, ALICE) as api:
        core = client.CoreV1Api(api)
        await core.create_namespaced_config_map(NAMESPACE, cm("settings", {"mode": "a"}))
        await core.create_namespaced_config_map(NAMESPACE, cm("flags", {"x": "1"}))
        await core.patch_namespaced_config_map("settings", NAMESPACE, {"data": {"mode": "b"}})

    def done(remote: GitRemote) -> bool:
        files = remote.files()
        return cm_path("flags") in files and "mode: b" in files.get(cm_path("settings"), "")

    await wait_until(env, "settings (mode b) and flags", done)
    commits = touching(env.remote.commits(since=since), cm_path("settings"), cm_path("flags"))
    assert len(commits) == 1, [c.subject for c in commits]
    (commit,) = commits
    assert sorted(commit.touched(CM_DIR)) == [("A", cm_path("flags")), ("A", cm_path("settings"))]
    assert_authored(commit, ALICE, {"exact"})
    assert commit.author_email == "alice@noreply.cluster.local"
    assert commit.subject == "alice on e2e: 2 resource(s)"
    settings = file_yaml(env.remote, cm_path("settings"))
    assert settings["data"] == {"mode": "b"}
    assert settings["metadata"]["name"] == "settings"
    assert "managedFields" not in settings["metadata"]


async def test_a_change_of_author_closes_the_window(env: Env) -> None:
    since = env.remote.head()
    for user, name in ((ALICE, "turn-1"), (BOB, "turn-2"), (ALICE, "turn-3")):
        async with kube_client(env.kubeconfig, user) as api:
            await client.CoreV1Api(api).create_namespaced_config_map(NAMESPACE, cm(name, {"by": user}))

    paths = [cm_path(n) for n in ("turn-1", "turn-2", "turn-3")]
    await wait_until(env, "three turns", lambda r: all(p in r.files() for p in paths))
    commits = touching(env.remote.commits(since=since), *paths)
    assert [(c.author_name, c.changes) for c in commits] == [
        (ALICE, (("A", paths[0]),)),
        (BOB, (("A", paths[1]),)),
        (ALICE, (("A", paths[2]),)),
    ]


async def test_bob_deletes_a_configmap(env: Env) -> None:
    async with kube_client(env.kubeconfig, ALICE) as api:
        await client.CoreV1Api(api).create_namespaced_config_map(NAMESPACE, cm("doomed", {"k": "v"}))
    await wait_until(env, "doomed created", lambda r: cm_path("doomed") in r.files())
    since = env.remote.head()

    async with kube_client(env.kubeconfig, BOB) as api:
        await client.CoreV1Api(api).delete_namespaced_config_map("doomed", NAMESPACE)

    await wait_until(env, "doomed deleted", lambda r: cm_path("doomed") not in r.files())
    (commit,) = touching(env.remote.commits(since=since), cm_path("doomed"))
    assert commit.touched(CM_DIR) == [("D", cm_path("doomed"))]
    # An immediate delete is answered with a Status body, so the fact carries no uid and the
    # removal matches bob's name-keyed delete fact (docs/attribution.md, "The join").
    assert_authored(commit, BOB, {"name"})


async def test_alice_deletes_a_set_by_label_selector(env: Env) -> None:
    names = ["cache-1", "cache-2", "cache-3"]
    async with kube_client(env.kubeconfig, ALICE) as api:
        core = client.CoreV1Api(api)
        for name in names:
            await core.create_namespaced_config_map(NAMESPACE, cm(name, {"k": name}, {"role": "cache"}))
        await core.create_namespaced_config_map(NAMESPACE, cm("keeper", {"k": "v"}, {"role": "db"}))
    await wait_until(env, "the cache set", lambda r: all(cm_path(n) in r.files() for n in [*names, "keeper"]))
    since = env.remote.head()

    async with kube_client(env.kubeconfig, ALICE) as api:
        await client.CoreV1Api(api).delete_collection_namespaced_config_map(
            NAMESPACE, label_selector="role=cache"
        )

    await wait_until(env, "the cache set deleted", lambda r: not any(cm_path(n) in r.files() for n in names))
    commits = touching(env.remote.commits(since=since), *(cm_path(n) for n in names))
    assert len(commits) == 1, [c.subject for c in commits]
    (commit,) = commits
    assert sorted(commit.touched(CM_DIR)) == [("D", cm_path(n)) for n in names]
    assert_authored(commit, ALICE, {"deletecollection_body_uid", "deletecollection_scope"})
    assert cm_path("keeper") in env.remote.files()


async def test_a_finalizer_removed_by_a_service_account_credits_the_deleter(env: Env) -> None:
    held = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="held", finalizers=[FINALIZER]), data={"k": "v"}
    )
    async with kube_client(env.kubeconfig, ALICE) as api:
        await client.CoreV1Api(api).create_namespaced_config_map(NAMESPACE, held)
    await wait_until(env, "held created", lambda r: cm_path("held") in r.files())
    since = env.remote.head()

    async with kube_client(env.kubeconfig, ALICE) as api:
        await client.CoreV1Api(api).delete_namespaced_config_map("held", NAMESPACE)
    async with kube_client(env.kubeconfig, FINALIZER_SA) as api:
        core = client.CoreV1Api(api)
        terminating = await core.read_namespaced_config_map("held", NAMESPACE)
        assert terminating.metadata.deletion_timestamp is not None
        await core.patch_namespaced_config_map(
            "held", NAMESPACE, [{"op": "remove", "path": "/metadata/finalizers"}]
        )

    await wait_until(env, "held deleted", lambda r: cm_path("held") not in r.files())
    # Let the final DELETED event (after the finalizer went) pass through the pipeline too.
    await processed_past(env, "after-held")
    commits = touching(env.remote.commits(since=since), cm_path("held"))
    assert len(commits) == 1, [(c.author_name, c.subject) for c in commits]
    (commit,) = commits
    assert commit.touched(CM_DIR) == [("D", cm_path("held"))]
    # A delete held by a finalizer is answered with the object itself, uid included: sticky.
    assert_authored(commit, ALICE, {"delete_sticky"})
    assert not [c for c in env.remote.commits(since=since) if c.author_name == FINALIZER_SA]


async def test_server_side_apply_is_credited_to_the_applier(env: Env) -> None:
    since = env.remote.head()
    manifest = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "applied", "namespace": NAMESPACE, "labels": {"via": "apply"}},
        "data": {"replicas": "3"},
    }
    async with kube_client(env.kubeconfig, ALICE) as api:
        await client.CoreV1Api(api).patch_namespaced_config_map(
            "applied",
            NAMESPACE,
            manifest,
            field_manager="alice-kubectl",
            force=True,
            # Server-side apply; the generated client's typed kwargs do not list the content type.
            _content_type="application/apply-patch+yaml",  # type: ignore[call-arg]
        )

    await wait_until(env, "applied", lambda r: cm_path("applied") in r.files())
    (commit,) = touching(env.remote.commits(since=since), cm_path("applied"))
    assert commit.touched(CM_DIR) == [("A", cm_path("applied"))]
    assert_authored(commit, ALICE, {"exact"})
    assert commit.subject == "[CREATE] v1/configmaps/applied"
    applied = file_yaml(env.remote, cm_path("applied"))
    assert applied["data"] == {"replicas": "3"}
    assert applied["metadata"]["labels"] == {"via": "apply"}


async def test_a_generate_name_create_lands_under_the_assigned_name(env: Env) -> None:
    since = env.remote.head()
    async with kube_client(env.kubeconfig, BOB) as api:
        created = await client.CoreV1Api(api).create_namespaced_config_map(
            NAMESPACE, client.V1ConfigMap(metadata=client.V1ObjectMeta(generate_name="gen-"), data={"k": "v"})
        )
    name = created.metadata.name
    assert name.startswith("gen-")
    assert len(name) > len("gen-")

    await wait_until(env, f"{name} created", lambda r: cm_path(name) in r.files())
    (commit,) = touching(env.remote.commits(since=since), cm_path(name))
    assert commit.touched(CM_DIR) == [("A", cm_path(name))]
    assert_authored(commit, BOB, {"exact"})


async def test_a_deployment_scaled_through_the_scale_subresource(env: Env) -> None:
    path = f"{DEPLOY_DIR}/web.yaml"
    deployment = client.V1Deployment(
        metadata=client.V1ObjectMeta(name="web"),
        spec=client.V1DeploymentSpec(
            replicas=1,
            selector=client.V1LabelSelector(match_labels={"app": "web"}),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels={"app": "web"}),
                spec=client.V1PodSpec(
                    containers=[client.V1Container(name="web", image="registry.invalid/web:1")]
                ),
            ),
        ),
    )
    async with kube_client(env.kubeconfig, ALICE) as api:
        await client.AppsV1Api(api).create_namespaced_deployment(NAMESPACE, deployment)
    await wait_until(env, "web created", lambda r: path in r.files())
    (created,) = touching(env.remote.commits(), path)
    assert_authored(created, ALICE, {"exact"})
    since = env.remote.head()

    async with kube_client(env.kubeconfig, BOB) as api:
        await client.AppsV1Api(api).patch_namespaced_deployment_scale(
            "web", NAMESPACE, {"spec": {"replicas": 3}}
        )

    await wait_until(env, "web scaled to 3", lambda r: "replicas: 3" in r.files().get(path, ""))
    (scaled,) = touching(env.remote.commits(since=since), path)
    assert scaled.touched(DEPLOY_DIR) == [("M", path)]
    assert_authored(scaled, BOB, {"exact"})
    assert file_yaml(env.remote, path)["spec"]["replicas"] == 3


def test_the_service_counted_what_it_did(env: Env) -> None:
    """Runs last: the metrics agree with the history above, and nothing was refused or unresolved."""
    service = env.service
    user_commits = [c for c in env.remote.commits() if c.author_name in (ALICE, BOB)]
    assert service.metric_sum("reverser_commit_commits_total", author_kind="user") >= len(user_commits) > 0
    assert service.metric_sum("reverser_audit_requests_total", route=ROUTE, code="200") > 0
    refused = [
        (labels, value)
        for labels, value in service.metric_samples("reverser_audit_requests_total")
        if not labels.get("code", "").startswith("2") and value > 0
    ]
    assert refused == []
    assert service.metric_sum("reverser_attribution_resolutions_total", tier="exact") > 0
    assert service.metric_sum("reverser_attribution_resolutions_total", tier="absent") == 0
    assert service.metric_sum("reverser_router_decode_errors_total") == 0


async def test_a_restart_loses_nothing_and_repeats_nothing(env: Env) -> None:
    """Runs after the metrics check (a restart resets the counters).

    While the service is down, the apiserver's audit batch fails and is retried, and the watch
    resumes from its cursor: the change made meanwhile is still credited to its author, and no work
    from before the restart is committed twice.
    """
    before = env.remote.head()
    assert before is not None
    assert await asyncio.to_thread(env.service.stop) == 0
    async with kube_client(env.kubeconfig, ALICE) as api:
        await client.CoreV1Api(api).create_namespaced_config_map(NAMESPACE, cm("while-down", {"k": "v"}))
    await asyncio.to_thread(env.service.start)

    await wait_until(env, "while-down", lambda r: cm_path("while-down") in r.files())
    marker = await processed_past(env, "after-restart")
    after = env.remote.commits(since=before)
    assert [c.changes for c in after] == [(("A", cm_path("while-down")),), (("A", marker),)], [
        c.subject for c in after
    ]
    assert_authored(after[0], ALICE, {"exact"})


async def test_changes_made_while_the_cursors_expired_are_credited_to_their_authors(env: Env) -> None:
    """The service is down while the cluster moves on: etcd is compacted and the apiserver restarted,
    so the watch cursors cannot be served (410 Gone) and the streams take snapshots. alice's create
    and bob's delete made meanwhile reach Git as their own commits, not in a `reconciled` commit and
    not left behind (issue 13: snapshot objects joined with the facts; absences deleted under OnEvent).
    """
    async with kube_client(env.kubeconfig, ALICE) as api:
        await client.CoreV1Api(api).create_namespaced_config_map(NAMESPACE, cm("doomed", {"k": "v"}))
    await wait_until(env, "doomed", lambda r: cm_path("doomed") in r.files())
    await processed_past(env, "before-gap")
    before = env.remote.head()
    assert await asyncio.to_thread(env.service.stop) == 0
    # first the cluster forgets the cursors' revisions, then the changes (whose audit batches the
    # restarted apiserver retries until the service is back)
    await asyncio.to_thread(env.plane.compact_etcd)
    await asyncio.to_thread(env.plane.restart_apiserver)
    async with kube_client(env.kubeconfig, ALICE) as api:
        await client.CoreV1Api(api).create_namespaced_config_map(NAMESPACE, cm("in-the-gap", {"k": "v"}))
    async with kube_client(env.kubeconfig, BOB) as api:
        await client.CoreV1Api(api).delete_namespaced_config_map("doomed", NAMESPACE)
    await asyncio.to_thread(env.service.start)

    await wait_until(env, "in-the-gap", lambda r: cm_path("in-the-gap") in r.files())
    await wait_until(env, "doomed deleted", lambda r: cm_path("doomed") not in r.files())
    assert env.service.metric_sum("reverser_watch_gone_total") >= 1, "the cursors were served: no snapshot"
    after = env.remote.commits(since=before)
    (created,) = touching(after, cm_path("in-the-gap"))
    assert_authored(created, ALICE, {"exact"})
    (deleted,) = touching(after, cm_path("doomed"))
    assert_authored(deleted, BOB, {"name"})  # a ConfigMap delete is answered with a Status


async def test_a_cold_reader_of_object_state_sees_the_cluster(env: Env) -> None:
    """Runs last: after the creates, updates and deletes above (and a restart), the first read of
    `<prefix>.object-state` holds exactly the target's objects the apiserver lists, at their
    current resourceVersions, and renders to the files on the branch."""
    marker = await processed_past(env, "object-state-marker")
    settings = Settings.model_validate(yaml.safe_load(env.service.config_path.read_text()))
    topic = TopicNames.for_prefix(settings.log.topic_prefix).object_state
    async with kube_client(env.kubeconfig) as api:
        core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
        listed = {
            ("configmaps", c.metadata.name): c.metadata.resource_version
            for c in (await core.list_namespaced_config_map(NAMESPACE)).items
        } | {
            ("deployments", d.metadata.name): d.metadata.resource_version
            for d in (await apps.list_namespaced_deployment(NAMESPACE)).items
        }
    log = open_log(settings)
    await log.start()
    try:

        async def marker_state() -> bool:
            states = await load_object_state(log, topic, frozenset({"e2e"}))
            return any(s.name == marker.rsplit("/", 1)[-1].removesuffix(".yaml") for s in states)

        await wait_for(marker_state, timeout_s=WAIT_S, what="the marker's object state")
        states = await load_object_state(log, topic, frozenset({"e2e"}))
    finally:
        await log.close()
    mirrored = {(s.resource, s.name): s.resource_version for s in states}
    files = env.remote.files()
    in_git = {p for p in files if p.startswith(f"{TARGET_PATH}/")}
    assert set(listed) - set(mirrored) == set(), "every listed object has its state"
    assert set(mirrored) - set(listed) == set(), "no state for an object the cluster no longer has"
    assert mirrored == listed, "each at the version the apiserver lists"

    def path_of(resource: str, name: str) -> str:
        return f"{CM_DIR if resource == 'configmaps' else DEPLOY_DIR}/{name}.yaml"

    assert {path_of(r, n) for r, n in mirrored} == in_git
    for state in states:
        assert state.document.decode() == files[path_of(state.resource, state.name)]
