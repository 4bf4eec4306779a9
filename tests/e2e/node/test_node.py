"""The chart on a real node: `helm install` with the image of `make image`, pods really running.

The quickstart mode (the embedded log on a PersistentVolumeClaim of a 1-replica StatefulSet) is
installed with `imagePullPolicy: Never`; its claim binds to a hostPath PersistentVolume whose
directory holds a bare Git remote, so the test reads what the pod pushed from the host. A
ConfigMap is committed, the pod is deleted, the StatefulSet's new pod comes up on the same claim
and log, and a second ConfigMap is committed after the first without the first again.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.deploy.helm import CHART
from tests.e2e.node.node import Node

pytestmark = [pytest.mark.e2e, pytest.mark.node]

RELEASE = "rp"
NAMESPACE = "reverser"
APPS = "apps"
POD = f"{RELEASE}-reverser-pipeline-0"
WAIT_S = 180.0


def git(remote: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "safe.directory=*", f"--git-dir={remote}", *args],
        capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip


def files_on_main(remote: Path) -> list[str]:
    return git(remote, "ls-tree", "-r", "--name-only", "main").split()


def committed(remote: Path, name: str) -> bool:
    """Whether main holds the ConfigMap's file (under whatever path prefix the layout gives it)."""
    return any(f.endswith(f"{APPS}/configmaps/{name}.yaml") for f in files_on_main(remote))


def wait_until(what: str, check: object, node: Node, timeout_s: float = WAIT_S) -> None:
    node.wait_for(what, check, timeout_s)  # type: ignore[arg-type]


def create_configmap(node: Node, name: str, value: str) -> None:
    node.api(
        "POST",
        f"/api/v1/namespaces/{APPS}/configmaps",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"value": value}},
    )


@pytest.fixture(scope="module")
def quickstart(node: Node, helm: Path, image_ref: str) -> Path:
    """The chart installed in quickstart mode; returns the bare remote inside the volume."""
    volume = node.workdir / "pv-workdir"
    volume.mkdir()
    remote = volume / "remote.git"
    subprocess.run(["git", "init", "--quiet", "--bare", "-b", "main", str(remote)], check=True)
    subprocess.run(["chown", "-R", "65532:65532", str(volume)], check=True)
    for namespace in (NAMESPACE, APPS):
        node.api(
            "POST",
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        )
    node.api(
        "POST",
        "/api/v1/persistentvolumes",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": "quickstart-workdir"},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "manual",
                "persistentVolumeReclaimPolicy": "Retain",
                "hostPath": {"path": str(volume), "type": "Directory"},
            },
        },
    )
    repository, tag = image_ref.rsplit(":", 1)
    providers = [
        {"name": "local", "url": "/var/lib/reverser/remote.git", "default_branch": "main",
         "commit_window_s": 1, "push_cooldown_s": 0.5},
    ]  # fmt: skip
    targets = [
        {"name": "t", "provider": "local", "branch": "main", "cluster": "default",
         "rules": [{"resources": ["configmaps"], "namespaces": [APPS]}]},
    ]  # fmt: skip
    result = subprocess.run(
        [
            str(helm), "install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--wait", "--timeout", "5m",
            "-f", str(CHART / "values-quickstart.yaml"),
            "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
            "--set", "image.pullPolicy=Never", "--set", "auditWebhook.enabled=false",
            "--set", "workdir.persistence.storageClassName=manual", "--set", "workdir.persistence.size=1Gi",
            "--set", "config.attribution.grace_ms=200", "--set", "config.attribution.max_wait_ms=1000",
            "--set-json", f"config.providers={json.dumps(providers)}",
            "--set-json", f"config.targets={json.dumps(targets)}",
        ],
        capture_output=True, text=True, timeout=400, check=False,
        env={**os.environ, "KUBECONFIG": str(node.kubeconfig), "HELM_CACHE_HOME": str(node.workdir / "helm")},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return remote


def test_helm_install_of_the_quickstart_reaches_ready_with_the_local_image(
    node: Node, quickstart: Path
) -> None:
    _, ready = node.pod_ready(NAMESPACE, POD)
    assert ready, "helm --wait returned before the pod was Ready"
    pod = node.api("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{POD}")
    (container,) = pod["spec"]["containers"]
    assert container["imagePullPolicy"] == "Never"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    claim = node.api("GET", f"/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims/workdir-{POD}")
    assert claim["status"]["phase"] == "Bound"
    assert claim["spec"]["volumeName"] == "quickstart-workdir"


def test_the_quickstart_survives_a_pod_deletion_without_loss(node: Node, quickstart: Path) -> None:
    create_configmap(node, "first", "1")
    wait_until(
        "first committed",
        lambda: committed(quickstart, "first"),
        node,
    )
    first_commits = git(quickstart, "log", "--format=%H", "main").split()
    log_dir = quickstart.parent / "log"
    assert log_dir.is_dir(), "the embedded log is not on the claim"

    old_uid, _ = node.pod_ready(NAMESPACE, POD)
    node.api("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{POD}")

    def replaced() -> bool:
        uid, ready = node.pod_ready(NAMESPACE, POD)
        return bool(uid) and uid != old_uid and ready

    wait_until("the StatefulSet's new pod Ready", replaced, node)
    create_configmap(node, "second", "2")
    wait_until(
        "second committed",
        lambda: committed(quickstart, "second"),
        node,
    )
    history = git(quickstart, "log", "--format=%H", "main").split()
    # Nothing lost, nothing rewritten: the old history is the tail of the new one.
    assert history[-len(first_commits) :] == first_commits
    files = files_on_main(quickstart)
    assert any(f.endswith(f"{APPS}/configmaps/first.yaml") for f in files)
    # The first ConfigMap was not committed again by the new pod (it resumed from the log).
    touching_first = git(
        quickstart, "log", "--format=%H", "main", "--", f"*{APPS}/configmaps/first.yaml"
    ).split()
    assert len(touching_first) == 1
