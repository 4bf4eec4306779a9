"""The pipeline service as operators run it: `reverser run --config FILE`, started means ready.

On top of `tests.support.process.ReverserProcess` (the raw child process): the environment is
cleaned of `REVERSER_*` variables so nothing from the test runner leaks into the service, the
configuration and log are `config.yaml` / `reverser.log` in the workdir, and `start()` returns
only once `/readyz` answers 200 (or fails with the log tail).
"""

from __future__ import annotations

import contextlib
import os
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support.process import POLL_INTERVAL_S, ReverserProcess, ServiceError

__all__ = ["ServiceError", "ServiceProcess", "serving"]

READY_TIMEOUT_S = 120.0


class ServiceProcess(ReverserProcess):
    """Writes `config` to `workdir/config.yaml` and runs the service on it."""

    def __init__(self, workdir: Path, config: dict[str, Any], log_level: str = "DEBUG") -> None:
        super().__init__(workdir, "reverser", config, log_level=log_level, config_file="config.yaml")

    def _environment(self, extra: dict[str, str]) -> dict[str, str]:
        """The runner's environment without `REVERSER_*`: the configuration file says it all."""
        return {k: v for k, v in os.environ.items() if not k.startswith("REVERSER_")} | extra

    @property
    def pid(self) -> int | None:
        """The pid while the service runs; None once it exited, was killed or stopped."""
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def start(self) -> None:
        super().start()
        try:
            self._wait_ready()
        except BaseException:
            # Never leave a half-started service behind a failed fixture.
            self.stop()
            raise

    def stop(self) -> int | None:
        code = super().stop()
        self.proc = None
        return code

    def _wait_ready(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        last = "no answer yet"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServiceError(f"reverser run exited with {self.proc.returncode}:\n{self.log_tail()}")
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


@contextlib.contextmanager
def serving(
    workdir: Path, config: dict[str, Any], *, snapshot_streams: int, timeout_s: float
) -> Iterator[ServiceProcess]:
    """A ready service whose `snapshot_streams` watch streams have completed their first snapshot,
    stopped at the end, which must be a clean exit (code 0).

    Readiness does not wait for the first snapshots: a change made before one completes lands in
    the operator's reconcile commit, not in the actor's, so tests about authorship wait for them.
    """
    service = ServiceProcess(workdir, config)
    service.start()
    try:
        service.wait_for_metric(
            "reverser_watch_snapshots_total", snapshot_streams, timeout_s, outcome="completed"
        )
        yield service
    finally:
        code = service.stop()
        assert code == 0, f"reverser run exited with {code}:\n{service.log_tail()}"
