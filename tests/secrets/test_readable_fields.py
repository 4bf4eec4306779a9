"""What a sealed Secret leaves readable, with the real `sops` binary and real age keys.

kapp's `kapp.k14s.io/original` and kubectl's last-applied-configuration hold a copy of the whole
applied Secret; other annotations, labels and unknown fields can hold anything. The sealer must
keep every value of `data`/`stringData` out of the plaintext of its document, and the commit worker
must refuse a document (one the landed sealer wrote, or a hand-made record) that has any plaintext
field outside the readable ones, writing nothing.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import logging
import os
import string
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from pipeline.codec.branch_work import WorkAuthor
from pipeline.codec.object_state import ObjectState
from pipeline.commit.branch import BranchWorker
from pipeline.commit.git.repo import LocalRepo
from pipeline.commit.rebuild import desired_files
from pipeline.config import EncryptionSettings, ProviderSettings, Settings, TargetSettings
from pipeline.content.sanitize import sanitize, sanitized_json
from pipeline.models import GroupResource
from pipeline.sealing import (
    DIGEST_ANNOTATION,
    READABLE_ANNOTATIONS,
    PlaintextFieldError,
    SealedDocument,
    Sealer,
    content_digest_of,
    sealer_for,
)
from pipeline.sealing.readable import plaintext_fields
from pipeline.sealing.sealer import find_sops
from tests.commit.helpers import Work, bare_remote, cm, files, git
from tests.secrets.keys import DIGEST_KEY, AgeKey, sops_decrypt

SECRETS = GroupResource("", "secrets")
PASSWORD = "hunter2 is my password!"
TOKEN = "tok/3f9a+c0ffee=="
ENCODED = base64.b64encode(PASSWORD.encode()).decode()
KAPP_ORIGINAL = "kapp.k14s.io/original"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
# The `--encrypted-regex` of the landed sealer: what a watch stage of that version put on the log.
LANDED_REGEX = "^(data|stringData|binaryData|spec)$"


def sealer(key: AgeKey) -> Sealer:
    target = TargetSettings(
        name="t1", provider="git", encryption=EncryptionSettings(age_recipients=[key.recipient])
    )
    found = sealer_for(target, {"REVERSER_SECRETS_DIGEST_KEY": DIGEST_KEY})
    assert found is not None
    return found


def leaks(content: bytes, *values: str) -> list[str]:
    """The values (raw or base64, as the API carries them) that `content` holds in plaintext."""
    return [v for v in values if v.encode() in content or base64.b64encode(v.encode()) in content]


def hostile_secret() -> dict[str, Any]:
    """A Secret as kapp applies it, with last-applied, a readable annotation and hostile ones."""
    applied = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "db", "namespace": "shop"},
        "type": "Opaque",
        "data": {"password": ENCODED},
        "stringData": {"token": TOKEN},
    }
    return {
        **applied,
        "metadata": {
            "name": "db",
            "namespace": "shop",
            "uid": "0b6c4e0e-1111-2222-3333-444455556666",
            "resourceVersion": "7",
            "labels": {"app": "shop", "kapp.k14s.io/app": "1700000000"},
            "annotations": {
                KAPP_ORIGINAL: json.dumps(applied),
                "kapp.k14s.io/original-diff-md5": "58e0494c51d30eb3494f7c9198986bb9",
                LAST_APPLIED: json.dumps(applied),
                "meta.helm.sh/release-name": "shop",
                # an allowlisted key whose value is not the name it holds, and a forged digest
                "kubernetes.io/service-account.name": ENCODED,
                DIGEST_ANNOTATION: "hmac-sha256:" + "0" * 64,
                "example.com/note": f"the password is {PASSWORD}",
                "evil\nkey\u202e": TOKEN,
            },
        },
    }


async def test_kapp_last_applied_and_hostile_annotations_never_reach_the_sealed_document(
    tmp_path: Path,
) -> None:
    key = AgeKey.generate()
    raw = hostile_secret()
    # sanitized as the watch stage does (which already drops last-applied), and raw: the rule
    # holds on its own
    for obj in (sanitize(raw), raw):
        sealed = await sealer(key).seal(obj, sanitized_json(obj), SECRETS)
        assert leaks(sealed, PASSWORD, TOKEN, ENCODED) == []
        visible = yaml.safe_load(sealed)
        assert sorted(visible["metadata"]) == ["annotations", "labels", "name", "namespace"]
        assert sorted(visible["metadata"]["annotations"]) == [
            "meta.helm.sh/release-name",
            DIGEST_ANNOTATION,
        ]
        assert visible["metadata"]["annotations"]["meta.helm.sh/release-name"] == "shop"
        assert visible["metadata"]["annotations"][DIGEST_ANNOTATION] == sealer(key).digest(
            sanitized_json(obj)
        )
        assert visible["type"].startswith("ENC[AES256_GCM,")
        assert all(v.startswith("ENC[") for v in visible["metadata"]["labels"].values())
        decrypted = sops_decrypt(sealed, key, tmp_path)
        assert decrypted["data"] == {"password": ENCODED}
        assert decrypted.get("stringData") == obj.get("stringData")
        assert decrypted["type"] == "Opaque"
        assert decrypted["metadata"]["labels"] == {"app": "shop", "kapp.k14s.io/app": "1700000000"}
        assert KAPP_ORIGINAL not in decrypted["metadata"]["annotations"]


def landed_seal(obj: dict[str, Any], key: AgeKey) -> bytes:
    """`obj` encrypted by the real `sops` exactly as the landed sealer ran it (annotations plaintext)."""
    argv = [find_sops(), "encrypt", "--input-type", "json", "--output-type", "yaml", "--age", key.recipient]
    argv += ["--encrypted-regex", LANDED_REGEX, "--filename-override", "shop/secrets/db.sops.yaml"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent"}
    return subprocess.run(
        [*argv, "/dev/stdin"], input=json.dumps(obj).encode(), capture_output=True, env=env, check=True
    ).stdout


def skipped(reason: str) -> float:
    return REGISTRY.get_sample_value("reverser_commit_skipped_total", {"reason": reason}) or 0.0


def sealed_write(work: Work, name: str, document: bytes) -> Any:
    """A CREATE of Secret `shop/name` whose record carries `document` as it came off the log."""
    item = work.create({"metadata": {"name": name, "namespace": "shop"}}, resource="secrets", scope="shop")
    return dataclasses.replace(item, body=dataclasses.replace(item.body, object_json=document))


async def test_worker_refuses_a_sealed_document_with_a_plaintext_field_and_writes_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    key = AgeKey.generate()
    obj = sanitize(hostile_secret())
    from_landed_sealer = landed_seal(obj, key)
    assert leaks(from_landed_sealer, PASSWORD), "the landed sealer left kapp's copy readable"
    tampered = yaml.safe_load(await sealer(key).seal(obj, sanitized_json(obj), SECRETS))
    tampered["note"] = PASSWORD
    hand_made = yaml.safe_dump(tampered).encode()
    good = await sealer(key).seal(obj, sanitized_json(obj), SECRETS)
    for document, field in (
        (from_landed_sealer, f'metadata.annotations["{KAPP_ORIGINAL}"]'),
        (hand_made, "note"),
    ):
        with pytest.raises(PlaintextFieldError, match="outside the readable fields") as refused:
            SealedDocument.parse(document)
        assert field in plaintext_fields(yaml.safe_load(document))
        assert f"readable fields: {plaintext_fields(yaml.safe_load(document))[0]}" in str(refused.value)
        assert leaks(str(refused.value).encode(), PASSWORD, TOKEN, ENCODED) == []
        assert content_digest_of(document) is None, "such a file in Git counts as changed: replaced"

    remote = bare_remote(tmp_path / "remote.git")
    provider = ProviderSettings(name="git", url=str(remote), commit_window_s=0, push_cooldown_s=0)
    encryption = EncryptionSettings(age_recipients=[key.recipient])
    config = Settings(
        workdir=tmp_path / "work",
        providers=[provider],
        targets=[TargetSettings(name="t1", provider="git", path="live", encryption=encryption)],
    )
    repo = LocalRepo.for_branch(tmp_path / "clones", "git", "main", str(remote), None)
    worker = BranchWorker(config, provider, "main", repo, lambda _: None)
    before = skipped("sealed_plaintext")
    caplog.set_level(logging.WARNING, logger="pipeline.commit.branch")
    work = Work()
    await worker.sync()
    for item in (
        sealed_write(work, "landed", from_landed_sealer),
        sealed_write(work, "forged", hand_made),
        sealed_write(work, "good", good),
        work.create(cm("plain", namespace="shop"), scope="shop"),
    ):
        await worker.handle(item)
    assert await worker.stop()

    assert sorted(files(remote)) == [
        "live/.sops.yaml",
        "live/shop/configmaps/plain.yaml",
        "live/shop/secrets/good.sops.yaml",
    ]
    assert skipped("sealed_plaintext") - before == 2
    objects = git(remote, "cat-file", "--batch-all-objects", "--batch-check")
    contents = "".join(git(remote, "cat-file", "-p", line.split()[0]) for line in objects.splitlines())
    assert leaks(contents.encode(), PASSWORD, TOKEN, ENCODED) == []
    refusals = [r.getMessage() for r in caplog.records if "readable fields" in r.getMessage()]
    assert len(refusals) == 2, refusals
    assert refusals[0].count("metadata.") == 1
    assert "readable fields: note)" in refusals[1]
    assert leaks("\n".join(refusals).encode(), PASSWORD, TOKEN, ENCODED) == []


# A data value as the property test draws it: base64-like, so no readable field (a name, a label
# value) could hold it, and with a marker no key of the alphabets below contains.
DATA_VALUES = st.text(string.ascii_letters + string.digits, min_size=8, max_size=24).map(
    lambda s: f"S3CR3T+{s}="
)
KEYS = st.text(string.ascii_lowercase + string.digits + "-._/", min_size=1, max_size=20)
ANY_TEXT = st.text(max_size=30)
KNOWN_ANNOTATIONS = sorted({*READABLE_ANNOTATIONS, KAPP_ORIGINAL, LAST_APPLIED})
PAYLOAD_FIELDS = ("apiVersion", "kind", "metadata", "data", "stringData")


@st.composite
def hostile_secrets(draw: st.DrawFn) -> tuple[dict[str, Any], list[str]]:
    """A Secret with random data and random annotations, labels and unknown top-level fields,
    any of which may hold a copy of a data value or of the whole data."""
    data = draw(st.dictionaries(KEYS, DATA_VALUES, min_size=1, max_size=4))
    string_data = draw(st.dictionaries(KEYS, DATA_VALUES, max_size=3))
    values = [*data.values(), *string_data.values()]
    copy = st.one_of(
        st.sampled_from(values),
        st.just(json.dumps({"data": data, "stringData": string_data})),
        st.tuples(ANY_TEXT, st.sampled_from(values)).map("".join),
    )
    value = st.one_of(copy, ANY_TEXT)
    annotation_keys = st.one_of(st.sampled_from(KNOWN_ANNOTATIONS), ANY_TEXT.filter(bool))
    extra_keys = st.text(min_size=1, max_size=12).filter(lambda k: k not in PAYLOAD_FIELDS)
    nested = st.one_of(value, st.lists(value, max_size=3), st.dictionaries(KEYS, value, max_size=3))
    obj = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "db",
            "namespace": "shop",
            "labels": draw(st.dictionaries(KEYS, value, max_size=4)),
            "annotations": draw(st.dictionaries(annotation_keys, value, max_size=6)),
        },
        "data": data,
        "stringData": string_data,
        **draw(st.dictionaries(extra_keys, nested, max_size=3)),
    }
    return obj, values


@pytest.fixture(scope="module")
def property_key() -> AgeKey:
    return AgeKey.generate()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=hostile_secrets())
def test_no_data_value_is_ever_plaintext_in_what_is_sealed_and_accepted(
    case: tuple[dict[str, Any], list[str]], property_key: AgeKey, tmp_path: Path
) -> None:
    obj, values = case
    sealed = asyncio.run(sealer(property_key).seal(obj, sanitized_json(obj), SECRETS))
    assert leaks(sealed, *values) == []
    assert SealedDocument.parse(sealed).digest is not None, "the worker accepts it as it is"
    decrypted = sops_decrypt(sealed, property_key, tmp_path)
    assert (decrypted["data"], decrypted.get("stringData", {})) == (obj["data"], obj["stringData"])


CIPHER = "ENC[AES256_GCM,data:aGk=,iv:MTIzNDU2Nzg5MDEy,tag:MTIzNDU2Nzg5MDEyMzQ1Ng==,type:str]"


@pytest.mark.parametrize(
    ("tree", "refused"),
    [
        ({"data": {"a": CIPHER, "b": None, "c": ""}, "kind": "Secret", "apiVersion": "v1"}, []),
        ({"data": {"a": "ENC[but plaintext]"}}, ["data.a"]),
        ({"data": {"a": [CIPHER, True]}}, ["data.a[1]"]),
        ({"type": "Opaque"}, ["type"]),
        ({"kind": "Secret\nx"}, ["kind"]),
        ({"metadata": {"finalizers": CIPHER}}, ["metadata.finalizers"]),
        (
            {"metadata": {"labels": {"app": "shop", "ok": CIPHER, "bad key!": CIPHER}}},
            [
                "metadata.labels.app",
                'metadata.labels["bad key!"]',
            ],
        ),
        (
            {"metadata": {"annotations": {KAPP_ORIGINAL: CIPHER, "meta.helm.sh/release-name": CIPHER}}},
            [f'metadata.annotations["{KAPP_ORIGINAL}"]'],
        ),
        (
            {"metadata": {"annotations": {DIGEST_ANNOTATION: "hmac-sha256:not-hex"}}},
            [f'metadata.annotations["{DIGEST_ANNOTATION}"]'],
        ),
        ({"metadata": "db"}, ["metadata"]),
        ({"metadata": {"name": "db", "namespace": "shop"}, "sops": {"mac": "plain"}}, []),
    ],
)
def test_the_worker_check_names_every_plaintext_field_outside_the_readable_ones(
    tree: dict[str, Any], refused: list[str]
) -> None:
    assert plaintext_fields(tree) == refused


async def test_a_rebuild_from_object_state_refuses_a_document_with_plaintext_fields() -> None:
    """`reverser replay branch --from object-state` writes stored documents back: one stored by the
    landed sealer (kapp's copy readable) must not return to Git."""
    key = AgeKey.generate()
    obj = sanitize(hostile_secret())
    stored = {
        "leaky": landed_seal(obj, key),
        "good": await sealer(key).seal(obj, sanitized_json(obj), SECRETS),
    }
    author = WorkAuthor("RESOLVED", "alice", "Alice", "alice@example.com", "exact", "user")
    states = [
        ObjectState(
            "t1",
            "git",
            "main",
            "live",
            "default",
            "",
            "v1",
            "secrets",
            "shop",
            name,
            "u-" + name,
            "7",
            document,
            True,
            b"",
            author,
            0,
            offset,
            0,
        )
        for offset, (name, document) in enumerate(stored.items())
    ]
    desired = desired_files(TargetSettings(name="t1", provider="git", path="live"), states)
    assert list(desired.files) == ["live/shop/secrets/good.sops.yaml"]
    assert len(desired.refused) == 1
    assert desired.refused[0].startswith("t1//secrets/shop/leaky: plaintext outside the readable fields: ")
    assert leaks(desired.refused[0].encode(), PASSWORD, TOKEN, ENCODED) == []
