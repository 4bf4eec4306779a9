"""`-b/--bootstrap-server` on the commands that read or repair the log (issue 33, CLI conventions):
it replaces `log.bootstrap_servers`, selects the Kafka backend, and is checked by the setting's rule.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.config import ConfigError, load_settings

REVERSER = Path(sys.executable).with_name("reverser")
#: Commands that take the flag, as typed after `reverser`.
COMMANDS = (("lag",), ("topics", "check"), ("topics", "create"), ("dead-letter", "list"))


def reverser(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REVERSER_")}
    return subprocess.run(
        [str(REVERSER), *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
@pytest.mark.parametrize("value", ["nohost", "k:9092,nohost", "k:99999", ""])
def test_a_malformed_bootstrap_server_is_a_usage_error_naming_the_flag(
    command: tuple[str, ...], value: str, tmp_path: Path
) -> None:
    done = reverser(*command, "-b", value, "--workdir", str(tmp_path))
    assert done.returncode == 2
    assert "argument -b/--bootstrap-server: " in done.stderr.splitlines()[-1]


def test_the_flag_selects_kafka_over_the_embedded_log(tmp_path: Path) -> None:
    """Without it the missing embedded log is refused; with it the command asks the named broker."""
    config = tmp_path / "config.yaml"
    config.write_text("log:\n  backend: embedded\n  connect_retries: 0\n", encoding="utf-8")
    workdir = tmp_path / "no-log-here"
    embedded = reverser("lag", "--config", str(config), "--workdir", str(workdir))
    assert "no embedded log there" in embedded.stderr
    # Nothing listens on port 1 of the loopback: the connection is refused at once.
    kafka = reverser(
        "lag", "--config", str(config), "--workdir", str(workdir), "--bootstrap-server", "127.0.0.1:1"
    )
    assert kafka.returncode == 3, kafka.stderr
    assert "log unavailable: connect admin to 127.0.0.1:1" in kafka.stderr


def test_the_setting_obeys_the_same_rule() -> None:
    with pytest.raises(ConfigError, match=r"log\.bootstrap_servers: address 'nohost' is not HOST:PORT"):
        load_settings(environ={"REVERSER_LOG__BOOTSTRAP_SERVERS": "k:9092,nohost"})
    settings = load_settings(environ={"REVERSER_LOG__BOOTSTRAP_SERVERS": "k:9092, [::1]:9093"})
    assert settings.log.effective_backend == "kafka"
