"""A real HAProxy in front of the replicas' audit ingress, configured as operators are told to.

The configuration is the shipped example, `deploy/haproxy/audit-webhook.cfg` (TCP mode, so the
apiserver's mutual TLS reaches the replica; `/readyz` health checks that take a stopped replica out
within about a second and cut its sessions with a reset, which the apiserver retries), with only
the listening address and the server lines replaced by this environment's ports.
"""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["EXAMPLE_CONFIG", "HAProxy", "HAProxyError", "render_config"]

START_TIMEOUT_S = 20.0
ROOT = Path(__file__).resolve().parents[2]
INSTALL_SCRIPT = ROOT / "scripts" / "install-system-tools.sh"
EXAMPLE_CONFIG = ROOT / "deploy" / "haproxy" / "audit-webhook.cfg"
_BIND = re.compile(r"^(\s*)bind \S+$", re.MULTILINE)
_SERVER = re.compile(r"^\s*server \S+ \S+$\n?", re.MULTILINE)


class HAProxyError(RuntimeError):
    """HAProxy is missing, its configuration was refused, or it did not start."""


def render_config(example: str, port: int, backends: Sequence[tuple[int, int]]) -> str:
    """The example configuration listening on `127.0.0.1:port`, with one server per (audit port,
    metrics port); everything else (checks, timeouts, resets) is kept as shipped."""
    if len(_BIND.findall(example)) != 1 or not _SERVER.search(example):
        raise HAProxyError(f"{EXAMPLE_CONFIG} no longer has one bind line and server lines to replace")
    servers = "".join(
        f"    server r{i} 127.0.0.1:{audit} port {metrics}\n" for i, (audit, metrics) in enumerate(backends)
    )
    text = _BIND.sub(lambda m: f"{m.group(1)}bind 127.0.0.1:{port}", example)
    replacements = iter([servers])  # the first server line becomes ours, the others go
    return _SERVER.sub(lambda _: next(replacements, ""), text)


class HAProxy:
    """Listens on `127.0.0.1:port`; `backends` are (audit port, metrics port) per replica."""

    def __init__(self, workdir: Path, port: int, backends: Sequence[tuple[int, int]]) -> None:
        binary = shutil.which("haproxy")
        if binary is None:
            raise HAProxyError(f"haproxy is not installed; run {INSTALL_SCRIPT} (as root)")
        self.binary = binary
        self.workdir = workdir
        self.port = port
        self.config = workdir / "haproxy.cfg"
        self.log_path = workdir / "haproxy.log"
        self.config.write_text(render_config(EXAMPLE_CONFIG.read_text(), port, backends))
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        checked = subprocess.run([self.binary, "-c", "-f", str(self.config)], capture_output=True, text=True)
        if checked.returncode != 0:
            raise HAProxyError(f"haproxy refused {self.config}:\n{checked.stdout}{checked.stderr}")
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                [self.binary, "-db", "-f", str(self.config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise HAProxyError(
                    f"haproxy exited with {self._proc.returncode}: {self.log_path.read_text()}"
                )
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise HAProxyError(f"haproxy did not listen on {self.port} within {START_TIMEOUT_S:.0f} s")

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
