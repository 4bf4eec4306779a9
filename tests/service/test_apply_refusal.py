"""A stage that refuses a configuration no longer keeps the stages after it from taking it.

Once the first refusal (a ConfigError) ended the apply: every stage after it kept the previous
configuration while the service had moved on to the new one. The real Service and its reload path
on an embedded log, with stand-in stages: the refusing one is named and counted as `invalid`, the
one after it takes the configuration.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pipeline.config import ConfigError, Settings, load_settings
from pipeline.log.api import Log
from pipeline.service.app import Service
from tests.service.test_reload import Taker, _config, _count


class Refuser(Taker):
    """A stage that refuses every configuration it is handed."""

    name = "refuser"

    async def apply(self, settings: Settings) -> None:
        raise ConfigError("refuser: this configuration cannot be taken")


async def test_the_stages_after_a_refusing_one_still_take_the_configuration(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(_config(tmp_path, ["a"])))
    refuser, taker = Refuser(), Taker()

    def build_refuser(_s: Settings, _l: Log) -> Refuser:
        return refuser

    def build_taker(_s: Settings, _l: Log) -> Taker:
        return taker

    factories = [build_refuser, build_taker]
    service = Service(load_settings(path), factories=factories, reload=lambda: load_settings(path))
    await service.start()
    try:
        invalid = _count("invalid")
        path.write_text(yaml.safe_dump(_config(tmp_path, ["a", "b"])))
        await service.reload()
        assert taker.applied == [["a", "b"]], "the stage after the refusing one took it"
        assert _count("invalid") == invalid + 1
        assert "refuser refused the configuration: refuser: this configuration cannot be taken" in caplog.text
    finally:
        await service.stop()
