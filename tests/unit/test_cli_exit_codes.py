"""Every `reverser` command exits with the code of docs/cli.md for the same situation, one error format.

The commands run for real through the entry point (`pipeline.cli.main`, what the `reverser`
script calls): a configuration that names an invalid field, a log that cannot be reached (a Kafka
address where nothing listens), and bad arguments or input files. The error is one line on stderr,
`reverser <command>: <message>` (details such as the fields of an invalid
configuration follow on indented lines).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pipeline.cli import main
from pipeline.exitcodes import ExitCode
from tests.support.net import free_port

#: Commands that open the log, with the arguments they need besides `--config`.
LOG_COMMANDS: dict[str, list[str]] = {
    "run": [],
    "resolve": ["--audit", "{audit}"],
    "topics create": [],
    "topics check": [],
    "lag": [],
    "replay facts": [],
    "replay branch": ["--provider", "git", "--branch", "main"],
    "dead-letter list": [],
}
#: Commands that only read the configuration.
CONFIG_COMMANDS: dict[str, list[str]] = {
    "watch-rules": [],
    "config check": ["{audit}"],
    "config export": [],
}


def closed_port() -> int:
    """A loopback port nothing listens on."""
    return free_port()


def write_config(tmp_path: Path, data: dict[str, object]) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def argv(command: str, extra: list[str], config: Path, tmp_path: Path) -> list[str]:
    audit = tmp_path / "audit.json"
    audit.write_text(json.dumps({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": []}))
    args = [arg.format(audit=audit) for arg in extra]
    return [*command.split(), "--config", str(config), *args]


def error_of(capsys: pytest.CaptureFixture[str], command: str) -> str:
    """The error the command stopped with: from its `reverser <command>: ` line to the end of stderr."""
    err = capsys.readouterr().err
    start = err.find(f"reverser {command}: ")
    assert start >= 0, f"no error line for {command!r} in: {err}"
    assert start == 0 or err[start - 1] == "\n"
    return err[start:]


@pytest.mark.parametrize("command", [*LOG_COMMANDS, *CONFIG_COMMANDS])
def test_an_invalid_configuration_exits_2_naming_the_field(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, {"attribution": {"grace_ms": -1}})
    extra = {**LOG_COMMANDS, **CONFIG_COMMANDS}[command]
    assert main(argv(command, extra, config, tmp_path)) == ExitCode.USAGE
    line = error_of(capsys, command)
    assert "attribution.grace_ms" in line


@pytest.mark.parametrize("command", list(LOG_COMMANDS))
def test_an_unreachable_log_exits_3(command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(
        tmp_path,
        {
            "workdir": str(tmp_path / "work"),
            "log": {
                "bootstrap_servers": f"127.0.0.1:{closed_port()}",
                "connect_retries": 0,
                "request_timeout_ms": 2000,
            },
            "providers": [{"name": "git", "url": str(tmp_path / "remote.git")}],
            "audit": {"enabled": False},
            "metrics": {"addr": "127.0.0.1:0"},
        },
    )
    assert main(argv(command, LOG_COMMANDS[command], config, tmp_path)) == ExitCode.LOG_UNAVAILABLE
    line = error_of(capsys, command)
    assert line.startswith(f"reverser {command}: log unavailable: ")
    assert "Kafka unavailable" in line


@pytest.mark.parametrize(
    ("command", "args", "named"),
    [
        ("run", ["--once"], "--once"),
        ("resolve", ["--grace-ms", "-1"], "--grace-ms"),
        ("resolve", ["--audit", "{missing}"], "missing.yaml"),
        ("lag", ["--interval", "0"], "--interval"),
        ("lag", ["--serve", "nowhere"], "--serve"),
        ("replay branch", ["--provider", "nope", "--branch", "main"], "unknown provider 'nope'"),
        ("config check", ["{missing}"], "missing.yaml"),
    ],
)
def test_bad_arguments_and_input_exit_2_naming_them(
    command: str, args: list[str], named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, {"workdir": str(tmp_path / "work")})
    (tmp_path / "work" / "log").mkdir(parents=True)  # a workdir a service ran in: only the argument is bad
    missing = str(tmp_path / "missing.yaml")
    full = [*command.split(), "--config", str(config), *(arg.format(missing=missing) for arg in args)]
    assert main(full) == ExitCode.USAGE
    line = error_of(capsys, command)
    assert named in line


def test_doctor_reports_an_unreachable_log_as_a_failed_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`doctor` examines the log: an unreachable one is its finding (exit 1), not a reason to stop."""
    config = write_config(
        tmp_path,
        {
            "log": {"bootstrap_servers": f"127.0.0.1:{closed_port()}", "connect_retries": 0},
            "audit": {"enabled": False},
        },
    )
    assert main(["doctor", "--config", str(config), "--output", "json"]) == ExitCode.FINDINGS
    report = json.loads(capsys.readouterr().out)
    (log_check, *_) = [c for c in report["checks"] if c["area"] == "log"]
    assert log_check["status"] == "fail"
