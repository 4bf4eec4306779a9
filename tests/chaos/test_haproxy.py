"""The shipped HAProxy configuration (deploy/haproxy/audit-webhook.cfg) on a real HAProxy.

What it must do for the audit webhook: take a stopped replica out of rotation, so that new
connections reach the replicas that answer, and leave the batch in flight on the stopped replica
alone, so that it is answered when the replica resumes (the apiserver drops a batch whose
connection is closed under it). Runs in `make test` (HAProxy comes from
scripts/install-system-tools.sh).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.chaos.haproxy import EXAMPLE_CONFIG, HAProxy, render_config
from tests.support.net import free_port

# A replica stand-in: answers every request 200 with its name (one letter) and keep-alive, on each
# port it is given.
BACKEND = """
import http.server, sys, threading
name = sys.argv[1].encode()
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def answer(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(name + b"\\n")
    do_GET = do_POST = answer
    def log_message(self, *args):
        pass
for port in sys.argv[2:]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", int(port)), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
threading.Event().wait()
"""
REQUEST = b"POST /audit-webhook/r HTTP/1.1\r\nHost: lb\r\nContent-Length: 2\r\n\r\n{}"
# These bound a hung test only; none is a timing assertion.
WAIT_TIMEOUT_S = 20.0
ANSWER_TIMEOUT_S = 10.0
POLL_S = 0.1


def _exchange(conn: socket.socket) -> str:
    """One request; the name of the backend that answered it ('' when the connection was closed)."""
    conn.sendall(REQUEST)
    return _answer(conn)


def _answer(conn: socket.socket) -> str:
    answer = b""
    while not (b"\r\n\r\n" in answer and len(answer.split(b"\r\n\r\n", 1)[1]) == 2):
        chunk = conn.recv(4096)
        if not chunk:
            return ""
        answer += chunk
    assert answer.startswith(b"HTTP/1.1 200"), answer
    return answer[-2:-1].decode()


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=ANSWER_TIMEOUT_S)


def _wait(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_TIMEOUT_S
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(POLL_S)


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _downs(log_path: Path) -> int:
    """How many times HAProxy has logged replica A (server r0) going DOWN."""
    return log_path.read_text().count("r0 is DOWN")


@pytest.fixture
def replicas() -> Iterator[list[tuple[subprocess.Popen[bytes], int, int]]]:
    started = []
    try:
        for name in "AB":
            audit, metrics = free_port(), free_port()
            proc = subprocess.Popen([sys.executable, "-c", BACKEND, name, str(audit), str(metrics)])
            started.append((proc, audit, metrics))
        yield started
    finally:
        for proc, _, _ in started:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait()


def test_the_example_renders_with_every_option_kept() -> None:
    example = EXAMPLE_CONFIG.read_text()
    rendered = render_config(example, 7000, [(7001, 7002), (7003, 7004)])
    assert "bind 127.0.0.1:7000" in rendered
    assert "server r0 127.0.0.1:7001 port 7002" in rendered
    assert "server r1 127.0.0.1:7003 port 7004" in rendered
    assert "10.0.0.1" not in rendered
    kept = [line for line in example.splitlines() if "server " not in line and "bind " not in line]
    assert [line for line in rendered.splitlines() if "server " not in line and "bind " not in line] == kept


def test_a_stopped_replica_gets_no_new_batches_and_still_answers_the_one_it_holds(
    replicas: list[tuple[subprocess.Popen[bytes], int, int]], tmp_path: Path
) -> None:
    haproxy = HAProxy(tmp_path, free_port(), [(audit, metrics) for _, audit, metrics in replicas])
    haproxy.start()
    try:
        # Both replicas answer, each on connections of its own (balanced per connection).
        seen: set[str] = set()

        def both_answer() -> bool:
            with _connect(haproxy.port) as conn:
                seen.add(_exchange(conn))
            return seen >= {"A", "B"}

        _wait(both_answer, "both replicas to answer behind HAProxy")
        held = _connect(haproxy.port)
        while _exchange(held) != "A":  # a kept-alive connection to A, as the apiserver has one
            held.close()
            held = _connect(haproxy.port)
        with held:
            stopped = replicas[0][0]
            # HAProxy may already have logged r0 DOWN once, when its first check ran before the
            # stand-in listened: only a DOWN logged after the stop takes A out of rotation.
            downs_before = _downs(haproxy.log_path)
            os.kill(stopped.pid, signal.SIGSTOP)
            _wait(lambda: _state(stopped.pid) == "T", "replica A to stop")
            held.sendall(REQUEST)  # a batch now waits in the stopped replica's socket
            _wait(lambda: _downs(haproxy.log_path) > downs_before, "HAProxy to take replica A out")
            for _ in range(4):
                with _connect(haproxy.port) as conn:
                    assert _exchange(conn) == "B"
            os.kill(stopped.pid, signal.SIGCONT)
            assert _answer(held) == "A", "the batch in flight on the stopped replica was cut"
    finally:
        haproxy.stop()
