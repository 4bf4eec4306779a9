"""`get` of Secrets and ConfigMaps on the cluster, for the commit worker's credentials.

The commit worker (a stage) does not know Kubernetes clients; `reverser run` hands it this
reader. It reads from the cluster the custom resources live in (`custom_resources.cluster`, else
the first of `clusters`) with the same client construction as the watch stage and the
controller, opened on first use. It only ever GETs one named object (no list, no watch), so the
ServiceAccount needs nothing but `get` on the Secrets it is pointed at (docs/security.md).
Kubernetes errors are translated here into `CredentialsError` with a reason; no value ever
appears in a message.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Mapping

from pipeline.config import Settings
from pipeline.gitcredentials import CredentialsError, CredentialsReason
from pipeline.kube.client import KubeClient, KubeError, open_client
from pipeline.watch.manager import ClientFactory

__all__ = ["ClusterObjects"]

_PATHS = {"Secret": "secrets", "ConfigMap": "configmaps"}


def _decoded(kind: str, described: str, found: dict[str, object]) -> dict[str, bytes]:
    """A Secret's `data` (base64) or a ConfigMap's `data` (text) and `binaryData` (base64), as bytes."""
    out: dict[str, bytes] = {}
    encoded = found.get("binaryData") if kind == "ConfigMap" else found.get("data")
    for key, value in (encoded if isinstance(encoded, dict) else {}).items():
        try:
            out[str(key)] = base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError):
            raise CredentialsError(
                CredentialsReason.MISSING_KEY, f"{described}: key {key} is not valid base64"
            ) from None
    if kind == "ConfigMap":
        text = found.get("data")
        for key, value in (text if isinstance(text, dict) else {}).items():
            out[str(key)] = str(value).encode()
    return out


class ClusterObjects:
    """Reads one object at a time; the client is opened on first use and kept until `close`."""

    def __init__(self, settings: Settings, client_factory: ClientFactory = open_client) -> None:
        self._settings = settings
        self._factory = client_factory
        self._client: KubeClient | None = None
        self._opening = asyncio.Lock()

    async def _open(self) -> KubeClient:
        async with self._opening:
            if self._client is None:
                if not self._settings.clusters:
                    raise CredentialsError(
                        CredentialsReason.UNREACHABLE, "no cluster in clusters to read credentials from"
                    )
                cluster = self._settings.resources_cluster
                try:
                    self._client = await self._factory(cluster)
                except Exception as exc:  # kubeconfig loaders raise many types for a bad file
                    raise CredentialsError(
                        CredentialsReason.UNREACHABLE,
                        f"cannot build a client for cluster {cluster.name}: {type(exc).__name__}",
                    ) from None
            return self._client

    async def read(self, kind: str, namespace: str, name: str) -> Mapping[str, bytes]:
        """The object's keys and values; raises CredentialsError naming the object, never a value."""
        described = f"{kind} {namespace}/{name}"
        client = await self._open()
        try:
            found = await client.get_json(f"/api/v1/namespaces/{namespace}/{_PATHS[kind]}/{name}")
        except KubeError as exc:
            if exc.not_found:
                raise CredentialsError(CredentialsReason.NOT_FOUND, f"{described} does not exist") from None
            if exc.status == 403:
                raise CredentialsError(
                    CredentialsReason.FORBIDDEN,
                    f"{described}: reading it is forbidden (the service account needs get on "
                    f"{_PATHS[kind]} in namespace {namespace})",
                ) from None
            raise CredentialsError(
                CredentialsReason.UNREACHABLE,
                f"{described}: the API server answered {exc.status} {exc.reason}",
            ) from None
        return _decoded(kind, described, found)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None
