"""A seeded workload of people changing a real cluster, and its own record of what it did.

Several workers act in parallel, each on objects only it touches (so no request conflicts with
another worker's), as alice, bob, carol or a service account (impersonation): creates, full
updates, merge patches, server-side apply, scale through the subresource, plain deletes, deletes
held by a finalizer that another service account removes, and label-selected deletecollection.
Every version a mutation produces carries a unique `seq` (a ConfigMap's `data.seq`, a
Deployment's `chaos/seq` annotation plus its replica count), so the oracle can find each version
in the Git history and know exactly who made it.
"""

from __future__ import annotations

import asyncio
import contextvars
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio import client

from tests.e2e.kube import kube_client

__all__ = [
    "FINALIZER",
    "FINALIZER_REMOVER",
    "ROBOT",
    "USERS",
    "Mutation",
    "Target",
    "Workload",
    "fingerprint",
]

USERS = ("alice", "bob", "carol")
ROBOT = "system:serviceaccount:kube-system:chaos-robot"
FINALIZER_REMOVER = "system:serviceaccount:kube-system:finalizer-remover"
FINALIZER = "chaos.reverser.invalid/hold"
SEQ_ANNOTATION = "chaos/seq"
CM_DIR = "configmaps"
FINALIZER_ATTEMPTS = 60
DEPLOY_DIR = "apps/deployments"


@dataclass(frozen=True, slots=True)
class Target:
    """One target of the pipeline: a namespace mirrored to `path` on `branch`."""

    name: str
    namespace: str
    branch: str
    path: str

    def file(self, directory: str, name: str) -> str:
        return f"{self.path}/{self.namespace}/{directory}/{name}.yaml"


@dataclass(frozen=True, slots=True)
class Mutation:
    """One answered request and the version it left (None: the object is gone)."""

    seq: int
    user: str
    op: str
    branch: str
    path: str
    fingerprint: str | None
    at: float  # time.monotonic() when the response came back
    # time.monotonic() before the request was sent (0: not recorded); with `at` it bounds when the
    # apiserver stored the write, which response times alone cannot order
    sent: float = 0.0

    @property
    def started(self) -> float:
        """No later than the request was sent (its response time when that was not recorded)."""
        return self.sent or self.at


# when the current worker's action began: before any request it sends (each worker is its own task)
_ACTION_STARTED: contextvars.ContextVar[float] = contextvars.ContextVar("action_started", default=0.0)


def fingerprint(obj: dict[str, Any]) -> str:
    """The version identity of a ConfigMap or Deployment, as rendered in Git or read from the cluster."""
    if obj.get("kind") == "Deployment":
        seq = (obj.get("metadata", {}).get("annotations") or {}).get(SEQ_ANNOTATION, "?")
        return f"{seq}/{obj.get('spec', {}).get('replicas')}"
    return str((obj.get("data") or {}).get("seq", "?"))


@dataclass
class _Objects:
    """What one worker has alive, by kind."""

    configmaps: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)  # configmaps carrying the finalizer
    deployments: dict[str, int] = field(default_factory=dict)  # name -> replicas
    batches: dict[str, list[str]] = field(default_factory=dict)  # label value -> names


class Workload:
    """Runs `workers` seeded workers over `targets` until `stop()`; `mutations` is the record."""

    def __init__(self, kubeconfig: Path, targets: list[Target], seed: int, workers: int = 3) -> None:
        self.kubeconfig = kubeconfig
        self.targets = targets
        self.seed = seed
        self.workers = workers
        self.mutations: list[Mutation] = []
        self.failures: list[str] = []
        self._seq = 0
        self._stopping = asyncio.Event()
        self._paused = asyncio.Event()
        self._paused.set()

    def stop(self) -> None:
        self._stopping.set()

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _record(self, user: str, op: str, target: Target, path: str, fp: str | None, seq: int) -> None:
        sent = _ACTION_STARTED.get()
        self.mutations.append(Mutation(seq, user, op, target.branch, path, fp, time.monotonic(), sent))

    async def run(self, interval_s: tuple[float, float]) -> None:
        await asyncio.gather(*(self._worker(i, interval_s) for i in range(self.workers)))

    async def _worker(self, index: int, interval_s: tuple[float, float]) -> None:
        rng = random.Random(self.seed * 1000 + index)
        objects = {t.name: _Objects() for t in self.targets}
        counter = 0
        while not self._stopping.is_set():
            # The first two targets get most of the traffic; the others keep their branches busy.
            target = self.targets[rng.choice([0, 0, 1, 1, *range(len(self.targets))])]
            user = rng.choice([*USERS, ROBOT])
            counter += 1
            _ACTION_STARTED.set(time.monotonic())  # each worker is a task: its own context
            try:
                await self._act(rng, index, counter, target, user, objects[target.name])
            except client.ApiException as exc:
                # An apiserver restart refuses requests for a moment: not a mutation, not recorded.
                if exc.status not in (0, 500, 503, 504):
                    self.failures.append(f"worker {index}: {exc.status} {exc.reason}")
            except (TimeoutError, OSError, aiohttp.ClientError) as exc:
                # A request in flight when the apiserver restarts loses its answer (the server
                # disconnects): reported, and a version it made anyway counts as a phantom.
                self.failures.append(f"worker {index}: {type(exc).__name__}")
            await asyncio.sleep(rng.uniform(*interval_s))

    async def _act(
        self, rng: random.Random, worker: int, counter: int, target: Target, user: str, objs: _Objects
    ) -> None:
        choices: list[Callable[[], Any]] = [lambda: self._create_cm(rng, worker, counter, target, user, objs)]
        if objs.configmaps:
            choices += [
                lambda: self._update_cm(rng, target, user, objs),
                lambda: self._patch_cm(rng, target, user, objs),
                lambda: self._apply_cm(rng, target, user, objs),
                lambda: self._delete_cm(rng, target, user, objs),
            ]
        choices += [lambda: self._create_deployment(worker, counter, target, user, objs)]
        if objs.deployments:
            choices += [
                lambda: self._scale(rng, target, user, objs),
                lambda: self._scale(rng, target, user, objs),
            ]
        if objs.held:
            choices.append(lambda: self._delete_held(rng, target, user, objs))
        else:
            choices.append(lambda: self._create_held(worker, counter, target, user, objs))
        if objs.batches:
            choices.append(lambda: self._delete_batch(rng, target, user, objs))
        elif rng.random() < 0.3:
            choices.append(lambda: self._create_batch(worker, counter, target, user, objs))
        await rng.choice(choices)()

    # configmaps ---------------------------------------------------------------------------------
    def _cm(self, name: str, seq: int, **meta: Any) -> client.V1ConfigMap:
        return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, **meta), data={"seq": str(seq)})

    async def _create_cm(
        self, rng: random.Random, worker: int, counter: int, target: Target, user: str, objs: _Objects
    ) -> None:
        name = f"cm-w{worker}-{counter}"
        seq = self._next_seq()
        async with kube_client(self.kubeconfig, user) as api:
            await client.CoreV1Api(api).create_namespaced_config_map(target.namespace, self._cm(name, seq))
        self._record(user, "create", target, target.file(CM_DIR, name), str(seq), seq)
        objs.configmaps.append(name)

    async def _update_cm(self, rng: random.Random, target: Target, user: str, objs: _Objects) -> None:
        name = rng.choice(objs.configmaps)
        seq = self._next_seq()
        async with kube_client(self.kubeconfig, user) as api:
            core = client.CoreV1Api(api)
            current = await core.read_namespaced_config_map(name, target.namespace)
            current.data = {"seq": str(seq)}
            await core.replace_namespaced_config_map(name, target.namespace, current)
        self._record(user, "update", target, target.file(CM_DIR, name), str(seq), seq)

    async def _patch_cm(self, rng: random.Random, target: Target, user: str, objs: _Objects) -> None:
        name = rng.choice(objs.configmaps)
        seq = self._next_seq()
        async with kube_client(self.kubeconfig, user) as api:
            await client.CoreV1Api(api).patch_namespaced_config_map(
                name, target.namespace, {"data": {"seq": str(seq)}}
            )
        self._record(user, "patch", target, target.file(CM_DIR, name), str(seq), seq)

    async def _apply_cm(self, rng: random.Random, target: Target, user: str, objs: _Objects) -> None:
        name = rng.choice(objs.configmaps)
        seq = self._next_seq()
        manifest = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": target.namespace},
            "data": {"seq": str(seq)},
        }
        async with kube_client(self.kubeconfig, user) as api:
            await client.CoreV1Api(api).patch_namespaced_config_map(
                name,
                target.namespace,
                manifest,
                field_manager="chaos-apply",
                force=True,
                _content_type="application/apply-patch+yaml",  # type: ignore[call-arg]
            )
        self._record(user, "apply", target, target.file(CM_DIR, name), str(seq), seq)

    async def _delete_cm(self, rng: random.Random, target: Target, user: str, objs: _Objects) -> None:
        name = objs.configmaps.pop(rng.randrange(len(objs.configmaps)))
        seq = self._next_seq()
        async with kube_client(self.kubeconfig, user) as api:
            await client.CoreV1Api(api).delete_namespaced_config_map(name, target.namespace)
        self._record(user, "delete", target, target.file(CM_DIR, name), None, seq)

    # deletes through a finalizer ------------------------------------------------------------------
    async def _create_held(
        self, worker: int, counter: int, target: Target, user: str, objs: _Objects
    ) -> None:
        name = f"held-w{worker}-{counter}"
        seq = self._next_seq()
        async with kube_client(self.kubeconfig, user) as api:
            await client.CoreV1Api(api).create_namespaced_config_map(
                target.namespace, self._cm(name, seq, finalizers=[FINALIZER])
            )
        self._record(user, "create", target, target.file(CM_DIR, name), str(seq), seq)
        objs.held.append(name)

    async def _delete_held(self, rng: random.Random, target: Target, user: str, objs: _Objects) -> None:
        """`user` deletes; the object lingers until the finalizer remover lets it go."""
        name = objs.held.pop(rng.randrange(len(objs.held)))
        seq = self._next_seq()
        async with kube_client(self.kubeconfig, user) as api:
            await client.CoreV1Api(api).delete_namespaced_config_map(name, target.namespace)
        self._record(user, "delete_finalized", target, target.file(CM_DIR, name), None, seq)
        await self._remove_finalizer(target, name)

    async def _remove_finalizer(self, target: Target, name: str) -> None:
        """The finalizer's controller lets the object go; it retries through an apiserver restart."""
        for _ in range(FINALIZER_ATTEMPTS):
            try:
                async with kube_client(self.kubeconfig, FINALIZER_REMOVER) as api:
                    await client.CoreV1Api(api).patch_namespaced_config_map(
                        name, target.namespace, [{"op": "remove", "path": "/metadata/finalizers"}]
                    )
                return
            except (OSError, aiohttp.ClientError, client.ApiException):
                await asyncio.sleep(1.0)
        self.failures.append(f"finalizer of {target.namespace}/{name} never removed")

    # label-selected deletecollection --------------------------------------------------------------
    async def _create_batch(
        self, worker: int, counter: int, target: Target, user: str, objs: _Objects
    ) -> None:
        label = f"w{worker}-{counter}"
        names = [f"batch-{label}-{i}" for i in range(3)]
        async with kube_client(self.kubeconfig, user) as api:
            core = client.CoreV1Api(api)
            for name in names:
                seq = self._next_seq()
                await core.create_namespaced_config_map(
                    target.namespace, self._cm(name, seq, labels={"chaos-batch": label})
                )
                self._record(user, "create", target, target.file(CM_DIR, name), str(seq), seq)
        objs.batches[label] = names

    async def _delete_batch(self, rng: random.Random, target: Target, user: str, objs: _Objects) -> None:
        label = rng.choice(sorted(objs.batches))
        names = objs.batches.pop(label)
        async with kube_client(self.kubeconfig, user) as api:
            await client.CoreV1Api(api).delete_collection_namespaced_config_map(
                target.namespace, label_selector=f"chaos-batch={label}"
            )
        for name in names:
            self._record(user, "deletecollection", target, target.file(CM_DIR, name), None, self._next_seq())

    # deployments and the scale subresource ----------------------------------------------------
    async def _create_deployment(
        self, worker: int, counter: int, target: Target, user: str, objs: _Objects
    ) -> None:
        name = f"web-w{worker}-{counter}"
        seq = self._next_seq()
        labels = {"app": name}
        body = client.V1Deployment(
            metadata=client.V1ObjectMeta(name=name, annotations={SEQ_ANNOTATION: str(seq)}),
            spec=client.V1DeploymentSpec(
                replicas=1,
                selector=client.V1LabelSelector(match_labels=labels),
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(labels=labels),
                    spec=client.V1PodSpec(
                        containers=[client.V1Container(name="web", image="registry.invalid/web:1")]
                    ),
                ),
            ),
        )
        async with kube_client(self.kubeconfig, user) as api:
            await client.AppsV1Api(api).create_namespaced_deployment(target.namespace, body)
        self._record(user, "create", target, target.file(DEPLOY_DIR, name), f"{seq}/1", seq)
        objs.deployments[name] = 1

    async def _scale(self, rng: random.Random, target: Target, user: str, objs: _Objects) -> None:
        name = rng.choice(sorted(objs.deployments))
        # Always up: no two versions of one Deployment look alike (a scale changes no annotation).
        replicas = objs.deployments[name] + rng.randint(1, 3)
        async with kube_client(self.kubeconfig, user) as api:
            apps = client.AppsV1Api(api)
            await apps.patch_namespaced_deployment_scale(
                name, target.namespace, {"spec": {"replicas": replicas}}
            )
            deployment = await apps.read_namespaced_deployment(name, target.namespace)
        objs.deployments[name] = replicas
        seq = deployment.metadata.annotations[SEQ_ANNOTATION]
        self._record(
            user, "scale", target, target.file(DEPLOY_DIR, name), f"{seq}/{replicas}", self._next_seq()
        )
