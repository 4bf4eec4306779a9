"""A real HAProxy in front of the replicas' audit ingress, as a Kubernetes Service would be.

TCP mode passes the apiserver's mutual TLS through to whichever replica it picks, so the ingress
still sees the client certificate; a replica is taken out of rotation when its `/readyz` (on the
metrics port) fails, and a connection refused by a dead replica is redispatched to another one.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from tests.support.net import free_port

__all__ = ["HAProxy", "HAProxyError"]

START_TIMEOUT_S = 20.0
INSTALL_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "install-system-tools.sh"


class HAProxyError(RuntimeError):
    """HAProxy is missing, its configuration was refused, or it did not start."""


class HAProxy:
    """Listens on `127.0.0.1:port`; `backends` are (audit port, metrics port) per replica."""

    def __init__(self, workdir: Path, port: int, backends: Sequence[tuple[int, int]]) -> None:
        binary = shutil.which("haproxy")
        if binary is None:
            raise HAProxyError(f"haproxy is not installed; run {INSTALL_SCRIPT} (as root)")
        self.binary = binary
        self.workdir = workdir
        self.port = port
        self.stats_port = free_port()
        self.config = workdir / "haproxy.cfg"
        self.log_path = workdir / "haproxy.log"
        servers = "\n".join(
            f"    server r{i} 127.0.0.1:{audit} check port {metrics} inter 500 fall 2 rise 1"
            for i, (audit, metrics) in enumerate(backends)
        )
        self.config.write_text(
            f"""global
    maxconn 512

defaults
    mode tcp
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    retries 3
    option redispatch

frontend audit
    bind 127.0.0.1:{port}
    default_backend replicas

backend replicas
    balance roundrobin
    option httpchk GET /readyz
{servers}

frontend stats
    mode http
    bind 127.0.0.1:{self.stats_port}
    stats enable
    stats uri /stats
"""
        )
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
