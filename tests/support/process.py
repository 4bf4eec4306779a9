"""`reverser run` as a child process: the real CLI, configuration file and signal handling.

A separate process keeps a test honest and lets it kill the service for real (SIGKILL,
SIGSTOP/SIGCONT); a crash in a stage cannot take the test runner down, and the log tail is attached
to failures. `ReverserProcess` is the raw process (it keeps `REVERSER_*` variables such as the
crash point `REVERSER_CRASH_AT` and does not insist on readiness, since a crash point may fire
first); `tests.e2e.service_process.ServiceProcess` is the operator's view on top of it (a clean
environment, start means ready).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from pipeline.config import Settings
from tests.support.net import free_port

__all__ = [
    "KILLED_MEMBER_SESSION_TIMEOUT_MS",
    "ReverserProcess",
    "ServiceError",
    "bare_remote",
    "base_config",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
STOP_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.25
LOG_TAIL_LINES = 60
# A killed group member's partitions move on after this: the broker's minimum session timeout,
# instead of the production 30 s every test that kills a consumer would otherwise wait out.
KILLED_MEMBER_SESSION_TIMEOUT_MS = 6_000


class ServiceError(RuntimeError):
    """The service exited, never became ready or never reached a metric; carries its log tail."""


def base_config(settings: Settings, workdir: Path) -> dict[str, Any]:
    """A `reverser run` configuration on `settings`' log with its own workdir and metrics port,
    no audit ingress and no lag monitor; tests add clusters, providers and targets."""
    return {
        "workdir": str(workdir),
        "log": {
            **settings.log.model_dump(mode="json", include={"backend", "bootstrap_servers", "topic_prefix"}),
            "session_timeout_ms": KILLED_MEMBER_SESSION_TIMEOUT_MS,
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
    """`reverser run --config <workdir>/<name>.yaml`, logging to `<workdir>/<name>.log`.

    `env` is added to the inherited environment (`_environment` says what is inherited).
    """

    def __init__(
        self,
        workdir: Path,
        name: str,
        config: dict[str, Any],
        env: dict[str, str] | None = None,
        log_level: str | None = None,
        config_file: str | None = None,
    ) -> None:
        self.workdir = workdir
        self.name = name
        self.config_path = workdir / (config_file or f"{name}.yaml")
        self.log_path = workdir / f"{name}.log"
        self.metrics_addr = str(config["metrics"]["addr"])
        self.log_level = log_level or os.environ.get("REVERSER_TEST_LOG_LEVEL", "INFO")
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.env = self._environment(env or {})
        self.proc: subprocess.Popen[bytes] | None = None

    def _environment(self, extra: dict[str, str]) -> dict[str, str]:
        """The test runner's environment, `REVERSER_*` included (crash points, test log level)."""
        return {**os.environ, **extra}

    def start(self) -> None:
        with self.log_path.open("ab") as log_file:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "pipeline.cli",
                    "--log-level",
                    self.log_level,
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
    def pid(self) -> int | None:
        """The started process's pid, also after it exited (records name their writer by it)."""
        return self.proc.pid if self.proc is not None else None

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

    def metric_samples(self, sample_name: str) -> list[tuple[dict[str, str], float]]:
        """Every sample called `sample_name`, as (labels, value)."""
        return [
            (sample.labels, sample.value)
            for family in text_string_to_metric_families(self.metrics())
            for sample in family.samples
            if sample.name == sample_name
        ]

    def metric_sum(self, sample_name: str, **labels: str) -> float:
        """Sum of the samples called `sample_name` whose labels include `labels`."""
        return sum(
            value for have, value in self.metric_samples(sample_name) if labels.items() <= have.items()
        )

    def signal(self, number: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(number)

    def kill(self) -> None:
        """SIGKILL, as in a crash or an OOM kill: no drain, no flush."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets and state but runs nothing (a long GC pause)."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> int | None:
        """SIGCONT (a paused process handles no SIGTERM), SIGTERM for a clean drain, SIGKILL after
        the timeout; returns the exit code."""
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

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def wait_for_metric(self, sample_name: str, minimum: float, timeout_s: float, **labels: str) -> None:
        """Wait until `metric_sum(sample_name, **labels) >= minimum`; fail with the log tail."""
        deadline = time.monotonic() + timeout_s
        while (value := self.metric_sum(sample_name, **labels)) < minimum:
            if time.monotonic() >= deadline:
                raise ServiceError(
                    f"{sample_name}{labels} stayed at {value} < {minimum} for {timeout_s:.0f} s:\n"
                    f"{self.log_tail()}"
                )
            time.sleep(POLL_INTERVAL_S)
