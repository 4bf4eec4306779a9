"""`reverser watch-rules --discovery FILE`: rules checked against recorded discovery, no cluster asked.

Issue 33, friction 4: on the demo's configuration `watch-rules` had no apiserver to ask and
showed nothing useful. A file of `APIResourceList` documents (what `kubectl get --raw /api/v1`
prints) stands in for discovery; a malformed one is refused naming the document and the field.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.exitcodes import CommandError, ExitCode
from pipeline.watch.discovery_file import read_discovery

REVERSER = Path(sys.executable).with_name("reverser")
CORE = {
    "kind": "APIResourceList",
    "groupVersion": "v1",
    "resources": [
        {"name": "configmaps", "kind": "ConfigMap", "namespaced": True, "verbs": ["get", "list", "watch"]},
        {"name": "pods/log", "kind": "Pod", "namespaced": True, "verbs": ["get"]},
        {"name": "nodes", "kind": "Node", "namespaced": False, "verbs": ["get", "list", "watch"]},
    ],
}
APPS_V1 = {
    "kind": "APIResourceList",
    "groupVersion": "apps/v1",
    "resources": [
        {"name": "deployments", "kind": "Deployment", "namespaced": True, "verbs": ["get", "list", "watch"]}
    ],
}
APPS_V1BETA1 = {**APPS_V1, "groupVersion": "apps/v1beta1"}


def reverser(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REVERSER_")}
    return subprocess.run(
        [str(REVERSER), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False
    )


def write(path: Path, *documents: object) -> Path:
    path.write_text(yaml.safe_dump_all(documents), encoding="utf-8")
    return path


def test_the_file_reads_like_live_discovery(tmp_path: Path) -> None:
    found = read_discovery(write(tmp_path / "d.yaml", CORE, APPS_V1, APPS_V1BETA1))
    assert sorted(found) == [("", "configmaps"), ("", "nodes"), ("apps", "deployments")]
    assert found[("apps", "deployments")].version == "v1", "a group's first document is its preferred"
    assert not found[("", "nodes")].namespaced


def test_kubectl_raw_json_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text(json.dumps(CORE) + "\n---\n" + json.dumps(APPS_V1), encoding="utf-8")
    assert ("apps", "deployments") in read_discovery(path)


@pytest.mark.parametrize(
    ("documents", "named"),
    [
        ([{"kind": "APIGroupList"}], "document 1: kind: must be APIResourceList"),
        ([CORE, {**APPS_V1, "groupVersion": "a/b/c"}], "document 2: groupVersion: must be"),
        ([{**CORE, "resources": {"configmaps": {}}}], "document 1: resources: must be a list"),
        (
            [{**CORE, "resources": [{"kind": "ConfigMap", "namespaced": True}]}],
            "document 1: resources.0.name: must be a resource name",
        ),
        (
            [{**CORE, "resources": [{"name": "configmaps", "kind": "ConfigMap", "namespaced": "yes"}]}],
            "document 1: resources.0.namespaced: must be true or false",
        ),
        (
            [
                {
                    **CORE,
                    "resources": [
                        {"name": "configmaps", "kind": "ConfigMap", "namespaced": True, "verbs": "get"}
                    ],
                }
            ],
            "document 1: resources.0.verbs: must be a list",
        ),
        ([], "holds no APIResourceList document"),
    ],
)
def test_a_malformed_file_names_the_document_and_field(
    tmp_path: Path, documents: list[object], named: str
) -> None:
    path = write(tmp_path / "d.yaml", *documents)
    with pytest.raises(CommandError) as raised:
        read_discovery(path)
    assert raised.value.code == ExitCode.USAGE
    assert f"{path}: {named}" in str(raised.value)


def test_watch_rules_resolves_against_the_file_without_a_cluster(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "workdir": str(tmp_path / "w"),
                "providers": [{"name": "git", "url": str(tmp_path / "remote.git")}],
                "targets": [
                    {
                        "name": "t",
                        "provider": "git",
                        "branch": "main",
                        "path": "x",
                        "cluster": "nowhere",
                        "rules": [
                            {"resources": ["configmaps", "apps/deployments", "widgets"], "namespaces": ["a"]}
                        ],
                    }
                ],
            }
        ),
        encoding="utf-8",
    )
    discovery = write(tmp_path / "d.yaml", CORE, APPS_V1)
    without = reverser("watch-rules", "--config", str(config), cwd=tmp_path)
    assert "UnknownCluster" in without.stdout
    done = reverser(
        "watch-rules", "--config", str(config), "--discovery", str(discovery), "-o", "json", cwd=tmp_path
    )
    assert done.returncode == ExitCode.FINDINGS, done.stderr
    report = json.loads(done.stdout)
    assert [(s["group"], s["resource"], s["scope"]) for s in report["streams"]] == [
        ("", "configmaps", "a"),
        ("apps", "deployments", "a"),
    ]
    assert [(p["resource"], p["reason"]) for p in report["problems"]] == [("widgets", "Unknown")]
    broken = reverser("watch-rules", "--config", str(config), "--discovery", str(tmp_path), cwd=tmp_path)
    assert broken.returncode == ExitCode.USAGE
    assert broken.stderr.splitlines() == [broken.stderr.strip()]
    assert broken.stderr.startswith(f"reverser watch-rules: {tmp_path}: is a directory")
