"""Fixtures for tests that need one particular backend rather than both."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from pipeline.config import Settings
from pipeline.log.api import Log
from tests.conftest import make_settings, started_log


@pytest.fixture
def kafka_settings(tmp_path: Path, request: pytest.FixtureRequest) -> Settings:
    return make_settings("kafka", tmp_path, request)


@pytest.fixture
def embedded_settings(tmp_path: Path, request: pytest.FixtureRequest) -> Settings:
    return make_settings("embedded", tmp_path, request)


@pytest.fixture
async def kafka_log(kafka_settings: Settings) -> AsyncIterator[Log]:
    async with started_log(kafka_settings) as log:
        yield log


@pytest.fixture
async def embedded_log(embedded_settings: Settings) -> AsyncIterator[Log]:
    async with started_log(embedded_settings) as log:
        yield log
