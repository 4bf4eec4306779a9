"""A Secret's data to Git credentials: the three key dialects, precedence, errors naming keys not values."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config import ProviderSettings, SigningSettings, SshSettings
from pipeline.gitcredentials import (
    CredentialsError,
    CredentialsReason,
    GitCredentials,
    SigningKey,
    credentials_from_secret,
    known_hosts_from,
    signing_key_from_secret,
)

SECRET = "team-a/git-creds"
KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nkey-material-xyz\n-----END OPENSSH PRIVATE KEY-----\n"


def data(**values: str) -> dict[str, bytes]:
    return {key.replace("_", "-") if key.startswith("ssh_") else key: v.encode() for key, v in values.items()}


@pytest.mark.parametrize("key", ["ssh-privatekey", "identity", "sshPrivateKey"])
def test_each_dialect_of_the_ssh_key_is_read(key: str) -> None:
    found = credentials_from_secret(SECRET, {key: KEY.encode(), "known_hosts": b"host ssh-ed25519 AAA"})
    assert (found.method, found.ssh_key, found.known_hosts) == ("ssh", KEY, "host ssh-ed25519 AAA")
    assert found.ssh_passphrase is None


def test_the_first_non_empty_ssh_key_wins_in_dialect_order() -> None:
    found = credentials_from_secret(
        SECRET, {"ssh-privatekey": b"  \n", "identity": b"flux-key", "sshPrivateKey": b"argo-key"}
    )
    assert found.ssh_key == "flux-key"


def test_passphrase_is_ssh_password_else_password_only_beside_a_key() -> None:
    both = credentials_from_secret(SECRET, {"identity": b"k", "ssh-password": b"p1", "password": b"p2"})
    assert both.ssh_passphrase == "p1"
    fallback = credentials_from_secret(SECRET, {"identity": b"k", "password": b"p2"})
    assert (fallback.method, fallback.ssh_passphrase, fallback.password) == ("ssh", "p2", None)
    # without a key, `password` is HTTP basic, never a passphrase
    basic = credentials_from_secret(SECRET, {"password": b"p2"})
    assert (basic.method, basic.username, basic.password, basic.ssh_passphrase) == ("basic", "", "p2", None)


def test_precedence_ssh_key_then_basic_then_bearer() -> None:
    everything = {
        "ssh-privatekey": b"k",
        "username": b"u",
        "password": b"p",
        "bearerToken": b"t",
    }
    ssh = credentials_from_secret(SECRET, everything)
    assert (ssh.method, ssh.username, ssh.bearer_token) == ("ssh", None, None)
    del everything["ssh-privatekey"]
    basic = credentials_from_secret(SECRET, everything)
    assert (basic.method, basic.username, basic.password, basic.bearer_token) == ("basic", "u", "p", None)
    bearer = credentials_from_secret(SECRET, {"bearerToken": b"t"})
    assert (bearer.method, bearer.bearer_token, bearer.password) == ("bearer", "t", None)


def test_a_username_without_password_names_the_secret_and_the_key_never_a_value() -> None:
    with pytest.raises(CredentialsError) as caught:
        credentials_from_secret(SECRET, {"username": b"alice-the-user", "password": b"   "})
    assert caught.value.reason is CredentialsReason.MISSING_KEY
    assert str(caught.value) == "Secret team-a/git-creds has key username but no key password"
    assert "alice-the-user" not in str(caught.value)


def test_a_secret_without_any_credential_key_names_the_keys_looked_for() -> None:
    with pytest.raises(
        CredentialsError,
        match="Secret team-a/git-creds has none of the keys ssh-privatekey, "
        "identity, sshPrivateKey, password, bearerToken",
    ) as caught:
        credentials_from_secret(SECRET, {"token": b"secret-value-123"})
    assert caught.value.reason is CredentialsReason.MISSING_KEY
    assert "secret-value-123" not in str(caught.value)


def test_values_never_show_in_the_repr() -> None:
    found = GitCredentials(
        ssh_key="k-1",
        ssh_passphrase="pp-2",
        username="u-3",
        password="pw-4",
        bearer_token="t-5",
        known_hosts="kh-6",
    )
    shown = repr(found)
    assert not any(value in shown for value in ("k-1", "pp-2", "u-3", "pw-4", "t-5", "kh-6"))


def test_known_hosts_of_a_reference_key_order_and_missing() -> None:
    assert known_hosts_from("ConfigMap a/b", {"ssh_known_hosts": b"x", "known_hosts": b"y"}) == "y"
    assert known_hosts_from("ConfigMap a/b", {"ssh_known_hosts": b"x"}) == "x"
    with pytest.raises(
        CredentialsError, match="ConfigMap a/b has neither key known_hosts nor ssh_known_hosts"
    ) as caught:
        known_hosts_from("ConfigMap a/b", {"other": b"z"})
    assert caught.value.reason is CredentialsReason.NO_KNOWN_HOSTS


def test_provider_settings_take_one_credentials_source() -> None:
    secret = {"namespace": "team-a", "name": "git-creds"}
    with pytest.raises(ValueError, match="credentials_secret and username_env, password_env both give"):
        ProviderSettings(
            name="p", url="https://g/r.git", credentials_secret=secret, username_env="U", password_env="P"
        )
    with pytest.raises(ValueError, match="refusing to send Basic credentials over plain http"):
        ProviderSettings(name="p", url="http://g/r.git", credentials_secret=secret)
    # an SSH remote may leave key and known hosts to the Secret
    ssh = ProviderSettings(name="p", url="ssh://git@g/r.git", credentials_secret=secret)
    assert ssh.credentials_from_cluster
    strict = ProviderSettings(name="p", url="ssh://git@g/r.git", credentials_secret=secret, ssh=SshSettings())
    assert strict.ssh is not None
    assert not strict.ssh.allow_unknown_host_keys
    with pytest.raises(ValueError, match="known_hosts_file and known_hosts_ref both"):
        ProviderSettings(
            name="p",
            url="ssh://git@g/r.git",
            credentials_secret=secret,
            known_hosts_ref={"name": "hosts", "namespace": "team-a"},
            ssh=SshSettings(known_hosts_file=Path("kh")),
        )


def test_a_signing_key_comes_from_its_own_key_or_an_ssh_key_of_the_secret() -> None:
    own = signing_key_from_secret(SECRET, {"signing.key": KEY.encode(), "ssh-privatekey": b"other"})
    assert own == SigningKey(KEY, None)
    shared = signing_key_from_secret(SECRET, {"identity": KEY.encode(), "ssh-password": b"pp"})
    assert shared == SigningKey(KEY, "pp")
    assert (
        signing_key_from_secret(
            SECRET, {"sshPrivateKey": KEY.encode(), "signing.passphrase": b"q"}
        ).passphrase
        == "q"
    )
    # gitops-reverser's signing Secret: signing.key, signing.pub and passphrase
    gr = signing_key_from_secret(
        SECRET, {"signing.key": KEY.encode(), "signing.pub": b"ssh-ed25519 A", "passphrase": b"g"}
    )
    assert gr == SigningKey(KEY, "g")
    assert "key-material" not in repr(own)
    with pytest.raises(
        CredentialsError,
        match=f"Secret {SECRET} has none of the signing key keys signing.key, "
        "ssh-privatekey, identity, sshPrivateKey",
    ) as caught:
        signing_key_from_secret(SECRET, {"password": b"p", "signing.key": b"  "})
    assert caught.value.reason is CredentialsReason.MISSING_KEY


def test_ssh_signing_takes_exactly_one_key_source() -> None:
    secret = {"namespace": "team-a", "name": "signer"}
    signing = SigningSettings(format="ssh", key_secret=secret)
    provider = ProviderSettings(name="p", url="https://g/r.git", signing=signing)
    assert provider.signing_secret is not None
    assert provider.signing_secret.describe() == "team-a/signer"
    assert provider.reads_cluster
    assert not provider.credentials_from_cluster
    with pytest.raises(ValueError, match="exactly one of key_file, key_env and key_secret"):
        SigningSettings(format="ssh", key_env="K", key_secret=secret)
    with pytest.raises(ValueError, match="not key_file/key_env/key_secret"):
        SigningSettings(format="openpgp", key_secret=secret)
