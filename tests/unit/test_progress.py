"""`pipeline.progress.ProgressReport`: periodic plain lines off a terminal, a live bar on one."""

from __future__ import annotations

import io

from pipeline.progress import LINE_INTERVAL_S, ProgressReport


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_come_once_per_interval_and_at_the_end() -> None:
    out = io.StringIO()
    clock = _Clock()
    with ProgressReport("reading t", 1000, stream=out, tty=False, clock=clock) as report:
        for _ in range(10):
            clock.now += LINE_INTERVAL_S / 4
            report.advance(50)
        report.note("warning: something")
    lines = out.getvalue().splitlines()
    # 10 quarter-intervals: a line at the 4th and the 8th advance, the note, and the last line
    assert lines == [
        "reading t: 200/1000 (20%), 40/s, eta 20 s",
        "reading t: 400/1000 (40%), 40/s, eta 15 s",
        "warning: something",
        "reading t: 500/1000 (50%), 40/s, eta 12 s",
    ]


def test_no_last_line_when_the_work_failed() -> None:
    out = io.StringIO()
    try:
        with ProgressReport("x", 10, stream=out, tty=False) as report:
            report.advance(1)
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert out.getvalue() == ""


def test_terminal_bar_shows_count_rate_and_eta() -> None:
    out = io.StringIO()
    with ProgressReport("replaying t", 40, stream=out, tty=True) as report:
        report.total = 50
        report.advance(50)
    text = out.getvalue()
    assert "replaying t" in text
    assert "50/50" in text
    assert "/s" in text
    assert "eta" in text
