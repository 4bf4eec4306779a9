"""Where a change lands (`pipeline.commit.inplace`), decided without Git, and the home index kept
current from real trees (`pipeline.commit.homes`) without reading unchanged files again."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.commit.decide import Decider, Staged
from pipeline.commit.git.objstore import ObjectStore
from pipeline.commit.git.repo import LocalRepo
from pipeline.commit.homes import BranchHomes
from pipeline.commit.inplace import (
    LiveChange,
    guess_resource,
    kind_of,
    live_object,
    place,
    remembered,
    unlisted_homes,
)
from pipeline.commit.yamlrender import render_object
from pipeline.config import ProviderSettings, Settings, TargetSettings
from pipeline.intent.documents import IntentRefusal, RefusalReason
from pipeline.intent.homes import FolderIndex, build_index
from pipeline.intent.homes import ObjectKey as HomeKey
from pipeline.intent.plan import EditKind
from pipeline.placement import NO_PLACEMENT, PlacedObject, compile_placement
from pipeline.slices import finish
from tests.commit.helpers import Work, bare_remote, cm, foreign_push

OWN = "live/team-a/configmaps/a.yaml"


def folder_of(files: dict[str, str]) -> FolderIndex:
    folder = FolderIndex("live")
    finish(folder.load({path: text.encode() for path, text in files.items()}))
    return folder


def change(
    name: str = "a", before: object = None, after: object = "same", listed: bool = False
) -> LiveChange:
    obj = cm(name)
    return LiveChange(
        "live",
        HomeKey("", "ConfigMap", "team-a", name),
        PlacedObject("", "v1", "configmaps", "ConfigMap", "team-a", name, {}),
        before,  # type: ignore[arg-type]
        obj if after == "same" else after,  # type: ignore[arg-type]
        listed=listed,
    )


def rendered(name: str = "a") -> bytes:
    return render_object(cm(name))


def test_the_pipelines_own_file_is_written_as_before() -> None:
    folder = folder_of({OWN: rendered().decode()})
    assert place(folder, OWN, rendered(), change(), NO_PLACEMENT) is None
    assert place(folder, OWN, None, change(after=None), NO_PLACEMENT) is None
    assert remembered(folder, change().key, OWN) is False


def test_a_canonical_path_holding_several_documents_is_a_users_file() -> None:
    folder = folder_of({OWN: f"{rendered().decode()}---\n{rendered('b').decode()}"})
    planned = place(folder, OWN, rendered(), change(after=cm("a", key="new")), NO_PLACEMENT)
    assert planned is not None
    assert planned.kind is EditKind.IN_PLACE
    assert remembered(folder, change().key, OWN) is True


def test_a_snapshot_leaves_a_users_file_as_it_is() -> None:
    folder = folder_of({"live/all.yaml": rendered().decode()})
    planned = place(folder, OWN, rendered(), change(after=cm("a", key="drift"), listed=True), NO_PLACEMENT)
    assert planned is not None
    assert planned.writes == ()


def test_an_object_without_a_home_goes_to_its_canonical_path_unless_a_kustomization_takes_it() -> None:
    assert place(folder_of({}), OWN, rendered(), change(), NO_PLACEMENT) is None
    assert place(folder_of({}), OWN, None, change(after=None), NO_PLACEMENT) is None, (
        "nothing to delete elsewhere"
    )
    beside = folder_of({"live/kustomization.yaml": "namespace: team-a\nresources: []\n"})
    planned = place(beside, OWN, rendered(), change(), NO_PLACEMENT)
    assert planned is not None
    assert [w.path for w in planned.writes] == ["live/configmap-a.yaml", "live/kustomization.yaml"]


def test_a_new_object_goes_where_the_targets_placement_template_says() -> None:
    placement = compile_placement({"v1/configmaps": "{namespace}/config/{name}.yaml"}, None)
    beside = folder_of({"live/kustomization.yaml": "namespace: team-a\nresources: []\n"})
    planned = place(beside, OWN, rendered(), change(), placement)
    assert planned is not None
    assert planned.path == "live/team-a/config/a.yaml"
    assert [w.path for w in planned.writes] == ["live/team-a/config/a.yaml", "live/kustomization.yaml"]
    assert remembered(folder_of({}), change().key, OWN, placed=True) is True


def test_a_refusal_is_raised_before_anything_is_written() -> None:
    folder = folder_of({"live/flux-system/gotk-components.yaml": rendered().decode()})
    with pytest.raises(IntentRefusal) as refused:
        place(folder, OWN, rendered(), change(after=cm("a", key="new")), NO_PLACEMENT)
    assert refused.value.reason is RefusalReason.OWNED_ELSEWHERE


@pytest.mark.parametrize(
    ("kind", "resource"),
    [
        ("ConfigMap", "configmaps"),
        ("Ingress", "ingresses"),
        ("NetworkPolicy", "networkpolicies"),
        ("Endpoints", "endpointses"),
    ],
)
def test_the_resource_kubernetes_guesses_for_a_kind(kind: str, resource: str) -> None:
    assert guess_resource(kind) == resource


def test_a_deletes_kind_is_found_in_the_index_by_its_resource() -> None:
    index = build_index(
        {
            "live/a.yaml": b"apiVersion: v1\nkind: Endpoints\nmetadata:\n  name: x\n  namespace: n\n",
            "live/b.yaml": b"apiVersion: v1\nkind: Service\nmetadata:\n  name: x\n  namespace: n\n",
        },
        "live",
    )
    folder = FolderIndex("live")
    folder.index = index
    assert kind_of(folder, "", "endpoints", "n", "x") == "Endpoints"
    assert kind_of(folder, "", "services", "n", "x") == "Service"
    assert kind_of(folder, "", "configmaps", "n", "x") == ""
    assert kind_of(folder, "apps", "services", "n", "x") == ""


def test_status_is_never_part_of_the_object_a_file_holds() -> None:
    assert live_object({"kind": "ConfigMap", "status": {"phase": "x"}}) == {"kind": "ConfigMap"}


class CountingStore:
    """An object store that counts blob reads; tree reads (their data starts with the first entry's
    mode, `100644 ` or `40000 `) are not counted."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.reads = 0

    def read(self, sha: bytes) -> bytes:
        data = self.store.read(sha)
        self.reads += not data.startswith((b"100644 ", b"40000 "))
        return data


async def test_the_home_index_follows_commits_reading_only_the_files_they_changed(tmp_path: Path) -> None:
    remote = bare_remote(tmp_path / "remote.git")
    for name in ("a", "b", "c"):
        foreign_push(remote, tmp_path, f"live/team-a/{name}.yaml", rendered(name).decode())
    foreign_push(remote, tmp_path, "elsewhere/x.yaml", rendered("x").decode())
    repo = LocalRepo.for_branch(tmp_path / "clones", "git", "main", str(remote), None)
    await repo.fetch()
    first = repo.read_commit(repo.remote_ref("main") or "").tree
    store = CountingStore(repo.objects)
    homes = BranchHomes()
    finish(homes.refresh(store, first, ["live"]))
    folder = homes.folder("live")
    assert folder is not None
    assert set(folder.files) == {f"live/team-a/{n}.yaml" for n in "abc"}
    assert store.reads == 3

    foreign_push(
        remote, tmp_path, "live/team-a/b.yaml", f"{rendered('b').decode()}---\n{rendered('d').decode()}"
    )
    await repo.fetch()
    second = repo.read_commit(repo.remote_ref("main") or "").tree
    store.reads = 0
    finish(homes.refresh(store, second, ["live"]))
    assert store.reads == 1, "only the changed file is read again"
    assert folder.index.candidates(HomeKey("", "ConfigMap", "team-a", "d"))[0].path == "live/team-a/b.yaml"
    finish(homes.refresh(store, first, ["live", "elsewhere"]))
    assert not folder.index.candidates(HomeKey("", "ConfigMap", "team-a", "d"))
    assert homes.folder("elsewhere") is not None
    finish(homes.refresh(store, first, ["elsewhere"]))
    assert homes.folder("live") is None


class OneFolder:
    """The `Homes` of a branch with one indexed target folder, `live`."""

    def __init__(self, folder: FolderIndex) -> None:
        self._folder = folder

    def folder(self, target_path: str) -> FolderIndex | None:
        return self._folder if target_path == "live" else None


def test_the_decider_records_changes_and_keeps_objects_only_for_files_edited_in_place() -> None:
    provider = ProviderSettings(name="git", url="/srv/git/state.git")
    settings = Settings(
        providers=[provider], targets=[TargetSettings(name="t1", provider="git", path="live")]
    )
    decider = Decider(settings, provider, "main")
    homes = OneFolder(folder_of({"live/all.yaml": f"{rendered('a').decode()}---\n{rendered('b').decode()}"}))
    w = Work()
    item = w.update(cm("a", key="x"), rv="2")
    staged = decider.write(item, item.body, homes)
    assert isinstance(staged, Staged)
    assert staged.change is not None
    assert staged.change.key == HomeKey("", "ConfigMap", "team-a", "a")
    assert staged.change.items == (item,)
    assert decider.seen.get(OWN) == cm("a", key="x"), "its file is edited in place: kept for next time"

    item = w.update(cm("c"), rv="3")
    decider.write(item, item.body, homes)
    assert decider.seen.get("live/team-a/configmaps/c.yaml") is None, "no home, no kustomization"

    item = w.delete("b", rv="4")
    deleted = decider.write(item, item.body, homes)
    assert isinstance(deleted, Staged)
    assert deleted.change is not None
    assert (deleted.change.key.kind, deleted.change.after) == ("ConfigMap", None)


def test_the_sweep_candidates_are_what_the_snapshot_did_not_list_by_namespace_and_name() -> None:
    """`listed` holds the names per namespace: a namespaced document is a candidate unless its
    namespace lists its name; one without a namespace only under the cluster-wide scope, and only
    when no namespace lists its name. The candidates come sorted."""

    def doc(name: str, namespace: str | None) -> str:
        where = f"  namespace: {namespace}\n" if namespace else ""
        return f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n{where}"

    folder = folder_of(
        {
            "live/a.yaml": doc("kept", "team-a"),
            "live/b.yaml": doc("gone", "team-a"),
            "live/c.yaml": doc("also-gone", "team-b"),
            "live/d.yaml": doc("kept", None),
            "live/e.yaml": doc("bare", None),
        }
    )
    listed = {"team-a": {"kept"}, "team-b": {"other"}}
    assert unlisted_homes(folder, "", "configmaps", "", listed) == [
        HomeKey("", "ConfigMap", "", "bare"),
        HomeKey("", "ConfigMap", "team-a", "gone"),
        HomeKey("", "ConfigMap", "team-b", "also-gone"),
    ]
    assert unlisted_homes(folder, "", "configmaps", "team-a", listed) == [
        HomeKey("", "ConfigMap", "team-a", "gone")
    ]
    assert unlisted_homes(folder, "", "configmaps", "", {}) == sorted(folder.index.homes)
    assert unlisted_homes(folder, "apps", "deployments", "", {}) == []
