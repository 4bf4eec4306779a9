"""The `.sops.yaml` the commit worker writes into a target folder with its first encrypted file,
as gitops-reverser does: real `sops`, real age keys, a real bare Git remote."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import yaml

from pipeline.commit.branch import BranchWorker
from pipeline.commit.git.repo import LocalRepo
from pipeline.config import EncryptionSettings, ProviderSettings, Settings, TargetSettings
from pipeline.content.sanitize import sanitize, sanitized_json
from pipeline.sealing.sealer import find_sops
from tests.commit.helpers import Work, bare_remote, cm, files, foreign_push
from tests.secrets.keys import AgeKey, sops_decrypt
from tests.secrets.test_readable_fields import SECRETS, sealed_write, sealer


def _worker(tmp_path: Path, remote: Path, encryption: EncryptionSettings) -> BranchWorker:
    provider = ProviderSettings(name="git", url=str(remote), commit_window_s=0, push_cooldown_s=0)
    config = Settings(
        workdir=tmp_path / "work",
        providers=[provider],
        targets=[TargetSettings(name="t1", provider="git", path="live", encryption=encryption)],
    )
    repo = LocalRepo.for_branch(tmp_path / "clones", "git", "main", str(remote), None)
    return BranchWorker(config, provider, "main", repo, lambda _: None)


async def _sealed(key: AgeKey) -> bytes:
    obj = sanitize(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "db", "namespace": "shop"},
            "data": {"p": "eA=="},
        }
    )
    return await sealer(key).seal(obj, sanitized_json(obj), SECRETS)


async def test_the_first_encrypted_file_brings_creation_rules_that_sops_uses(tmp_path: Path) -> None:
    key, other = AgeKey.generate(), AgeKey.generate()
    remote = bare_remote(tmp_path / "remote.git")
    worker = _worker(tmp_path, remote, EncryptionSettings(age_recipients=[key.recipient, other.recipient]))
    work = Work()
    await worker.sync()
    await worker.handle(work.create(cm("plain", namespace="shop"), scope="shop"))
    await worker.handle(sealed_write(work, "db", await _sealed(key)))
    assert await worker.stop()
    tree = files(remote)
    assert "live/.sops.yaml" in tree
    rules = yaml.safe_load(tree["live/.sops.yaml"])["creation_rules"]
    assert rules[0]["key_groups"] == [{"age": sorted([key.recipient, other.recipient])}]

    # a person adds a Secret beside them with plain `sops`: the rules encrypt it to the same keys
    folder = tmp_path / "checkout" / "live" / "shop" / "secrets"
    folder.mkdir(parents=True)
    (tmp_path / "checkout" / "live" / ".sops.yaml").write_text(tree["live/.sops.yaml"])
    mine = folder / "added.sops.yaml"
    mine.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Secret", "data": {"token": "c2VjcmV0"}}))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    argv = [find_sops(), "encrypt", "--in-place", str(mine)]
    await asyncio.to_thread(subprocess.run, argv, check=True, cwd=folder, env=env)
    encrypted = mine.read_bytes()
    assert b"c2VjcmV0" not in encrypted
    assert sops_decrypt(encrypted, other, tmp_path)["data"] == {"token": "c2VjcmV0"}
    decrypted = sops_decrypt(tree["live/shop/secrets/db.sops.yaml"].encode(), key, tmp_path)
    assert decrypted["data"] == {"p": "eA=="}


async def test_a_rules_file_of_someone_else_stays_and_a_sops_config_target_writes_none(
    tmp_path: Path,
) -> None:
    key = AgeKey.generate()
    remote = bare_remote(tmp_path / "remote.git")
    mine = "# mine\ncreation_rules: []\n"
    foreign_push(remote, tmp_path, "live/.sops.yaml", mine)
    worker = _worker(tmp_path, remote, EncryptionSettings(age_recipients=[key.recipient]))
    work = Work()
    await worker.sync()
    await worker.handle(sealed_write(work, "db", await _sealed(key)))
    assert await worker.stop()
    assert files(remote)["live/.sops.yaml"].strip() == mine.strip()

    config = tmp_path / "sops.yaml"
    config.write_text(yaml.safe_dump({"creation_rules": [{"age": key.recipient}]}))
    other_remote = bare_remote(tmp_path / "other.git")
    worker = _worker(tmp_path / "o", other_remote, EncryptionSettings(sops_config=config))
    work = Work()
    await worker.sync()
    await worker.handle(sealed_write(work, "db", await _sealed(key)))
    await worker.handle(work.create(cm("plain", namespace="shop"), scope="shop"))
    assert await worker.stop()
    assert sorted(files(other_remote)) == [
        "live/shop/configmaps/plain.yaml",
        "live/shop/secrets/db.sops.yaml",
    ]
