"""Real age keys and the real `sops` binary for the secret tests (keys generated per test)."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyrage

from pipeline.sealing.sealer import find_sops

DIGEST_KEY = "k" * 40


@dataclass(frozen=True)
class AgeKey:
    identity: str
    recipient: str

    @classmethod
    def from_file(cls, path: Path) -> AgeKey:
        identity = pyrage.x25519.Identity.from_str(path.read_text(encoding="ascii").strip())
        return cls(str(identity), str(identity.to_public()))

    @classmethod
    def generate(cls) -> AgeKey:
        identity = pyrage.x25519.Identity.generate()
        return cls(str(identity), str(identity.to_public()))


def sops_decrypt(content: bytes, key: AgeKey, tmp_path: Path) -> dict[str, Any]:
    """`sops decrypt` of a document with the age identity, as a user would run it."""
    key_file = tmp_path / "age.key"
    key_file.write_text(key.identity + "\n", encoding="ascii")
    document = tmp_path / "doc.sops.yaml"
    document.write_bytes(content)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "SOPS_AGE_KEY_FILE": str(key_file)}
    # JSON out: what sops' YAML 1.2 writes plainly (a lone `=`) PyYAML's 1.1 rules may misread
    argv = [find_sops(), "decrypt", "--output-type", "json", str(document)]
    result = subprocess.run(argv, capture_output=True, env=env, check=False, timeout=60)
    assert result.returncode == 0, result.stderr.decode()
    decrypted = json.loads(result.stdout)
    assert isinstance(decrypted, dict)
    return decrypted


def sops_decrypt_fails(content: bytes, key: AgeKey, tmp_path: Path) -> bool:
    try:
        sops_decrypt(content, key, tmp_path)
    except AssertionError:
        return True
    return False
