"""A real OpenSSH server (Debian's openssh-server) on a loopback address, with a bare repository.

Each server gets its own host key, client key and authorized_keys under a temporary directory. It
listens on port 22 of a random 127.x.y.z address, so scp-like URLs (`user@host:path`, which cannot
name a port) work too. Installed by scripts/install-system-tools.sh (`make test` runs it).
"""

from __future__ import annotations

import getpass
import random
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

SSHD = Path("/usr/sbin/sshd")
START_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class SshServer:
    host: str
    port: int
    user: str
    host_public_key: str
    client_key: Path
    root: Path

    def known_hosts_line(self) -> str:
        where = self.host if self.port == 22 else f"[{self.host}]:{self.port}"
        return f"{where} {self.host_public_key}"

    def known_hosts(self, name: str = "known_hosts") -> Path:
        path = self.root / name
        path.write_text(self.known_hosts_line() + "\n", encoding="ascii")
        return path

    def bare_repo(self, name: str = "remote.git") -> Path:
        path = self.root / name
        subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(path)], check=True)
        return path

    def ssh_url(self, repo: Path) -> str:
        return f"ssh://{self.user}@{self.host}:{self.port}{repo}"

    def scp_url(self, repo: Path) -> str:
        return f"{self.user}@{self.host}:{repo}"


def _keygen(path: Path, comment: str) -> str:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True
    )
    return path.with_suffix(".pub").read_text(encoding="ascii").strip()


def _accepting(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


@contextmanager
def running_sshd(root: Path) -> Iterator[SshServer]:
    """Start sshd (as the current user, which must be root for port 22) and stop it on exit."""
    if not SSHD.exists():
        pytest.skip("openssh-server is not installed (run `make system-tools` as root)")
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation directory
    root.mkdir(parents=True, exist_ok=True)
    host = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(2, 254)}"
    port = 22
    host_key = _keygen(root / "host_ed25519", "host")
    client = _keygen(root / "client_ed25519", "client")
    (root / "authorized_keys").write_text(client + "\n", encoding="ascii")
    config = root / "sshd_config"
    config.write_text(
        "\n".join(
            [
                f"Port {port}",
                f"ListenAddress {host}",
                f"HostKey {root / 'host_ed25519'}",
                f"AuthorizedKeysFile {root / 'authorized_keys'}",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PubkeyAuthentication yes",
                "PermitRootLogin prohibit-password",
                "StrictModes no",
                "UsePAM no",
                "PidFile none",
                "LogLevel ERROR",
                "",
            ]
        ),
        encoding="ascii",
    )
    process = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(config)], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _accepting(host, port):
            if process.poll() is not None:
                err = process.stderr.read().decode() if process.stderr else ""
                raise RuntimeError(f"sshd exited {process.returncode}: {err}")
            if time.monotonic() > deadline:
                raise RuntimeError("sshd did not start listening")
            time.sleep(0.05)
        yield SshServer(host, port, getpass.getuser(), host_key, root / "client_ed25519", root)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()
