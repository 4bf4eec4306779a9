"""Live changes written into repositories people already keep (issue 29, docs/intent.md).

Each test pushes a real layout as a foreign user to a bare remote, then runs live changes through
the `BranchWorker` and reads back the exact bytes of every file the commit touched.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from pipeline.codec.branch_work import WorkItem
from pipeline.codec.commit_request_result import RequestResult
from pipeline.codec.object_state import ObjectState
from pipeline.codec.target_result import PushOutcome, TargetResult, decode_result, encode_result
from pipeline.commit.decide import SNAPSHOT_AUTHOR
from pipeline.config import TargetSettings
from pipeline.log.api import PendingRecord, Record
from tests.commit.helpers import BOB, Work, cm, files, foreign_push, git, log_lines
from tests.commit.test_branch_worker import Harness, pushes

SETTINGS_DOC = """\
# Team A's settings, owned by the platform team
apiVersion: v1
kind: ConfigMap
metadata:
  name: app-settings
  namespace: team-a
data:
  # the log level the app starts with
  level: info
  region: "eu-1"
"""
FEATURES_DOC = """\
# feature switches: ask before turning one on
apiVersion: v1
kind: ConfigMap
metadata:
  name: features
  namespace: team-a
data:
  beta: "false"
"""
MULTI = f"{SETTINGS_DOC}---\n{FEATURES_DOC}"
MULTI_PATH = "live/team-a/config.yaml"


class Parked:
    """The dead-letter port: records the worker parks, with the error it gives."""

    def __init__(self) -> None:
        self.items: list[tuple[WorkItem, Exception]] = []

    async def __call__(self, item: WorkItem, error: Exception) -> None:
        self.items.append((item, error))


def harness(
    tmp_path: Path,
    layout: dict[str, str],
    target_path: str = "live",
    states: list[ObjectState] | None = None,
    emitted: list[PendingRecord] | None = None,
    results: list[TargetResult] | None = None,
    **target: Any,
) -> tuple[Harness, Parked]:
    """A worker on a remote that already holds `layout`, pushed by somebody else; with `states`
    (read at sync) or `emitted` (what it writes), it tracks object state; with `results`, it
    reports the target's results there (decoded from their log records). `target` holds more of
    the target's settings (`placement`, `kustomize`)."""
    settings = TargetSettings(name="t1", provider="git", path=target_path, **target)
    h = Harness(tmp_path, targets=[settings])
    for path, content in layout.items():
        foreign_push(h.remote, tmp_path, path, content)
    parked = Parked()

    async def load_state(targets: frozenset[str]) -> list[ObjectState]:
        return states or []

    async def on_result(result: TargetResult | RequestResult) -> None:
        if results is not None and isinstance(result, TargetResult):
            record = encode_result(result)
            results.append(decode_result(Record("config", 0, 0, 0, record.key, record.value, record.headers)))

    tracked = states is not None or emitted is not None
    h.worker = h.new_worker(
        reject=parked,
        load_state=load_state if tracked else None,
        on_state=(emitted if emitted is not None else []).extend if tracked else None,
        on_result=on_result if results is not None else None,
    )
    return h, parked


def refusals(reason: str) -> float:
    return (
        REGISTRY.get_sample_value(
            "reverser_commit_in_place_refusals_total", {"target": "t1", "reason": reason}
        )
        or 0.0
    )


def changed_paths(remote: Path) -> list[str]:
    """The files the branch tip's commit changed."""
    return git(remote, "show", "--name-only", "--format=", "main").split()


async def test_a_change_edits_only_its_document_of_a_multi_document_file(tmp_path: Path) -> None:
    h, _ = harness(tmp_path, {MULTI_PATH: MULTI})
    w = Work()
    await h.feed(w.update(cm("app-settings", level="debug", region="eu-1"), rv="2"))
    await h.settle_time()
    assert files(h.remote)[MULTI_PATH] == MULTI.replace("level: info", "level: debug")
    assert changed_paths(h.remote) == [MULTI_PATH], "no canonical copy is written beside the file"
    assert git(h.remote, "diff", "--numstat", "main~1", "main").split()[:2] == ["1", "1"]
    assert log_lines(h.remote, fmt="%an|%s")[-1] == "Alice Example|[UPDATE] v1/configmaps/app-settings"

    # the next change is the difference from the object the worker now knows: a new key is added
    await h.feed(w.update(cm("app-settings", level="debug", region="eu-1", tier="gold"), rv="3"))
    await h.settle_time()
    assert files(h.remote)[MULTI_PATH] == MULTI.replace("level: info", "level: debug").replace(
        '  region: "eu-1"\n', '  region: "eu-1"\n  tier: gold\n'
    )
    assert h.settled == [(0, 0), (0, 1)]


async def test_a_new_owner_takes_the_change_from_the_object_as_last_committed(tmp_path: Path) -> None:
    """After a restart the object state says what the object was, so a new key is written too (a
    worker that knows nothing updates only the values the document already holds)."""
    committed = ObjectState(
        target="t1",
        provider="git",
        branch="main",
        path="live",
        cluster="default",
        group="",
        version="v1",
        resource="configmaps",
        namespace="team-a",
        name="app-settings",
        uid="uid-app-settings",
        resource_version="1",
        object_json=json.dumps(cm("app-settings", level="info", region="eu-1")).encode(),
        sealed=False,
        document=b"",
        author=SNAPSHOT_AUTHOR,
        partition=0,
        offset=0,
        committed_at_ms=0,
    )
    h, _ = harness(tmp_path, {MULTI_PATH: MULTI}, states=[committed])
    await h.feed(Work(start=1).update(cm("app-settings", level="info", region="eu-1", tier="gold"), rv="2"))
    await h.settle_time()
    assert files(h.remote)[MULTI_PATH] == MULTI.replace(
        '  region: "eu-1"\n', '  region: "eu-1"\n  tier: gold\n'
    )

    unknown, _ = harness(tmp_path / "cold", {MULTI_PATH: MULTI})
    await unknown.feed(
        Work(start=1).update(cm("app-settings", level="info", region="eu-1", tier="gold"), rv="2")
    )
    await unknown.settle_time()
    assert files(unknown.remote)[MULTI_PATH] == MULTI, "nothing the document holds changed"


async def test_two_documents_of_one_file_change_in_one_commit(tmp_path: Path) -> None:
    h, _ = harness(tmp_path, {MULTI_PATH: MULTI})
    w = Work()
    await h.feed(
        w.update(cm("features", beta="true"), rv="2"),
        w.update(cm("app-settings", level="warn", region="eu-1"), rv="3"),
    )
    await h.settle_time()
    assert files(h.remote)[MULTI_PATH] == MULTI.replace('beta: "false"', 'beta: "true"').replace(
        "level: info", "level: warn"
    )
    assert log_lines(h.remote, fmt="%s")[-1] == "alice@example.com on t1: 2 resource(s)"


async def test_a_delete_removes_its_document_and_keeps_the_others(tmp_path: Path) -> None:
    h, _ = harness(tmp_path, {MULTI_PATH: MULTI})
    w = Work()
    await h.feed(w.delete("features", rv="2"))
    await h.settle_time()
    assert files(h.remote)[MULTI_PATH] == SETTINGS_DOC
    await h.feed(w.delete("app-settings", rv="3"))
    await h.settle_time()
    assert MULTI_PATH not in files(h.remote), "the file goes with its last document"
    assert log_lines(h.remote, fmt="%s")[-1] == "[DELETE] v1/configmaps/app-settings"


async def test_a_commit_replayed_onto_a_moved_tip_edits_the_file_as_the_remote_has_it(tmp_path: Path) -> None:
    h, _ = harness(tmp_path, {MULTI_PATH: MULTI})
    w = Work()
    await h.feed(w.update(cm("app-settings", level="debug", region="eu-1"), rv="2"))
    await h.settle_time()
    human = files(h.remote)[MULTI_PATH].replace('beta: "false"', 'beta: "true"  # on for the demo')
    foreign_push(h.remote, tmp_path, MULTI_PATH, human)
    rejected = pushes("rejected")
    await h.feed(w.update(cm("app-settings", level="trace", region="eu-1"), BOB, rv="3"))
    await h.settle_time()
    assert pushes("rejected") == rejected + 1
    assert files(h.remote)[MULTI_PATH] == human.replace("level: debug", "level: trace")
    assert h.settled == [(0, 0), (0, 1)]


SHOP_KUSTOMIZATION = """\
# the shop, as Flux applies it
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: team-a
resources:
  - settings.yaml  # app settings
"""
SHOP_SETTINGS = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: shop-settings
data:
  currency: EUR  # billing needs EUR
  theme: dark
"""


async def test_a_kustomize_folder_is_edited_in_place_and_new_objects_are_registered(tmp_path: Path) -> None:
    layout = {"shop/kustomization.yaml": SHOP_KUSTOMIZATION, "shop/settings.yaml": SHOP_SETTINGS}
    h, _ = harness(tmp_path, layout, target_path="shop")
    w = Work(path="shop")
    await h.feed(w.update(cm("shop-settings", currency="EUR", theme="light"), rv="2"))
    await h.settle_time()
    tree = files(h.remote)
    assert tree["shop/settings.yaml"] == SHOP_SETTINGS.replace("theme: dark", "theme: light")
    assert sorted(tree) == sorted(layout), "the namespace comes from the kustomization: no copy"

    await h.feed(w.create(cm("promotions", banner="spring"), rv="3"))
    await h.settle_time()
    tree = files(h.remote)
    assert tree["shop/configmap-promotions.yaml"] == (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: promotions\n  namespace: team-a\n"
        "data:\n  banner: spring\n"
    )
    assert tree["shop/kustomization.yaml"] == SHOP_KUSTOMIZATION + "  - configmap-promotions.yaml\n"
    assert changed_paths(h.remote) == ["shop/configmap-promotions.yaml", "shop/kustomization.yaml"]
    assert log_lines(h.remote, fmt="%s")[-1] == "[CREATE] v1/configmaps/promotions"

    await h.feed(w.delete("promotions", rv="4"))
    await h.settle_time()
    assert files(h.remote) == {**layout, "shop/settings.yaml": tree["shop/settings.yaml"]}


BASE_DEPLOYMENT = """\
# podinfo, as the platform team ships it
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 1
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
        - name: web
          image: nginx:1.25
"""
OVERLAY = """\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: {namespace}
resources:
  - ../../base
"""
FLUX_MONOREPO = {
    "apps/base/kustomization.yaml": "resources:\n  - deployment.yaml\n",
    "apps/base/deployment.yaml": BASE_DEPLOYMENT,
    "apps/overlays/staging/kustomization.yaml": OVERLAY.format(namespace="staging"),
    "apps/overlays/prod/kustomization.yaml": OVERLAY.format(namespace="prod"),
}


def web(namespace: str, image: str = "nginx:1.25", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": image}]},
            },
        },
    }


async def test_a_shared_base_is_changed_through_the_overlay_or_not_at_all(tmp_path: Path) -> None:
    h, parked = harness(tmp_path, FLUX_MONOREPO, target_path="apps")
    w = Work(path="apps")
    deployments = {"group": "apps", "resource": "deployments", "scope": "prod"}
    await h.feed(*w.snapshot(1, [web("prod")], rv="10", **deployments))
    assert files(h.remote) == FLUX_MONOREPO, "a snapshot leaves a user's files as they are"

    await h.feed(w.update(web("prod", "nginx:1.26"), rv="11", **deployments))
    await h.settle_time()
    tree = files(h.remote)
    assert tree["apps/overlays/prod/kustomization.yaml"] == OVERLAY.format(namespace="prod") + (
        "images:\n  - name: nginx\n    newTag: '1.26'\n"
    )
    assert changed_paths(h.remote) == ["apps/overlays/prod/kustomization.yaml"]

    before = refusals("SharedBase")
    tip = git(h.remote, "rev-parse", "main")
    await h.feed(w.update(web("prod", "nginx:1.26", tier="gold"), rv="12", **deployments))
    await h.settle_time()
    assert git(h.remote, "rev-parse", "main") == tip, "a label change to a shared base writes nothing"
    assert refusals("SharedBase") == before + 1
    assert [(item.offset, type(error).__name__) for item, error in parked.items] == [
        (w.offset - 1, "IntentRefusal")
    ]
    assert "apps/base/deployment.yaml" in str(parked.items[0][1])
    assert sorted(h.settled)[-1] == (0, w.offset - 1), "the parked record settles"


NAME_PREFIX = {
    "live/app/kustomization.yaml": "namePrefix: team-\nresources:\n  - settings.yaml\n",
    "live/app/settings.yaml": SETTINGS_DOC,
    "live/flux-system/gotk-components.yaml": FEATURES_DOC,
}


async def test_a_refused_layout_writes_nothing_and_is_counted(tmp_path: Path) -> None:
    emitted: list[PendingRecord] = []
    h, parked = harness(tmp_path, NAME_PREFIX, emitted=emitted)
    w = Work()
    unsupported, owned = refusals("UnsupportedKustomization"), refusals("OwnedByAnotherTool")
    tip = git(h.remote, "rev-parse", "main")
    await h.feed(
        w.update(cm("app-settings", level="debug", region="eu-1"), rv="2"),
        w.update(cm("features", beta="true"), rv="3"),
    )
    await h.settle_time()
    assert git(h.remote, "rev-parse", "main") == tip
    assert files(h.remote) == NAME_PREFIX
    assert refusals("UnsupportedKustomization") == unsupported + 1
    assert refusals("OwnedByAnotherTool") == owned + 1
    reasons = {item.offset: str(error) for item, error in parked.items}
    assert "namePrefix" in reasons[0]
    assert "live/app/kustomization.yaml" in reasons[0]
    assert "gotk-components.yaml" in reasons[1]
    assert sorted(h.settled) == [(0, 0), (0, 1)]
    assert emitted == [], "object state says what Git holds: nothing was committed"


async def test_a_refusal_stalls_the_target_until_the_fixed_folder_takes_a_change(tmp_path: Path) -> None:
    results: list[TargetResult] = []
    h, parked = harness(tmp_path, NAME_PREFIX, results=results)
    w = Work()
    tip = git(h.remote, "rev-parse", "main")
    await h.feed(w.update(cm("app-settings", level="debug", region="eu-1"), rv="2"))
    await h.settle_time()
    await h.settle_time()
    assert git(h.remote, "rev-parse", "main") == tip, "a refused layout writes nothing"
    assert len(parked.items) == 1
    (stalled,) = results
    assert stalled.refusal is not None
    assert stalled.refusal.reason == "UnsupportedKustomization"
    assert stalled.refusal.file == "live/app/kustomization.yaml"
    assert stalled.refusal.object == "ConfigMap team-a/app-settings"
    assert (stalled.push, stalled.commit) == (PushOutcome.NONE, ""), "nothing of the target was pushed"
    assert "namePrefix" not in repr(stalled), "the status names the file, not what it holds"

    # the user fixes the folder; the next change of the target is written into it and clears it
    fixed = "resources:\n  - settings.yaml\n"
    foreign_push(h.remote, tmp_path, "live/app/kustomization.yaml", fixed)
    await h.feed(w.update(cm("app-settings", level="warn", region="eu-1"), rv="3"))
    await h.settle_time()
    await h.settle_time()
    assert changed_paths(h.remote) == ["live/app/settings.yaml"]
    assert files(h.remote)["live/app/settings.yaml"] == SETTINGS_DOC.replace("level: info", "level: warn")
    assert files(h.remote)["live/app/kustomization.yaml"] == fixed
    pushed = results[-1]
    assert pushed.push is PushOutcome.SUCCEEDED
    assert pushed.commit == git(h.remote, "rev-parse", "main").strip()
    assert pushed.refusal is None, "a change of the target committed: no longer stalled"
    assert len(parked.items) == 1


async def test_a_refusal_keeps_the_last_push_and_a_failed_fetch_keeps_the_refusal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    results: list[TargetResult] = []
    h, _ = harness(tmp_path, NAME_PREFIX, results=results)
    w = Work()
    await h.feed(w.create(cm("extra", banner="spring"), rv="2"))
    await h.settle_time()
    await h.settle_time()
    (pushed,) = results
    assert pushed.push is PushOutcome.SUCCEEDED
    assert pushed.refusal is None
    tip = git(h.remote, "rev-parse", "main")
    h.worker.repo.url = str(tmp_path / "gone.git")
    await h.feed(w.update(cm("app-settings", level="debug", region="eu-1"), rv="3"))
    await h.settle_time()
    assert git(h.remote, "rev-parse", "main") == tip
    stalled = results[-1]
    assert stalled.refusal is not None
    assert stalled.refusal.reason == "UnsupportedKustomization"
    assert (stalled.commit, stalled.push) == (pushed.commit, PushOutcome.SUCCEEDED), "the last push stays"
    assert "fetch after a refusal failed" in caplog.text


async def test_an_object_whose_home_is_its_canonical_file_is_rewritten_as_before(tmp_path: Path) -> None:
    """The pipeline's own files keep today's bytes, also in a folder with users' files beside them."""
    h, _ = harness(tmp_path, {MULTI_PATH: MULTI})
    w = Work()
    await h.feed(w.create(cm("own", key="a"), rv="2"))
    await h.settle_time()
    await h.feed(w.update(cm("own", key="b"), rv="3"))
    await h.settle_time()
    tree = files(h.remote)
    assert tree["live/team-a/configmaps/own.yaml"] == (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: own\n  namespace: team-a\ndata:\n  key: b\n"
    )
    assert tree[MULTI_PATH] == MULTI


async def test_a_new_object_lands_where_the_targets_placement_puts_it(tmp_path: Path) -> None:
    """gitops-reverser's `placement.byType`: the new object's file is the template's, its later
    changes edit that file, and its delete removes it."""
    placement = {"by_type": {"v1/configmaps": "{namespace}/config/{name}.yaml"}}
    h, _ = harness(tmp_path, {MULTI_PATH: MULTI}, placement=placement)
    w = Work()
    await h.feed(w.create(cm("promotions", banner="spring"), rv="2"))
    await h.settle_time()
    placed = "live/team-a/config/promotions.yaml"
    assert changed_paths(h.remote) == [placed], "no canonical copy is written"
    assert files(h.remote)[placed] == (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: promotions\n  namespace: team-a\n"
        "data:\n  banner: spring\n"
    )
    await h.feed(w.update(cm("promotions", banner="summer"), rv="3"))
    await h.settle_time()
    assert changed_paths(h.remote) == [placed]
    assert git(h.remote, "diff", "main~1", "main", "--", placed).splitlines()[-2:] == [
        "-  banner: spring",
        "+  banner: summer",
    ]
    await h.feed(w.delete("promotions", rv="4"))
    await h.settle_time()
    assert files(h.remote) == {MULTI_PATH: MULTI}


def push_symlink(remote: Path, workdir: Path, link: str, points_to: str) -> None:
    """Somebody commits a symbolic link (git mode 120000) through a normal clone."""
    clone = workdir / "foreign"
    git(clone, "fetch", "-q", "origin")
    git(clone, "checkout", "-q", "-B", "main", "origin/main")
    (clone / link).parent.mkdir(parents=True, exist_ok=True)
    (clone / link).symlink_to(points_to)
    git(clone, "add", link)
    git(clone, "-c", "user.name=Human", "-c", "user.email=human@example.com", "commit", "-q", "-m", "link")
    git(clone, "push", "-q", "origin", "HEAD:main")


async def test_symlinks_are_never_followed_out_of_the_target_folder(tmp_path: Path) -> None:
    """A link inside the target folder to a file outside it is not a home: the object it points
    at is written inside the folder, the link and the file outside stay as they were."""
    outside = "platform/team-a-config.yaml"
    h, _ = harness(tmp_path, {outside: MULTI})
    push_symlink(h.remote, tmp_path, MULTI_PATH, f"../../{outside}")
    link_before = git(h.remote, "ls-tree", "main", MULTI_PATH)
    assert link_before.startswith("120000 ")
    w = Work()
    await h.feed(w.update(cm("app-settings", level="debug", region="eu-1"), rv="2"))
    await h.settle_time()
    after = files(h.remote)
    assert after[outside] == MULTI, "nothing outside the target path is touched"
    assert git(h.remote, "ls-tree", "main", MULTI_PATH) == link_before, "the link is kept as a link"
    written = [path for path in changed_paths(h.remote) if path != MULTI_PATH]
    assert written
    assert all(path.startswith("live/") for path in written)
    assert "level: debug" in after[written[0]]


async def test_a_link_at_an_objects_own_path_is_replaced_never_written_through(tmp_path: Path) -> None:
    """The worker writes Git trees, not a checkout, so a link is never followed: a link where the
    object's canonical file belongs becomes that file, and what it pointed at is untouched."""
    outside = "platform/x.yaml"
    h, _ = harness(tmp_path, {outside: "a: 1\n"})
    own = "live/team-a/configmaps/app-settings.yaml"
    push_symlink(h.remote, tmp_path, own, f"../../../{outside}")
    w = Work()
    await h.feed(w.update(cm("app-settings", level="debug", region="eu-1"), rv="2"))
    await h.settle_time()
    assert git(h.remote, "ls-tree", "main", own).startswith("100644 blob ")
    assert "level: debug" in files(h.remote)[own]
    assert files(h.remote)[outside] == "a: 1\n"
