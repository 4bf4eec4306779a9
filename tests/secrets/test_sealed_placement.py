"""Sealed (SOPS) objects placed by a target's `placement` templates (issue 29): real `sops`, real age
keys, a real bare Git remote; every step is a fresh worker, so each reads the branch as it is."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from pipeline.codec.branch_work import ResyncBegin, ResyncChunk, ResyncEnd, ResyncObject
from pipeline.codec.object_state import ObjectState
from pipeline.commit.branch import BranchWorker
from pipeline.commit.decide import SNAPSHOT_AUTHOR
from pipeline.commit.git.repo import LocalRepo
from pipeline.commit.inplace import place
from pipeline.commit.rebuild import desired_files
from pipeline.config import EncryptionSettings, ProviderSettings, Settings, TargetSettings
from pipeline.content.sanitize import sanitize, sanitized_json
from pipeline.intent.homes import FolderIndex
from pipeline.intent.plan import IntentPlan
from pipeline.slices import finish
from tests.commit.helpers import Work, bare_remote, files, foreign_push, git
from tests.secrets.keys import AgeKey, sops_decrypt
from tests.secrets.test_readable_fields import SECRETS, sealed_write, sealer

PLACEMENT = {"by_type": {"v1/secrets": "{namespace}/creds/{name}.yaml"}}
PLACED = "live/shop/creds/db.sops.yaml"
CANONICAL = "live/shop/secrets/db.sops.yaml"


def _target(key: AgeKey, prune: str = "OnEvent") -> TargetSettings:
    return TargetSettings(
        name="t1",
        provider="git",
        path="live",
        encryption=EncryptionSettings(age_recipients=[key.recipient]),
        placement=PLACEMENT,
        prune=prune,
    )


def _worker(tmp_path: Path, remote: Path, key: AgeKey, prune: str = "OnEvent") -> BranchWorker:
    provider = ProviderSettings(name="git", url=str(remote), commit_window_s=0, push_cooldown_s=0)
    target = _target(key, prune)
    config = Settings(workdir=tmp_path / "work", providers=[provider], targets=[target])
    repo = LocalRepo.for_branch(tmp_path / "clones", "git", "main", str(remote), None)
    return BranchWorker(config, provider, "main", repo, lambda _: None)


async def _sealed(key: AgeKey, password: str) -> bytes:
    obj = sanitize(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "db", "namespace": "shop"},
            "data": {"p": password},
        }
    )
    return await sealer(key).seal(obj, sanitized_json(obj), SECRETS)


async def _run(tmp_path: Path, remote: Path, key: AgeKey, *items: Any, prune: str = "OnEvent") -> None:
    worker = _worker(tmp_path, remote, key, prune)
    await worker.sync()
    for item in items:
        await worker.handle(item)
    assert await worker.stop()


async def test_a_secret_lands_in_its_own_placed_file_covered_by_the_creation_rules(tmp_path: Path) -> None:
    key = AgeKey.generate()
    remote = bare_remote(tmp_path / "remote.git")
    work = Work()
    await _run(tmp_path / "1", remote, key, sealed_write(work, "db", await _sealed(key, "eA==")))
    tree = files(remote)
    assert sorted(tree) == ["live/.sops.yaml", PLACED], "no canonical copy; `.sops` joins the name"
    assert sops_decrypt(tree[PLACED].encode(), key, tmp_path)["data"] == {"p": "eA=="}
    rules = yaml.safe_load(tree["live/.sops.yaml"])["creation_rules"]
    assert re.fullmatch(rules[0]["path_regex"], PLACED), "the creation rules cover the placed file"

    # the same plaintext sealed again (other ciphertext, same digest) commits nothing
    tip = git(remote, "rev-parse", "main")
    await _run(tmp_path / "2", remote, key, sealed_write(work, "db", await _sealed(key, "eA==")))
    assert git(remote, "rev-parse", "main") == tip

    # a new value rewrites the placed file whole, still the only document in it
    await _run(tmp_path / "3", remote, key, sealed_write(work, "db", await _sealed(key, "eQ==")))
    tree = files(remote)
    assert sorted(tree) == ["live/.sops.yaml", PLACED]
    assert sops_decrypt(tree[PLACED].encode(), key, tmp_path)["data"] == {"p": "eQ=="}
    assert git(remote, "show", "--name-only", "--format=", "main").split() == [PLACED]

    # its delete removes the placed file
    delete = work.delete("db", namespace="shop", resource="secrets", scope="shop")
    await _run(tmp_path / "4", remote, key, delete)
    assert sorted(files(remote)) == ["live/.sops.yaml"]


async def test_a_placed_path_holding_a_users_file_is_refused_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    """A sealed document never joins another file: the template's path is taken, so nothing is
    written (no second copy at the canonical path either)."""
    key = AgeKey.generate()
    remote = bare_remote(tmp_path / "remote.git")
    notes = "# the team's notes\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\n"
    foreign_push(remote, tmp_path, PLACED, notes)
    tip = git(remote, "rev-parse", "main")
    await _run(tmp_path / "1", remote, key, sealed_write(Work(), "db", await _sealed(key, "eA==")))
    assert git(remote, "rev-parse", "main") == tip
    assert files(remote) == {PLACED: notes}


async def test_a_rebuild_from_object_state_writes_a_placed_secret_where_it_lives(tmp_path: Path) -> None:
    """`reverser replay branch --from object-state` places a sealed object as the worker does: its
    placed file, rewritten whole when its plaintext changed, never a canonical copy beside it."""
    key = AgeKey.generate()
    remote = bare_remote(tmp_path / "remote.git")
    await _run(tmp_path / "1", remote, key, sealed_write(Work(), "db", await _sealed(key, "eA==")))
    folder = FolderIndex("live")
    finish(folder.load({path: data.encode() for path, data in files(remote).items()}))
    target = _target(key)

    def rebuilt(document: bytes) -> IntentPlan | None:
        state = ObjectState(
            "t1", "git", "main", "live", "default", "", "v1", "secrets", "shop", "db", "u-db", "7",
            document, True, b"", SNAPSHOT_AUTHOR, 0, 0, 0,
        )  # fmt: skip
        desired = desired_files(target, [state], lambda _state: True)
        assert list(desired.files) == [CANONICAL]
        content, _ = desired.files[CANONICAL]
        return place(folder, CANONICAL, content, desired.changes[CANONICAL], target.placement_policy)

    same = rebuilt(await _sealed(key, "eA=="))
    assert same is not None
    assert same.writes == (), "the same plaintext, sealed again, writes nothing"
    changed = rebuilt(await _sealed(key, "eQ=="))
    assert changed is not None
    assert [write.path for write in changed.writes] == [PLACED]
    data = changed.writes[0].data
    assert data is not None
    assert sops_decrypt(data, key, tmp_path)["data"] == {"p": "eQ=="}


def _snapshot(work: Work, epoch: int, sealed: list[bytes]) -> list[Any]:
    """A snapshot of the Secrets of `shop` whose objects are these SOPS documents (all named db)."""
    scope = {"resource": "secrets", "scope": "shop"}
    objects = tuple(ResyncObject("shop", "db", "u-db", "9", document) for document in sealed)
    return [
        work._item(ResyncBegin(epoch, "20"), **scope),
        work._item(ResyncChunk(epoch, 0, objects), **scope),
        work._item(ResyncEnd(epoch, 1, len(objects), "20"), **scope),
    ]


async def test_a_snapshot_keeps_a_listed_placed_secret_and_sweeps_it_once_gone(tmp_path: Path) -> None:
    key = AgeKey.generate()
    remote = bare_remote(tmp_path / "remote.git")
    work = Work()
    await _run(tmp_path / "1", remote, key, sealed_write(work, "db", await _sealed(key, "eA==")))
    tip = git(remote, "rev-parse", "main")
    listed = _snapshot(work, 1, [await _sealed(key, "eA==")])
    await _run(tmp_path / "2", remote, key, *listed, prune="Always")
    assert git(remote, "rev-parse", "main") == tip, "listed with the same plaintext: no copy, no rewrite"

    # deleted while nothing watched: the next snapshot under prune Always removes the placed file
    await _run(tmp_path / "3", remote, key, *_snapshot(work, 2, []), prune="Always")
    assert sorted(files(remote)) == ["live/.sops.yaml"]
