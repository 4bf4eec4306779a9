"""SSH remotes: the `ssh` command git runs, with a configured key and strict host-key checking.

Why a full command instead of the user's ssh configuration: the service must behave the same on
every replica and never prompt, so `~/.ssh/config` is ignored (`-F /dev/null`), only the configured
key is offered, and a host whose key is not in the configured known_hosts is refused unless the
provider explicitly allows unknown hosts (then the first key seen is pinned in the workdir).
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from pipeline.commit.git.keyfiles import KeyFile, key_path
from pipeline.config import ProviderSettings

__all__ = [
    "SshTransport",
    "is_ssh_url",
    "pinned_known_hosts",
    "ssh_transport",
    "write_private_file",
]

_SCP_LIKE = re.compile(r"^(?:[A-Za-z0-9._-]+@)?[A-Za-z0-9.-]+:(?!//)")
CONNECT_TIMEOUT_S = 15


def is_ssh_url(url: str) -> bool:
    """`ssh://…` or the scp-like `user@host:path` form git accepts."""
    return url.startswith("ssh://") or bool(_SCP_LIKE.match(url))


def write_private_file(path: Path, content: str) -> Path:
    """Write key material readable by this user only (ssh refuses group/world-readable keys)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(content if content.endswith("\n") else content + "\n")
    os.chmod(path, 0o600)
    return path


@dataclass(frozen=True, slots=True)
class SshTransport:
    """How git reaches an SSH remote; `key_file` None means ssh's default identities."""

    key_file: Path | None
    known_hosts: Path | None
    strict: bool = True

    def command(self) -> str:
        """The value of GIT_SSH_COMMAND."""
        argv = ["ssh", "-F", "/dev/null", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}"]
        if self.key_file is not None:
            argv += ["-i", str(self.key_file), "-o", "IdentitiesOnly=yes"]
        if self.known_hosts is not None:
            argv += ["-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null"]
        argv += ["-o", f"StrictHostKeyChecking={'yes' if self.strict else 'accept-new'}"]
        return shlex.join(argv)


def ssh_transport(provider: ProviderSettings, keys_dir: Path) -> SshTransport | None:
    """The transport for an SSH provider (None for other URLs); a key from the environment is
    written to a 0600 file under `keys_dir`, since ssh reads keys only from files or an agent.

    Raises ValueError naming the variable when `private_key_env` is configured but unset.
    """
    if not is_ssh_url(provider.url):
        return None
    settings = provider.ssh
    if settings is None:
        return SshTransport(None, None, strict=True)
    key_file = settings.private_key_file
    if settings.private_key_env is not None:
        material = os.environ.get(settings.private_key_env, "")
        if not material.strip():
            raise ValueError(
                f"providers[{provider.name}].ssh: environment variable {settings.private_key_env} is not set"
            )
        key_file = write_private_file(key_path(keys_dir, provider.name, KeyFile.SSH_KEY), material)
    known_hosts = settings.known_hosts_file
    if known_hosts is None and settings.allow_unknown_host_keys:
        known_hosts = pinned_known_hosts(keys_dir, provider.name)
    return SshTransport(key_file, known_hosts, strict=not settings.allow_unknown_host_keys)


def pinned_known_hosts(keys_dir: Path, provider: str) -> Path:
    """The file that pins the first host key seen (`allow_unknown_host_keys`), created empty."""
    known_hosts = key_path(keys_dir, provider, KeyFile.PINNED_KNOWN_HOSTS)
    known_hosts.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    known_hosts.touch(exist_ok=True)
    return known_hosts
