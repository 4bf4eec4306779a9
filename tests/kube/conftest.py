"""Fixtures for the Kubernetes client: the watch-protocol test server, over real HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.watch.kube_server import FakeKubeApiServer, running_server


@pytest.fixture
async def kube() -> AsyncIterator[FakeKubeApiServer]:
    async with running_server() as server:
        yield server
