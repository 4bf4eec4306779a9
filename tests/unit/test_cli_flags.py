"""The command line as typed: global flags anywhere, `--version`, suggestions for typos, and a help
screen that does not import the stages.

Issue 33, frictions 5 (a mistyped flag or subcommand), 6 (no `--version`; global flags only before
the subcommand) and 8 (`reverser --help` took 2.4 s importing every stage).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from pipeline.buildinfo import BUILD_COMMIT_FILE
from pipeline.cli import SUBCOMMANDS, main

REVERSER = Path(sys.executable).with_name("reverser")
REPO_ROOT = Path(__file__).resolve().parents[2]
#: Packages `reverser --help` must not import: each costs a large part of a second.
HEAVY_MODULES = ("aiokafka", "aiohttp", "kubernetes_asyncio", "pydantic", "git", "fastavro")


def reverser(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REVERSER_")}
    return subprocess.run(
        [str(REVERSER), *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=60, check=False
    )


def head_commit() -> str:
    return subprocess.run(
        ["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_version_flag_and_subcommand_name_the_build() -> None:
    flag, command = reverser("--version"), reverser("version")
    assert flag.returncode == command.returncode == 0
    assert flag.stdout == command.stdout
    assert flag.stdout == f"reverser 0.1.0 (git {head_commit()[:12]})\n"


def test_help_imports_no_stage() -> None:
    probe = (
        "import sys; from pipeline.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        f"print([m for m in {HEAVY_MODULES!r} if m in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-1] == "[]"
    assert all(subcommand.name in done.stdout for subcommand in SUBCOMMANDS)


@pytest.mark.parametrize(
    "argv",
    [
        ["--log-level", "ERROR", "--config", "{config}", "config", "export"],
        ["config", "export", "--config", "{config}", "--log-level", "ERROR"],
        ["--config", "{config}", "config", "export", "--log-level", "ERROR"],
    ],
)
def test_global_flags_before_or_after_the_subcommand(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("providers: [{name: repo, url: https://git.example.com/r.git}]\n", encoding="utf-8")
    assert main([arg.format(config=config) for arg in argv]) == 0
    assert "name: repo" in capsys.readouterr().out


def test_a_required_config_may_come_first_but_not_be_left_out(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["config", "export"])
    assert stopped.value.code == 2
    assert "the following arguments are required: --config" in capsys.readouterr().err


def test_config_is_refused_by_a_command_that_reads_none(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--config", "x.yaml", "config", "schema"])
    assert "--config does not apply to this command" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "suggestion"),
    [
        (["lgo"], "(did you mean lag?)"),
        (["doctr"], "(did you mean doctor?)"),
        (["lag", "--grop", "x"], "(did you mean --group?)"),
        (["lag", "--output", "jsn"], "(did you mean json?)"),
        (["topics", "chek"], "(did you mean check?)"),
    ],
)
def test_a_typo_gets_a_suggestion(args: list[str], suggestion: str) -> None:
    result = reverser(*args)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1].endswith(suggestion), result.stderr


def test_debug_and_log_level_after_the_subcommand(tmp_path: Path) -> None:
    result = reverser("config", "schema", "--log-level", "ERROR", "--debug")
    assert result.returncode == 0, result.stderr
    assert "properties" in json.loads(result.stdout)


def test_a_wheel_records_the_commit_it_was_built_from(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(tmp_path),
            str(REPO_ROOT),
        ],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    (wheel,) = tmp_path.glob("reverser_pipeline-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert archive.read(f"pipeline/{BUILD_COMMIT_FILE}").decode().strip() == head_commit()
        metadata = next(name for name in archive.namelist() if name.endswith(".dist-info/METADATA"))
        assert "License-Expression: Apache-2.0" in archive.read(metadata).decode()


def test_quiet_library_logs_still_reach_the_kafka_credentials_check() -> None:
    """Library noise is kept off the output, not silenced at its logger: the Kafka backend reads
    aiokafka's ERROR records to tell rejected credentials from a broker that is down."""
    import logging

    from aiokafka.errors import SaslAuthenticationFailed

    from pipeline.cli import LibraryNoise, _configure_logging
    from pipeline.log.kafka.clients import AIOKAFKA_LOGGER, BootstrapFailures
    from pipeline.logoutput import LogFormat

    _configure_logging("INFO", LogFormat.TEXT, debug=False)
    failures = BootstrapFailures()
    AIOKAFKA_LOGGER.addHandler(failures)
    try:
        logging.getLogger("aiokafka.conn").error("Unable to connect: %s", SaslAuthenticationFailed("bad"))
    finally:
        AIOKAFKA_LOGGER.removeHandler(failures)
    assert isinstance(failures.fatal, SaslAuthenticationFailed)

    noise = LibraryNoise()

    def record(name: str, level: int) -> logging.LogRecord:
        return logging.LogRecord(name, level, __file__, 1, "m", None, None)

    assert not noise.filter(record("aiokafka.consumer", logging.ERROR))
    assert not noise.filter(record("kubernetes_asyncio", logging.WARNING))
    assert noise.filter(record("aiokafka", logging.CRITICAL))
    assert noise.filter(record("pipeline.watch", logging.WARNING))
    assert noise.filter(record("aiokafkaesque", logging.WARNING))
