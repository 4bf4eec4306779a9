"""`helm test <release>`: the release answers through its own Services, over the cluster network.

Run by templates/tests/service-test.yaml in the service's image. It checks that
1. GET /readyz on the metrics Service answers 200 (a replica is ready behind it), and
2. when the chart generated the audit certificates, an empty audit EventList posted to the audit
   Service with the apiserver's client certificate is accepted (200): the serving certificate
   verifies for the Service's DNS name against the chart's CA, the ingress takes the client
   certificate, and the route exists.
Each Service is reached at the address Kubernetes gives every pod in <NAME>_SERVICE_HOST/_PORT,
so the test needs no cluster DNS; the certificate is still checked for the DNS name the
apiserver uses. Any failure exits 1 with what failed, which fails `helm test`.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
import sys

TIMEOUT_S = 10.0
CLIENT_DIR = "/etc/reverser-test/audit-client"
EMPTY_EVENTS = json.dumps({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": []})


def address(service: str, namespace: str, default_port: int) -> tuple[str, int]:
    """The Service's ClusterIP and port from the pod's environment, else its DNS name."""
    key = service.upper().replace("-", "_")
    host = os.environ.get(f"{key}_SERVICE_HOST") or f"{service}.{namespace}.svc"
    port = int(os.environ.get(f"{key}_SERVICE_PORT") or default_port)
    return host, port


def check_readyz(service: str, namespace: str, port: int) -> str | None:
    host, port = address(service, namespace, port)
    connection = http.client.HTTPConnection(host, port, timeout=TIMEOUT_S)
    try:
        connection.request("GET", "/readyz")
        answer = connection.getresponse()
        body = answer.read().decode(errors="replace").strip()
    except OSError as exc:
        return f"GET http://{host}:{port}/readyz: {exc}"
    finally:
        connection.close()
    return None if answer.status == 200 else f"GET http://{host}:{port}/readyz: {answer.status} {body}"


def check_audit(service: str, namespace: str, port: int, route: str) -> str | None:
    host, port = address(service, namespace, port)
    name = f"{service}.{namespace}.svc"
    context = ssl.create_default_context(cafile=f"{CLIENT_DIR}/ca.crt")
    context.load_cert_chain(f"{CLIENT_DIR}/tls.crt", f"{CLIENT_DIR}/tls.key")
    connection = http.client.HTTPConnection(name, port, timeout=TIMEOUT_S)
    try:
        raw = socket.create_connection((host, port), timeout=TIMEOUT_S)
        connection.sock = context.wrap_socket(raw, server_hostname=name)
        connection.request(
            "POST", f"/audit-webhook/{route}", EMPTY_EVENTS, {"Content-Type": "application/json"}
        )
        answer = connection.getresponse()
        body = answer.read().decode(errors="replace").strip()
    except (OSError, ssl.SSLError) as exc:
        return f"POST https://{name}:{port}/audit-webhook/{route} (at {host}): {exc}"
    finally:
        connection.close()
    if answer.status != 200:
        return f"POST https://{name}:{port}/audit-webhook/{route}: {answer.status} {body}"
    return None


def main() -> int:
    namespace = os.environ["POD_NAMESPACE"]
    problems = [check_readyz(os.environ["METRICS_SERVICE"], namespace, int(os.environ["METRICS_PORT"]))]
    audit = os.environ.get("AUDIT_SERVICE")
    if audit:
        problems.append(
            check_audit(audit, namespace, int(os.environ["AUDIT_PORT"]), os.environ["AUDIT_ROUTE"])
        )
    failed = [p for p in problems if p is not None]
    for problem in failed:
        print(f"helm test: {problem}", file=sys.stderr)
    if not failed:
        print("helm test: the release answers through its Services")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
