"""The apiserver flags `reverser doctor --audit-setup` derives from the attribution settings (pure)."""

from __future__ import annotations

import pytest

from pipeline.config import Settings
from pipeline.doctor.audit_setup import RETRY_WAITS_PER_INITIAL_BACKOFF, batch_max_wait_s, initial_backoff_s


def settings(grace_ms: int, max_wait_ms: int) -> Settings:
    return Settings.model_validate({"attribution": {"grace_ms": grace_ms, "max_wait_ms": max_wait_ms}})


@pytest.mark.parametrize(
    ("grace_ms", "max_wait_ms", "backoff_s"),
    [
        (3000, 15000, 1.0),  # the defaults: the recommended 1 s fits (horizon about 10.75 s)
        (3000, 60000, 1.0),  # never above 1 s, however long the hold
        (3000, 8000, 0.7),  # a shorter hold needs a shorter backoff, rounded down to tenths
        (3000, 0, 0.1),  # no hold at all: the shortest backoff offered
    ],
)
def test_the_retry_horizon_fits_in_the_attribution_hold(
    grace_ms: int, max_wait_ms: int, backoff_s: float
) -> None:
    chosen = settings(grace_ms, max_wait_ms)
    assert initial_backoff_s(chosen) == backoff_s
    if backoff_s > 0.1:
        horizon_s = backoff_s * RETRY_WAITS_PER_INITIAL_BACKOFF + batch_max_wait_s(chosen)
        assert horizon_s <= max_wait_ms / 1000
