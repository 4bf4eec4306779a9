"""The history reader against a real Git repository: a mirrored file's content key is the watch's.

The admission check (`tests.chaos.oracle.check_facts`) ties a commit to its fact by the content key
of the file the commit wrote; that only works if the file, read back, digests to the same key the
watch and the admission webhook compute from the object itself.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from pipeline.commit.yamlrender import render_object
from pipeline.content.key import content_key
from pipeline.content.sanitize import sanitize, sanitized_json
from tests.chaos.history import read_transitions, version_keys

PATH = "clusters/chaos/team-0/apps/deployments/web.yaml"


def _deployment() -> dict[str, object]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web",
            "namespace": "team-0",
            "uid": "0b8c",
            "resourceVersion": "812",
            "annotations": {"chaos/seq": "4"},
            "labels": {"app": "web"},
        },
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}, "creationTimestamp": None},
                "spec": {"containers": [{"name": "web", "image": "registry.invalid/web:1", "args": []}]},
            },
        },
        "status": {"replicas": 0},
    }


def test_a_committed_version_digests_to_the_key_the_watch_gives_it(tmp_path: Path) -> None:
    work, bare = tmp_path / "work", tmp_path / "remote.git"
    git = ["git", "-C", str(work), "-c", "user.name=alice", "-c", "user.email=alice@example.invalid"]
    subprocess.run(["git", "init", "--quiet", "--initial-branch=b0", str(work)], check=True)
    obj = _deployment()
    (work / PATH).parent.mkdir(parents=True)
    (work / PATH).write_bytes(render_object(sanitize(obj)))
    subprocess.run([*git, "add", PATH], check=True)
    subprocess.run([*git, "commit", "--quiet", "-m", "web"], check=True)
    subprocess.run(["git", "clone", "--quiet", "--bare", str(work), str(bare)], check=True)

    (transition,) = read_transitions(bare, "b0", "clusters/chaos", {})
    assert transition.fingerprint == "4/3"
    keys = version_keys(bare, [transition])
    assert keys == {f"{transition.sha}:{PATH}": content_key(sanitized_json(sanitize(obj)))}
