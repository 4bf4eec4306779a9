"""A real etcd + kube-apiserver on loopback, with the audit webhook pointed at the pipeline's ingress.

The binaries come from `build-binaries.sh` (Go module proxy, cached under ~/.cache/reverser-e2e), so
end-to-end tests exercise the watch and audit behaviour of the apiserver itself rather than a
protocol double. Only the standard library plus `cryptography` (for the PKI) are used.

    python -m tests.e2e.cluster.controlplane build
    python -m tests.e2e.cluster.controlplane start --workdir DIR [--audit-url URL]
    python -m tests.e2e.cluster.controlplane stop --workdir DIR

`start` prints the admin kubeconfig path; the processes keep running until `stop`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

from tests.e2e.cluster.pki import Pki, write_pki
from tests.support.net import free_port

__all__ = [
    "ControlPlane",
    "ControlPlaneError",
    "ControlPlaneState",
    "binaries_dir",
    "build_binaries",
    "find_binaries",
]

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build-binaries.sh"
READY_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 20.0
POLL_INTERVAL_S = 0.25
LOG_TAIL_LINES = 30
SERVICE_CIDR = "10.0.0.0/24"
AUDIT_BATCH_MAX_WAIT = "1s"
AUDIT_INITIAL_BACKOFF = "1s"
STATE_FILE = "state.json"

# Mutating verbs at RequestResponse level (the ingress needs both bodies for object identity);
# reads, the apiserver's own bootstrap writes and lease/event chatter are not audited at all.
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
  - level: None
    users: ["system:apiserver"]
  - level: None
    resources:
      - group: coordination.k8s.io
        resources: ["leases"]
      - group: ""
        resources: ["events"]
      - group: events.k8s.io
        resources: ["events"]
  - level: RequestResponse
    verbs: ["create", "update", "patch", "delete", "deletecollection"]
  - level: None
"""


class ControlPlaneError(RuntimeError):
    """The control plane could not be built, started or stopped; carries the relevant log tail."""


def binaries_dir() -> Path:
    """Where `build-binaries.sh` puts (or has put) etcd and kube-apiserver."""
    override = os.environ.get("REVERSER_E2E_BIN_DIR")
    if override:
        return Path(override)
    out = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--print-dir"], check=True, capture_output=True, text=True
    )
    return Path(out.stdout.strip().splitlines()[-1])


def find_binaries() -> Path | None:
    """The binary directory if both binaries are already built, else None (nothing is built)."""
    directory = binaries_dir()
    if all(os.access(directory / name, os.X_OK) for name in ("etcd", "kube-apiserver")):
        return directory
    return None


def build_binaries() -> Path:
    """Build (or reuse from the cache) etcd and kube-apiserver; returns their directory."""
    result = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True)
    if result.returncode != 0:
        tail = "\n".join(result.stderr.splitlines()[-LOG_TAIL_LINES:])
        raise ControlPlaneError(f"build-binaries.sh failed ({result.returncode}):\n{tail}")
    return Path(result.stdout.strip().splitlines()[-1])


@dataclass(frozen=True, slots=True)
class ControlPlaneState:
    """What a started control plane left in its workdir, so `stop` can find its processes."""

    etcd_pid: int
    apiserver_pid: int
    etcd_url: str
    server: str
    kubeconfig: str
    audit_url: str | None

    def save(self, workdir: Path) -> None:
        (workdir / STATE_FILE).write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, workdir: Path) -> ControlPlaneState:
        return cls(**json.loads((workdir / STATE_FILE).read_text()))


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(lines[-LOG_TAIL_LINES:])


def _kubeconfig(server: str, ca: Path, cert: Path, key: Path, user: str) -> str:
    # JSON is valid YAML, and both kube-apiserver and kubernetes-asyncio read it.
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "cluster", "cluster": {"server": server, "certificate-authority": str(ca)}}
            ],
            "users": [{"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}],
            "contexts": [{"name": "default", "context": {"cluster": "cluster", "user": user}}],
            "current-context": "default",
        },
        indent=2,
    )


def _signal_group(pid: int, signum: int) -> bool:
    """Signal the process group `pid` leads; False when it is already gone."""
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        return False
    return True


def _terminate_child(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM a process group we started, SIGKILL it if it has not exited in time."""
    if proc.poll() is None and _signal_group(proc.pid, signal.SIGTERM):
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()


def _terminate_foreign(pid: int) -> None:
    """Like `_terminate_child` for a process started by another Python process (the CLI)."""
    if not _signal_group(pid, signal.SIGTERM):
        return
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(POLL_INTERVAL_S)
    _signal_group(pid, signal.SIGKILL)


class ControlPlane:
    """etcd and kube-apiserver on free loopback ports under `workdir`.

    `audit_url` is the full webhook URL (`https://127.0.0.1:<port>/audit-webhook/<route>`); when it
    is None the apiserver runs without an audit backend.
    """

    def __init__(self, workdir: Path, bin_dir: Path, audit_url: str | None = None) -> None:
        self.workdir = workdir.resolve()
        self.bin_dir = bin_dir
        self.audit_url = audit_url
        self.pki: Pki = write_pki(self.workdir / "pki")
        self.kubeconfig = self.workdir / "admin.kubeconfig"
        self.server = ""
        self._etcd_url = ""
        self._procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> ControlPlaneState:
        """Start etcd, then kube-apiserver; return once `/readyz` answers 200."""
        try:
            etcd_url, etcd = self._start_etcd()
            self._etcd_url = etcd_url
            apiserver = self._start_apiserver(etcd_url)
        except BaseException:
            self.stop()
            raise
        state = ControlPlaneState(
            etcd_pid=etcd.pid,
            apiserver_pid=apiserver.pid,
            etcd_url=etcd_url,
            server=self.server,
            kubeconfig=str(self.kubeconfig),
            audit_url=self.audit_url,
        )
        state.save(self.workdir)
        return state

    def restart_apiserver(self) -> None:
        """SIGTERM kube-apiserver and start it again on the same port and etcd (watches reconnect)."""
        apiserver = self._procs.pop()
        _terminate_child(apiserver)
        port = int(self.server.rsplit(":", 1)[1])
        self._start_apiserver(self._etcd_url, port)

    def compact_etcd(self) -> int:
        """Compact etcd at its current revision (through its JSON gateway); returns that revision.

        Every resourceVersion before it is then gone from etcd: after an apiserver restart a watch
        resumed from such a cursor is answered 410 Gone, as after a long outage.
        """

        def post(path: str, body: dict[str, object]) -> dict[str, object]:
            request = urllib.request.Request(
                f"{self._etcd_url}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(request, timeout=10) as response:
                answer: dict[str, object] = json.loads(response.read())
                return answer

        header = post("/v3/kv/range", {"key": "Lw=="})["header"]
        assert isinstance(header, dict)
        revision = int(header["revision"])
        post("/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    def stop(self) -> None:
        """Stop every process this object started, apiserver first."""
        for proc in reversed(self._procs):
            _terminate_child(proc)
        self._procs.clear()

    def ssl_context(self) -> ssl.SSLContext:
        """A client TLS context that trusts the cluster CA and presents the admin certificate."""
        context = ssl.create_default_context(cafile=str(self.pki.ca))
        context.load_cert_chain(str(self.pki.admin_cert), str(self.pki.admin_key))
        return context

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        log_path = self.workdir / f"{name}.log"
        with log_path.open("ab") as log_file:
            # A new session lets `stop` signal the whole process group, even from another process.
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._procs.append(proc)
        return proc

    def _wait_ready(
        self, name: str, proc: subprocess.Popen[bytes], url: str, context: ssl.SSLContext | None
    ) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        last_error = "no answer yet"
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ControlPlaneError(
                    f"{name} exited with {proc.returncode} before it was ready:\n"
                    f"{_tail(self.workdir / f'{name}.log')}"
                )
            try:
                with urllib.request.urlopen(url, timeout=5, context=context) as response:
                    if response.status == 200:
                        return
                    last_error = f"HTTP {response.status}"
            except urllib.error.HTTPError as exc:
                if exc.code in (401, 403):
                    # Our own credentials are refused: waiting longer cannot help.
                    raise ControlPlaneError(
                        f"{name} refused the admin client certificate (HTTP {exc.code}):\n"
                        f"{_tail(self.workdir / f'{name}.log')}"
                    ) from exc
                last_error = f"HTTP {exc.code}"
            except (urllib.error.URLError, OSError) as exc:
                last_error = str(exc)
            time.sleep(POLL_INTERVAL_S)
        raise ControlPlaneError(
            f"{name} not ready after {READY_TIMEOUT_S:.0f} s ({last_error}):\n"
            f"{_tail(self.workdir / f'{name}.log')}"
        )

    def _start_etcd(self) -> tuple[str, subprocess.Popen[bytes]]:
        client_port, peer_port = free_port(), free_port()
        client_url = f"http://127.0.0.1:{client_port}"
        peer_url = f"http://127.0.0.1:{peer_port}"
        proc = self._spawn(
            "etcd",
            [
                str(self.bin_dir / "etcd"),
                "--name=e2e",
                f"--data-dir={self.workdir / 'etcd-data'}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=e2e={peer_url}",
                # A throwaway test store: durability costs fsyncs on a shared disk for nothing.
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        self._wait_ready("etcd", proc, f"{client_url}/health", None)
        return client_url, proc

    def _write_audit_files(self) -> list[str]:
        if self.audit_url is None:
            return []
        policy = self.workdir / "audit-policy.yaml"
        policy.write_text(AUDIT_POLICY)
        webhook = self.workdir / "audit-webhook.kubeconfig"
        webhook.write_text(
            _kubeconfig(
                self.audit_url,
                self.pki.ca,
                self.pki.audit_client_cert,
                self.pki.audit_client_key,
                "kube-apiserver",
            )
        )
        return [
            f"--audit-policy-file={policy}",
            f"--audit-webhook-config-file={webhook}",
            "--audit-webhook-mode=batch",
            f"--audit-webhook-batch-max-wait={AUDIT_BATCH_MAX_WAIT}",
            f"--audit-webhook-initial-backoff={AUDIT_INITIAL_BACKOFF}",
            "--audit-webhook-version=audit.k8s.io/v1",
        ]

    def _start_apiserver(self, etcd_url: str, port: int | None = None) -> subprocess.Popen[bytes]:
        port = port or free_port()
        self.server = f"https://127.0.0.1:{port}"
        # Replaced whole, never truncated in place: a restarted apiserver (a chaos fault) rewrites
        # it while clients of the workload open it, and a half-written file reads as empty YAML.
        staged = self.kubeconfig.with_name(f".{self.kubeconfig.name}.tmp")
        staged.write_text(
            _kubeconfig(self.server, self.pki.ca, self.pki.admin_cert, self.pki.admin_key, "admin")
        )
        os.replace(staged, self.kubeconfig)
        proc = self._spawn(
            "kube-apiserver",
            [
                str(self.bin_dir / "kube-apiserver"),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.workdir / 'apiserver-certs'}",
                f"--tls-cert-file={self.pki.apiserver_cert}",
                f"--tls-private-key-file={self.pki.apiserver_key}",
                f"--client-ca-file={self.pki.ca}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={self.pki.sa_public_key}",
                f"--service-account-signing-key-file={self.pki.sa_signing_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=RBAC",
                # No kube-controller-manager runs, so nothing would create the token controller's
                # default ServiceAccounts that this admission plugin waits for.
                "--disable-admission-plugins=ServiceAccount",
                # The `kubernetes` Service endpoints may not be loopback, and nothing here needs them.
                "--endpoint-reconciler-type=none",
                "--profiling=false",
                *self._write_audit_files(),
            ],
        )
        self._wait_ready("kube-apiserver", proc, f"{self.server}/readyz", self.ssl_context())
        return proc


def stop_workdir(workdir: Path) -> bool:
    """Stop a control plane started by another process from its saved state; False if none."""
    try:
        state = ControlPlaneState.load(workdir)
    except FileNotFoundError:
        return False
    for pid in (state.apiserver_pid, state.etcd_pid):
        _terminate_foreign(pid)
    (workdir / STATE_FILE).unlink()
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="controlplane", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="build or reuse the cached etcd and kube-apiserver")
    start = sub.add_parser("start", help="start etcd and kube-apiserver on loopback")
    start.add_argument("--workdir", type=Path, required=True)
    start.add_argument("--audit-url", help="https://127.0.0.1:PORT/audit-webhook/ROUTE")
    stop = sub.add_parser("stop", help="stop what `start` started in WORKDIR")
    stop.add_argument("--workdir", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            print(build_binaries())
        elif args.command == "start":
            args.workdir.mkdir(parents=True, exist_ok=True)
            plane = ControlPlane(args.workdir, build_binaries(), args.audit_url)
            # The CLI hands the processes over to `stop`: they must outlive this Python process.
            state = plane.start()
            print(f"control plane up at {state.server}; kubeconfig {state.kubeconfig}", file=sys.stderr)
            print(state.kubeconfig)
        elif not stop_workdir(args.workdir):
            print(f"no control plane state in {args.workdir}", file=sys.stderr)
            return 1
    except ControlPlaneError as exc:
        print(f"controlplane: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
