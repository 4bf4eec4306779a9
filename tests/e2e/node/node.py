"""A real one-machine Kubernetes node for the chart: control plane, containerd, kubelet, kube-proxy.

The e2e control plane (tests/e2e/cluster) has no node, so a Deployment never gets a pod. This one
runs the chart's pods for real: etcd, kube-apiserver, kube-controller-manager and kube-scheduler
(all from build-binaries.sh --node), Debian's containerd with runc and the bridge CNI plugin, the
kubelet and kube-proxy (iptables mode). Images are never pulled: a static `pause` built here and
the image of `make image` are imported into containerd, and pods use `imagePullPolicy: Never`.

Layout: the pod network is the bridge `cni-e2e0` (10.244.0.1/24), created before the apiserver,
which listens on the bridge address so that pods reach it through the `kubernetes` Service
(10.96.0.1, kube-proxy). The node is named `localhost`, so the apiserver reaches the kubelet (which
listens on loopback only) for logs and exec. Every port is a free one; all state lives under the
workdir except what the kubelet insists on, which `HostChanges` records and removes at `stop()`.

`start()` raises NodeError naming the part that failed (with its log tail) after stopping what it
started; `stop()` deletes the pods first (so CNI DEL runs), stops everything in reverse order and
restores the host (sysctls, iptables, mounts, cgroups, bridge, directories), raising NodeError if
anything could not be undone.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import os
import signal
import ssl
import subprocess
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.e2e.node.host import BRIDGE, HostChanges
from tests.support.net import free_port

__all__ = ["NODE_BINARIES", "NODE_TOOLS", "Node", "NodeError", "missing_prerequisites"]

NODE_BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kube-proxy",
)
NODE_TOOLS = ("containerd", "ctr", "runc", "iptables", "ip", "gcc", "podman")
CNI_BIN_DIR = Path("/usr/lib/cni")
BRIDGE_IP = "10.244.0.1"
POD_CIDR = "10.244.0.0/24"
SERVICE_CIDR = "10.96.0.0/24"
SERVICE_IP = "10.96.0.1"
NODE_NAME = "localhost"
PAUSE_IMAGE = "localhost/pause:3.10"
READY_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 30.0
POLL_S = 0.5
LOG_TAIL = 25

PAUSE_C = r"""
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
static void quit(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, 0, WNOHANG) > 0) {} }
int main(void) {
  struct sigaction q = {.sa_handler = quit}, r = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
  sigaction(SIGINT, &q, 0); sigaction(SIGTERM, &q, 0); sigaction(SIGCHLD, &r, 0);
  for (;;) pause();
}
"""


class NodeError(RuntimeError):
    """A part of the node failed to start or to stop; the message names it."""


def missing_prerequisites(bin_dir: Path) -> list[str]:
    """What the node needs and this machine lacks (empty: it can start)."""
    import shutil

    missing = [f"{bin_dir}/{name}" for name in NODE_BINARIES if not os.access(bin_dir / name, os.X_OK)]
    missing += [tool for tool in NODE_TOOLS if shutil.which(tool) is None]
    if not (CNI_BIN_DIR / "bridge").exists():
        missing.append(f"{CNI_BIN_DIR}/bridge (containernetworking-plugins)")
    if os.geteuid() != 0:
        missing.append("root")
    return missing


# --- PKI -------------------------------------------------------------------------------------


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


@dataclass(frozen=True)
class _Ca:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate
    path: Path

    @classmethod
    def create(cls, directory: Path) -> _Ca:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name("reverser-node-ca"))
            .issuer_name(_name("reverser-node-ca"))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        path = directory / "ca.pem"
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _pem_key(key, directory / "ca-key.pem")
        return cls(key, cert, path)

    def issue(
        self, directory: Path, stem: str, cn: str, org: str | None = None, *, dns: tuple[str, ...] = (),
        ips: tuple[str, ...] = (),
    ) -> tuple[Path, Path]:  # fmt: skip
        """A leaf for `cn` (client and, with SANs, server use); returns (cert, key) paths."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH] + ([ExtendedKeyUsageOID.SERVER_AUTH] if dns or ips else [])
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(cn, org))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        if dns or ips:
            names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
            names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert_path, key_path = directory / f"{stem}.pem", directory / f"{stem}-key.pem"
        cert_path.write_bytes(
            builder.sign(self.key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
        )
        _pem_key(key, key_path)
        return cert_path, key_path


# --- the node --------------------------------------------------------------------------------


class Node:
    """One machine's Kubernetes: see the module docstring."""

    def __init__(self, workdir: Path, bin_dir: Path) -> None:
        self.workdir = workdir.resolve()
        self.bin_dir = bin_dir
        self.kubeconfig = self.workdir / "admin.kubeconfig"
        self.server = ""
        self._procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self._host: HostChanges | None = None
        self._ctx: ssl.SSLContext | None = None
        self.containerd_sock = self.workdir / "containerd" / "containerd.sock"
        self._apiserver_argv: list[str] = []

    # -- lifecycle --

    def start(self) -> None:
        """Start every part in order; on failure stop what started and raise NodeError naming it."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        steps: list[tuple[str, Callable[[], None]]] = [
            ("host snapshot", self._capture_host),
            (f"bridge {BRIDGE}", self._bridge),
            ("pki", self._pki),
            ("etcd", self._etcd),
            ("kube-apiserver", self._apiserver),
            ("kube-controller-manager", self._controller_manager),
            ("kube-scheduler", self._scheduler),
            ("containerd", self._containerd),
            ("images", self._images),
            ("kubelet", self._kubelet),
            ("kube-proxy", self._proxy),
        ]
        for name, step in steps:
            try:
                step()
            except Exception as exc:
                log = self.workdir / f"{name}.log"
                tail = _tail(log) if log.exists() else ""
                try:
                    self.stop()
                except NodeError as stop_exc:
                    tail += f"\n(and stopping what had started: {stop_exc})"
                raise NodeError(f"node: {name} failed: {exc}\n{tail}".rstrip()) from exc

    def stop(self) -> None:
        """Delete the pods, stop every process in reverse order, restore the host."""
        problems: list[str] = []
        if self._ctx is not None and any(name == "kubelet" for name, _ in self._procs):
            try:
                self._delete_all_pods()
            except (OSError, NodeError) as exc:
                problems.append(f"deleting pods: {exc}")
        for name, proc in reversed(self._procs):
            if not _terminate(proc):
                problems.append(f"{name} (pid {proc.pid}) did not stop")
        self._procs.clear()
        problems += self._kill_shims()
        if self._host is not None:
            problems += self._host.restore((self.workdir,))
            self._host = None
        if problems:
            raise NodeError("node teardown left changes: " + "; ".join(problems))

    # -- API helpers --

    def api(
        self, method: str, path: str, body: dict[str, Any] | None = None, *, as_user: str | None = None
    ) -> dict[str, Any]:
        """One request to the apiserver as admin, or as `as_user` through impersonation (the audit
        event then names that user, as it would for a person's own credentials); raises
        urllib.error.HTTPError on 4xx/5xx."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"}
        if as_user is not None:
            headers["Impersonate-User"] = as_user
        request = urllib.request.Request(self.server + path, data=data, method=method, headers=headers)
        with urllib.request.urlopen(request, timeout=15, context=self._ctx) as response:
            answer: dict[str, Any] = json.loads(response.read() or b"{}")
            return answer

    def wait_for(self, what: str, check: Callable[[], bool], timeout_s: float = READY_TIMEOUT_S) -> None:
        """Poll `check` until it is true; NodeError naming `what` after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            try:
                if check():
                    return
            except (OSError, KeyError, ValueError) as exc:
                last = f" (last error: {exc})"
            for name, proc in self._procs:
                if proc.poll() is not None:
                    raise NodeError(
                        f"{name} exited with {proc.returncode}:\n{_tail(self.workdir / f'{name}.log')}"
                    )
            time.sleep(POLL_S)
        raise NodeError(f"{what}: not reached within {timeout_s:.0f} s{last}")

    def pod_ready(self, namespace: str, name: str) -> tuple[str, bool]:
        """(uid, Ready) of a pod; ("", False) while it does not exist."""
        try:
            pod = self.api("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return "", False
            raise
        conditions = pod.get("status", {}).get("conditions") or []
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
        return str(pod["metadata"]["uid"]), ready

    def restart_apiserver(self, extra_args: list[str]) -> None:
        """Restart kube-apiserver on the same address and etcd with `extra_args` added (the audit
        webhook, whose kubeconfig exists only once the chart has generated its certificates)."""
        for index, (name, proc) in enumerate(self._procs):
            if name == "kube-apiserver":
                if not _terminate(proc):
                    raise NodeError(f"kube-apiserver (pid {proc.pid}) did not stop")
                del self._procs[index]
                break
        self._spawn("kube-apiserver", [*self._apiserver_argv, *extra_args])
        self.wait_for("kube-apiserver /readyz", lambda: _get(f"{self.server}/readyz", self._ctx) == 200)

    def container_pid(self, container_id: str) -> int:
        """The host pid of a container's main process (`containerd://<id>` from a pod's status)."""
        wanted = container_id.removeprefix("containerd://")
        listed = self._ctr("tasks", "ls")
        for line in listed.stdout.splitlines()[1:]:
            fields = line.split()
            if len(fields) >= 2 and fields[0] == wanted:
                return int(fields[1])
        raise NodeError(f"no containerd task {wanted}: {listed.stdout.strip()}{listed.stderr.strip()}")

    # -- steps --

    def _capture_host(self) -> None:
        if Path(f"/sys/class/net/{BRIDGE}").exists():
            raise NodeError(
                f"the bridge {BRIDGE} exists already: another node runs, or one was not torn down"
            )
        self._host = HostChanges.capture()

    def _bridge(self) -> None:
        # Before the apiserver: it listens on the bridge address, which must exist to be bound.
        for argv in (
            ["ip", "link", "add", BRIDGE, "type", "bridge"],
            ["ip", "addr", "add", f"{BRIDGE_IP}/24", "dev", BRIDGE],
            ["ip", "link", "set", BRIDGE, "up"],
        ):
            _run(argv)

    def _pki(self) -> None:
        pki = self.workdir / "pki"
        pki.mkdir(exist_ok=True)
        ca = _Ca.create(pki)
        self.ca = ca.path
        self.certs = {
            "apiserver": ca.issue(
                pki, "apiserver", "kube-apiserver",
                dns=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                     "kubernetes.default.svc.cluster.local"),
                ips=("127.0.0.1", BRIDGE_IP, SERVICE_IP),
            ),
            "admin": ca.issue(pki, "admin", "reverser-node-admin", "system:masters"),
            "apiserver-kubelet": ca.issue(
                pki, "apiserver-kubelet", "kube-apiserver-kubelet-client", "system:masters"
            ),
            "controller-manager": ca.issue(pki, "controller-manager", "system:kube-controller-manager"),
            "scheduler": ca.issue(pki, "scheduler", "system:kube-scheduler"),
            "kubelet": ca.issue(pki, "kubelet", f"system:node:{NODE_NAME}", "system:nodes"),
            "kubelet-serving": ca.issue(
                pki, "kubelet-serving", NODE_NAME, dns=(NODE_NAME,), ips=("127.0.0.1",)
            ),
            "proxy": ca.issue(pki, "proxy", "system:kube-proxy"),
        }  # fmt: skip
        sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.sa_key = pki / "sa.key"
        _pem_key(sa, self.sa_key)
        self.sa_pub = pki / "sa.pub"
        self.sa_pub.write_bytes(
            sa.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )

    def _kubeconfig_for(self, who: str) -> Path:
        cert, key = self.certs[who]
        path = self.workdir / f"{who}.kubeconfig"
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "node",
                            "cluster": {"server": self.server, "certificate-authority": str(self.ca)},
                        }
                    ],
                    "users": [
                        {"name": who, "user": {"client-certificate": str(cert), "client-key": str(key)}}
                    ],
                    "contexts": [{"name": "default", "context": {"cluster": "node", "user": who}}],
                    "current-context": "default",
                }
            )
        )
        return path

    def _etcd(self) -> None:
        client, peer = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
        self._spawn(
            "etcd",
            [
                str(self.bin_dir / "etcd"), "--name=node", f"--data-dir={self.workdir / 'etcd-data'}",
                f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=node={peer}", "--unsafe-no-fsync=true", "--log-level=warn",
            ],
        )  # fmt: skip
        self.etcd_url = client
        self.wait_for("etcd /health", lambda: _get(f"{client}/health", None) == 200)

    def _apiserver(self) -> None:
        port = free_port()
        self.server = f"https://{BRIDGE_IP}:{port}"
        cert, key = self.certs["apiserver"]
        kcert, kkey = self.certs["apiserver-kubelet"]
        self._apiserver_argv = [
                str(self.bin_dir / "kube-apiserver"), f"--etcd-servers={self.etcd_url}",
                f"--bind-address={BRIDGE_IP}", f"--advertise-address={BRIDGE_IP}", f"--secure-port={port}",
                f"--cert-dir={self.workdir / 'apiserver-certs'}",
                f"--tls-cert-file={cert}", f"--tls-private-key-file={key}", f"--client-ca-file={self.ca}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={self.sa_pub}",
                f"--service-account-signing-key-file={self.sa_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}", "--authorization-mode=Node,RBAC",
                f"--kubelet-client-certificate={kcert}", f"--kubelet-client-key={kkey}",
                "--kubelet-preferred-address-types=Hostname,InternalIP", "--profiling=false",
        ]  # fmt: skip
        self._spawn("kube-apiserver", self._apiserver_argv)
        cert_a, key_a = self.certs["admin"]
        self._ctx = ssl.create_default_context(cafile=str(self.ca))
        self._ctx.load_cert_chain(str(cert_a), str(key_a))
        self.kubeconfig.write_text(self._kubeconfig_for("admin").read_text())
        self.wait_for("kube-apiserver /readyz", lambda: _get(f"{self.server}/readyz", self._ctx) == 200)

    def _controller_manager(self) -> None:
        port = free_port()
        self._spawn(
            "kube-controller-manager",
            [
                str(self.bin_dir / "kube-controller-manager"),
                f"--kubeconfig={self._kubeconfig_for('controller-manager')}",
                f"--authentication-kubeconfig={self.workdir / 'controller-manager.kubeconfig'}",
                f"--authorization-kubeconfig={self.workdir / 'controller-manager.kubeconfig'}",
                "--bind-address=127.0.0.1", f"--secure-port={port}", "--leader-elect=false",
                f"--service-account-private-key-file={self.sa_key}", f"--root-ca-file={self.ca}",
                "--use-service-account-credentials=true", f"--service-cluster-ip-range={SERVICE_CIDR}",
            ],
        )  # fmt: skip
        # The ServiceAccount controller making `default` proves the controllers run.
        self.wait_for(
            "kube-controller-manager (the default ServiceAccount)",
            lambda: bool(self.api("GET", "/api/v1/namespaces/default/serviceaccounts/default")),
        )

    def _scheduler(self) -> None:
        port = free_port()
        kubeconfig = self._kubeconfig_for("scheduler")
        self._spawn(
            "kube-scheduler",
            [
                str(self.bin_dir / "kube-scheduler"), f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1", f"--secure-port={port}", "--leader-elect=false",
            ],
        )  # fmt: skip
        insecure = ssl.create_default_context()
        insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE
        self.wait_for(
            "kube-scheduler /healthz", lambda: _get(f"https://127.0.0.1:{port}/healthz", insecure) == 200
        )

    def _containerd(self) -> None:
        root = self.workdir / "containerd"
        (root / "net.d").mkdir(parents=True, exist_ok=True)
        (root / "net.d" / "10-e2e.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "1.0.0",
                    "name": "e2e",
                    "plugins": [
                        {
                            "type": "bridge",
                            "bridge": BRIDGE,
                            "isGateway": True,
                            "ipMasq": True,
                            "ipam": {
                                "type": "host-local",
                                "ranges": [[{"subnet": POD_CIDR, "gateway": BRIDGE_IP}]],
                                # The pods' default route: Service IPs (10.96.0.1) are not on the bridge.
                                "routes": [{"dst": "0.0.0.0/0"}],
                                "dataDir": str(root / "cni-ipam"),
                            },
                        },
                        {"type": "portmap", "capabilities": {"portMappings": True}},
                        {"type": "loopback"},
                    ],
                }
            )
        )
        config = root / "config.toml"
        config.write_text(
            textwrap.dedent(
                f"""\
                version = 2
                root = "{root / "root"}"
                state = "{root / "state"}"
                [grpc]
                  address = "{self.containerd_sock}"
                [ttrpc]
                  address = "{root / "containerd.sock.ttrpc"}"
                [plugins."io.containerd.grpc.v1.cri"]
                  sandbox_image = "{PAUSE_IMAGE}"
                  # Without CAP_SYS_RESOURCE runc cannot lower oom_score_adj below the parent's.
                  restrict_oom_score_adj = true
                  disable_apparmor = true
                  [plugins."io.containerd.grpc.v1.cri".containerd]
                    snapshotter = "overlayfs"
                    default_runtime_name = "runc"
                    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
                      runtime_type = "io.containerd.runc.v2"
                      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
                        SystemdCgroup = false
                  [plugins."io.containerd.grpc.v1.cri".cni]
                    bin_dir = "{CNI_BIN_DIR}"
                    conf_dir = "{root / "net.d"}"
                """
            )
        )
        self._spawn("containerd", ["containerd", "--config", str(config)])
        self.wait_for("containerd socket", lambda: self._ctr("version").returncode == 0, timeout_s=60)

    def _ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ctr", "--address", str(self.containerd_sock), "--namespace", "k8s.io", *args],
            capture_output=True, text=True, check=False, timeout=300,
        )  # fmt: skip

    def _images(self) -> None:
        """The static pause image (built here) and every OCI archive under build/ into containerd."""
        pause_dir = self.workdir / "pause"
        pause_dir.mkdir(exist_ok=True)
        (pause_dir / "pause.c").write_text(PAUSE_C)
        _run(["gcc", "-static", "-O2", "-o", str(pause_dir / "rootfs" / "pause"), str(pause_dir / "pause.c")],
             mkdir=pause_dir / "rootfs")  # fmt: skip
        archive = pause_dir / "pause.oci.tar"
        tar = subprocess.Popen(
            ["tar", "-C", str(pause_dir / "rootfs"), "-cf", "-", "pause"], stdout=subprocess.PIPE
        )
        podman = ["podman", "--cgroup-manager=cgroupfs", "--events-backend=file"]
        _run([*podman, "import", "--change", 'ENTRYPOINT ["/pause"]', "-", PAUSE_IMAGE], stdin=tar.stdout)
        tar.wait()
        _run([*podman, "save", "--format", "oci-archive", "-o", str(archive), PAUSE_IMAGE])
        # Only the archive was wanted: leave podman's store as it was.
        _run([*podman, "rmi", PAUSE_IMAGE])
        for path in (archive, *self.image_archives):
            result = self._ctr("images", "import", str(path))
            if result.returncode != 0:
                raise NodeError(f"ctr images import {path}: {result.stderr.strip()}")

    image_archives: tuple[Path, ...] = ()

    def _kubelet(self) -> None:
        root = self.workdir / "kubelet"
        (root / "manifests").mkdir(parents=True, exist_ok=True)
        port, healthz = free_port(), free_port()
        cert, key = self.certs["kubelet-serving"]
        config = root / "config.json"
        config.write_text(
            json.dumps(
                {
                    "apiVersion": "kubelet.config.k8s.io/v1beta1",
                    "kind": "KubeletConfiguration",
                    # 1.37 refuses cgroup v1 unless told; this VM has nothing else.
                    "failCgroupV1": False,
                    "cgroupDriver": "cgroupfs",
                    "containerRuntimeEndpoint": f"unix://{self.containerd_sock}",
                    "staticPodPath": str(root / "manifests"),
                    "address": "127.0.0.1",
                    "port": port,
                    "healthzBindAddress": "127.0.0.1",
                    "healthzPort": healthz,
                    "readOnlyPort": 0,
                    "tlsCertFile": str(cert),
                    "tlsPrivateKeyFile": str(key),
                    "authentication": {
                        "anonymous": {"enabled": False},
                        "webhook": {"enabled": True},
                        "x509": {"clientCAFile": str(self.ca)},
                    },
                    "authorization": {"mode": "Webhook"},
                    "failSwapOn": False,
                    "podLogsDir": str(root / "pod-logs"),
                    "evictionHard": {
                        "memory.available": "100Mi",
                        "nodefs.available": "1%",
                        "imagefs.available": "1%",
                    },
                    "imageGCHighThresholdPercent": 100,
                    "clusterDomain": "cluster.local",
                    "serializeImagePulls": False,
                }
            )
        )
        self._spawn(
            "kubelet",
            [
                str(self.bin_dir / "kubelet"), f"--config={config}",
                f"--kubeconfig={self._kubeconfig_for('kubelet')}", f"--hostname-override={NODE_NAME}",
                f"--root-dir={root / 'root'}", "--v=1",
            ],
        )  # fmt: skip

        def ready() -> bool:
            node = self.api("GET", f"/api/v1/nodes/{NODE_NAME}")
            conditions = node.get("status", {}).get("conditions") or []
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

        self.wait_for(f"node {NODE_NAME} Ready", ready)

    def _proxy(self) -> None:
        healthz, metrics = free_port(), free_port()
        config = self.workdir / "kube-proxy.json"
        config.write_text(
            json.dumps(
                {
                    "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
                    "kind": "KubeProxyConfiguration",
                    "mode": "iptables",
                    "clusterCIDR": POD_CIDR,
                    "clientConnection": {"kubeconfig": str(self._kubeconfig_for("proxy"))},
                    "bindAddress": "127.0.0.1",
                    "healthzBindAddress": f"127.0.0.1:{healthz}",
                    "metricsBindAddress": f"127.0.0.1:{metrics}",
                    # The VM refuses conntrack table resizes; leave every conntrack setting alone.
                    "conntrack": {
                        "maxPerCore": 0,
                        "min": 0,
                        "tcpEstablishedTimeout": "0s",
                        "tcpCloseWaitTimeout": "0s",
                    },
                    "hostnameOverride": NODE_NAME,
                }
            )
        )
        self._spawn("kube-proxy", [str(self.bin_dir / "kube-proxy"), f"--config={config}"])
        self.wait_for("kube-proxy /healthz", lambda: _get(f"http://127.0.0.1:{healthz}/healthz", None) == 200)

    # -- teardown helpers --

    def _delete_all_pods(self) -> None:
        namespaces = [n["metadata"]["name"] for n in self.api("GET", "/api/v1/namespaces")["items"]]
        for namespace in namespaces:
            for kind in (
                "apps/v1/statefulsets",
                "apps/v1/deployments",
                "apps/v1/replicasets",
                "batch/v1/jobs",
            ):
                with contextlib.suppress(urllib.error.HTTPError):
                    self.api(
                        "DELETE",
                        f"/apis/{kind.rsplit('/', 1)[0]}/namespaces/{namespace}/{kind.rsplit('/', 1)[1]}",
                    )
            self.api("DELETE", f"/api/v1/namespaces/{namespace}/pods")

        def gone() -> bool:
            return not self.api("GET", "/api/v1/pods")["items"]

        self.wait_for("every pod deleted (CNI DEL)", gone, timeout_s=120)

    def _kill_shims(self) -> list[str]:
        """containerd's runc shims outlive containerd; end the ones of this node's socket, by pid."""
        problems = []
        marker = str(self.workdir).encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"containerd-shim" in cmdline and marker in cmdline:
                try:
                    os.kill(int(entry.name), signal.SIGKILL)
                except ProcessLookupError:
                    continue
                except OSError as exc:
                    problems.append(f"kill shim {entry.name}: {exc.strerror}")
        return problems

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        with (self.workdir / f"{name}.log").open("ab") as log:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self._procs.append((name, proc))
        return proc


def _run(argv: list[str], *, mkdir: Path | None = None, stdin: Any = None) -> None:
    if mkdir is not None:
        mkdir.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(argv, capture_output=True, text=True, check=False, stdin=stdin, timeout=600)
    if result.returncode != 0:
        raise NodeError(f"{' '.join(argv[:4])}... exited {result.returncode}: {result.stderr.strip()[-500:]}")


def _get(url: str, context: ssl.SSLContext | None) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return 0


def _terminate(proc: subprocess.Popen[bytes]) -> bool:
    if proc.poll() is not None:
        return True
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=STOP_TIMEOUT_S)
    except ProcessLookupError:
        return True
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return False
    return True


def _tail(path: Path) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-LOG_TAIL:])
    except OSError:
        return ""
