"""`until_done`: a log operation repeated through an outage, paced by the backoff, and nothing else."""

from __future__ import annotations

import logging

import pytest

from pipeline.backoff import Backoff
from pipeline.log.api import LogError, LogUnavailableError
from pipeline.log.retrying import until_done

logger = logging.getLogger("tests.retrying")


async def test_log_errors_are_retried_logged_and_the_backoff_reset_on_success(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outcomes: list[Exception | str] = [LogUnavailableError("broker away"), LogError("not leader"), "fetched"]
    backoff = Backoff(0.001, 0.002)

    async def call() -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        assert backoff.attempt == 2, "each failure advanced the backoff before the next try"
        return outcome

    with caplog.at_level(logging.WARNING, logger="tests.retrying"):
        assert await until_done(call, backoff, logger, "reading the test topic") == "fetched"
    assert outcomes == []
    assert backoff.attempt == 0
    messages = [r.getMessage() for r in caplog.records if r.name == "tests.retrying"]
    assert messages == [
        "reading the test topic failed, retrying in 0.0 s: broker away",
        "reading the test topic failed, retrying in 0.0 s: not leader",
    ]


async def test_anything_but_a_log_error_propagates_at_once() -> None:
    calls = 0

    async def call() -> None:
        nonlocal calls
        calls += 1
        raise ValueError("a bug, not an outage")

    backoff = Backoff(0.001, 0.002)
    with pytest.raises(ValueError, match="a bug"):
        await until_done(call, backoff, logger, "anything")
    assert calls == 1
    assert backoff.attempt == 0
