"""The chart's `helm test` hook: how it renders, and its script against real servers.

The hook's pod runs `files/helm-test.py` inline (`python -c`). Here the rendered pod is checked
(a test hook, selected by no Service or budget, the release's image and security context, the
audit check only with the generated certificates), and the script itself runs as the pod would,
with the same environment, against a real HTTP server on loopback answering 200 or 503, and with
nothing listening: it passes only on 200 and names what failed otherwise. On a real node
`tests/e2e/node/test_node_kafka.py` runs it through `helm test` for real, mutual TLS included.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.helm import BUILD_HELM, CHART, helm_path
from tests.deploy.helm import render as render_chart
from tests.support.net import free_port

NAMESPACE = "reverser"
PROVIDERS = ("--set-json", 'config.providers=[{"name":"git","url":"https://git.example.invalid/r.git"}]')
SCRIPT = CHART / "files" / "helm-test.py"


@pytest.fixture(scope="module")
def helm() -> Path:
    path = helm_path()
    if path is None:
        pytest.skip(f"helm is not built; run {BUILD_HELM.name} in tests/deploy (Go module proxy)")
    return path


def hook_pod(helm: Path, *args: str) -> dict[str, Any]:
    objects = render_chart(helm, NAMESPACE, *PROVIDERS, *args)
    (pod,) = [o for o in objects if o["kind"] == "Pod"]
    return pod


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    (container,) = pod["spec"]["containers"]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def test_the_hook_is_a_helm_test_pod_outside_every_selector(helm: Path) -> None:
    pod = hook_pod(helm)
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["automountServiceAccountToken"] is False
    # The workload's selector is app.kubernetes.io/name + instance: the test pod lacks the name.
    assert "app.kubernetes.io/name" not in pod["metadata"]["labels"]
    (container,) = pod["spec"]["containers"]
    assert container["image"] == "reverser-pipeline:0.1.0"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["command"][:2] == ["python", "-c"]
    assert container["command"][2] == SCRIPT.read_text()
    assert env_of(pod) == {
        "METRICS_SERVICE": "rp-reverser-pipeline-metrics",
        "METRICS_PORT": "9464",
        "AUDIT_SERVICE": "rp-reverser-pipeline-audit",
        "AUDIT_PORT": "443",
        "AUDIT_ROUTE": "default",
    }
    (volume,) = pod["spec"]["volumes"]
    assert volume["secret"]["secretName"] == "rp-reverser-pipeline-audit-client"


def test_with_the_operators_own_certificates_only_readyz_is_checked(helm: Path) -> None:
    pod = hook_pod(helm, "--set", "auditWebhook.tls.secretName=mine")
    assert set(env_of(pod)) == {"METRICS_SERVICE", "METRICS_PORT"}
    assert "volumes" not in pod["spec"]


class _Answer(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        body = b"ready\n" if self.status == 200 else b"not ready\nlog: unreachable\n"
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def metrics_server() -> Iterator[tuple[HTTPServer, type[_Answer]]]:
    handler = type("Answer", (_Answer,), {})
    server = HTTPServer(("127.0.0.1", free_port()), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, handler
    finally:
        server.shutdown()
        server.server_close()


def run_script(port: int) -> subprocess.CompletedProcess[str]:
    """The script as the pod runs it: Kubernetes' Service variables point at `port` on loopback."""
    env = {
        "POD_NAMESPACE": NAMESPACE,
        "METRICS_SERVICE": "rp-reverser-pipeline-metrics",
        "METRICS_PORT": "9464",
        "RP_REVERSER_PIPELINE_METRICS_SERVICE_HOST": "127.0.0.1",
        "RP_REVERSER_PIPELINE_METRICS_SERVICE_PORT": str(port),
    }
    return subprocess.run(
        [sys.executable, "-c", SCRIPT.read_text()], env=env, capture_output=True, text=True, timeout=60
    )


def test_the_script_passes_on_a_ready_release(metrics_server: tuple[HTTPServer, type[_Answer]]) -> None:
    server, _ = metrics_server
    result = run_script(server.server_address[1])
    assert result.returncode == 0, result.stderr
    assert "the release answers through its Services" in result.stdout


def test_the_script_fails_naming_readyz_when_no_replica_is_ready(
    metrics_server: tuple[HTTPServer, type[_Answer]],
) -> None:
    server, handler = metrics_server
    handler.status = 503
    result = run_script(server.server_address[1])
    assert result.returncode == 1
    assert "/readyz: 503 not ready" in result.stderr
    assert "log: unreachable" in result.stderr


def test_the_script_fails_when_nothing_answers() -> None:
    result = run_script(free_port())
    assert result.returncode == 1
    assert "/readyz" in result.stderr
    assert "Connection refused" in result.stderr
