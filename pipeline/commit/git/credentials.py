"""A provider's credentials from its Kubernetes Secret, read when the remote is first needed.

The configuration holds only the reference (`credentials_secret`, `known_hosts_ref`); this module
turns it into what git needs, on the replica that pushes: the Secret is read with `get` through
the injected reader, its keys (and the SSH keys as git's ssh takes them) decided by
`pipeline.gitcredentials`, HTTP credentials kept in
memory and SSH keys and known hosts written to 0600 files in the worker's private keys
directory (ssh reads keys only from files). The values are read again when the remote refuses
them (a rotated Secret), every `credentials_refresh_s` (so a rotation is picked up before the old
credentials are revoked) and when a new configuration changes the provider; key files go when
the Secret no longer yields them or the provider leaves the configuration
(`pipeline.commit.git.keyfiles`).

Unusable credentials (no Secret, no access to it, a key missing) never stop the worker: the
remote operation fails like an unreachable remote, so the branch keeps its work and retries
with its backoff; each failure is counted in `reverser_commit_credentials_errors_total` and,
with custom resources, reported for the GitProvider's status. Messages name the Secret and its
keys, never a value.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from pipeline.codec.credentials_report import CredentialsReport
from pipeline.commit import metrics
from pipeline.commit.git.keyfiles import CLUSTER_KINDS, KeyFile, key_path, remove_files
from pipeline.commit.git.repo import GitRemoteError, RemoteAuth
from pipeline.commit.git.signing import SecretSigner
from pipeline.commit.git.sshremote import (
    SshTransport,
    is_ssh_url,
    pinned_known_hosts,
    ssh_transport,
    write_private_file,
)
from pipeline.config import ProviderSettings
from pipeline.gitcredentials import (
    SIGNING_PASSPHRASE_KEYS,
    SSH_KEY_KEYS,
    CredentialsError,
    CredentialsReason,
    GitCredentials,
    ObjectReader,
    credentials_from_secret,
    known_hosts_from,
    public_key_of,
    signing_key_from_secret,
    unlocked_key,
)
from pipeline.log.api import LogError
from pipeline.redaction import redact_url

__all__ = ["SecretAccess"]

logger = logging.getLogger(__name__)

Loaded = tuple[RemoteAuth | None, SshTransport | None]


class SecretAccess:
    """The `RemoteAccess` of one provider whose credentials or known hosts live in the cluster.

    Shared by every clone of the provider on this replica, so the Secret is read once for all of
    its branches, again for all of them after a refusal, and every `credentials_refresh_s` so a
    rotated Secret is used before the old credentials are revoked. A refresh that fails keeps the
    credentials in use (the remote may still take them) and reports the failure; a read that
    fails with nothing to fall back on, and a Secret that no longer yields an SSH key, remove the
    key files, as does retiring the access when the provider leaves the configuration.
    """

    def __init__(
        self,
        provider: ProviderSettings,
        keys_dir: Path,
        reader: ObjectReader,
        *,
        env_auth: RemoteAuth | None = None,
        report: Callable[[CredentialsReport], Awaitable[None]] | None = None,
        wall: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`env_auth`: HTTP credentials from the environment, for a provider with only a known-hosts
        reference; `report` hears every change of state (custom-resource status); `clock` (seconds)
        times the refresh."""
        self._provider = provider
        self._keys = keys_dir
        self._reader = reader
        self._env_auth = env_auth
        self._report = report
        self._wall = wall
        self._clock = clock
        self._loaded: Loaded | None = None
        self._loaded_at = 0.0
        # why the last refresh failed while the credentials read before stay in use
        self._stale: CredentialsError | None = None
        self._retired = False
        self._lock = asyncio.Lock()
        self._reported: tuple[bool, str, str, str] | None = None
        #: signs the provider's commits with the key of its signing Secret (when it has one); kept
        #: for the life of this access, so every clone holding it signs with the last key read
        self.signer = SecretSigner(key_path(keys_dir, provider.name, KeyFile.SECRET_SIGNING_KEY), None)

    @property
    def _secret(self) -> str:
        """The Secret reports name: the credentials Secret, else the signing Secret."""
        ref = self._provider.credentials_secret or self._provider.signing_secret
        return "" if ref is None else ref.describe()

    def configure(self, provider: ProviderSettings, env_auth: RemoteAuth | None) -> None:
        """A new configuration version: a changed provider reads its Secret again before the next use."""
        self._retired = False
        if provider != self._provider or env_auth != self._env_auth:
            self._provider, self._env_auth = provider, env_auth
            self._forget()
            self._reported = None

    def report_again(self) -> None:
        """Report the next state even if it was reported before (another report replaced it)."""
        self._reported = None

    def retire(self) -> None:
        """The provider left the configuration or no longer reads the cluster: its key files go now,
        and a branch still holding this access gets no credentials (until `configure` again)."""
        self._retired = True
        self._forget()
        remove_files(self._keys, self._provider.name, CLUSTER_KINDS)

    def _forget(self) -> None:
        self._loaded = None
        self._stale = None

    async def current(self) -> Loaded:
        async with self._lock:
            name = self._provider.name
            if self._retired:
                raise GitRemoteError(f"provider {name}: no longer configured on this replica", auth=True)
            if self._loaded is not None and self._refresh_due():
                await self._refresh()
            if self._loaded is None:
                try:
                    self._loaded = await self._load()
                except CredentialsError as exc:
                    remove_files(self._keys, name, CLUSTER_KINDS)
                    await self._failed(exc)
                    raise GitRemoteError(
                        f"provider {name}: no usable credentials: {exc}", auth=True
                    ) from None
                self._loaded_at = self._clock()
            return self._loaded

    def _refresh_due(self) -> bool:
        every = self._provider.credentials_refresh_s
        return every > 0 and self._clock() - self._loaded_at >= every

    async def _refresh(self) -> None:
        """Read the Secret again; on failure keep what is loaded and report why."""
        try:
            self._loaded = await self._load()
            self._stale = None
        except CredentialsError as exc:
            self._stale = CredentialsError(
                exc.reason,
                f"{exc}; reading it again failed, the credentials read before stay in use until the "
                "remote refuses them",
            )
            await self._failed(self._stale)
        self._loaded_at = self._clock()

    async def outcome(self, refused: bool) -> None:
        if not refused:
            if self._stale is None:  # else the failed refresh stays reported until a read succeeds
                await self._state(True, "", "", self.signer.public_key)
            return
        self._forget()  # read the Secret again before the next attempt: it may have been rotated
        what = f"Secret {self._secret}" if self._secret else "the configured credentials"
        await self._failed(
            CredentialsError(
                CredentialsReason.REJECTED,
                f"the remote {redact_url(self._provider.url)} refused the credentials of {what}",
            )
        )

    async def _failed(self, error: CredentialsError) -> None:
        metrics.CREDENTIALS_ERRORS.labels(self._provider.name, error.reason).inc()
        logger.warning("provider %s: %s", self._provider.name, error)
        await self._state(False, error.reason, str(error), self.signer.public_key)

    async def _state(self, ok: bool, reason: str, message: str, public_key: str) -> None:
        """Report a change of state (once: the branches share this object)."""
        state = (ok, reason, message, public_key)
        if self._report is None or state == self._reported:
            return
        report = CredentialsReport(
            self._provider.name, ok, reason, self._secret, int(self._wall() * 1000), message, public_key
        )
        try:
            await self._report(report)
        except LogError as exc:
            logger.warning("reporting the credentials of provider %s failed: %s", self._provider.name, exc)
            return
        self._reported = state

    async def _load(self) -> Loaded:
        """Read and decide everything before writing a file or changing the signing key, so a failed
        read leaves what is in use as it was; files the Secret no longer yields are removed."""
        signing = await self._signing_key()
        loaded = await self._remote_access()
        if signing is None:
            self.signer.stop()
        else:
            self.signer.use(*signing)
        return loaded

    async def _signing_key(self) -> tuple[str, str, str] | None:
        """The provider's signing Secret, its unlocked key and the key's public half, or None."""
        ref = self._provider.signing_secret
        if ref is None:
            return None
        described = ref.describe()
        found = signing_key_from_secret(described, await self._reader("Secret", ref.namespace, ref.name))
        key = unlocked_key(described, found.key, found.passphrase, " or ".join(SIGNING_PASSPHRASE_KEYS))
        public = public_key_of(described, key)
        logger.info(
            "provider %s: signing key (%s) read from Secret %s",
            self._provider.name,
            public.split()[0],
            described,
        )
        return described, key, public

    async def _remote_access(self) -> Loaded:
        provider = self._provider
        ref = provider.credentials_secret
        credentials = GitCredentials()
        if ref is not None:
            data = await self._reader("Secret", ref.namespace, ref.name)
            credentials = credentials_from_secret(ref.describe(), data)
            logger.info(
                "provider %s: credentials (%s) read from Secret %s",
                provider.name,
                credentials.method,
                ref.describe(),
            )
        if is_ssh_url(provider.url):
            return None, await self._ssh(credentials)
        if credentials.ssh_key is not None:
            raise CredentialsError(
                CredentialsReason.MISSING_KEY,
                f"Secret {self._secret} holds an SSH key ({', '.join(SSH_KEY_KEYS)}), which comes "
                f"before username/password and bearerToken, but {redact_url(provider.url)} is not "
                "an SSH remote",
            )
        remove_files(self._keys, provider.name, CLUSTER_KINDS)
        if credentials.password is not None:
            return RemoteAuth(credentials.username or "", credentials.password), None
        if credentials.bearer_token is not None:
            return RemoteAuth(bearer_token=credentials.bearer_token), None
        return (self._env_auth if ref is None else None), None

    async def _ssh(self, credentials: GitCredentials) -> SshTransport:
        """Key from the Secret (or, without one, the file or environment); host keys from the
        Secret, the known-hosts reference, the file, or pinned on first use; else refused."""
        provider, name = self._provider, self._provider.name
        key: str | None = None
        key_file: Path | None = None
        if credentials.ssh_key is not None:
            key = unlocked_key(
                self._secret, credentials.ssh_key, credentials.ssh_passphrase, "ssh-password (or password)"
            )
        elif provider.credentials_secret is not None:
            raise CredentialsError(
                CredentialsReason.MISSING_KEY,
                f"Secret {self._secret} has none of the keys {', '.join(SSH_KEY_KEYS)} for the SSH "
                f"remote {redact_url(provider.url)}",
            )
        else:
            try:
                base = ssh_transport(provider, self._keys)
            except ValueError as exc:
                raise CredentialsError(CredentialsReason.MISSING_KEY, str(exc)) from None
            if not provider.credentials_from_cluster and base is not None:
                # no longer reads the cluster (a running branch kept this access): as the file says
                remove_files(self._keys, name, CLUSTER_KINDS)
                return base
            key_file = base.key_file if base is not None else None
        hosts = credentials.known_hosts
        hosts_ref = provider.known_hosts_ref
        if hosts is None and hosts_ref is not None:
            data = await self._reader(hosts_ref.kind, hosts_ref.namespace, hosts_ref.name)
            hosts = known_hosts_from(hosts_ref.describe(), data)
        transport = self._host_trust(hosts)
        if key is not None:
            key_file = write_private_file(key_path(self._keys, name, KeyFile.SECRET_KEY), key)
        else:
            remove_files(self._keys, name, [KeyFile.SECRET_KEY])
        if hosts is not None:
            hosts_file = write_private_file(key_path(self._keys, name, KeyFile.SECRET_KNOWN_HOSTS), hosts)
            return SshTransport(key_file, hosts_file)
        remove_files(self._keys, name, [KeyFile.SECRET_KNOWN_HOSTS])
        assert transport is not None
        return SshTransport(key_file, transport.known_hosts, strict=transport.strict)

    def _host_trust(self, hosts: str | None) -> SshTransport | None:
        """Host trust besides the cluster's (None when the cluster gives it); raises when there is none."""
        if hosts is not None:
            return None
        provider, settings = self._provider, self._provider.ssh
        if settings is not None and settings.known_hosts_file is not None:
            return SshTransport(None, settings.known_hosts_file)
        if settings is not None and settings.allow_unknown_host_keys:
            return SshTransport(None, pinned_known_hosts(self._keys, provider.name), strict=False)
        where = f"Secret {self._secret} has no key known_hosts and " if self._secret else ""
        raise CredentialsError(
            CredentialsReason.NO_KNOWN_HOSTS,
            f"no known hosts for the SSH remote {redact_url(provider.url)}: {where}the provider "
            "sets no known-hosts reference (spec.knownHostsRef)",
        )
