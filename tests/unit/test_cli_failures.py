"""Every command, against every way its surroundings can fail, stops with one line and exit 2 or 3.

Issue 33, frictions 2 and 3: an unwritable workdir, a port held by another process, `--workdir
FILE/x`, a dead broker or apiserver each ended in a 40-line traceback or a library's repr. Each
case here runs the installed `reverser` script in a real process, in a clean environment, and
asserts what a person sees: exactly one stderr line `reverser <command>: <what failed>: <what to
check>`, no traceback, no library log line, and the exit code of docs/cli.md (2: the input is at
fault; 3: something the command needs is unavailable).
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from pipeline.exitcodes import ExitCode
from tests.support.net import free_port

REVERSER = Path(sys.executable).with_name("reverser")
COMMAND_TIMEOUT_S = 90.0
#: Where root cannot create anything either (sysfs refuses mkdir with EPERM).
ROOT_UNWRITABLE = Path("/sys/reverser-test")


@dataclass(frozen=True)
class Case:
    """One command in one failing surrounding: its arguments ({names} filled in by `Scene`)."""

    command: str
    args: tuple[str, ...]
    code: ExitCode
    #: Text the error line must contain (the path, address or cluster at fault).
    names: str
    #: Text the error line must end with: the hint, where it names the option at fault.
    hint: str = ""


class Scene:
    """The failing surroundings of one test: paths, a held port, configurations."""

    def __init__(self, tmp_path: Path, held_port: int) -> None:
        self.tmp = tmp_path
        self.workdir = tmp_path / "work"
        (self.workdir / "log").mkdir(parents=True)  # a workdir a service ran in
        self.file = tmp_path / "a-file"
        self.file.write_text("not a directory\n", encoding="utf-8")
        self.directory = tmp_path / "a-directory"
        self.directory.mkdir()
        self.missing = tmp_path / "missing.yaml"
        if os.geteuid() == 0:
            self.unwritable = ROOT_UNWRITABLE
        else:
            self.unwritable = tmp_path / "read-only"
            self.unwritable.mkdir(mode=0o555)
        self.held = f"127.0.0.1:{held_port}"
        self.audit = tmp_path / "audit.json"
        self.audit.write_text('{"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": []}')
        dead = f"127.0.0.1:{free_port()}"
        self.dead_broker = self._config(
            "dead-broker",
            {
                "log": {
                    "bootstrap_servers": dead,
                    "connect_retries": 0,
                    "request_timeout_ms": 2000,
                }
            },
        )
        kubeconfig = tmp_path / "kubeconfig.yaml"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{free_port()}"}}],
                    "users": [{"name": "u", "user": {"token": "t"}}],
                    "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                    "current-context": "c",
                }
            ),
            encoding="utf-8",
        )
        self.dead_apiserver = self._config(
            "dead-apiserver",
            {
                "clusters": [{"name": "east", "kubeconfig": str(kubeconfig)}],
                "targets": [
                    {
                        "name": "t",
                        "provider": "git",
                        "branch": "main",
                        "path": "x",
                        "cluster": "east",
                        "rules": [{"resources": ["configmaps"], "namespaces": ["a"]}],
                    }
                ],
            },
        )
        self.dead_broker_targets = self._config(
            "dead-broker-targets",
            {
                "log": {"bootstrap_servers": dead, "connect_retries": 0, "request_timeout_ms": 2000},
                "targets": [
                    {
                        "name": name,
                        "provider": "git",
                        "branch": "main",
                        "path": name,
                        "rules": [{"resources": ["configmaps"], "namespaces": ["a"]}],
                    }
                    for name in ("t", "u")
                ],
            },
        )
        self.plain = self._config("plain", {})
        self.with_audit = self._config("with-audit", {"audit": {}})

    def _config(self, name: str, extra: dict[str, object]) -> Path:
        data: dict[str, object] = {
            "workdir": str(self.workdir),
            "audit": {"enabled": False},
            "metrics": {"addr": f"127.0.0.1:{free_port()}"},
            "providers": [{"name": "git", "url": str(self.tmp / "remote.git")}],
            **extra,
        }
        path = self.tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data), encoding="utf-8")
        return path

    def argv(self, case: Case) -> list[str]:
        fields = {name: str(value) for name, value in vars(self).items()}
        return [*case.command.split(), *(arg.format(**fields) for arg in case.args), "--log-level", "ERROR"]

    def names(self, case: Case) -> str:
        return case.names.format(**{name: str(value) for name, value in vars(self).items()})


RUN_ADDRS = ("--audit-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0")
CASES: dict[str, Case] = {
    # an unwritable workdir
    "run-unwritable": Case(
        "run", ("--workdir", "{unwritable}/w", *RUN_ADDRS), ExitCode.USAGE, "{unwritable}"
    ),
    "topics-create-unwritable": Case(
        "topics create", ("--workdir", "{unwritable}/w"), ExitCode.USAGE, "{unwritable}"
    ),
    "lag-unwritable": Case("lag", ("--workdir", "{unwritable}/w"), ExitCode.USAGE, "{unwritable}"),
    "run-demo-unwritable": Case(
        "run",
        ("--demo", "--once", "--workdir", "{unwritable}/w", *RUN_ADDRS),
        ExitCode.USAGE,
        "{unwritable}",
        hint="or choose another --workdir",
    ),
    # the hint names the option whose path failed, not always --workdir
    "replay-branch-into-unwritable": Case(
        "replay branch",
        ("--config", "{plain}", "--provider", "git", "--branch", "main", "--into", "{unwritable}/r.git"),
        ExitCode.USAGE,
        "{unwritable}",
        hint="or choose another --into",
    ),
    # a file where a directory is expected
    "run-workdir-file": Case("run", ("--workdir", "{file}/x", *RUN_ADDRS), ExitCode.USAGE, "{file}/x"),
    "topics-create-workdir-file": Case(
        "topics create", ("--workdir", "{file}/x"), ExitCode.USAGE, "{file}/x"
    ),
    "lag-workdir-file": Case("lag", ("--workdir", "{file}/x"), ExitCode.USAGE, "{file}/x"),
    "topics-list-workdir-file": Case("topics list", ("--workdir", "{file}/x"), ExitCode.USAGE, "{file}/x"),
    "dead-letter-list-workdir-file": Case(
        "dead-letter list", ("--workdir", "{file}/x"), ExitCode.USAGE, "{file}/x"
    ),
    "replay-facts-workdir-file": Case("replay facts", ("--workdir", "{file}/x"), ExitCode.USAGE, "{file}/x"),
    "run-demo-workdir-file": Case(
        "run", ("--demo", "--once", "--workdir", "{file}/x", *RUN_ADDRS), ExitCode.USAGE, "{file}/x"
    ),
    # a directory where a file is expected
    "run-config-directory": Case("run", ("--config", "{directory}"), ExitCode.USAGE, "{directory}"),
    "lag-config-directory": Case("lag", ("--config", "{directory}"), ExitCode.USAGE, "{directory}"),
    "watch-rules-config-directory": Case(
        "watch-rules", ("--config", "{directory}"), ExitCode.USAGE, "{directory}"
    ),
    "resolve-audit-directory": Case("resolve", ("--audit", "{directory}"), ExitCode.USAGE, "{directory}"),
    "config-check-directory": Case("config check", ("{directory}",), ExitCode.USAGE, "{directory}"),
    "config-export-directory": Case(
        "config export", ("--config", "{directory}"), ExitCode.USAGE, "{directory}"
    ),
    "topics-list-config-directory": Case(
        "topics list", ("--config", "{directory}"), ExitCode.USAGE, "{directory}"
    ),
    "dead-letter-show-config-directory": Case(
        "dead-letter show", ("0", "--config", "{directory}"), ExitCode.USAGE, "{directory}"
    ),
    "replay-branch-config-directory": Case(
        "replay branch",
        ("--config", "{directory}", "--provider", "git", "--branch", "main"),
        ExitCode.USAGE,
        "{directory}",
    ),
    "watch-rules-discovery-directory": Case(
        "watch-rules", ("--config", "{plain}", "--discovery", "{directory}"), ExitCode.USAGE, "{directory}"
    ),
    "resolve-watch-directory": Case(
        "resolve", ("--audit", "{audit}", "--watch", "{directory}"), ExitCode.USAGE, "{directory}"
    ),
    # a missing file
    "run-config-missing": Case("run", ("--config", "{missing}"), ExitCode.USAGE, "{missing}"),
    "lag-config-missing": Case("lag", ("--config", "{missing}"), ExitCode.USAGE, "{missing}"),
    "resolve-audit-missing": Case("resolve", ("--audit", "{missing}"), ExitCode.USAGE, "{missing}"),
    "config-check-missing": Case("config check", ("{missing}",), ExitCode.USAGE, "{missing}"),
    "replay-facts-config-missing": Case(
        "replay facts", ("--config", "{missing}"), ExitCode.USAGE, "{missing}"
    ),
    "topics-describe-config-missing": Case(
        "topics describe", ("--config", "{missing}"), ExitCode.USAGE, "{missing}"
    ),
    "dead-letter-replay-config-missing": Case(
        "dead-letter replay", ("0", "--config", "{missing}"), ExitCode.USAGE, "{missing}"
    ),
    "watch-rules-config-missing": Case("watch-rules", ("--config", "{missing}"), ExitCode.USAGE, "{missing}"),
    "watch-rules-discovery-missing": Case(
        "watch-rules", ("--config", "{plain}", "--discovery", "{missing}"), ExitCode.USAGE, "{missing}"
    ),
    "resolve-watch-missing": Case(
        "resolve", ("--audit", "{audit}", "--watch", "{missing}"), ExitCode.USAGE, "{missing}"
    ),
    "replay-watch-events-config-missing": Case(
        "replay watch-events",
        ("--config", "{missing}", "--from-target", "t", "--target", "u"),
        ExitCode.USAGE,
        "{missing}",
    ),
    # a port another process holds
    "run-audit-port-in-use": Case(
        "run", ("--config", "{with_audit}", "--audit-addr", "{held}"), ExitCode.UNAVAILABLE, "{held}"
    ),
    "run-metrics-port-in-use": Case(
        "run", ("--config", "{plain}", "--metrics-addr", "{held}"), ExitCode.UNAVAILABLE, "{held}"
    ),
    "lag-serve-port-in-use": Case(
        "lag", ("--config", "{plain}", "--serve", "{held}"), ExitCode.UNAVAILABLE, "{held}"
    ),
    # issue 33, friction 2: a second `reverser run` while the demo holds its ports
    "run-demo-audit-port-in-use": Case(
        "run",
        (
            "--demo",
            "--once",
            "--workdir",
            "{tmp}/demo",
            "--audit-addr",
            "{held}",
            "--metrics-addr",
            "127.0.0.1:0",
        ),
        ExitCode.UNAVAILABLE,
        "{held}",
    ),
    "run-demo-metrics-port-in-use": Case(
        "run",
        (
            "--demo",
            "--once",
            "--workdir",
            "{tmp}/demo",
            "--metrics-addr",
            "{held}",
            "--audit-addr",
            "127.0.0.1:0",
        ),
        ExitCode.UNAVAILABLE,
        "{held}",
    ),
    # a dead broker
    **{
        f"{command.replace(' ', '-')}-dead-broker": Case(
            command, ("--config", "{dead_broker}", *extra), ExitCode.UNAVAILABLE, "log.bootstrap_servers"
        )
        for command, extra in {
            "run": (),
            "lag": (),
            "topics check": (),
            "topics create": (),
            "replay facts": (),
            "replay branch": ("--provider", "git", "--branch", "main"),
            "dead-letter list": (),
            "resolve": ("--audit", "{audit}"),
            "topics list": (),
            "topics describe": ("branch-work",),
            "dead-letter show": ("0",),
            "dead-letter replay": ("0",),
        }.items()
    },
    "replay-watch-events-dead-broker": Case(
        "replay watch-events",
        ("--config", "{dead_broker_targets}", "--from-target", "t", "--target", "u"),
        ExitCode.UNAVAILABLE,
        "log.bootstrap_servers",
    ),
    # a dead apiserver
    "watch-rules-dead-apiserver": Case(
        "watch-rules", ("--config", "{dead_apiserver}"), ExitCode.UNAVAILABLE, "cluster east"
    ),
}


@pytest.fixture
def held_port() -> Iterator[int]:
    """A loopback port this test listens on, as a running `reverser run` would."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", free_port()))
        sock.listen()
        yield int(sock.getsockname()[1])


def run_reverser(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REVERSER_")}
    return subprocess.run(
        [str(REVERSER), *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_failure_is_one_line_and_exit_2_or_3(case: Case, tmp_path: Path, held_port: int) -> None:
    scene = Scene(tmp_path, held_port)
    result = run_reverser(scene.argv(case), tmp_path)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    (line,) = lines
    assert line.startswith(f"reverser {case.command}: "), line
    assert scene.names(case) in line
    assert line.endswith(case.hint), line
    assert result.returncode == case.code, line
    assert not (scene.tmp / "work" / "w").exists()


def test_debug_adds_the_traceback(tmp_path: Path, held_port: int) -> None:
    scene = Scene(tmp_path, held_port)
    case = CASES["lag-workdir-file"]
    result = run_reverser([*scene.argv(case), "--debug"], tmp_path)
    assert result.returncode == ExitCode.USAGE
    assert "Traceback (most recent call last)" in result.stderr
    assert result.stderr.splitlines()[-1].startswith("reverser lag: ")


def test_doctor_reports_a_dead_apiserver_in_words(tmp_path: Path, held_port: int) -> None:
    """`doctor` reports failures as checks (exit 1, docs/cli.md): the detail is words, not a repr."""
    scene = Scene(tmp_path, held_port)
    result = run_reverser(["doctor", "--config", str(scene.dead_apiserver), "--log-level", "ERROR"], tmp_path)
    assert result.returncode == ExitCode.FINDINGS
    assert result.stderr == ""
    (cluster,) = [line for line in result.stdout.splitlines() if line.split()[:2] == ["cluster", "east"]]
    assert "cannot connect to 127.0.0.1:" in cluster
    assert "connection refused" in cluster
    assert "ConnectionKey(" not in result.stdout


def test_errors_inside_exception_groups_and_from_aiokafka_are_translated() -> None:
    """What a TaskGroup or the Kafka client raises past a command reads like everything else."""
    from aiokafka.errors import KafkaConnectionError

    from pipeline.cli import translate

    refused = ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed ('127.0.0.1', 1)")
    bare = KafkaConnectionError("Unable to bootstrap from [('127.0.0.1', 1, <AddressFamily.AF_INET: 2>)]")
    for raised, code, text in [
        (
            ExceptionGroup("stages", [ValueError("a bug"), refused]),
            ExitCode.UNAVAILABLE,
            "cannot connect to 127.0.0.1:1: connection refused",
        ),
        (bare, ExitCode.UNAVAILABLE, "Kafka: no bootstrap server answered: check log.bootstrap_servers"),
        (
            OSError(
                errno.EADDRINUSE,
                "error while attempting to bind on address ('127.0.0.1', 9444): address already in use",
            ),
            ExitCode.UNAVAILABLE,
            "cannot listen on 127.0.0.1:9444",
        ),
    ]:
        error = translate(raised)
        assert error is not None
        assert error.code == code
        assert str(error).startswith(text), str(error)
        assert "AddressFamily" not in str(error)
    assert translate(ValueError("a bug")) is None


@pytest.mark.parametrize("command", ["lag", "dead-letter list", "replay facts"])
def test_a_mistyped_workdir_is_refused_and_leaves_nothing_behind(command: str, tmp_path: Path) -> None:
    """A read-only command pointed at a workdir that holds no log says so instead of making one."""
    typo = tmp_path / "state-typo"
    result = run_reverser([*command.split(), "--workdir", str(typo), "--log-level", "ERROR"], tmp_path)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"reverser {command}: ")
    assert str(typo) in lines[0]
    assert result.returncode == ExitCode.USAGE
    assert not typo.exists()


@pytest.mark.parametrize("command", [("config", "schema"), ("version",)], ids=" ".join)
def test_a_reader_that_went_away_is_not_an_error(command: tuple[str, ...], tmp_path: Path) -> None:
    """`reverser config schema | head -1`: the output's reader closed the pipe. That said
    `broken pipe: check the address or path` and exit 3; like any Unix tool it is quiet now and
    exits as SIGPIPE would end it. The read end is closed before the command starts, so its first
    write fails, every time."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    env = {k: v for k, v in os.environ.items() if not k.startswith("REVERSER_")}
    try:
        result = subprocess.run(
            [str(REVERSER), *command],
            stdout=write_end,
            stderr=subprocess.PIPE,
            cwd=tmp_path,
            env=env,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )
    finally:
        os.close(write_end)
    assert result.stderr == ""
    assert result.returncode == 128 + signal.SIGPIPE
