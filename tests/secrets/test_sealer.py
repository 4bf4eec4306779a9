"""The sealer against the real `sops` binary and real age keys: what a user decrypts, what the
worker can read without keys, and the refusals."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import EncryptionSettings, TargetSettings
from pipeline.content.sanitize import sanitize, sanitized_json
from pipeline.models import GroupResource
from pipeline.sealing import (
    DIGEST_ANNOTATION,
    SealedDocument,
    SealedDocumentError,
    SealingError,
    content_digest_of,
    sealer_for,
)
from tests.secrets.keys import DIGEST_KEY, AgeKey, sops_decrypt

SECRETS = GroupResource("", "secrets")
PASSWORD = "hunter2-plain"
DIGEST_ENV = {"REVERSER_SECRETS_DIGEST_KEY": DIGEST_KEY}


def secret(value: str = PASSWORD) -> dict[str, Any]:
    return sanitize(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "db", "namespace": "shop", "uid": "u1", "resourceVersion": "7"},
            "type": "Opaque",
            "data": {"password": base64.b64encode(value.encode()).decode()},
        }
    )


def target(encryption: EncryptionSettings | None) -> TargetSettings:
    return TargetSettings(name="t", provider="git", encryption=encryption)


async def seal(key: AgeKey, obj: dict[str, Any]) -> bytes:
    sealer = sealer_for(target(EncryptionSettings(age_recipients=[key.recipient])), DIGEST_ENV)
    assert sealer is not None
    return await sealer.seal(obj, sanitized_json(obj), SECRETS)


async def test_sealed_secret_decrypts_with_the_age_key_and_hides_the_value(tmp_path: Path) -> None:
    key = AgeKey.generate()
    obj = secret()
    sealed = await seal(key, obj)
    encoded = obj["data"]["password"].encode()
    assert PASSWORD.encode() not in sealed
    assert encoded not in sealed
    decrypted = sops_decrypt(sealed, key, tmp_path)
    assert base64.b64decode(decrypted["data"]["password"]).decode() == PASSWORD
    assert decrypted["metadata"]["name"] == "db"
    assert decrypted["type"] == "Opaque"
    assert decrypted["metadata"]["annotations"][DIGEST_ANNOTATION].startswith("hmac-sha256:")


async def test_another_key_cannot_decrypt(tmp_path: Path) -> None:
    sealed = await seal(AgeKey.generate(), secret())
    with pytest.raises(AssertionError):
        sops_decrypt(sealed, AgeKey.generate(), tmp_path)


async def test_digest_is_stable_for_equal_content_and_differs_for_changes() -> None:
    key = AgeKey.generate()
    first, again, changed = await seal(key, secret()), await seal(key, secret()), await seal(key, secret("x"))
    assert first != again, "sops output is not deterministic, which is why the digest exists"
    assert content_digest_of(first) == content_digest_of(again)
    assert content_digest_of(first) != content_digest_of(changed)


def test_plaintext_and_partly_encrypted_documents_are_refused() -> None:
    with pytest.raises(SealedDocumentError, match="no sops metadata"):
        SealedDocument.parse(b"apiVersion: v1\nkind: Secret\ndata: {password: aGk=}\n")
    leaky = b"data: {password: aGk=}\nsops: {mac: 'ENC[x]', age: [{recipient: r}]}\n"
    with pytest.raises(SealedDocumentError, match=r"readable fields: data\.password$") as refused:
        SealedDocument.parse(leaky)
    assert "aGk=" not in str(refused.value)
    assert content_digest_of(b"not: [yaml") is None


def test_missing_digest_key_names_the_variable_not_a_value() -> None:
    recipient = AgeKey.generate().recipient
    settings = target(EncryptionSettings(age_recipients=[recipient], digest_key_env="MY_KEY"))
    with pytest.raises(SealingError, match="MY_KEY"):
        sealer_for(settings, {"MY_KEY": "short"})
    assert sealer_for(target(None), {}) is None


def test_encryption_needs_a_recipient() -> None:
    with pytest.raises(ValueError, match="age_recipients, sops_config or age_key_secret"):
        EncryptionSettings()
    with pytest.raises(ValueError, match="age_recipients"):
        EncryptionSettings(age_recipients=["not-a-recipient"])


async def test_recipients_from_a_sops_config(tmp_path: Path) -> None:
    key = AgeKey.generate()
    config = tmp_path / ".sops.yaml"
    config.write_text(
        f"creation_rules:\n- path_regex: .*\\.sops\\.yaml$\n  age: {key.recipient}\n", encoding="utf-8"
    )
    sealer = sealer_for(target(EncryptionSettings(sops_config=config)), DIGEST_ENV)
    assert sealer is not None
    sealed = await sealer.seal(secret(), sanitized_json(secret()), SECRETS)
    assert base64.b64decode(sops_decrypt(sealed, key, tmp_path)["data"]["password"]).decode() == PASSWORD


async def test_sops_failure_is_a_sealing_error_without_content(tmp_path: Path) -> None:
    config = tmp_path / ".sops.yaml"
    config.write_text("creation_rules:\n- path_regex: ^nothing-matches$\n  age: age1x\n", encoding="utf-8")
    sealer = sealer_for(target(EncryptionSettings(sops_config=config)), DIGEST_ENV)
    assert sealer is not None
    with pytest.raises(SealingError, match="sops exited") as failed:
        await sealer.seal(secret(), sanitized_json(secret()), SECRETS)
    assert PASSWORD not in str(failed.value)
