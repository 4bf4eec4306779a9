"""Everything a provider's clone needs besides its URL: HTTP credentials, the SSH transport and
the commit signer, built per provider when a configuration is taken so a bad key shows at once.

A key that cannot be loaded is an `AccessError` naming the setting, variable or file (never key
material): the commit worker parks that provider (`pipeline/commit/parking.py`) while every other
provider goes on, since the configuration may come from a tenant's GitProvider."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pipeline.commit.git.credentials import SecretAccess
from pipeline.commit.git.repo import LocalRepo, RemoteAccess, RemoteAuth, clone_dir
from pipeline.commit.git.signing import CommitSigner, SigningError, commit_signer
from pipeline.commit.git.sshremote import SshTransport, ssh_transport
from pipeline.config import ConfigError, ProviderSettings
from pipeline.gitcredentials import CredentialsReason

__all__ = ["AccessError", "ProviderAccess", "provider_access"]


class AccessError(ConfigError):
    """The provider's access cannot be built; `reason` is `missing_key` (a variable unset, a file
    unreadable), `invalid_key` (a key that cannot sign) or `unreachable` (a Secret, no cluster)."""

    def __init__(self, message: str, reason: CredentialsReason) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ProviderAccess:
    auth: RemoteAuth | None
    ssh: SshTransport | None
    signer: CommitSigner | None
    #: credentials read from the cluster (a Secret), which replace `auth` and `ssh` when set
    remote: RemoteAccess | None = None

    def clone(self, root: Path, provider: str, branch: str, url: str) -> LocalRepo:
        return LocalRepo(
            clone_dir(root, provider, branch, url),
            url,
            self.auth,
            ssh=self.ssh,
            signer=self.signer,
            access=self.remote,
        )


def provider_access(
    provider: ProviderSettings,
    auth: RemoteAuth | None,
    keys_dir: Path,
    remote: SecretAccess | None = None,
) -> ProviderAccess:
    """The provider's access; a missing or unreadable key, or a signing key that does not match the
    committer, is an AccessError naming the provider and the setting (never a key). With `remote`
    (credentials from the cluster) the SSH key is not looked for here: `remote` gives it when the
    remote is used, and a signing key in a Secret is `remote`'s signer too."""
    try:
        ssh = None if remote is not None else ssh_transport(provider, keys_dir)
    except ValueError as exc:
        raise AccessError(str(exc), CredentialsReason.MISSING_KEY) from None
    signer: CommitSigner | None
    try:
        if remote is not None and provider.signing_secret is not None:
            signer = remote.signer
        else:
            signer = commit_signer(provider, keys_dir, dict(os.environ))
    except SigningError as exc:
        raise AccessError(str(exc), exc.reason) from None
    return ProviderAccess(auth, ssh, signer, remote)
