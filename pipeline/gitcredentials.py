"""A provider's credentials as git needs them, from a Kubernetes Secret, decided without I/O.

This module is their one owner: which keys of a Secret mean what, and what an SSH key must look
like for git's ssh (unlocked, OpenSSH form) and for signing (its public half). The commit
worker's `SecretAccess` (`pipeline.commit.git.credentials`) only reads the Secrets, writes the
key files and reports; `doctor` and `replay` decide through the same functions.

A GitProvider's `spec.secretRef` (a provider's `credentials_secret` in the file) names a Secret
whose keys are spelled in one of three dialects, as gitops-reverser accepts them: Kubernetes'
own (`ssh-privatekey`, `ssh-password`, `username`, `password`), Flux's (`identity`,
`known_hosts`) and Argo CD's (`sshPrivateKey`). Exactly one method is used, SSH key before HTTP
basic before a bearer token, so a Secret that carries several never mixes them. SSH host trust
comes from the Secret's `known_hosts`, else from the provider's known-hosts reference (a
ConfigMap or Secret with `known_hosts` or `ssh_known_hosts`); with neither, an SSH remote is
refused (fail closed) unless the provider allows unknown host keys.

Every message names the Secret and the key, never a value: messages reach logs, metrics
labels (the reason only) and the custom resources' status.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

__all__ = [
    "KNOWN_HOSTS_KEYS",
    "SIGNING_KEY_KEYS",
    "SIGNING_PASSPHRASE_KEYS",
    "SSH_KEY_KEYS",
    "CredentialsError",
    "CredentialsReason",
    "GitCredentials",
    "ObjectReader",
    "SigningKey",
    "credentials_from_secret",
    "known_hosts_from",
    "load_private_key",
    "public_key_of",
    "signing_key_from_secret",
    "unlocked_key",
]

#: Keys of an SSH private key, first non-empty wins: Kubernetes, Flux, Argo CD.
SSH_KEY_KEYS = ("ssh-privatekey", "identity", "sshPrivateKey")
#: Keys of a known-hosts object (a known-hosts reference); a credentials Secret's own is `known_hosts`.
KNOWN_HOSTS_KEYS = ("known_hosts", "ssh_known_hosts")
_SECRET_KNOWN_HOSTS = "known_hosts"
#: Keys of an SSH signing key (a GitProvider's `spec.commit.signing.secretRef`), first non-empty
#: wins: this project's own name, then the SSH key names of a credentials Secret, so one Secret
#: may serve both.
SIGNING_KEY_KEYS = ("signing.key", *SSH_KEY_KEYS)
#: Keys of the signing key's passphrase, first non-empty wins: gitops-reverser's `passphrase`
#: (its signing Secret holds `signing.key`, `signing.pub` and `passphrase`), this project's own
#: name, then a credentials Secret's.
SIGNING_PASSPHRASE_KEYS = ("passphrase", "signing.passphrase", "ssh-password")


#: `get` of one object's data on the cluster: (kind `Secret` or `ConfigMap`, namespace, name) to its
#: keys and (decoded) values; raises CredentialsError (not_found, forbidden, unreachable).
ObjectReader = Callable[[str, str, str], Awaitable[Mapping[str, bytes]]]


class CredentialsReason(StrEnum):
    """Why a provider has no usable credentials (the `reason` label of the errors metric)."""

    NOT_FOUND = "not_found"
    FORBIDDEN = "forbidden"
    UNREACHABLE = "unreachable"
    MISSING_KEY = "missing_key"
    NO_KNOWN_HOSTS = "no_known_hosts"
    INVALID_KEY = "invalid_key"
    REJECTED = "rejected"


class CredentialsError(Exception):
    """No usable credentials; the message names the object and the key, never a value."""

    def __init__(self, reason: CredentialsReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class GitCredentials:
    """What one Secret gives: an SSH key (and its passphrase), basic credentials or a bearer token.

    Values are left out of the repr, so a log line or a traceback never shows them.
    """

    ssh_key: str | None = field(default=None, repr=False)
    ssh_passphrase: str | None = field(default=None, repr=False)
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    bearer_token: str | None = field(default=None, repr=False)
    known_hosts: str | None = field(default=None, repr=False)

    @property
    def method(self) -> str:
        """`ssh`, `basic`, `bearer` or `anonymous` (for logs: never a value)."""
        if self.ssh_key is not None:
            return "ssh"
        if self.password is not None:
            return "basic"
        return "bearer" if self.bearer_token is not None else "anonymous"


def _text(data: Mapping[str, bytes], key: str) -> str | None:
    """The key's value as text, or None when absent or blank (a blank key counts as unset)."""
    raw = data.get(key)
    if raw is None:
        return None
    text = raw.decode("utf-8", "replace")
    return text if text.strip() else None


def _first(data: Mapping[str, bytes], keys: tuple[str, ...]) -> str | None:
    for key in keys:
        value = _text(data, key)
        if value is not None:
            return value
    return None


def credentials_from_secret(secret: str, data: Mapping[str, bytes]) -> GitCredentials:
    """The credentials in a Secret's (base64-decoded) `data`; `secret` is `namespace/name` for messages.

    SSH key > basic > bearer: the first method present is the only one kept. A `username` without
    a `password` raises CredentialsError naming the Secret and `password`; a Secret with none of
    the keys raises naming the keys looked for.
    """
    known_hosts = _text(data, _SECRET_KNOWN_HOSTS)
    ssh_key = _first(data, SSH_KEY_KEYS)
    if ssh_key is not None:
        passphrase = _text(data, "ssh-password") or _text(data, "password")
        return GitCredentials(ssh_key=ssh_key, ssh_passphrase=passphrase, known_hosts=known_hosts)
    username, password = _text(data, "username"), _text(data, "password")
    if username is not None and password is None:
        raise CredentialsError(
            CredentialsReason.MISSING_KEY, f"Secret {secret} has key username but no key password"
        )
    if password is not None:
        return GitCredentials(username=username or "", password=password, known_hosts=known_hosts)
    token = _text(data, "bearerToken")
    if token is not None:
        return GitCredentials(bearer_token=token, known_hosts=known_hosts)
    wanted = ", ".join([*SSH_KEY_KEYS, "password", "bearerToken"])
    raise CredentialsError(CredentialsReason.MISSING_KEY, f"Secret {secret} has none of the keys {wanted}")


def known_hosts_from(described: str, data: Mapping[str, bytes]) -> str:
    """The known_hosts text of a known-hosts reference (`described`: `ConfigMap ns/name`)."""
    return _required(
        data,
        KNOWN_HOSTS_KEYS,
        CredentialsReason.NO_KNOWN_HOSTS,
        f"{described} has neither key {' nor '.join(KNOWN_HOSTS_KEYS)}",
    )


def _required(
    data: Mapping[str, bytes], keys: tuple[str, ...], reason: CredentialsReason, missing: str
) -> str:
    """The first of `keys` present; else CredentialsError(reason, missing)."""
    found = _first(data, keys)
    if found is None:
        raise CredentialsError(reason, missing)
    return found


@dataclass(frozen=True, slots=True)
class SigningKey:
    """An SSH signing key from a Secret (and its passphrase); values left out of the repr."""

    key: str = field(repr=False)
    passphrase: str | None = field(default=None, repr=False)


def signing_key_from_secret(secret: str, data: Mapping[str, bytes]) -> SigningKey:
    """The SSH signing key in a Secret's `data`; raises CredentialsError naming the keys looked for."""
    key = _required(
        data,
        SIGNING_KEY_KEYS,
        CredentialsReason.MISSING_KEY,
        f"Secret {secret} has none of the signing key keys {', '.join(SIGNING_KEY_KEYS)}",
    )
    return SigningKey(key, _first(data, SIGNING_PASSPHRASE_KEYS))


def load_private_key(data: bytes, passphrase: bytes | None) -> PrivateKeyTypes:
    """An SSH private key in OpenSSH or PEM form, as ssh and ssh-keygen read it. Raises ValueError
    (not a key), TypeError (encrypted, and no passphrase given) or UnsupportedAlgorithm."""
    try:
        return serialization.load_ssh_private_key(data, passphrase)
    except ValueError:
        return serialization.load_pem_private_key(data, passphrase)


def unlocked_key(secret: str, key: str, passphrase: str | None, keys: str) -> str:
    """The SSH key without its passphrase (ssh run by git can be given none), in OpenSSH form;
    `keys` names where the passphrase came from, for the error."""
    if passphrase is None:
        return key
    try:
        loaded = load_private_key(key.encode(), passphrase.encode())
    except TypeError:
        return key  # not encrypted: the passphrase key was for something else
    except ValueError:
        raise CredentialsError(
            CredentialsReason.INVALID_KEY,
            f"Secret {secret}: the SSH key cannot be opened with the passphrase of key {keys}",
        ) from None
    return loaded.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    ).decode("ascii")


def public_key_of(secret: str, key: str) -> str:
    """The public half in authorized_keys form (`ssh-ed25519 AAAA...`), from an unlocked key."""
    try:
        loaded = load_private_key(key.encode(), None)
        public = loaded.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise CredentialsError(
            CredentialsReason.INVALID_KEY,
            f"Secret {secret}: the signing key is not an SSH private key this service can read "
            f"(keys {', '.join(SIGNING_KEY_KEYS)})",
        ) from None
    return public.decode("ascii")
