"""The commit worker's private keys directory: which file holds what for which provider, and when it goes.

ssh and ssh-keygen read keys only from files, so key material from the environment or from a
Secret is written to `<workdir>/keys/<provider>.<kind>` (0600). This module owns those names and
their removal: a file must not outlive the reason it was written for, so a provider removed from
the configuration loses all of its files, a provider that stops using a kind (a Secret that no
longer yields an SSH key, an environment key replaced by a Secret) loses that file, and a start
removes the files of providers the configuration does not have (left by an earlier version).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from enum import StrEnum
from pathlib import Path

from pipeline.config import ProviderSettings

__all__ = ["CLUSTER_KINDS", "KeyFile", "key_path", "kinds_in_use", "remove_files", "remove_unconfigured"]

logger = logging.getLogger(__name__)


class KeyFile(StrEnum):
    """The kinds of per-provider file, named by their suffix."""

    #: an SSH key from `ssh.private_key_env`
    SSH_KEY = "ssh-key"
    #: host keys pinned on first use (`ssh.allow_unknown_host_keys`)
    PINNED_KNOWN_HOSTS = "known_hosts"
    #: an SSH signing key from `signing.key_env`
    SIGNING_KEY = "signing-key"
    #: the SSH key of the provider's credentials Secret
    SECRET_KEY = "secret-key"
    #: the known hosts of the credentials Secret or the known-hosts reference
    SECRET_KNOWN_HOSTS = "secret-known_hosts"
    #: the SSH signing key of `signing.key_secret` (spec.commit.signing.secretRef)
    SECRET_SIGNING_KEY = "secret-signing-key"


#: The remote-access kinds read from the cluster, written and removed by the provider's
#: SecretAccess as the Secret's content says (the signing key is kept while its Secret is unreadable:
#: commits go on being signed with the last key read).
CLUSTER_KINDS = frozenset({KeyFile.SECRET_KEY, KeyFile.SECRET_KNOWN_HOSTS})


def key_path(keys_dir: Path, provider: str, kind: KeyFile) -> Path:
    return keys_dir / f"{provider}.{kind.value}"


def kinds_in_use(provider: ProviderSettings) -> frozenset[KeyFile]:
    """The kinds this provider's settings may have written (those from the cluster included when
    it reads the cluster: whether they exist then depends on the Secret)."""
    used: set[KeyFile] = set()
    ssh, signing = provider.ssh, provider.signing
    if ssh is not None and ssh.private_key_env is not None:
        used.add(KeyFile.SSH_KEY)
    if ssh is not None and ssh.allow_unknown_host_keys:
        used.add(KeyFile.PINNED_KNOWN_HOSTS)
    if signing is not None and signing.key_env is not None:
        used.add(KeyFile.SIGNING_KEY)
    if provider.credentials_from_cluster:
        used |= CLUSTER_KINDS
    if provider.signing_secret is not None:
        used.add(KeyFile.SECRET_SIGNING_KEY)
    return frozenset(used)


def remove_files(keys_dir: Path, provider: str, kinds: Iterable[KeyFile] = KeyFile) -> list[Path]:
    """Remove the provider's files of these kinds (default all); returns the paths removed."""
    removed = []
    for kind in kinds:
        path = key_path(keys_dir, provider, kind)
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        removed.append(path)
    if removed:
        logger.info("provider %s: removed %s", provider, ", ".join(p.name for p in removed))
    return removed


def remove_unconfigured(keys_dir: Path, providers: Iterable[ProviderSettings]) -> list[Path]:
    """Remove the files of every kind above that no configured provider may use (at start).

    Matched by exact name, so a provider whose name contains a dot is never mistaken for another;
    files of other names are left alone (the directory is the worker's, but not ours to judge).
    """
    keep = {key_path(keys_dir, p.name, kind) for p in providers for kind in kinds_in_use(p)}
    if not keys_dir.is_dir():
        return []
    removed = []
    for path in sorted(keys_dir.iterdir()):
        if path in keep or not path.is_file():
            continue
        if any(path.name.endswith(f".{kind.value}") for kind in KeyFile):
            path.unlink(missing_ok=True)
            removed.append(path)
    if removed:
        logger.info("removed key files no configured provider uses: %s", ", ".join(p.name for p in removed))
    return removed
