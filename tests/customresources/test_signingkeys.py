"""Which GitProviders ask for a generated signing key, and the key made for them (pure parts;
the apiserver races are in tests/e2e/test_custom_resources_live.py)."""

from __future__ import annotations

import yaml
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_ssh_private_key, load_ssh_public_key

from pipeline.customresources.objects import parse_object
from pipeline.customresources.signingkeys import SigningSecret, generated_key, requested

OBJECTS = """
apiVersion: configbutler.ai/v1alpha3
kind: GitProvider
metadata: {name: wants, namespace: team-a}
spec:
  url: "https://g/r.git"
  allowedBranches: [main]
  commit: {signing: {secretRef: {name: sig}, generateWhenMissing: true}}
---
apiVersion: configbutler.ai/v1alpha3
kind: GitProvider
metadata: {name: has, namespace: team-a}
spec: {url: "https://g/r.git", allowedBranches: [main], commit: {signing: {secretRef: {name: own}}}}
---
apiVersion: configbutler.ai/v1alpha3
kind: GitProvider
metadata: {name: quoted, namespace: team-b}
spec:
  url: "https://g/r.git"
  allowedBranches: [main]
  commit: {signing: {secretRef: {name: s}, generateWhenMissing: "true"}}
---
apiVersion: configbutler.ai/v1alpha3
kind: GitTarget
metadata: {name: t, namespace: team-a}
spec:
  providerRef: {name: wants}
  branch: main
  path: t
  commit: {signing: {secretRef: {name: x}, generateWhenMissing: true}}
"""


def test_only_gitproviders_that_set_the_flag_get_a_key_made() -> None:
    objects = [parse_object(d) for d in yaml.safe_load_all(OBJECTS) if d]
    assert requested(objects) == [SigningSecret("team-a", "sig")]


def test_the_generated_key_is_an_openssh_ed25519_pair() -> None:
    private, public = generated_key()
    key = load_ssh_private_key(private, password=None)
    assert isinstance(key, Ed25519PrivateKey)
    assert public.startswith(b"ssh-ed25519 ")
    loaded = load_ssh_public_key(public.strip())
    assert isinstance(loaded, Ed25519PublicKey)
    assert loaded.public_bytes_raw() == key.public_key().public_bytes_raw()
    assert generated_key()[0] != private
