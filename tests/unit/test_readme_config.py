"""The configuration example in README.md must load, so the front page cannot drift from `Settings`."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from pipeline.config import Settings, load_settings

README = Path(__file__).resolve().parents[2] / "README.md"


def _readme_config_block() -> str:
    """The first YAML block under the README's `## Configuration` heading."""
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Configuration\n", 1)
    assert len(section) == 2, "README.md has no '## Configuration' section"
    match = re.search(r"^```yaml\n(.*?)^```", section[1], re.S | re.M)
    assert match is not None, "the Configuration section of README.md has no ```yaml block"
    return match.group(1)


def test_readme_configuration_example_is_valid(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(_readme_config_block(), encoding="utf-8")

    settings = load_settings(config, environ={})

    assert settings.log.effective_backend == "kafka"
    assert [t.name for t in settings.targets] == ["prod-apps"]
    assert settings.provider(settings.targets[0].provider).name == "platform-repo"


def test_readme_configuration_example_shows_every_section() -> None:
    shown = yaml.safe_load(_readme_config_block())

    assert set(shown) == set(Settings.model_fields)
