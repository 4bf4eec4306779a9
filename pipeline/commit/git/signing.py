"""Signed commits: the `gpgsig` header git itself writes, made with ssh-keygen or gpg.

The worker writes commit objects directly (no `git commit`), so it signs the same way git does:
the commit object without the signature is the payload, and the armored signature goes into a
`gpgsig` header right after `committer`. `git verify-commit` then checks it like any signed commit.
"""

from __future__ import annotations

import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from cryptography.exceptions import UnsupportedAlgorithm

from pipeline.commit.git.keyfiles import KeyFile, key_path
from pipeline.commit.git.sshremote import write_private_file
from pipeline.config import ProviderSettings, SigningFormat
from pipeline.gitcredentials import CredentialsReason, load_private_key

__all__ = [
    "CommitSigner",
    "GpgSigner",
    "SecretSigner",
    "SigningError",
    "SshSigner",
    "commit_signer",
    "signed_commit",
]

SIGN_TIMEOUT_S = 30.0
#: What an OpenPGP key signs once when its provider's access is built, to prove it signs unattended.
PROBE_PAYLOAD = b"reverser-pipeline signing probe\n"


class SigningError(Exception):
    """A commit could not be signed (key missing, tool failed); the message holds no key material.

    `reason` says which: a key that is not there (`missing_key`) or one that cannot be used.
    """

    def __init__(self, message: str, reason: CredentialsReason = CredentialsReason.INVALID_KEY) -> None:
        super().__init__(message)
        self.reason = reason


class CommitSigner(Protocol):
    def sign(self, payload: bytes) -> bytes | None:
        """The armored detached signature of `payload`; None: this commit is not signed (a
        signer whose provider stopped signing while its clones live)."""
        ...


def _run(argv: list[str], payload: bytes, what: str, env: dict[str, str] | None = None) -> bytes:
    try:
        result = subprocess.run(
            argv, input=payload, capture_output=True, check=False, timeout=SIGN_TIMEOUT_S, env=env
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SigningError(f"{what} could not run: {exc}") from None
    if result.returncode != 0 or not result.stdout.strip():
        detail = result.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        raise SigningError(f"{what} failed (exit {result.returncode}): {detail[0][:200]}")
    return result.stdout


@dataclass(frozen=True, slots=True)
class SshSigner:
    """`gpg.format=ssh`: `ssh-keygen -Y sign -n git` with a private key file."""

    key_file: Path

    def argv(self) -> list[str]:
        """The key file is the value of `-f` (getopt takes the next argument whatever it is), and
        nothing follows the options: the payload comes on stdin."""
        return ["ssh-keygen", "-Y", "sign", "-n", "git", "-q", "-f", str(self.key_file)]

    def sign(self, payload: bytes) -> bytes:
        return _run(self.argv(), payload, "ssh-keygen")


class SecretSigner:
    """`gpg.format=ssh` with the key of a Secret (`signing.key_secret`), which the provider's
    SecretAccess reads before every remote operation: a branch commits only after its first
    successful fetch, so a commit never goes unsigned for want of the key. Every clone of a provider
    that reads the cluster holds it, so a GitProvider that starts (or stops) signing with a Secret
    does so in its running branches from the next read on.

    The key stays in memory (the last one read: a failed re-read keeps signing with it) and is
    written to its 0600 file only while ssh-keygen signs, then removed: no key file outlives the
    signature, whatever happens to the provider afterwards.
    """

    def __init__(self, key_file: Path, secret: str | None) -> None:
        self.key_file = key_file
        #: the Secret, `namespace/name`; None while the provider does not sign with a Secret (its
        #: commits are then signed by `delegate`, or not at all)
        self.secret = secret
        #: how the provider signs when not with a Secret (a key file or variable; None: unsigned)
        self.delegate: CommitSigner | None = None
        self._key: str | None = None
        #: the public key in authorized_keys form (`ssh-ed25519 AAAA...`): the GitProvider's
        #: `status.signingPublicKey`, registered on the Git host to verify the commits
        self.public_key = ""
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SecretSigner({self.secret!r}, {self.public_key[:32]!r})"

    def use(self, secret: str, key: str, public_key: str) -> None:
        self.secret, self._key, self.public_key = secret, key, public_key

    def stop(self) -> None:
        """The provider signs with no Secret any more: `delegate` signs (or nothing does)."""
        self.secret, self._key, self.public_key = None, None, ""

    def sign(self, payload: bytes) -> bytes | None:
        if self.secret is None:
            return None if self.delegate is None else self.delegate.sign(payload)
        if self._key is None:
            raise SigningError(f"the signing key of Secret {self.secret} has not been read")
        with self._lock:
            write_private_file(self.key_file, self._key)
            try:
                return SshSigner(self.key_file).sign(payload)
            finally:
                self.key_file.unlink(missing_ok=True)


@dataclass(frozen=True, slots=True)
class GpgSigner:
    """OpenPGP: `gpg --detach-sign --armor` with a key from a GnuPG home (no passphrase prompt)."""

    home: Path | None
    #: `signing.key_id` (validated by `pipeline.config`) or the committer email
    key_id: str

    def _argv(self, *args: str) -> list[str]:
        """Every value from the configuration in option form (`--homedir=PATH`), so none can be
        read as an option of its own."""
        home = [f"--homedir={self.home}"] if self.home is not None else []
        return ["gpg", *home, "--batch", "--no-tty", "--pinentry-mode=loopback", *args]

    def sign_argv(self) -> list[str]:
        return self._argv("--detach-sign", "--armor", f"--local-user={self.key_id}")

    def list_argv(self) -> list[str]:
        """The key is a name to look up, after `--`: gpg reads nothing after it as an option."""
        return self._argv("--with-colons", "--list-secret-keys", "--", self.key_id)

    def sign(self, payload: bytes) -> bytes:
        return _run(self.sign_argv(), payload, "gpg")

    def user_ids(self) -> list[str]:
        """The user ids of the secret key, to check the committer identity against."""
        out = _run(self.list_argv(), b"", "gpg --list-secret-keys")
        return [
            line.split(":")[9]
            for line in out.decode("utf-8", "replace").splitlines()
            if line.startswith("uid:")
        ]


def _check_ssh_key(material: bytes, where: str) -> None:
    """Raise SigningError naming `where` unless `material` is an SSH private key ssh-keygen can
    sign with unattended (no passphrase): found at start, a broken key parks its provider instead
    of failing inside a branch's commit."""
    try:
        load_private_key(material, None)
    except TypeError:
        raise SigningError(f"{where} is encrypted; give the key without a passphrase") from None
    except (ValueError, UnsupportedAlgorithm):
        raise SigningError(f"{where} is not an SSH private key this service can read") from None


def _ssh_key(provider: ProviderSettings, keys_dir: Path, environ: dict[str, str]) -> Path:
    """The SSH signing key's file (a key from the environment written to the keys directory)."""
    settings = provider.signing
    assert settings is not None
    field = f"providers[{provider.name}].signing"
    if settings.key_env is not None:
        material = environ.get(settings.key_env, "")
        if not material.strip():
            raise SigningError(
                f"{field}: environment variable {settings.key_env} is not set", CredentialsReason.MISSING_KEY
            )
        _check_ssh_key(material.encode(), f"{field}: the key in environment variable {settings.key_env}")
        return write_private_file(key_path(keys_dir, provider.name, KeyFile.SIGNING_KEY), material)
    assert settings.key_file is not None
    where = f"{field}: key_file {settings.key_file}"
    try:
        _check_ssh_key(settings.key_file.read_bytes(), where)
    except OSError as exc:
        raise SigningError(f"{where} cannot be read: {exc.strerror}", CredentialsReason.MISSING_KEY) from None
    return settings.key_file


def commit_signer(provider: ProviderSettings, keys_dir: Path, environ: dict[str, str]) -> CommitSigner | None:
    """The provider's signer, its key checked and matched to the committer identity; raises
    SigningError naming the setting, the variable or the file (never key material)."""
    settings = provider.signing
    if settings is None:
        return None
    committer = f"<{provider.committer.email}>"
    if settings.key_secret is not None:
        raise SigningError(
            f"providers[{provider.name}].signing: the key is in Secret {settings.key_secret.describe()}, "
            "which only a process reading the cluster can use",
            CredentialsReason.UNREACHABLE,
        )
    if settings.format == SigningFormat.SSH:
        return SshSigner(_ssh_key(provider, keys_dir, environ))
    signer = GpgSigner(settings.gpg_home, settings.key_id or provider.committer.email)
    if not any(committer in uid for uid in signer.user_ids()):
        raise SigningError(
            f"providers[{provider.name}].signing: the OpenPGP key has no user id with the committer email "
            f"{provider.committer.email}"
        )
    try:  # a key behind a passphrase or an agent that cannot be asked lists, but does not sign
        signer.sign(PROBE_PAYLOAD)
    except SigningError as exc:
        field = f"providers[{provider.name}].signing"
        raise SigningError(f"{field}: the OpenPGP key cannot sign: {exc}") from None
    return signer


def signed_commit(headers: bytes, message: bytes, signer: CommitSigner | None) -> bytes:
    """The commit object's content: headers, the `gpgsig` header when signing, a blank line, message."""
    unsigned = headers + b"\n\n" + message
    if signer is None:
        return unsigned
    signed = signer.sign(unsigned)
    if signed is None:
        return unsigned
    signature = signed.decode("ascii").strip("\n")
    header = b"gpgsig " + signature.replace("\n", "\n ").encode("ascii")
    return headers + b"\n" + header + b"\n\n" + message
