"""Reading a remote cluster's kubeconfig from a Secret (`clusters[].kubeconfig_secret`): the key
chosen (Flux's order), and every refusal naming the Secret, the key and the field, never a value.
The pure half; the real API server reads it in tests/e2e/test_cluster_providers.py."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from pipeline.config import ClusterSettings, KubeconfigSecretReference
from pipeline.kube.client import open_client
from pipeline.kube.kubeconfigsecret import (
    KubeconfigReason,
    KubeconfigSecretError,
    kubeconfig_of,
    with_kubeconfig_secrets,
)

REF = KubeconfigSecretReference(namespace="reverser", name="prod-kubeconfig")
TOKEN = "s3cr3t-token-value"


def _kubeconfig(**overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "prod", "cluster": {"server": "https://prod.example:6443"}}],
        "users": [{"name": "mirror", "user": {"token": TOKEN}}],
        "contexts": [{"name": "prod", "context": {"cluster": "prod", "user": "mirror"}}],
        "current-context": "prod",
    }
    config.update(overrides)
    return config


def _data(config: Any, key: str = "value") -> dict[str, bytes]:
    return {key: yaml.safe_dump(config).encode()}


def _refusal(data: dict[str, bytes], ref: KubeconfigSecretReference = REF) -> str:
    with pytest.raises(KubeconfigSecretError) as caught:
        kubeconfig_of(ref, data)
    message = str(caught.value)
    assert TOKEN not in message
    return message


@pytest.mark.parametrize("key", ["value", "value.yaml"])
def test_without_a_key_value_then_value_yaml_is_read(key: str) -> None:
    assert kubeconfig_of(REF, _data(_kubeconfig(), key)) == _kubeconfig()


def test_value_wins_over_value_yaml_and_a_named_key_over_both() -> None:
    data = {
        **_data(_kubeconfig(), "value.yaml"),
        **_data(_kubeconfig(**{"current-context": "prod"}), "value"),
    }
    data["value.yaml"] = b"not: [a kubeconfig"
    assert kubeconfig_of(REF, data)["current-context"] == "prod"
    named = REF.model_copy(update={"key": "config"})
    assert kubeconfig_of(named, {"config": data["value"], "value": b"{}"}) == _kubeconfig()


def test_a_missing_key_names_the_secret_and_the_keys_it_has() -> None:
    assert _refusal({"other": b"x"}) == (
        "Secret reverser/prod-kubeconfig has neither key 'value' nor 'value.yaml' (its keys: other); "
        "name the key in kubeConfig.secretRef.key"
    )
    named = REF.model_copy(update={"key": "config"})
    assert _refusal({"value": b"x"}, named) == (
        "Secret reverser/prod-kubeconfig has no key 'config' (its keys: value)"
    )


def test_broken_yaml_names_the_place_never_the_text() -> None:
    message = _refusal({"value": f"users: [{{token: {TOKEN}\n".encode()})
    assert message.startswith("Secret reverser/prod-kubeconfig key value: not valid YAML at line ")


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (["a", "list"], "not a kubeconfig"),
        (_kubeconfig(**{"current-context": "gone"}), "current-context must name one of its contexts"),
        (
            _kubeconfig(contexts=[{"name": "prod", "context": {"cluster": "elsewhere", "user": "mirror"}}]),
            "context 'prod' names no cluster",
        ),
        (_kubeconfig(clusters=[{"name": "prod", "cluster": {}}]), "cluster 'prod' has no server"),
        (_kubeconfig(users="mirror"), "users must be a list"),
        (
            _kubeconfig(users=[{"name": "mirror", "user": {"exec": {"command": "aws"}}}]),
            "user 'mirror' sets exec, which runs a command",
        ),
        (
            _kubeconfig(users=[{"name": "mirror", "user": {"auth-provider": {"name": "gcp"}}}]),
            "user 'mirror' sets auth-provider",
        ),
        (
            _kubeconfig(users=[{"name": "mirror", "user": {"tokenFile": "/var/run/secrets/token"}}]),
            "user 'mirror' sets tokenFile, a file of this pod; put the credential in token",
        ),
        (
            _kubeconfig(
                clusters=[
                    {"name": "prod", "cluster": {"server": "https://p", "insecure-skip-tls-verify": True}}
                ]
            ),
            "cluster 'prod' sets insecure-skip-tls-verify",
        ),
        (
            _kubeconfig(
                clusters=[
                    {"name": "prod", "cluster": {"server": "https://p", "certificate-authority": "/ca"}}
                ]
            ),
            "cluster 'prod' sets certificate-authority, a file of this pod",
        ),
    ],
)
def test_unusable_or_unsafe_kubeconfigs_are_refused_by_field(config: Any, message: str) -> None:
    refusal = _refusal(_data(config))
    assert refusal.startswith("Secret reverser/prod-kubeconfig key value: ")
    assert message in refusal


async def test_the_plain_client_factory_refuses_a_secret_cluster_instead_of_guessing() -> None:
    cluster = ClusterSettings(name="prod", kubeconfig_secret=REF)
    with pytest.raises(ValueError, match=r"Secret reverser/prod-kubeconfig"):
        await open_client(cluster)


async def test_without_a_cluster_to_read_from_the_error_names_the_secret() -> None:
    factory = with_kubeconfig_secrets(open_client, None)
    with pytest.raises(KubeconfigSecretError, match=r"Secret reverser/prod-kubeconfig: no cluster"):
        await factory(ClusterSettings(name="prod", kubeconfig_secret=REF))


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ({"other": b"x"}, KubeconfigReason.KEY_NOT_FOUND),
        ({"value": b"users: [\n"}, KubeconfigReason.INVALID),
        (_data(_kubeconfig(**{"current-context": "gone"})), KubeconfigReason.INVALID),
        (
            _data(_kubeconfig(users=[{"name": "mirror", "user": {"exec": {"command": "aws"}}}])),
            KubeconfigReason.EXEC_NOT_ALLOWED,
        ),
        (
            _data(_kubeconfig(users=[{"name": "mirror", "user": {"auth-provider": {"name": "gcp"}}}])),
            KubeconfigReason.EXEC_NOT_ALLOWED,
        ),
        (
            _data(
                _kubeconfig(
                    clusters=[
                        {"name": "prod", "cluster": {"server": "https://p", "insecure-skip-tls-verify": True}}
                    ]
                )
            ),
            KubeconfigReason.INSECURE_TLS_NOT_ALLOWED,
        ),
        (
            _data(_kubeconfig(users=[{"name": "mirror", "user": {"client-key": "/key"}}])),
            KubeconfigReason.FILE_REFERENCE_NOT_ALLOWED,
        ),
        (
            _data(
                _kubeconfig(
                    clusters=[
                        {"name": "prod", "cluster": {"server": "https://p", "certificate-authority": "/ca"}}
                    ]
                )
            ),
            KubeconfigReason.FILE_REFERENCE_NOT_ALLOWED,
        ),
    ],
)
def test_each_refusal_carries_gitops_reversers_validated_reason(
    data: dict[str, bytes], reason: KubeconfigReason
) -> None:
    with pytest.raises(KubeconfigSecretError) as caught:
        kubeconfig_of(REF, data)
    assert caught.value.reason is reason


def test_the_reasons_are_gitops_reversers_names() -> None:
    # internal/kubeconfig/kubeconfig.go of gitops-reverser, and ours for a Secret it cannot read
    assert {r.value for r in KubeconfigReason} == {
        "KubeConfigSecretNotFound",
        "KubeConfigKeyNotFound",
        "KubeConfigInvalid",
        "KubeConfigExecNotAllowed",
        "KubeConfigInsecureTLSNotAllowed",
        "KubeConfigFileReferenceNotAllowed",
        "KubeConfigSecretUnreadable",
    }
