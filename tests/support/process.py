"""`reverser run` as a child process that tests kill for real (SIGKILL, SIGSTOP/SIGCONT).

Unlike tests/e2e/service_process.py (an operator's view: start, wait until ready, drain), this
keeps `REVERSER_*` variables such as the crash point `REVERSER_CRASH_AT`, does not insist on
readiness (a crash point may fire first), and exposes the process for signals.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from pipeline.config import Settings
from tests.support.net import free_port

__all__ = ["ReverserProcess", "bare_remote", "base_config"]

REPO_ROOT = Path(__file__).resolve().parents[2]
STOP_TIMEOUT_S = 30.0


def base_config(settings: Settings, workdir: Path) -> dict[str, Any]:
    """A `reverser run` configuration on `settings`' log with its own workdir and metrics port,
    no audit ingress and no lag monitor; tests add clusters, providers and targets."""
    return {
        "workdir": str(workdir),
        "log": {
            **settings.log.model_dump(mode="json", include={"backend", "bootstrap_servers", "topic_prefix"}),
            # a killed member's partitions move on after this (the broker's minimum)
            "session_timeout_ms": 6_000,
        },
        "metrics": {"addr": f"127.0.0.1:{free_port()}"},
        "audit": {"enabled": False},
        "lag": {"enabled": False},
    }


def bare_remote(path: Path) -> Path:
    """An empty bare Git repository with a `main` branch, as a file:// remote."""
    subprocess.run(["git", "init", "--bare", "-q", "-b", "main", str(path)], check=True)
    return path


class ReverserProcess:
    """`reverser run --config <workdir>/<name>.yaml`, logging to `<workdir>/<name>.log`."""

    def __init__(self, workdir: Path, name: str, config: dict[str, Any], env: dict[str, str] | None = None):
        self.name = name
        self.config_path = workdir / f"{name}.yaml"
        self.log_path = workdir / f"{name}.log"
        self.metrics_addr = str(config["metrics"]["addr"])
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log_path.open("ab") as log_file:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "pipeline.cli",
                    "--log-level",
                    os.environ.get("REVERSER_TEST_LOG_LEVEL", "INFO"),
                    "run",
                    "--config",
                    str(self.config_path),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=REPO_ROOT,
            )

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.metrics_addr}/readyz", timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://{self.metrics_addr}/metrics", timeout=5) as response:
            text: str = response.read().decode()
            return text

    def signal(self, number: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(number)

    def stop(self) -> int | None:
        """SIGCONT (in case it is stopped), SIGTERM, SIGKILL after the timeout; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
