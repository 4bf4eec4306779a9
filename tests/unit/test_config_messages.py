"""Configuration errors read as this configuration's field paths and plain messages, and typos are
caught: an unknown field or environment variable gets the nearest real one ("did you mean").

Friction 5 of issue 33: `REVERSER_LOG__TOPIC_PREFX=x` printed `E<value of ...>tra inputs are not
permitted` (every "x" of pydantic's message redacted), `REVERSER_LGO__...` was ignored without a
word, and a cross-field error read `(top level): Value error, targets.0.provider: ...`.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from pipeline.config import ConfigError, LogBackend, load_settings


def error_of(environ: dict[str, str], config: Path | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        load_settings(config, environ=environ)
    return str(caught.value)


def test_a_short_env_value_is_redacted_only_where_it_stands_whole() -> None:
    message = error_of({"REVERSER_LOG__TOPIC_PREFX": "x"})
    assert "Extra inputs" not in message  # pydantic's wording is translated
    assert "<value of" not in message  # "x" inside words is not a value
    assert "log.topic_prefx: unknown field (did you mean REVERSER_LOG__TOPIC_PREFIX?)" in message
    assert "(from REVERSER_LOG__TOPIC_PREFX)" in message


def test_a_secret_value_echoed_by_a_validator_is_still_redacted() -> None:
    message = error_of({"REVERSER_LOG__COMPRESSION": "hunter2"})
    assert "hunter2" not in message
    assert "REVERSER_LOG__COMPRESSION" in message


def test_an_unknown_file_field_suggests_the_nearest(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("log: {topic_prefx: a}\nattribution: {grace_mss: 1}\n", encoding="utf-8")
    message = error_of({}, config)
    assert "  log.topic_prefx: unknown field (did you mean topic_prefix?)" in message
    assert "  attribution.grace_mss: unknown field (did you mean grace_ms?)" in message


def test_a_cross_field_error_names_the_field_in_plain_words(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "clusters: [{name: c, kubeconfig: /dev/null}]\n"
        "targets: [{name: a, provider: nope, branch: main, path: x, cluster: c}]\n",
        encoding="utf-8",
    )
    message = error_of({}, config)
    assert message.splitlines()[1] == "  targets.0.provider: unknown provider 'nope'"
    assert "Value error" not in message
    assert "(top level)" not in message


def test_an_env_variable_with_an_unknown_section_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="pipeline.config"):
        settings = load_settings(
            None,
            environ={
                "REVERSER_LGO__TOPIC_PREFIX": "a",
                "REVERSER_WORKDR": "/tmp/w",
                "REVERSER_NO_SKIPS": "1",  # the test harness's, not a setting: left alone
            },
        )
    assert settings.log.topic_prefix == "reverser"
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == [
        "environment variable REVERSER_LGO__TOPIC_PREFIX names no setting and is ignored "
        "(did you mean REVERSER_LOG__TOPIC_PREFIX?)",
        "environment variable REVERSER_WORKDR names no setting and is ignored "
        "(did you mean REVERSER_WORKDIR?)",
    ]


@pytest.mark.parametrize(
    ("environ", "backend"),
    [
        ({}, LogBackend.EMBEDDED),
        ({"REVERSER_LOG__BOOTSTRAP_SERVERS": "broker:9092"}, LogBackend.KAFKA),
        ({"REVERSER_LOG__BACKEND": "kafka", "REVERSER_LOG__BOOTSTRAP_SERVERS": "b:9092"}, LogBackend.KAFKA),
        (
            {"REVERSER_LOG__BACKEND": "embedded", "REVERSER_LOG__BOOTSTRAP_SERVERS": "b:9092"},
            LogBackend.EMBEDDED,
        ),
    ],
)
def test_the_log_backend_is_read_into_its_enum(environ: dict[str, str], backend: LogBackend) -> None:
    settings = load_settings(None, environ=environ)
    assert settings.log.effective_backend is backend
    assert isinstance(settings.log.backend, LogBackend)


def test_a_log_backend_outside_its_set_is_refused_by_name() -> None:
    message = error_of({"REVERSER_LOG__BACKEND": "redpanda"})
    assert "log.backend" in message
    assert "REVERSER_LOG__BACKEND" in message
