"""The pipeline service as operators run it: `reverser run --config FILE` in its own process.

A separate process keeps the test honest (the real CLI, configuration file and signal handling)
and keeps a crash in a stage from taking the test runner down with it; the log file is attached to
any failure.
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

__all__ = ["ServiceError", "ServiceProcess"]

READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.25
LOG_TAIL_LINES = 60


class ServiceError(RuntimeError):
    """The service exited or never became ready; carries its log tail."""


class ServiceProcess:
    """Writes `config` to `workdir/config.yaml` and runs the service on it."""

    def __init__(self, workdir: Path, config: dict[str, Any], log_level: str = "DEBUG") -> None:
        self.workdir = workdir
        self.log_level = log_level
        self.config_path = workdir / "config.yaml"
        self.log_path = workdir / "reverser.log"
        self.metrics_addr = str(config["metrics"]["addr"])
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self._proc: subprocess.Popen[bytes] | None = None

    def log_tail(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-LOG_TAIL_LINES:])

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("REVERSER_")}
        with self.log_path.open("ab") as log_file:
            self._proc = subprocess.Popen(
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
                env=env,
            )
        try:
            self._wait_ready()
        except BaseException:
            # Never leave a half-started service behind a failed fixture.
            self.stop()
            raise

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

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def kill(self) -> None:
        """SIGKILL, as in a crash or an OOM kill: no drain, no flush."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets and state but runs nothing (a long GC pause)."""
        if self._proc is not None:
            self._proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self._proc is not None:
            self._proc.send_signal(signal.SIGCONT)

    def stop(self) -> int | None:
        """SIGTERM (a clean drain), SIGKILL after the timeout; returns the exit code."""
        if self._proc is None:
            return None
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGCONT)  # a paused process handles no SIGTERM
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        code = self._proc.returncode
        self._proc = None
        return code

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        last = "no answer yet"
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise ServiceError(f"reverser run exited with {self._proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"http://{self.metrics_addr}/readyz", timeout=5) as response:
                    if response.status == 200:
                        return
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}: {exc.read().decode(errors='replace').strip()}"
            except (urllib.error.URLError, OSError) as exc:
                last = str(exc)
            time.sleep(POLL_INTERVAL_S)
        raise ServiceError(
            f"reverser run not ready after {READY_TIMEOUT_S:.0f} s ({last}):\n{self.log_tail()}"
        )
