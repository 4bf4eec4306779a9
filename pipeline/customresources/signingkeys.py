"""gitops-reverser's `commit.signing.generateWhenMissing`: create the signing key Secret once.

A GitProvider that asks for it gets an ed25519 SSH key in its signing Secret (`signing.key`, the
OpenSSH private key; `signing.pub`, the authorized_keys line; GR's layout), made by the leading
configuration controller when the Secret does not exist or holds no `signing.key`. Several
replicas, or a leader that changes while it works, cannot make two keys: a missing Secret is made
with `create`, which the apiserver lets exactly one caller win (the others read the winner's);
a Secret without the key is completed with an `update` carrying the `resourceVersion` it read,
which fails for everyone but one when several try (they read again and find the key). A Secret
that already holds a key is never touched, so a key is never replaced. The commit worker then
reads the Secret as it reads any signing Secret. The key's private half is never logged; the
outcome is counted in `reverser_config_signing_keys_total{outcome}`.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from prometheus_client import Counter

from pipeline.customresources.objects import CustomResource, Kind
from pipeline.kube.client import KubeClient, KubeError

__all__ = ["KeyOutcome", "SigningSecret", "ensure_signing_secret", "generated_key", "requested"]

logger = logging.getLogger(__name__)

KEY = "signing.key"
PUBLIC = "signing.pub"
_ATTEMPTS = 3


class KeyOutcome(StrEnum):
    """What ensuring one signing Secret did (the `outcome` label)."""

    EXISTS = "exists"
    CREATED = "created"
    ADDED = "added"
    FORBIDDEN = "forbidden"
    ERROR = "error"


KEYS = Counter(
    "reverser_config_signing_keys_total",
    "Signing key Secrets of GitProviders with generateWhenMissing, by what ensuring them did "
    "(exists, created, added: a key put into an existing Secret, forbidden, error).",
    ["outcome"],
)


@dataclass(frozen=True, slots=True, order=True)
class SigningSecret:
    namespace: str
    name: str

    def describe(self) -> str:
        return f"{self.namespace}/{self.name}"


def requested(objects: Iterable[CustomResource]) -> list[SigningSecret]:
    """The signing Secrets of GitProviders that set `spec.commit.signing.generateWhenMissing: true`."""
    found: set[SigningSecret] = set()
    for obj in objects:
        if obj.ref.kind is not Kind.GIT_PROVIDER:
            continue
        commit = obj.spec.get("commit")
        signing = commit.get("signing") if isinstance(commit, dict) else None
        if not isinstance(signing, dict) or signing.get("generateWhenMissing") is not True:
            continue
        ref = signing.get("secretRef")
        name = ref.get("name") if isinstance(ref, dict) else None
        if isinstance(name, str) and name:
            found.add(SigningSecret(obj.ref.namespace, name))
    return sorted(found)


def generated_key() -> tuple[bytes, bytes]:
    """A new ed25519 key: the OpenSSH private key and its authorized_keys line."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return private, public + b"\n"


def _data(private: bytes, public: bytes) -> dict[str, str]:
    return {KEY: base64.b64encode(private).decode(), PUBLIC: base64.b64encode(public).decode()}


def _path(secret: SigningSecret, named: bool = True) -> str:
    base = f"/api/v1/namespaces/{secret.namespace}/secrets"
    return f"{base}/{secret.name}" if named else base


async def ensure_signing_secret(client: KubeClient, secret: SigningSecret) -> KeyOutcome:
    """Make sure `secret` holds a signing key, creating or completing it at most once."""
    outcome = await _ensure(client, secret)
    KEYS.labels(outcome).inc()
    if outcome in (KeyOutcome.CREATED, KeyOutcome.ADDED):
        logger.info(
            "signing key Secret %s: %s a new ed25519 key (generateWhenMissing)", secret.describe(), outcome
        )
    return outcome


async def _ensure(client: KubeClient, secret: SigningSecret) -> KeyOutcome:
    for _ in range(_ATTEMPTS):
        try:
            found: dict[str, Any] | None = await client.get_json(_path(secret))
        except KubeError as exc:
            if not exc.not_found:
                return _failed(secret, "read", exc)
            found = None
        if found is not None and (found.get("data") or {}).get(KEY):
            return KeyOutcome.EXISTS
        private, public = generated_key()
        try:
            if found is None:
                body = {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {
                        "name": secret.name,
                        "namespace": secret.namespace,
                        "labels": {"app.kubernetes.io/managed-by": "reverser-pipeline"},
                    },
                    "type": "Opaque",
                    "data": _data(private, public),
                }
                await client.send_json("POST", _path(secret, named=False), body)
                return KeyOutcome.CREATED
            # resourceVersion makes it an update of exactly what was read: of several, one wins
            updated = {**found, "data": {**(found.get("data") or {}), **_data(private, public)}}
            await client.send_json("PUT", _path(secret), updated)
            return KeyOutcome.ADDED
        except KubeError as exc:
            if exc.status == 409:
                continue  # another replica created or completed it first: read what it wrote
            return _failed(secret, "write", exc)
    return _failed(secret, "write", KubeError(409, "Conflict", "changed while it was being completed"))


def _failed(secret: SigningSecret, what: str, exc: KubeError) -> KeyOutcome:
    forbidden = exc.status == 403
    logger.warning(
        "signing key Secret %s (generateWhenMissing): cannot %s it: %s%s",
        secret.describe(),
        what,
        exc,
        "; grant the service account create (and update) on Secrets in that namespace" if forbidden else "",
    )
    return KeyOutcome.FORBIDDEN if forbidden else KeyOutcome.ERROR
