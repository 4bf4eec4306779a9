"""deploy/redpanda: the values file for Redpanda's official chart, and the hand-written example.

Redpanda's chart (redpanda/redpanda) cannot be pulled on the project's machines (no chart
repository is reachable), so it is not rendered here: these tests parse `values.yaml`, check that it
sets exactly what deploy/redpanda/README.md says it sets, and that the address the README gives the
pipeline is the Service those values name. The hand-written `kubernetes/` StatefulSet is checked for
the security context of every container.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

REDPANDA = Path(__file__).resolve().parents[2] / "deploy" / "redpanda"
ROW = re.compile(r"^\| `(?P<key>[^`]+)` \| `(?P<value>[^`]+)` \| (?P<why>.+) \|$")


def values() -> dict[str, Any]:
    loaded = yaml.safe_load((REDPANDA / "values.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def readme_rows() -> dict[str, Any]:
    """The README's table of what values.yaml sets: key path -> the value, parsed as YAML."""
    rows = {}
    for line in (REDPANDA / "README.md").read_text().splitlines():
        match = ROW.match(line)
        if match:
            rows[match["key"]] = yaml.safe_load(match["value"])
    return rows


def lookup(tree: Any, path: str) -> Any:
    """`a.b[name].c`: dict keys, and `[name]` for the list item whose `name` is that."""
    node = tree
    for part in re.findall(r"[^.\[\]]+|\[[^\]]+\]", path):
        if part.startswith("["):
            (node,) = [item for item in node if item.get("name") == part[1:-1]]
        else:
            assert isinstance(node, dict), f"values.yaml: {path} goes through a non-mapping"
            assert part in node, f"values.yaml does not set {path}"
            node = node[part]
    return node


def test_lookup_follows_keys_and_named_list_items() -> None:
    tree = {"a": {"items": [{"name": "x", "v": 1}, {"name": "y", "v": 2}]}}
    assert lookup(tree, "a.items[y].v") == 2
    with pytest.raises(AssertionError, match=r"does not set a\.b"):
        lookup(tree, "a.b")


def test_values_set_what_the_readme_says() -> None:
    rows = readme_rows()
    # the brief's keys of the official chart are all there
    for key in (
        "statefulset.replicas",
        "tls.enabled",
        "auth.sasl.enabled",
        "storage.persistentVolume.size",
        "resources.cpu.cores",
        "external.enabled",
    ):
        assert key in rows, f"README.md documents no {key}"
    for key, documented in rows.items():
        assert lookup(values(), key) == documented, key


def test_every_container_runs_unprivileged_in_the_official_chart_values() -> None:
    spec = values()["statefulset"]["podTemplate"]["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (redpanda,) = [c for c in spec["containers"] if c["name"] == "redpanda"]
    context = redpanda["securityContext"]
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"]["drop"] == ["ALL"]
    assert context["readOnlyRootFilesystem"] is True
    # the read-only root needs /tmp as a volume
    assert {"name": "tmp", "mountPath": "/tmp"} in redpanda["volumeMounts"]
    assert {"name": "tmp", "emptyDir": {}} in spec["volumes"]
    # the aio tuner would be a privileged init container
    assert values()["tuning"]["tune_aio_events"] is False


def test_readme_address_is_the_service_the_values_name() -> None:
    v = values()
    address = f"{v['fullnameOverride']}.redpanda.svc.cluster.local:{v['listeners']['kafka']['port']}"
    readme = (REDPANDA / "README.md").read_text()
    assert f"config.log.bootstrap_servers={address}" in readme
    assert f"config.log.bootstrap_servers={address}" in (REDPANDA / "values.yaml").read_text()
    assert "-n redpanda" in readme


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


@pytest.mark.parametrize("manifest", ["statefulset.yaml", "topics-job.yaml"])
def test_hand_written_containers_have_a_restricted_security_context(manifest: str) -> None:
    (workload,) = [
        d
        for d in yaml.safe_load_all((REDPANDA / "kubernetes" / manifest).read_text())
        if d and d["kind"] in ("StatefulSet", "Job")
    ]
    pod = workload["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    for container in _containers(workload):
        context = container.get("securityContext", {})
        assert context.get("allowPrivilegeEscalation") is False, container["name"]
        assert context.get("readOnlyRootFilesystem") is True, container["name"]
        assert context.get("capabilities") == {"drop": ["ALL"]}, container["name"]
    if workload["kind"] == "StatefulSet":
        # what the broker writes is on volumes: config dir, data, /tmp
        (broker,) = [c for c in pod["containers"] if c["name"] == "redpanda"]
        mounts = {m["mountPath"] for m in broker["volumeMounts"]}
        assert {"/etc/redpanda", "/var/lib/redpanda/data", "/tmp"} <= mounts
