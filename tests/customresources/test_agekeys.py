"""gitops-reverser's SOPS key setup: which Secret a GitTarget names, what its entries mean, and a
key Secret that yields nothing stalling that target only (real age keys from pyrage)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

import pyrage
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from pipeline.config import Settings, TargetSettings
from pipeline.customresources.agekeys import (
    BACKUP_WARNING_ANNOTATION,
    RECIPIENT_ANNOTATION,
    AgeKeyError,
    KeyResolution,
    KeySource,
    dated_key_name,
    generated_secret,
    key_source,
    recipients_of,
)
from pipeline.customresources.compile import ClusterReads, compile_resources
from pipeline.customresources.export import ExportError, export_resources
from pipeline.customresources.objects import Kind, ObjectRef, parse_object
from pipeline.sealing import SealingError, sealer_for
from pipeline.sealing.sopsrules import sops_rules, sops_rules_path

QUICKSTART = """
apiVersion: configbutler.ai/v1alpha3
kind: GitProvider
metadata: {name: example-provider, namespace: default}
spec:
  url: https://git.example.com/team/state.git
  allowedBranches: ["*"]
---
apiVersion: configbutler.ai/v1alpha3
kind: GitTarget
metadata: {name: example-target, namespace: default}
spec:
  providerRef: {name: example-provider}
  branch: main
  path: live-cluster
  encryption:
    provider: sops
    age:
      enabled: true
      recipients: {extractFromSecret: true, generateWhenMissing: true}
    secretRef: {name: sops-age-key}
---
apiVersion: configbutler.ai/v1alpha3
kind: GitTarget
metadata: {name: plain, namespace: default}
spec:
  providerRef: {name: example-provider}
  branch: main
  path: plain
"""
KEY = "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p"
SOURCE = KeySource("default", "sops-age-key", generate=True)
TARGET = ObjectRef(Kind.GIT_TARGET, "default", "example-target")


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _objects(text: str = QUICKSTART) -> list[Any]:
    return [parse_object(document) for document in yaml.safe_load_all(text)]


def test_every_agekey_entry_gives_its_public_key_and_nothing_else_is_read() -> None:
    first, second = pyrage.x25519.Identity.generate(), pyrage.x25519.Identity.generate()
    data = {
        "20260101.agekey": _b64(f"# created: 2026-01-01\n# public key: {first.to_public()}\n{first}\n"),
        "old.agekey": _b64(f"{second}"),
        "SOPS_AGE_RECIPIENTS": _b64("not a key at all"),
    }
    assert recipients_of("default/keys", data) == tuple(
        sorted([str(first.to_public()), str(second.to_public())])
    )


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("AGE-SECRET-KEY-1NOTAKEY", "does not hold a valid age identity"),
        ("ssh-ed25519 AAAA", "must hold exactly one AGE-SECRET-KEY-... age identity"),
        ("", "must hold exactly one"),
    ],
)
def test_a_broken_entry_is_named_by_secret_and_key_never_by_value(value: str, words: str) -> None:
    with pytest.raises(AgeKeyError) as caught:
        recipients_of("default/keys", {"a.agekey": _b64(value)})
    message = str(caught.value)
    assert message.startswith("Secret default/keys key a.agekey ")
    assert words in message
    assert not value or value not in message


def test_two_identities_in_one_entry_and_no_entry_are_refused() -> None:
    one, two = pyrage.x25519.Identity.generate(), pyrage.x25519.Identity.generate()
    with pytest.raises(AgeKeyError, match="exactly one"):
        recipients_of("default/keys", {"a.agekey": _b64(f"{one}\n{two}\n")})
    with pytest.raises(AgeKeyError, match=r"Secret default/keys has no \*\.agekey entry"):
        recipients_of("default/keys", {"identity": _b64(str(one))})
    with pytest.raises(AgeKeyError, match="not valid base64"):
        recipients_of("default/keys", {"a.agekey": "%%%"})


@given(st.lists(st.booleans(), min_size=1, max_size=4))
def test_recipients_are_exactly_the_public_keys_of_the_entries(valid: list[bool]) -> None:
    identities = [pyrage.x25519.Identity.generate() for _ in valid]
    data = {f"k{i}.agekey": _b64(str(identity)) for i, identity in enumerate(identities)}
    assert recipients_of("ns/s", data) == tuple(sorted({str(i.to_public()) for i in identities}))


def test_a_generated_secret_holds_one_dated_key_that_yields_its_annotated_recipient() -> None:
    now = datetime(2026, 3, 7, 23, 59, tzinfo=UTC)
    manifest, recipient = generated_secret(SOURCE, now)
    assert dated_key_name(now) == "20260307.agekey"
    assert list(manifest["data"]) == ["20260307.agekey"]
    assert manifest["metadata"] == {
        "name": "sops-age-key",
        "namespace": "default",
        "annotations": {RECIPIENT_ANNOTATION: recipient, BACKUP_WARNING_ANNOTATION: "REMOVE_AFTER_BACKUP"},
    }
    assert recipients_of("default/sops-age-key", manifest["data"]) == (recipient,)
    assert generated_secret(SOURCE, now)[1] != recipient  # a fresh key each time


@pytest.mark.parametrize(
    ("encryption", "path", "words"),
    [
        (
            {
                "age": {"enabled": True, "recipients": {"generateWhenMissing": True}},
                "secretRef": {"name": "k"},
            },
            "spec.encryption.age.recipients.generateWhenMissing",
            "needs extractFromSecret",
        ),
        (
            {"age": {"enabled": True, "recipients": {"extractFromSecret": True}}},
            "spec.encryption.secretRef.name",
            "required with age.recipients.extractFromSecret",
        ),
        (
            {
                "age": {"enabled": True, "recipients": {"extractFromSecret": "yes"}},
                "secretRef": {"name": "k"},
            },
            "spec.encryption.age.recipients.extractFromSecret",
            "true or false",
        ),
        (
            {
                "age": {"enabled": True, "recipients": {"extractFromSecret": True}},
                "secretRef": {"name": "k", "kind": "ConfigMap"},
            },
            "spec.encryption.secretRef.kind",
            "must be Secret",
        ),
    ],
)
def test_key_source_errors_name_the_field_the_user_wrote(
    encryption: dict[str, Any], path: str, words: str
) -> None:
    source, problems = key_source("default", encryption)
    assert source is None
    assert [p.path for p in problems] == [path]
    assert words in problems[0].message


def test_key_source_is_read_only_with_age_enabled_and_extract_from_secret() -> None:
    disabled = {
        "age": {"enabled": False, "recipients": {"extractFromSecret": True}},
        "secretRef": {"name": "k"},
    }
    assert key_source("default", disabled) == (None, [])
    public_only = {
        "age": {"enabled": True, "recipients": {"publicKeys": ["age1x"]}},
        "secretRef": {"name": "k"},
    }
    assert key_source("default", public_only) == (None, [])
    wanted = {
        "age": {"enabled": True, "recipients": {"extractFromSecret": True}},
        "secretRef": {"name": " k "},
    }
    assert key_source("team-a", wanted) == (KeySource("team-a", "k", generate=False), [])


def test_offline_the_quickstart_target_compiles_naming_its_secret_and_seals_nothing() -> None:
    compiled = compile_resources(_objects(), home_namespace="default")
    assert compiled.errors == []
    target = next(t for t in compiled.targets if t.name == "example-target")
    assert target.encryption is not None
    assert target.encryption.age_key_secret is not None
    assert target.encryption.age_key_secret.describe() == "default/sops-age-key"
    assert target.encryption.generate_age_key
    assert target.encryption.age_recipients == []
    # without the controller's recipients nobody can decrypt: the watch stage refuses to seal
    with pytest.raises(SealingError, match="Secret default/sops-age-key"):
        sealer_for(target, {"REVERSER_SECRETS_DIGEST_KEY": "k" * 32})


def test_resolved_recipients_are_published_and_a_failed_secret_stalls_only_its_target() -> None:
    identity = pyrage.x25519.Identity.generate()
    recipient = str(identity.to_public())
    resolved = compile_resources(
        _objects(),
        home_namespace="default",
        reads=ClusterReads(age_keys={SOURCE: KeyResolution(recipients=(recipient,))}),
    )
    target = next(t for t in resolved.targets if t.name == "example-target")
    assert target.encryption is not None
    assert target.encryption.age_recipients == [recipient]
    assert str(identity) not in TargetSettings.model_dump_json(target)

    broken = "Secret default/sops-age-key key 20260101.agekey does not hold a valid age identity"
    failed = compile_resources(
        _objects(),
        home_namespace="default",
        reads=ClusterReads(age_keys={SOURCE: KeyResolution(error=broken)}),
    )
    assert [(ref, e.path, e.message) for ref, e in failed.errors] == [
        (TARGET, "spec.encryption.secretRef", broken)
    ]
    assert [t.name for t in failed.targets] == ["plain"]  # the rest of the configuration goes on
    unread = compile_resources(_objects(), home_namespace="default", reads=ClusterReads(age_keys={}))
    assert [e.message for _, e in unread.errors] == ["Secret default/sops-age-key was not read yet"]


def test_an_encryption_error_is_reported_at_spec_encryption_not_spec_pipeline() -> None:
    text = QUICKSTART.replace(
        "recipients: {extractFromSecret: true, generateWhenMissing: true}", "recipients: {}"
    )
    compiled = compile_resources(_objects(text), home_namespace="default")
    assert [(ref, e.path) for ref, e in compiled.errors] == [(TARGET, "spec.encryption")]
    assert "age_recipients, sops_config or age_key_secret" in compiled.errors[0][1].message


def test_a_file_target_cannot_name_a_generated_key_without_its_secret() -> None:
    with pytest.raises(ValueError, match="generate_age_key needs age_key_secret"):
        Settings.model_validate(
            {
                "providers": [{"name": "p", "url": "https://git.example.com/x.git"}],
                "targets": [
                    {
                        "name": "t",
                        "provider": "p",
                        "encryption": {"age_recipients": [KEY], "generate_age_key": True},
                    }
                ],
            }
        )


def test_the_rules_file_encrypts_data_to_the_recipients_and_lives_in_the_target_folder() -> None:
    keys = [str(pyrage.x25519.Identity.generate().to_public()) for _ in range(2)]
    rules = yaml.safe_load(sops_rules([keys[1], keys[0], keys[1]]))
    assert rules == {
        "creation_rules": [
            {
                "path_regex": r".*\.sops\.ya?ml$",
                "encrypted_regex": "^(data|stringData)$",
                "key_groups": [{"age": sorted(keys)}],
            }
        ]
    }
    assert sops_rules_path("live-cluster/") == "live-cluster/.sops.yaml"
    assert sops_rules_path(".") == ".sops.yaml"


def test_a_missing_digest_key_stalls_only_the_encrypted_target_naming_the_variable() -> None:
    """The controller compiles with its own environment, which the chart gives every pod alike."""
    keys = {SOURCE: KeyResolution(recipients=(KEY,))}
    without = compile_resources(
        _objects(), home_namespace="default", reads=ClusterReads(age_keys=keys, environ={})
    )
    ((ref, error),) = without.errors
    assert (ref, error.path) == (TARGET, "spec.encryption")
    assert "environment variable REVERSER_SECRETS_DIGEST_KEY must hold a digest key of at least 32 bytes" in (
        error.message
    )
    assert [t.name for t in without.targets] == ["plain"]
    short = compile_resources(
        _objects(),
        home_namespace="default",
        reads=ClusterReads(age_keys=keys, environ={"REVERSER_SECRETS_DIGEST_KEY": "s3cret"}),
    )
    assert "s3cret" not in short.errors[0][1].message
    given = {"REVERSER_SECRETS_DIGEST_KEY": "k" * 32}
    ok = compile_resources(
        _objects(), home_namespace="default", reads=ClusterReads(age_keys=keys, environ=given)
    )
    assert ok.errors == []
    assert sorted(t.name for t in ok.targets) == ["example-target", "plain"]


def test_a_key_secret_exports_as_grs_secret_ref_and_compiles_back() -> None:
    settings = Settings.model_validate(
        {
            "providers": [{"name": "repo", "url": "https://git.example.com/x.git"}],
            "targets": [
                {
                    "name": "apps",
                    "provider": "repo",
                    "path": "apps",
                    "encryption": {
                        "age_recipients": [KEY],
                        "age_key_secret": {"namespace": "platform", "name": "sops-age-key"},
                        "generate_age_key": True,
                    },
                }
            ],
        }
    )
    documents = export_resources(settings, "platform")
    (target,) = [d for d in documents if d["kind"] == "GitTarget"]
    assert target["spec"]["encryption"] == {
        "provider": "sops",
        "age": {
            "enabled": True,
            "recipients": {"publicKeys": [KEY], "extractFromSecret": True, "generateWhenMissing": True},
        },
        "secretRef": {"name": "sops-age-key"},
    }
    assert "pipeline" not in target["spec"]
    back = compile_resources([parse_object(d) for d in documents], home_namespace="platform")
    assert back.errors == []
    assert back.targets[0].encryption == settings.targets[0].encryption
    with pytest.raises(ExportError, match="age_key_secret is in namespace 'platform'"):
        export_resources(settings, "elsewhere")
