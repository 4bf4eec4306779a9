"""Progress of long commands (replays, rebuilds): a live bar on a terminal, periodic lines otherwise.

On a tty the user watches: a `rich` bar with the count, the rate and the time left. In a pipe or
a CI log a redrawn bar is noise, so the same progress becomes one plain line every
`LINE_INTERVAL_S` seconds (and a last one when the work ends), with the same figures.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

__all__ = ["LINE_INTERVAL_S", "ProgressReport"]

LINE_INTERVAL_S = 5.0


class _Rate(TransferSpeedColumn):
    """Records per second (rich's transfer column speaks bytes)."""

    def render(self, task: object) -> str:  # type: ignore[override]
        speed = getattr(task, "finished_speed", None) or getattr(task, "speed", None)
        return "-/s" if speed is None else f"{speed:,.0f}/s"


class ProgressReport:
    """`with ProgressReport("replaying", total) as p: p.advance(n)`; `total` may grow with `p.total = n`.

    `stream` defaults to stderr so the command's output (stdout) stays clean; `tty` overrides the
    terminal detection (tests); `clock` is for tests of the line interval.
    """

    def __init__(
        self,
        what: str,
        total: int,
        *,
        stream: TextIO | None = None,
        tty: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what = what
        self.done = 0
        self._total = total
        self._stream = stream if stream is not None else sys.stderr
        self._tty = self._stream.isatty() if tty is None else tty
        self._clock = clock
        self._started = clock()
        self._last_line = self._started
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    @property
    def total(self) -> int:
        return self._total

    @total.setter
    def total(self, value: int) -> None:
        self._total = value
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, total=value)

    def __enter__(self) -> ProgressReport:
        if self._tty:
            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                _Rate(),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                console=Console(file=self._stream),
                transient=False,
            )
            self._bar.start()
            self._task = self._bar.add_task(self.what, total=self._total)
        return self

    def advance(self, count: int = 1) -> None:
        self.done += count
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=self.done)
            return
        now = self._clock()
        if now - self._last_line >= LINE_INTERVAL_S:
            self._last_line = now
            self._line(now)

    def note(self, message: str) -> None:
        """A message that must not be drawn over by the bar (warnings)."""
        if self._bar is not None:
            self._bar.console.print(message)
        else:
            print(message, file=self._stream, flush=True)

    def _line(self, now: float) -> None:
        elapsed = max(now - self._started, 1e-9)
        rate = self.done / elapsed
        left = max(self._total - self.done, 0)
        eta = f"{left / rate:.0f} s" if rate > 0 else "unknown"
        share = f" ({100 * self.done / self._total:.0f}%)" if self._total else ""
        print(
            f"{self.what}: {self.done}/{self._total}{share}, {rate:,.0f}/s, eta {eta}",
            file=self._stream,
            flush=True,
        )

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        elif exc_type is None:
            self._line(self._clock())
