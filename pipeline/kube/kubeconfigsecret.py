"""Remote clusters reached through a kubeconfig held in a Secret (`clusters[].kubeconfig_secret`).

gitops-reverser's ClusterProvider names a remote source cluster by `spec.kubeConfig.secretRef`
(Flux's `KubeConfigReference`): a Secret in the operator's namespace, so a cluster's credential
never has to live on that cluster nor in the pod's filesystem. Here the Secret is read through
the API server of the cluster the custom resources live in (`Settings.resources_cluster`), each
time the remote cluster's client is opened, so a rotated kubeconfig is picked up when the client is
next opened (a changed configuration, or the retry of a failed one).

The pure half (`kubeconfig_of`) picks the key (`key`, else `value`, else `value.yaml`: Flux's
order), parses it and refuses what would be unsafe to run in this pod, as gitops-reverser does:
`exec` and `auth-provider` users (a command or plugin run with the pod's rights) and
`insecure-skip-tls-verify`, and paths to files of this pod (`tokenFile`, `client-key`,
`certificate-authority`: a Secret could otherwise send the pod's own service-account token to
another server). Every error is a `KubeconfigSecretError` naming the Secret, the key and
the kubeconfig field, never a value, with its reason in gitops-reverser's words (`KubeconfigReason`,
the ClusterProvider's `Validated` reasons): the manager reports it as that cluster's
`ClusterConfigError` and retries later, while every other cluster keeps running.

A client opened from a Secret reads it again when the remote cluster answers 401 (a rotated
token or certificate), and continues with the new kubeconfig if it changed (`pipeline.kube.client`,
`Reauthenticate`), so a rotation heals without waiting for the next rediscovery.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Awaitable, Callable, Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import yaml

from pipeline.config import ClusterSettings, KubeconfigSecretReference
from pipeline.kube.client import (
    KubeClient,
    KubeError,
    Reauthenticate,
    api_client_from_dict,
    open_client_from_dict,
)

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient

__all__ = [
    "DEFAULT_KEYS",
    "KubeconfigReason",
    "KubeconfigSecretError",
    "kubeconfig_of",
    "read_kubeconfig",
    "with_kubeconfig_secrets",
]

#: The keys read when the reference names none, in order (Flux's `value`, then `value.yaml`).
DEFAULT_KEYS = ("value", "value.yaml")

_Factory = Callable[[ClusterSettings], Awaitable[KubeClient]]

logger = logging.getLogger(__name__)


#: User fields naming a file of the pod (the pod's own service-account token, say), and their
#: inline counterparts: a Secret's kubeconfig must carry its credential, not point at ours.
_DATA = {
    "tokenFile": "token",
    "client-certificate": "client-certificate-data",
    "client-key": "client-key-data",
}
_USER_FILES = tuple(_DATA)


class KubeconfigReason(StrEnum):
    """Why a kubeconfig Secret cannot be used: gitops-reverser's ClusterProvider `Validated=False`
    reasons, and ours for a Secret the API server would not give (403, or no answer)."""

    SECRET_NOT_FOUND = "KubeConfigSecretNotFound"
    KEY_NOT_FOUND = "KubeConfigKeyNotFound"
    INVALID = "KubeConfigInvalid"
    EXEC_NOT_ALLOWED = "KubeConfigExecNotAllowed"
    INSECURE_TLS_NOT_ALLOWED = "KubeConfigInsecureTLSNotAllowed"
    FILE_REFERENCE_NOT_ALLOWED = "KubeConfigFileReferenceNotAllowed"
    SECRET_UNREADABLE = "KubeConfigSecretUnreadable"


class KubeconfigSecretError(Exception):
    """A kubeconfig Secret that is missing, unreadable, or holds no usable kubeconfig."""

    def __init__(self, message: str, reason: KubeconfigReason = KubeconfigReason.INVALID) -> None:
        super().__init__(message)
        self.reason = reason


def _key_of(ref: KubeconfigSecretReference, data: Mapping[str, bytes]) -> str:
    if ref.key is not None:
        if ref.key not in data:
            raise KubeconfigSecretError(
                f"{ref.describe()} has no key {ref.key!r} (its keys: {', '.join(sorted(data)) or 'none'})",
                KubeconfigReason.KEY_NOT_FOUND,
            )
        return ref.key
    found = next((key for key in DEFAULT_KEYS if key in data), None)
    if found is None:
        raise KubeconfigSecretError(
            f"{ref.describe()} has neither key 'value' nor 'value.yaml' (its keys: "
            f"{', '.join(sorted(data)) or 'none'}); name the key in kubeConfig.secretRef.key",
            KubeconfigReason.KEY_NOT_FOUND,
        )
    return found


def _named(entries: Any, section: str, where: str) -> dict[str, dict[str, Any]]:
    """`clusters`/`users`/`contexts` by name; their bodies must be mappings."""
    if entries is None:
        return {}
    if not isinstance(entries, list):
        raise KubeconfigSecretError(f"{where}: {section} must be a list")
    out: dict[str, dict[str, Any]] = {}
    for index, entry in enumerate(entries):
        body = entry.get(section[:-1]) if isinstance(entry, dict) else None
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("name"), str)
            or not isinstance(body, dict)
        ):
            raise KubeconfigSecretError(
                f"{where}: {section}[{index}] needs a name and a {section[:-1]} mapping"
            )
        out[entry["name"]] = body
    return out


def _unsafe(
    users: Mapping[str, Mapping[str, Any]], clusters: Mapping[str, Mapping[str, Any]]
) -> tuple[KubeconfigReason, str] | None:
    for name, user in users.items():
        for field in ("exec", "auth-provider"):
            if user.get(field) is not None:
                return KubeconfigReason.EXEC_NOT_ALLOWED, (
                    f"user {name!r} sets {field}, which runs a command or plugin inside this pod with its "
                    "rights; use a token or a client certificate"
                )
        for field in _USER_FILES:
            if user.get(field) is not None:
                return KubeconfigReason.FILE_REFERENCE_NOT_ALLOWED, (
                    f"user {name!r} sets {field}, a file of this pod; put the credential in {_DATA[field]}"
                )
    for name, cluster in clusters.items():
        if cluster.get("insecure-skip-tls-verify") is True:
            return KubeconfigReason.INSECURE_TLS_NOT_ALLOWED, (
                f"cluster {name!r} sets insecure-skip-tls-verify; give its certificate-authority-data"
            )
        if cluster.get("certificate-authority") is not None:
            return KubeconfigReason.FILE_REFERENCE_NOT_ALLOWED, (
                f"cluster {name!r} sets certificate-authority, a file of this pod; put the certificate "
                "in certificate-authority-data"
            )
    return None


def kubeconfig_of(ref: KubeconfigSecretReference, data: Mapping[str, bytes]) -> dict[str, Any]:
    """The kubeconfig the Secret's `data` holds, checked; raises KubeconfigSecretError (no value shown)."""
    key = _key_of(ref, data)
    where = f"{ref.describe()} key {key}"
    try:
        parsed = yaml.safe_load(data[key].decode("utf-8"))
    except UnicodeDecodeError:
        raise KubeconfigSecretError(f"{where}: not UTF-8 text") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise KubeconfigSecretError(f"{where}: not valid YAML{at}") from None
    if not isinstance(parsed, dict):
        raise KubeconfigSecretError(f"{where}: not a kubeconfig (a mapping with clusters, users, contexts)")
    clusters = _named(parsed.get("clusters"), "clusters", where)
    users = _named(parsed.get("users"), "users", where)
    contexts = _named(parsed.get("contexts"), "contexts", where)
    current = parsed.get("current-context")
    if not isinstance(current, str) or current not in contexts:
        raise KubeconfigSecretError(f"{where}: current-context must name one of its contexts")
    context = contexts[current]
    if context.get("cluster") not in clusters:
        raise KubeconfigSecretError(f"{where}: context {current!r} names no cluster of the kubeconfig")
    if not isinstance(clusters[context["cluster"]].get("server"), str):
        raise KubeconfigSecretError(f"{where}: cluster {context['cluster']!r} has no server")
    if context.get("user") is not None and context.get("user") not in users:
        raise KubeconfigSecretError(f"{where}: context {current!r} names no user of the kubeconfig")
    unsafe = _unsafe(users, clusters)
    if unsafe is not None:
        raise KubeconfigSecretError(f"{where}: {unsafe[1]}", unsafe[0])
    return parsed


async def read_kubeconfig(client: KubeClient, ref: KubeconfigSecretReference) -> dict[str, Any]:
    """GET the Secret through `client` and return its checked kubeconfig; raises KubeconfigSecretError."""
    try:
        found = await client.get_json(f"/api/v1/namespaces/{ref.namespace}/secrets/{ref.name}")
    except KubeError as exc:
        if exc.not_found:
            raise KubeconfigSecretError(
                f"{ref.describe()} does not exist", KubeconfigReason.SECRET_NOT_FOUND
            ) from None
        if exc.status == 403:
            raise KubeconfigSecretError(
                f"{ref.describe()}: reading it is forbidden (the service account needs get on secrets "
                f"in namespace {ref.namespace})",
                KubeconfigReason.SECRET_UNREADABLE,
            ) from None
        raise KubeconfigSecretError(
            f"{ref.describe()}: the API server of cluster {client.name} answered {exc.status} {exc.reason}",
            KubeconfigReason.SECRET_UNREADABLE,
        ) from None
    encoded = found.get("data")
    data: dict[str, bytes] = {}
    for key, value in (encoded if isinstance(encoded, dict) else {}).items():
        try:
            data[str(key)] = base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError):
            raise KubeconfigSecretError(f"{ref.describe()} key {key}: not valid base64") from None
    return kubeconfig_of(ref, data)


def with_kubeconfig_secrets(base: _Factory, holder: ClusterSettings | None) -> _Factory:
    """`base`, except that a cluster with `kubeconfig_secret` is opened from the Secret, read
    through a client of `holder` (the cluster the Secrets live in; None: no cluster to read from)."""

    async def read(ref: KubeconfigSecretReference) -> dict[str, Any]:
        if holder is None:
            raise KubeconfigSecretError(
                f"{ref.describe()}: no cluster in clusters to read it from",
                KubeconfigReason.SECRET_UNREADABLE,
            )
        reader = await base(holder)
        try:
            return await read_kubeconfig(reader, ref)
        finally:
            await reader.close()

    async def factory(cluster: ClusterSettings) -> KubeClient:
        ref = cluster.kubeconfig_secret
        if ref is None:
            return await base(cluster)
        kubeconfig = await read(ref)
        try:
            return await open_client_from_dict(
                cluster, kubeconfig, _rereading(cluster, ref, kubeconfig, read)
            )
        except Exception as exc:  # the loader raises many types; its messages may quote the file
            raise KubeconfigSecretError(
                f"{ref.describe()}: the kubeconfig could not be loaded ({type(exc).__name__})"
            ) from None

    return factory


def _rereading(
    cluster: ClusterSettings,
    ref: KubeconfigSecretReference,
    first: dict[str, Any],
    read: Callable[[KubeconfigSecretReference], Awaitable[dict[str, Any]]],
) -> Reauthenticate:
    """After a 401 from `cluster`: the Secret read again, and a new API client when its kubeconfig
    changed (None when it did not, or cannot be used: the 401 then stands)."""
    current = first

    async def reauthenticate() -> ApiClient | None:
        nonlocal current
        try:
            kubeconfig = await read(ref)
        except KubeconfigSecretError as exc:
            logger.warning(
                "cluster %s answered 401; reading its kubeconfig again failed: %s", cluster.name, exc
            )
            return None
        if kubeconfig == current:
            logger.warning(
                "cluster %s answered 401 and %s holds the same kubeconfig", cluster.name, ref.describe()
            )
            return None
        try:
            api = await api_client_from_dict(kubeconfig)
        except Exception as exc:  # the loader raises many types; its messages may quote the file
            logger.warning(
                "cluster %s: the rotated kubeconfig of %s could not be loaded (%s)",
                cluster.name,
                ref.describe(),
                type(exc).__name__,
            )
            return None
        current = kubeconfig
        logger.info(
            "cluster %s answered 401: continuing with the rotated kubeconfig of %s",
            cluster.name,
            ref.describe(),
        )
        return api

    return reauthenticate
