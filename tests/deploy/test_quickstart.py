"""The chart's quickstart mode: the embedded log on a PersistentVolumeClaim, no broker.

With `config.log.backend: embedded` (values-quickstart.yaml) the chart renders a 1-replica
StatefulSet whose workdir (holding the log) is a claim, instead of the Deployment with an emptyDir,
and no topics Job; more than one replica is refused at render time with the way out. Rendered by
real helm (tests/deploy/build-helm.sh), like tests/deploy/test_chart.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pipeline.config import load_settings
from tests.deploy.helm import CHART, run_helm
from tests.deploy.test_chart import NAMESPACE, by_kind, helm, named, refusal, render, rendered_config

__all__ = ["helm"]

QUICKSTART = ("-f", str(CHART / "values-quickstart.yaml"))
README_SECTION = "From the quickstart to Kafka"


def statefulset(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (found,) = by_kind(objects, "StatefulSet")
    return found


def test_quickstart_renders_one_statefulset_replica_with_the_log_on_a_claim(helm: Path) -> None:
    objects = render(helm, *QUICKSTART)
    assert not by_kind(objects, "Deployment")
    sts = statefulset(objects)
    assert sts["spec"]["replicas"] == 1
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "workdir"
    assert claim["spec"]["resources"]["requests"]["storage"] == "10Gi"
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert "storageClassName" not in claim["spec"]
    pod = sts["spec"]["template"]["spec"]
    # The workdir comes from the claim only; the Deployment's emptyDir is gone.
    assert "workdir" not in [volume["name"] for volume in pod["volumes"]]
    (container,) = pod["containers"]
    mounts = {mount["name"]: mount["mountPath"] for mount in container["volumeMounts"]}
    assert mounts["workdir"] == "/var/lib/reverser"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    # The claim outlives the pod and the release: the log is the pipeline's state.
    retention = sts["spec"]["persistentVolumeClaimRetentionPolicy"]
    assert retention == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    assert sts["spec"]["serviceName"] == named(objects, "Service", "-metrics")["metadata"]["name"]


def test_quickstart_has_no_topics_job_and_its_config_names_no_broker(helm: Path, tmp_path: Path) -> None:
    """The service creates its topics in its own log; the default broker address must not leak in."""
    objects = render(helm, *QUICKSTART)
    assert not by_kind(objects, "Job")
    settings = load_settings(rendered_config(objects, tmp_path))
    assert settings.log.effective_backend == "embedded"
    assert settings.log.bootstrap_servers == ""
    assert str(settings.workdir) == "/var/lib/reverser"


def test_no_bootstrap_servers_with_one_replica_is_the_embedded_log_too(helm: Path) -> None:
    objects = render(helm, "--set", "config.log.bootstrap_servers=", "--set", "replicaCount=1")
    assert statefulset(objects)["spec"]["replicas"] == 1
    assert not by_kind(objects, "Deployment")


@pytest.mark.parametrize("replicas", ["2", "5"])
def test_more_than_one_replica_on_the_embedded_log_is_refused_with_the_way_out(
    helm: Path, replicas: str
) -> None:
    message = refusal(helm, *QUICKSTART, "--set", f"replicaCount={replicas}")
    assert "the embedded log (config.log.backend embedded) runs in one process" in message
    assert "set replicaCount: 1" in message
    assert README_SECTION in message


def test_the_chart_readme_explains_the_move_to_kafka() -> None:
    readme = (CHART / "README.md").read_text()
    assert f"## {README_SECTION}" in readme
    assert "bootstrap_servers" in readme


def test_claim_settings_are_passed_through_and_validated(helm: Path) -> None:
    objects = render(
        helm,
        *QUICKSTART,
        "--set", "workdir.persistence.size=50Gi",
        "--set", "workdir.persistence.storageClassName=fast",
        "--set", "workdir.persistence.annotations.backup=daily",
    )  # fmt: skip
    (claim,) = statefulset(objects)["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "50Gi"
    assert claim["spec"]["storageClassName"] == "fast"
    assert claim["metadata"]["annotations"] == {"backup": "daily"}
    assert "/workdir/persistence/size" in refusal(helm, *QUICKSTART, "--set", "workdir.persistence.size=lots")
    assert "/workdir/persistence/accessModes" in refusal(
        helm, *QUICKSTART, "--set-json", 'workdir.persistence.accessModes=["ReadWriteSometimes"]'
    )


def test_the_kafka_default_still_renders_the_deployment(helm: Path) -> None:
    objects = render(helm)
    assert not by_kind(objects, "StatefulSet")
    (deployment,) = by_kind(objects, "Deployment")
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["workdir"] == {"name": "workdir", "emptyDir": {"sizeLimit": "2Gi"}}


def test_helm_lint_passes_in_quickstart_mode(helm: Path) -> None:
    result = run_helm(helm, "lint", str(CHART), "--namespace", NAMESPACE, *QUICKSTART)
    assert result.returncode == 0, result.stdout + result.stderr
