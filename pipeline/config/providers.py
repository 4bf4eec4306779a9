"""A `providers` entry: a Git remote, its credentials, SSH trust, committer and commit signing."""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, Field, field_validator, model_validator

from pipeline.config.references import KnownHostsReference, SecretReference
from pipeline.config.section import Section, closed_set
from pipeline.gitnames import check_branch_name, check_remote_url, check_url_without_password, origin_of

# An OpenPGP key as gpg's `--local-user` takes it: a key id (8 or 16 hex digits) or a fingerprint
# (40: v4, 64: v5/v6), optionally `0x`-prefixed; or the email address of one of its user ids.
_OPENPGP_KEY_ID = re.compile(r"(0[xX])?([0-9A-Fa-f]{8}|[0-9A-Fa-f]{16}|[0-9A-Fa-f]{40}|[0-9A-Fa-f]{64})")
_OPENPGP_EMAIL = re.compile(r"(<)?[A-Za-z0-9_.+=][A-Za-z0-9_.+=-]*@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*(?(1)>)")


def _check_openpgp_key_id(key_id: str | None) -> str | None:
    """A key id gpg can only read as a key: hex, or an email address (never an option).

    The value reaches gpg's command line (`pipeline/commit/git/signing.py`, as `--local-user=ID` and
    after `--`), where anything starting with `-` would be an option such as `--logger-file`.
    """
    if key_id is None or _OPENPGP_KEY_ID.fullmatch(key_id) or _OPENPGP_EMAIL.fullmatch(key_id):
        return key_id
    raise ValueError(
        "not an OpenPGP key id: give 8 or 16 hex digits, a 40- or 64-digit fingerprint (0x optional), "
        "or the email address of one of the key's user ids"
    )


class CommitterSettings(Section):
    """The identity every commit names as committer (the author is the person who made the change)."""

    name: str = "Reverser Pipeline"
    """Committer name on every commit."""
    email: str = "noreply@reverser.invalid"
    """Committer email on every commit."""


class SshSettings(Section):
    """How an `ssh://` or `user@host:path` remote is reached (docs/commit-worker.md, SSH remotes).

    The key comes from a file, from an environment variable (never this file) or from the
    provider's `credentials_secret`. Host keys are checked strictly against `known_hosts_file` (or
    the Secret's or `known_hosts_ref`'s); an unknown host is refused unless
    `allow_unknown_host_keys` (then the first key seen is pinned in the workdir).
    """

    private_key_file: Path | None = None
    """SSH private key file for the remote."""
    private_key_env: str | None = None
    """Environment variable holding the SSH private key."""
    known_hosts_file: Path | None = None
    """known_hosts file the remote's host key is checked against."""
    allow_unknown_host_keys: bool = False
    """Accept any host key (unsafe; for tests and first contact only)."""

    @model_validator(mode="after")
    def _one_key(self) -> SshSettings:
        if self.private_key_file is not None and self.private_key_env is not None:
            raise ValueError("give exactly one of private_key_file and private_key_env")
        return self

    @property
    def has_key(self) -> bool:
        return self.private_key_file is not None or self.private_key_env is not None


class SigningFormat(StrEnum):
    """How commits are signed: git's `gpg.format`."""

    SSH = "ssh"
    OPENPGP = "openpgp"


class SigningSettings(Section):
    """Commit signing: `ssh` (gpg.format=ssh, a private key) or `openpgp` (a GnuPG secret key).

    The committer identity must match the key: for OpenPGP the key needs a user id with the
    committer's email; for SSH the verifier's allowed-signers file maps that email to the key.
    """

    format: Annotated[SigningFormat, closed_set(SigningFormat)]
    """`ssh` (gpg.format=ssh with a private key) or `openpgp` (a GnuPG secret key)."""
    key_file: Path | None = None
    """Signing key file."""
    key_env: str | None = None
    """Environment variable holding the signing key."""
    key_secret: SecretReference | None = None
    """A Kubernetes Secret holding the SSH signing key (a GitProvider's spec.commit.signing.secretRef;
    keys: docs/secrets.md, Commit signing key from a Secret); needs a cluster."""
    gpg_home: Path | None = None
    """GnuPG home directory holding the OpenPGP secret key."""
    key_id: Annotated[str | None, AfterValidator(_check_openpgp_key_id)] = None
    """OpenPGP key to sign with: its key id or fingerprint (hex), or a user id's email address;
    none: the committer email."""

    @model_validator(mode="after")
    def _key_for_format(self) -> SigningSettings:
        given = [v for v in (self.key_file, self.key_env, self.key_secret) if v is not None]
        if self.format == "ssh" and len(given) != 1:
            raise ValueError("ssh signing needs exactly one of key_file, key_env and key_secret")
        if self.format == "ssh" and self.key_id is not None:
            raise ValueError("key_id names an OpenPGP key; ssh signing takes key_file, key_env or key_secret")
        if self.format == "openpgp" and given:
            raise ValueError("openpgp signing uses gpg_home and key_id, not key_file/key_env/key_secret")
        return self


class ProviderSettings(Section):
    """A Git remote; credentials come from environment variables or a Kubernetes Secret, never
    from this file.

    Basic credentials over plain `http://` would travel readable by anyone on the path, so they
    need `allow_plain_http_credentials: true`.
    """

    name: str
    """The provider's name; targets refer to it."""
    url: str
    """The Git remote: https://, http://, ssh://, user@host:path or a local path."""
    default_branch: str = "main"
    """Branch a target writes to when it names none."""
    username_env: str | None = None
    """Environment variable holding the HTTP user name."""
    password_env: str | None = None
    """Environment variable holding the HTTP password or token."""
    allow_plain_http_credentials: bool = False
    """Send Basic credentials over plain http:// (unsafe)."""
    committer: CommitterSettings = CommitterSettings()
    """The committer every commit names (the author is who made the change)."""
    commit_window_s: float = Field(default=5.0, ge=0)
    """Silence in seconds that closes a commit window (0: one commit per change)."""
    commit_window_max_s: float | None = Field(default=None, gt=0)
    """Longest a commit window stays open, in seconds, however steadily writes keep coming; none: its
    own commit_window_s (the provider's or the target's)."""
    push_cooldown_s: float = Field(default=5.0, ge=0)
    """Least time between two pushes of one branch, in seconds."""
    window_max_bytes: int = Field(default=8 * 1024 * 1024, gt=0)
    """Largest commit window in bytes of objects; a larger one is closed early."""
    snapshot_part_objects: int = Field(default=2_500, ge=1)
    """Objects of a snapshot committed and pushed as one part while its chunks arrive, so the
    commit worker's memory is bounded by the part, not the collection; the last part sweeps."""
    push_max_backoff_s: float = Field(default=60.0, gt=0)
    """Longest pause between retries of a failing push, in seconds."""
    ssh: SshSettings | None = None
    """How an SSH remote is reached."""
    credentials_secret: SecretReference | None = None
    """A Kubernetes Secret with the credentials (SSH key, user name and password, or bearer token),
    instead of username_env/password_env/ssh keys; needs a cluster (docs/secrets.md)."""
    known_hosts_ref: KnownHostsReference | None = None
    """A ConfigMap or Secret with the SSH known_hosts, when the credentials Secret has none."""
    credentials_refresh_s: float = Field(default=300.0, ge=0)
    """Seconds after which the next push reads credentials_secret (and known_hosts_ref) again, so a
    rotated Secret is used before the old credentials are revoked (0: only after a refusal)."""
    signing: SigningSettings | None = None
    """Commit signing; none: commits are not signed."""

    @field_validator("url")
    @classmethod
    def _safe_url(cls, url: str) -> str:
        return check_url_without_password(check_remote_url(url))

    @field_validator("default_branch")
    @classmethod
    def _branch_name(cls, branch: str) -> str:
        return check_branch_name(branch)

    @model_validator(mode="after")
    def _no_plain_http_credentials(self) -> ProviderSettings:
        origin = origin_of(self.url)
        plain = origin is not None and origin.scheme == "http"
        sends = self.password_env is not None or self.credentials_secret is not None
        if plain and sends and not self.allow_plain_http_credentials:
            raise ValueError(
                f"provider {self.name}: refusing to send Basic credentials over plain http://; "
                "use https:// or set allow_plain_http_credentials: true"
            )
        return self

    @model_validator(mode="after")
    def _one_credentials_source(self) -> ProviderSettings:
        """Credentials from the environment or from a Secret, never both; SSH host trust from one place."""
        ssh = self.ssh
        if self.credentials_secret is not None:
            env_fields = [
                name
                for name, value in (
                    ("username_env", self.username_env),
                    ("password_env", self.password_env),
                    ("ssh.private_key_env", ssh.private_key_env if ssh else None),
                    ("ssh.private_key_file", ssh.private_key_file if ssh else None),
                )
                if value is not None
            ]
            if env_fields:
                raise ValueError(
                    f"credentials_secret and {', '.join(env_fields)} both give credentials; keep one"
                )
        elif ssh is not None and not ssh.has_key:
            raise ValueError("ssh: give exactly one of private_key_file and private_key_env")
        if ssh is not None and ssh.known_hosts_file is not None and self.known_hosts_ref is not None:
            raise ValueError("ssh.known_hosts_file and known_hosts_ref both give known hosts; keep one")
        from_cluster = self.credentials_secret is not None or self.known_hosts_ref is not None
        trusted = ssh is None or ssh.known_hosts_file is not None or ssh.allow_unknown_host_keys
        if not trusted and not from_cluster:
            raise ValueError("ssh: known_hosts_file is required (or set allow_unknown_host_keys: true)")
        return self

    @property
    def credentials_from_cluster(self) -> bool:
        """Whether the commit worker reads the credentials (or the known hosts) from the cluster."""
        return self.credentials_secret is not None or self.known_hosts_ref is not None

    @property
    def signing_secret(self) -> SecretReference | None:
        """The Secret holding the SSH signing key, if the provider signs with one."""
        return None if self.signing is None else self.signing.key_secret

    @property
    def reads_cluster(self) -> bool:
        """Whether the commit worker reads anything of this provider from the cluster."""
        return self.credentials_from_cluster or self.signing_secret is not None
