"""Chaos tests: the `chaos` marker, deselected unless `-m` names it (`make chaos` does).

The seed comes from CHAOS_SEED, or is drawn at random and printed, so any run can be repeated.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tests.e2e.cluster.controlplane import find_binaries

SKIP_REASON = (
    "kube-apiserver/etcd are not built; `make chaos` builds them (tests/e2e/cluster/build-binaries.sh)"
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect chaos tests unless the marker expression asks for them."""
    if "chaos" in (config.getoption("markexpr") or ""):
        return
    chaos = [item for item in items if item.get_closest_marker("chaos") is not None]
    if not chaos:
        return
    config.hook.pytest_deselected(items=chaos)
    items[:] = [item for item in items if item.get_closest_marker("chaos") is None]


@pytest.fixture(scope="session")
def chaos_seed() -> int:
    raw = os.environ.get("CHAOS_SEED")
    seed = int(raw) if raw else random.SystemRandom().randrange(1, 1_000_000)
    print(f"\nCHAOS_SEED={seed}{'' if raw else ' (random; set CHAOS_SEED to repeat)'}")
    return seed


@pytest.fixture(scope="session")
def chaos_bin_dir() -> Path:
    directory = find_binaries()
    if directory is None:
        pytest.skip(SKIP_REASON)
    return directory
