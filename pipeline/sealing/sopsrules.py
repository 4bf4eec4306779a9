"""The `.sops.yaml` written beside a target's encrypted files, so people can work with them.

gitops-reverser writes one into the target's folder once its age recipients are known: creation
rules that encrypt `data` and `stringData` of any `*.sops.yaml` to those recipients, so a person who
adds or re-encrypts a Secret in the repository with plain `sops` uses the same keys. Decryption
needs none of it (every SOPS document carries its own recipients); the file is written once, when
the folder has none, and never overwritten: a `.sops.yaml` someone keeps there is theirs.
"""

from __future__ import annotations

from collections.abc import Iterable

import yaml

__all__ = ["SOPS_RULES_FILE", "sops_rules", "sops_rules_path"]

SOPS_RULES_FILE = ".sops.yaml"


def sops_rules_path(folder: str) -> str:
    """The rules file of a target folder (`.` or `""`: the repository root)."""
    folder = folder.strip("/")
    return SOPS_RULES_FILE if folder in ("", ".") else f"{folder}/{SOPS_RULES_FILE}"


def sops_rules(recipients: Iterable[str]) -> bytes:
    """The rules file for these age public keys (sorted, so the same keys write the same bytes)."""
    rules = {
        "creation_rules": [
            {
                "path_regex": r".*\.sops\.ya?ml$",
                "encrypted_regex": "^(data|stringData)$",
                "key_groups": [{"age": sorted(set(recipients))}],
            }
        ]
    }
    header = "# written by reverser-pipeline: sops creation rules for the *.sops.yaml files below\n"
    return (header + yaml.safe_dump(rules, sort_keys=False)).encode()
