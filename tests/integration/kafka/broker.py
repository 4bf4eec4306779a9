"""Real Apache Kafka brokers (KRaft, broker+controller) on loopback, for tests: one, or a cluster.

The jars come from Maven Central through `pom.xml` and are cached under
`~/.cache/reverser-kafka/<version>/libs`, so the tests exercise the same broker operators run
rather than a fake. Only the standard library is used here: `broker.sh` runs this file with any
Python 3 before the project's virtualenv exists. Run it as a module from the repository root
(it shares `tests/support/net.py`, which hands out ports no other test process races for):

    python -m tests.integration.kafka.broker fetch
    python -m tests.integration.kafka.broker start --workdir DIR [--bootstrap-file FILE] [--nodes N]
    python -m tests.integration.kafka.broker stop|status --workdir DIR [--nodes N]

A cluster (`KafkaCluster`, `--nodes 3`) runs every node as broker and controller with a static
voter set, so killing one node leaves a working quorum and killing two leaves none, exactly the
failures replication (RF 3, min.insync.replicas 2) has to survive or refuse.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.net import free_port

__all__ = [
    "KAFKA_VERSION",
    "BrokerError",
    "BrokerSecurity",
    "KafkaBroker",
    "KafkaCluster",
    "Quorum",
    "fetch_jars",
    "libs_dir",
]

KAFKA_VERSION = "4.1.1"
HERE = Path(__file__).resolve().parent
NODE_ID = 1
HEAP = "512m"
START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 30.0
LOG_TAIL_LINES = 40

LOG4J2_PROPERTIES = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log_file}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.apache.name = org.apache.kafka
logger.apache.level = INFO
"""


@dataclass(frozen=True)
class BrokerSecurity:
    """Extra SSL and SASL_SSL listeners, so clients' TLS and SASL options meet a real broker.

    `keystore_pem` holds the broker's PKCS#8 private key followed by its certificate chain;
    `client_ca_pem`, when set, makes the SSL listener require client certificates signed by it.
    PLAIN users live in the listener's JAAS config; SCRAM-SHA-256 users are written into the
    cluster metadata when the storage is formatted.
    """

    keystore_pem: str
    client_ca_pem: str | None = None
    plain_users: dict[str, str] = field(default_factory=dict)
    scram_users: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Quorum:
    """What every node of a cluster shares: its id, the controller voters and internal-topic copies.

    `voters` maps node id to controller port. Internal topics (offsets, transactions) get
    `min(3, nodes)` copies with `min(2, copies)` in sync, so group commits and transactions
    survive one lost node like the pipeline's own topics do.
    """

    cluster_id: str
    voters: dict[int, int]

    @property
    def replicas(self) -> int:
        return min(3, len(self.voters))

    @property
    def min_insync(self) -> int:
        return min(2, self.replicas)

    def voters_config(self) -> str:
        return ",".join(f"{node}@127.0.0.1:{port}" for node, port in sorted(self.voters.items()))


class BrokerError(RuntimeError):
    """The broker could not be fetched, started or stopped; the message carries its log tail."""


def libs_dir(version: str = KAFKA_VERSION) -> Path:
    """Where the broker jars of `version` are cached (`REVERSER_KAFKA_LIBS` overrides)."""
    override = os.environ.get("REVERSER_KAFKA_LIBS")
    if override:
        return Path(override)
    return Path.home() / ".cache" / "reverser-kafka" / version / "libs"


def fetch_jars(version: str = KAFKA_VERSION) -> Path:
    """Copy the broker jars from Maven Central into the cache unless a complete copy is there."""
    target = libs_dir(version)
    marker = target / ".complete"
    if marker.exists():
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerError("Maven (mvn) is needed to fetch the Kafka broker jars; install it first")
    target.mkdir(parents=True, exist_ok=True)
    command = [
        mvn,
        "-B",
        "-q",
        "-f",
        str(HERE / "pom.xml"),
        f"-Dkafka.version={version}",
        f"-Dkafka.libs.dir={target}",
        "package",
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-LOG_TAIL_LINES:])
        raise BrokerError(f"fetching Kafka {version} jars failed (mvn exit {result.returncode}):\n{tail}")
    marker.write_text(version + "\n", encoding="utf-8")
    return target


def _cluster_id() -> str:
    """A random Kafka Uuid in its base64url form (never starting with '-', like Uuid.randomUuid)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _metadata_request(correlation_id: int) -> bytes:
    """A MetadataRequest v4 (all topics, no auto-creation): the oldest version Kafka 4 still serves."""
    client_id = b"reverser-test-broker"
    header = struct.pack(">hhih", 3, 4, correlation_id, len(client_id)) + client_id
    body = struct.pack(">i?", -1, False)
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        chunks.extend(chunk)
    return bytes(chunks)


def answers_metadata(host: str, port: int, timeout_s: float = 2.0) -> bool:
    """True when the broker answers a metadata request listing at least one broker."""
    correlation_id = 7
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(_metadata_request(correlation_id))
            (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
            response = _recv_exactly(sock, size)
    except (OSError, ConnectionError):
        return False
    if len(response) < 12:
        return False
    got_correlation, _throttle_ms, brokers = struct.unpack(">iii", response[:12])
    return bool(got_correlation == correlation_id and brokers >= 1)


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return f"({path} not written)"
    return "\n".join(text.splitlines()[-lines:])


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        status = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return status != "Z"


class KafkaBroker:
    """One broker+controller process with its data, logs and ports under `workdir`.

    Ports are chosen once and kept, so `restart()` brings the broker back at the same address
    with the same data: clients that were connected before can reconnect and carry on.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        version: str = KAFKA_VERSION,
        heap: str = HEAP,
        security: BrokerSecurity | None = None,
        node_id: int = NODE_ID,
        quorum: Quorum | None = None,
        port: int = 0,
        host: str = "127.0.0.1",
    ) -> None:
        self.workdir = Path(workdir).resolve()
        # The client listener's address; another one than loopback lets pods on a bridge reach it.
        self.host = host
        self.version = version
        self.heap = heap
        self.security = security
        self.node_id = node_id
        self.quorum = quorum
        self.port = port
        self.controller_port = quorum.voters[node_id] if quorum is not None else 0
        self.ssl_port = 0
        self.sasl_ssl_port = 0
        self.cluster_id = ""
        self._process: subprocess.Popen[bytes] | None = None
        self._pid: int | None = None
        self._load_state()

    # paths ------------------------------------------------------------------------------
    @property
    def data_dir(self) -> Path:
        return self.workdir / "data"

    @property
    def log_file(self) -> Path:
        return self.workdir / "logs" / "server.log"

    @property
    def out_file(self) -> Path:
        return self.workdir / "logs" / "broker.out"

    @property
    def state_file(self) -> Path:
        return self.workdir / "broker.json"

    @property
    def bootstrap(self) -> str:
        """The client address, `HOST:PORT` (`127.0.0.1` unless `host` was given)."""
        if not self.port:
            raise BrokerError("the broker has not been started")
        return f"{self.host}:{self.port}"

    @property
    def ssl_bootstrap(self) -> str:
        """The SSL listener (only with `security`)."""
        if not self.ssl_port:
            raise BrokerError("the broker has no SSL listener")
        return f"127.0.0.1:{self.ssl_port}"

    @property
    def sasl_ssl_bootstrap(self) -> str:
        """The SASL_SSL listener (only with `security`)."""
        if not self.sasl_ssl_port:
            raise BrokerError("the broker has no SASL_SSL listener")
        return f"127.0.0.1:{self.sasl_ssl_port}"

    @property
    def pid(self) -> int | None:
        return self._pid

    # lifecycle --------------------------------------------------------------------------
    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Format storage on first use, launch the broker and wait until it answers metadata."""
        self.launch()
        self.wait_ready(timeout_s)

    def launch(self) -> None:
        """Format storage on first use and start the process without waiting for it.

        A cluster launches every node before waiting: no node answers until a quorum is up.
        """
        if self.running():
            raise BrokerError(f"a broker is already running from {self.workdir} (pid {self._pid})")
        libs = fetch_jars(self.version)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        if not self.port:
            ports: set[int] = set()
            while len(ports) < 4:
                ports.add(free_port())
            self.port, self.controller_port, ssl_port, sasl_ssl_port = sorted(ports)
            if self.security is not None:
                self.ssl_port, self.sasl_ssl_port = ssl_port, sasl_ssl_port
        config = self._write_config()
        if not (self.data_dir / "meta.properties").exists():
            self._format(libs, config)
        with self.out_file.open("ab") as out:
            self._process = subprocess.Popen(
                [*self._java(libs), "kafka.Kafka", str(config)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self._pid = self._process.pid
        self._save_state()

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM for a clean shutdown, SIGKILL if it has not exited after `timeout_s`."""
        if not self.running():
            self._forget_process()
            return
        self._signal(signal.SIGTERM)
        if not self._wait_exit(timeout_s):
            self._signal(signal.SIGKILL)
            self._wait_exit(STOP_TIMEOUT_S)
        self._forget_process()

    def request_stop(self) -> None:
        """SIGTERM without waiting (`stop` waits); a cluster asks every node at once."""
        if self.running():
            self._signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL, as in a crash: no controlled shutdown, no flush."""
        if self.running():
            self._signal(signal.SIGKILL)
            self._wait_exit(STOP_TIMEOUT_S)
        self._forget_process()

    def restart(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Stop if running, then start again on the same port with the same data directory."""
        self.stop()
        self.start(timeout_s)

    def running(self) -> bool:
        if self._process is not None:
            return self._process.poll() is None
        return self._pid is not None and _pid_alive(self._pid)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return f"--- {self.log_file} ---\n{_tail(self.log_file, lines)}\n--- {self.out_file} ---\n" + _tail(
            self.out_file, lines
        )

    # internals --------------------------------------------------------------------------
    def _java(self, libs: Path) -> list[str]:
        java_home = os.environ.get("JAVA_HOME")
        java = str(Path(java_home) / "bin" / "java") if java_home else (shutil.which("java") or "java")
        return [
            java,
            f"-Xmx{self.heap}",
            f"-Xms{self.heap}",
            # A test broker lives for minutes on a small, shared machine: the client JIT only and
            # the serial collector start it in about half the CPU time (measured: 2.7 s vs 4.8 s
            # until it answers), and its load is far below what C2 or a parallel GC would pay off.
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.log_file.parent}",
            "-cp",
            f"{libs}/*",
        ]

    def _write_config(self) -> Path:
        (self.workdir / "log4j2.properties").write_text(
            LOG4J2_PROPERTIES.format(log_file=self.log_file), encoding="utf-8"
        )
        replicas = self.quorum.replicas if self.quorum is not None else 1
        min_insync = self.quorum.min_insync if self.quorum is not None else 1
        settings = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": (
                self.quorum.voters_config()
                if self.quorum is not None
                else f"{self.node_id}@127.0.0.1:{self.controller_port}"
            ),
            "listeners": f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "num.partitions": "1",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "background.threads": "2",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": str(replicas),
            "offsets.topic.num.partitions": "10",
            "transaction.state.log.replication.factor": str(replicas),
            "transaction.state.log.min.isr": str(min_insync),
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": str(replicas),
            "share.coordinator.state.topic.min.isr": str(min_insync),
            # A killed node is fenced (and dropped from ISRs, its partitions re-led) within seconds.
            "broker.session.timeout.ms": "4000",
            "broker.heartbeat.interval.ms": "500",
            "group.initial.rebalance.delay.ms": "0",
            # Retention and compaction run within seconds so tests can watch log-start move.
            "log.initial.task.delay.ms": "1000",
            "log.retention.check.interval.ms": "1000",
            "log.segment.delete.delay.ms": "1000",
            "log.cleaner.backoff.ms": "1000",
            "message.max.bytes": str(8 * 1024 * 1024 + 1024),
            "replica.fetch.max.bytes": str(8 * 1024 * 1024 + 1024),
        }
        if self.security is not None:
            settings.update(self._security_config(self.security))
        path = self.workdir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()), encoding="utf-8")
        return path

    def _security_config(self, security: BrokerSecurity) -> dict[str, str]:
        keystore = self.workdir / "tls" / "broker-keystore.pem"
        keystore.parent.mkdir(parents=True, exist_ok=True)
        keystore.write_text(security.keystore_pem, encoding="utf-8")
        plain_users = " ".join(f'user_{name}="{secret}"' for name, secret in security.plain_users.items())
        config = {
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port},"
                f"SSL://127.0.0.1:{self.ssl_port},SASL_SSL://127.0.0.1:{self.sasl_ssl_port}"
            ),
            "advertised.listeners": (
                f"PLAINTEXT://127.0.0.1:{self.port},SSL://127.0.0.1:{self.ssl_port},"
                f"SASL_SSL://127.0.0.1:{self.sasl_ssl_port}"
            ),
            "listener.security.protocol.map": (
                "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL"
            ),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(keystore),
            "listener.name.sasl_ssl.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": (
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};"
            ),
            "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
        }
        if security.client_ca_pem is not None:
            truststore = self.workdir / "tls" / "client-ca.pem"
            truststore.write_text(security.client_ca_pem, encoding="utf-8")
            config["listener.name.ssl.ssl.truststore.type"] = "PEM"
            config["listener.name.ssl.ssl.truststore.location"] = str(truststore)
            config["listener.name.ssl.ssl.client.auth"] = "required"
        return config

    def _format(self, libs: Path, config: Path) -> None:
        self.cluster_id = self.quorum.cluster_id if self.quorum is not None else _cluster_id()
        tool = [*self._java(libs), "kafka.tools.StorageTool"]
        command = [*tool, "format", "-t", self.cluster_id, "-c", str(config)]
        if self.security is not None:
            for name, secret in self.security.scram_users.items():
                command += ["--add-scram", f"SCRAM-SHA-256=[name={name},password={secret}]"]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise BrokerError(
                f"formatting KRaft storage in {self.data_dir} failed (exit {result.returncode}):\n"
                + (result.stdout + result.stderr)[-4000:]
            )

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.running():
                code = self._process.returncode if self._process is not None else None
                self._forget_process()
                raise BrokerError(
                    f"the Kafka broker exited during start-up (exit {code}):\n{self.log_tail()}"
                )
            if answers_metadata(self.host, self.port):
                return
            time.sleep(0.25)
        self.kill()
        raise BrokerError(
            f"the Kafka broker did not answer a metadata request on {self.bootstrap} within "
            f"{timeout_s:.0f}s:\n{self.log_tail()}"
        )

    def _signal(self, signum: signal.Signals) -> None:
        if self._pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._pid, signum)

    def _wait_exit(self, timeout_s: float) -> bool:
        if self._process is not None:
            try:
                self._process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                return False
            return True
        deadline = time.monotonic() + timeout_s
        while self._pid is not None and _pid_alive(self._pid):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)
        return True

    def _forget_process(self) -> None:
        self._process = None
        self._pid = None
        if self.port:
            self._save_state()

    def _save_state(self) -> None:
        state = {
            "pid": self._pid,
            "port": self.port,
            "controller_port": self.controller_port,
            "ssl_port": self.ssl_port,
            "sasl_ssl_port": self.sasl_ssl_port,
            "cluster_id": self.cluster_id,
            "version": self.version,
        }
        self.state_file.write_text(json.dumps(state) + "\n", encoding="utf-8")

    def _load_state(self) -> None:
        try:
            state = json.loads(self.state_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        self.port = int(state.get("port") or 0)
        self.controller_port = int(state.get("controller_port") or 0)
        self.ssl_port = int(state.get("ssl_port") or 0)
        self.sasl_ssl_port = int(state.get("sasl_ssl_port") or 0)
        self.cluster_id = str(state.get("cluster_id") or "")
        pid = state.get("pid")
        self._pid = int(pid) if pid else None


class KafkaCluster:
    """`size` broker+controller nodes under `workdir/node-<id>`, sharing one KRaft quorum.

    Ports and the cluster id are chosen once and kept in `workdir/cluster.json`, so a node that is
    killed and started again rejoins with its data at its old address, as a restarted pod would.
    """

    def __init__(self, workdir: Path, size: int = 3, *, heap: str = HEAP) -> None:
        if size < 1:
            raise BrokerError(f"a cluster needs at least one node, not {size}")
        self.workdir = Path(workdir).resolve()
        self.workdir.mkdir(parents=True, exist_ok=True)
        state_file = self.workdir / "cluster.json"
        try:
            state = json.loads(state_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            ports: set[int] = set()
            while len(ports) < 2 * size:
                ports.add(free_port())
            chosen = sorted(ports)
            state = {
                "cluster_id": _cluster_id(),
                "ports": {str(node): chosen[2 * (node - 1)] for node in range(1, size + 1)},
                "voters": {str(node): chosen[2 * (node - 1) + 1] for node in range(1, size + 1)},
            }
            state_file.write_text(json.dumps(state) + "\n", encoding="utf-8")
        self.quorum = Quorum(
            cluster_id=str(state["cluster_id"]),
            voters={int(node): int(port) for node, port in state["voters"].items()},
        )
        self.nodes = {
            node: KafkaBroker(
                self.workdir / f"node-{node}",
                heap=heap,
                node_id=node,
                quorum=self.quorum,
                port=int(state["ports"][str(node)]),
            )
            for node in sorted(self.quorum.voters)
        }

    @property
    def bootstrap(self) -> str:
        """Every node's client address, comma-separated (what `bootstrap_servers` takes)."""
        return ",".join(node.bootstrap for node in self.nodes.values())

    def node(self, node_id: int) -> KafkaBroker:
        return self.nodes[node_id]

    def node_at(self, address: str) -> KafkaBroker:
        """The node listening at `host:port` (as a client's metadata names a partition leader)."""
        for node in self.nodes.values():
            if node.bootstrap == address:
                return node
        raise BrokerError(f"no node of {self.workdir} listens at {address}")

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Launch every node, then wait until each answers metadata (a quorum must form first)."""
        try:
            for node in self.nodes.values():
                if not node.running():
                    node.launch()
            for node in self.nodes.values():
                node.wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """SIGTERM every node at once, then wait for each: stopped one by one, the last node's
        controlled shutdown waits for a quorum that is already gone (30 s, then SIGKILL)."""
        for node in self.nodes.values():
            node.request_stop()
        for node in self.nodes.values():
            node.stop()

    def running(self) -> bool:
        return all(node.running() for node in self.nodes.values())

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return "\n".join(f"=== node {i} ===\n{n.log_tail(lines)}" for i, n in self.nodes.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the Apache Kafka test broker or cluster")
    parser.add_argument("command", choices=["fetch", "start", "stop", "status"])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/reverser-kafka-broker"))
    parser.add_argument("--bootstrap-file", type=Path, default=None)
    parser.add_argument("--nodes", type=int, default=1, help="1: one broker; 3: a three-node cluster")
    args = parser.parse_args(argv)
    try:
        if args.command == "fetch":
            print(fetch_jars())
            return 0
        server: KafkaBroker | KafkaCluster = (
            KafkaCluster(args.workdir, args.nodes) if args.nodes > 1 else KafkaBroker(args.workdir)
        )
        nodes = server.nodes.values() if isinstance(server, KafkaCluster) else [server]
        serving = all(node.running() and answers_metadata("127.0.0.1", node.port) for node in nodes)
        if args.command == "start":
            # Idempotent for `make kafka-start`: brokers already serving from this workdir are reused.
            if not serving:
                server.start()
            bootstrap_file = args.bootstrap_file or Path(args.workdir) / "bootstrap"
            bootstrap_file.write_text(server.bootstrap + "\n", encoding="utf-8")
            print(server.bootstrap)
            return 0
        if args.command == "stop":
            server.stop()
            print("stopped")
            return 0
        if serving:
            print(f"running {server.bootstrap}")
            return 0
        print("not running")
        return 1
    except BrokerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
