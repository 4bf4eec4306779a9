"""A real smart-HTTP Git remote on loopback: `git http-backend` behind a tiny CGI bridge with basic auth."""

from __future__ import annotations

import base64
import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.commit.helpers import bare_remote

HTTP_BACKEND = "/usr/lib/git-core/git-http-backend"
_NO_LOCK = contextlib.nullcontext()


def basic_authorization(username: str, password: str) -> str:
    """The Authorization header value of HTTP basic credentials."""
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


class GitHttpServer:
    """Serves every bare repository under `root` at `http://<host>:<port>/<name>.git`.

    `refuse_for(s)` makes it answer every request 503 for `s` seconds (a Git host outage);
    `also_accepted` holds more Authorization values it takes (a rotation: old and new password);
    `pushes` records, after each accepted push, when it landed and the refs it left (monotonic
    time), so a test can tell when each commit became visible on the remote.
    """

    def __init__(self, root: Path, username: str, password: str, host: str = "127.0.0.1") -> None:
        self.root = root
        # Another address than loopback lets pods on a bridge reach it (tests/e2e/node).
        self.host = host
        self.expected = basic_authorization(username, password)
        self.also_accepted: set[str] = set()
        self.requests: list[tuple[str, int]] = []
        self.authorizations: list[str] = []
        self.pushes: list[tuple[float, dict[str, str]]] = []
        self._refuse_until = 0.0
        self._push_lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.handle(self)

            def do_POST(self) -> None:
                server.handle(self)

            def log_message(self, format: str, *args: object) -> None:
                return

        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.httpd.server_address[1]}"

    def __enter__(self) -> GitHttpServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def refuse_for(self, seconds: float) -> None:
        self._refuse_until = time.monotonic() + seconds

    def _refs(self, repo: Path) -> dict[str, str]:
        listed = subprocess.run(
            ["git", "--git-dir", str(repo), "for-each-ref", "--format=%(refname) %(objectname)"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return dict(line.split(" ", 1) for line in listed.splitlines() if line)

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        for value in request.headers.get_all("Authorization") or []:
            self.authorizations.append(value)
        if time.monotonic() < self._refuse_until:
            self.requests.append((request.path, 503))
            request.send_response(503)
            request.send_header("Content-Length", "0")
            request.end_headers()
            return
        given = request.headers.get("Authorization")
        if given != self.expected and given not in self.also_accepted:
            self.requests.append((request.path, 401))
            request.send_response(401)
            request.send_header("WWW-Authenticate", 'Basic realm="git"')
            request.send_header("Content-Length", "0")
            request.end_headers()
            return
        body = self._body(request)
        path, _, query = request.path.partition("?")
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": request.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": request.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": "tester",
            "REMOTE_ADDR": "127.0.0.1",
            "GIT_HTTP_MAX_REQUEST_BUFFER": "100M",
        }
        if request.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = request.headers["Content-Encoding"]
        if request.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = request.headers["Git-Protocol"]
        pushing = path.endswith("/git-receive-pack")
        with self._push_lock if pushing else _NO_LOCK:
            done = subprocess.run([HTTP_BACKEND], input=body, env=env, capture_output=True, check=False)
            if pushing and done.returncode == 0:
                repo = self.root / path.strip("/").rsplit("/", 1)[0]
                self.pushes.append((time.monotonic(), self._refs(repo)))
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        status = 200
        headers: list[tuple[str, str]] = []
        for line in head.decode("latin-1").split("\r\n"):
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.strip().split()[0])
            elif name:
                headers.append((name, value.strip()))
        self.requests.append((request.path, status))
        request.send_response(status)
        for name, value in headers:
            request.send_header(name, value)
        request.send_header("Content-Length", str(len(payload)))
        request.end_headers()
        request.wfile.write(payload)

    @staticmethod
    def _body(request: BaseHTTPRequestHandler) -> bytes:
        if request.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(request.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    request.rfile.readline()
                    break
                chunks.append(request.rfile.read(size))
                request.rfile.readline()
            return b"".join(chunks)
        length = int(request.headers.get("Content-Length") or 0)
        return request.rfile.read(length) if length else b""


@contextmanager
def serving(root: Path, repositories: list[str], username: str, password: str) -> Iterator[GitHttpServer]:
    """A started server over a new `root` holding empty bare `repositories` (e.g. `repo.git`)."""
    root.mkdir()
    for name in repositories:
        bare_remote(root / name)
    with GitHttpServer(root, username, password) as server:
        yield server
