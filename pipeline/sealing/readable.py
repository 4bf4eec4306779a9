"""What of a sensitive object stays readable in its SOPS document: the one owner of that rule.

The watch stage hands `sops` only what `sealable()` builds, encrypted as `encrypted_regex()` says,
and the commit worker accepts a document only when `plaintext_fields()` finds nothing; both sides
read the same lists here, so what the sealer leaves readable is exactly what the worker accepts.

Readable are `apiVersion`, `kind`, `metadata.name` and `metadata.namespace` (the file's path names
them anyway), and the annotations of `READABLE_ANNOTATIONS` whose value has the shape that key
holds (a name, the keyed digest the worker compares). Label values are encrypted; label keys stay
readable, as `data` keys do, because SOPS never encrypts keys. Every other top-level field, known
or not, is encrypted whole.

Every other annotation and metadata field is dropped, not encrypted. Annotations are where tools
keep copies of the object: kapp's `kapp.k14s.io/original` and kubectl's
`kubectl.kubernetes.io/last-applied-configuration` each hold the whole applied Secret, data
included. Sanitizing already drops last-applied-configuration (and the rest of
`kubectl.kubernetes.io/`) from every object as bookkeeping, not intent; an unknown annotation of a
sensitive object gets the same treatment, because nothing can tell a harmless one from such a copy.
Dropping also keeps the worker's rule a plain allowlist: an annotation outside it is refused
whatever it holds, with no ciphertext to trust. An annotation that must survive a restore from Git
belongs in `READABLE_ANNOTATIONS`, with the shape of its value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

__all__ = [
    "DIGEST_ANNOTATION",
    "READABLE_ANNOTATIONS",
    "encrypted_regex",
    "is_ciphertext",
    "plaintext_fields",
    "sealable",
]

DIGEST_ANNOTATION = "reverser.dev/content-hmac"
# The metadata block of the SOPS format itself: never part of the sealed object.
_SOPS_KEY = "sops"
_METADATA = "metadata"
_LABELS = "labels"
_ANNOTATIONS = "annotations"
_NAME_FIELDS = ("name", "namespace")

# Kubernetes' own shapes (DNS subdomains, qualified names), so a readable field cannot hold a copy
# of the object or a base64 value longer than a name.
_NAME = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,251}[A-Za-z0-9])?")
_LABEL_KEY = re.compile(
    r"(?:[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)
_API_VERSION = re.compile(r"(?:[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?/)?[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")
_KIND = re.compile(r"[A-Za-z][A-Za-z0-9]{0,62}")
_DIGEST = re.compile(r"hmac-sha256:[0-9a-f]{64}")
_TYPE_FIELDS: Mapping[str, re.Pattern[str]] = MappingProxyType({"apiVersion": _API_VERSION, "kind": _KIND})

READABLE_ANNOTATIONS: Mapping[str, re.Pattern[str]] = MappingProxyType(
    {
        DIGEST_ANNOTATION: _DIGEST,
        # the ServiceAccount a token Secret belongs to (the token controller fills in the rest)
        "kubernetes.io/service-account.name": _NAME,
        # Helm's ownership of the object, which `helm upgrade` checks after a restore
        "meta.helm.sh/release-name": _NAME,
        "meta.helm.sh/release-namespace": _NAME,
        "helm.sh/resource-policy": re.compile(r"keep"),
        # cert-manager's link from a TLS Secret to its Certificate and issuer
        "cert-manager.io/certificate-name": _NAME,
        "cert-manager.io/issuer-name": _NAME,
        "cert-manager.io/issuer-kind": _NAME,
        "cert-manager.io/issuer-group": _NAME,
    }
)

# What `sops` writes for an encrypted value (the worker holds no key, so the shape is all it sees).
_CIPHERTEXT = re.compile(
    r"ENC\[AES256_GCM,data:[A-Za-z0-9+/=]*,iv:[A-Za-z0-9+/=]+,tag:[A-Za-z0-9+/=]+,type:[a-z]+\]"
)
_PLAIN_STEP = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MAX_KEY_CHARS_SHOWN = 64


def is_ciphertext(value: Any) -> bool:
    """Whether a leaf reveals nothing: a SOPS ciphertext, or null and "" (which sops leaves as they are)."""
    if value is None or value == "":
        return True
    return isinstance(value, str) and _CIPHERTEXT.fullmatch(value) is not None


def _shaped(pattern: re.Pattern[str], value: Any) -> bool:
    return isinstance(value, str) and pattern.fullmatch(value) is not None


def _readable_annotation(key: Any, value: Any) -> bool:
    pattern = READABLE_ANNOTATIONS.get(key) if isinstance(key, str) else None
    return pattern is not None and _shaped(pattern, value)


def _readable_top_level(key: Any, value: Any) -> bool:
    """`metadata` (checked field by field), or an `apiVersion`/`kind` of Kubernetes' shape."""
    shape = _TYPE_FIELDS.get(key) if isinstance(key, str) else None
    return key == _METADATA or (shape is not None and _shaped(shape, value))


def sealable(obj: Mapping[str, Any], digest: str) -> dict[str, Any]:
    """The object as it is handed to `sops`: readable fields first, then every other field (sorted).

    `metadata` keeps its name, namespace, the labels with Kubernetes-shaped keys and the readable
    annotations, with `digest` as the digest annotation (replacing any the object claimed). An
    `apiVersion` or `kind` without Kubernetes' shape is not left readable but encrypted like any
    other field; a top-level `sops` field cannot be represented in a SOPS document and is dropped.
    """
    source = obj.get(_METADATA)
    meta: Mapping[Any, Any] = source if isinstance(source, Mapping) else {}
    kept: dict[str, Any] = {key: meta[key] for key in _NAME_FIELDS if _shaped(_NAME, meta.get(key))}
    labels = meta.get(_LABELS)
    if isinstance(labels, Mapping):
        shaped = {k: v for k, v in labels.items() if _shaped(_LABEL_KEY, k) and isinstance(v, str)}
        if shaped:
            kept[_LABELS] = shaped
    annotations = meta.get(_ANNOTATIONS)
    readable = (
        {k: v for k, v in annotations.items() if _readable_annotation(k, v)}
        if isinstance(annotations, Mapping)
        else {}
    )
    kept[_ANNOTATIONS] = {**readable, DIGEST_ANNOTATION: digest}
    document: dict[str, Any] = {k: obj[k] for k, shape in _TYPE_FIELDS.items() if _shaped(shape, obj.get(k))}
    document[_METADATA] = kept
    document.update((k, obj[k]) for k in sorted(obj) if k not in document and k not in (_METADATA, _SOPS_KEY))
    return document


def _re2_literal(text: str) -> str:
    """`text` as a literal in sops' (Go RE2) regex syntax: every character but [A-Za-z0-9_] as \\x{..}."""
    return "".join(c if c.isascii() and (c.isalnum() or c == "_") else f"\\x{{{ord(c):x}}}" for c in text)


def encrypted_regex(document: Mapping[str, Any]) -> str:
    """sops' `--encrypted-regex` for a `sealable()` document: every field but the readable ones.

    sops encrypts a value when any key on its path matches, at any depth; so a top-level field
    that shares its name with a readable field (an odd object's top-level `name`) makes that one
    encrypted too: more is encrypted, never less.
    """
    fields = sorted({*(k for k, v in document.items() if not _readable_top_level(k, v)), _LABELS})
    return "^(?:" + "|".join(_re2_literal(field) for field in fields) + ")$"


def _step(path: str, key: Any) -> str:
    text = str(key)
    if _PLAIN_STEP.fullmatch(text):
        return f"{path}.{text}" if path else text
    return f"{path}[{json.dumps(text[:_MAX_KEY_CHARS_SHOWN])}]"


def _plaintext_leaves(node: Any, path: str) -> Iterator[str]:
    if isinstance(node, Mapping):
        for key, value in node.items():
            yield from _plaintext_leaves(value, _step(path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _plaintext_leaves(value, f"{path}[{index}]")
    elif not is_ciphertext(node):
        yield path


def _metadata_plaintext(meta: Mapping[Any, Any]) -> Iterator[str]:
    for key, value in meta.items():
        where = _step(_METADATA, key)
        if key in _NAME_FIELDS:
            if not (_shaped(_NAME, value) or is_ciphertext(value)):
                yield where
        elif key == _LABELS and isinstance(value, Mapping):
            for label, label_value in value.items():
                if not (_shaped(_LABEL_KEY, label) and is_ciphertext(label_value)):
                    yield _step(where, label)
        elif key == _ANNOTATIONS and isinstance(value, Mapping):
            for name, annotation in value.items():
                encrypted = name in READABLE_ANNOTATIONS and is_ciphertext(annotation)
                if not (_readable_annotation(name, annotation) or encrypted):
                    yield _step(where, name)
        else:
            yield where


def plaintext_fields(tree: Mapping[Any, Any]) -> list[str]:
    """The fields of a parsed SOPS document that are plaintext but not readable (empty: it is safe).

    A field is named by its path (`data.password`, `metadata.annotations["kapp.k14s.io/original"]`),
    never by its value. In `metadata` an unexpected field or annotation counts whatever it holds:
    the sealer drops those, so only a document the watch stage did not make carries one.
    """
    found: list[str] = []
    for key, value in tree.items():
        if key == _SOPS_KEY:
            continue
        if key == _METADATA:
            found.extend(
                _metadata_plaintext(value) if isinstance(value, Mapping) else _plaintext_leaves(value, key)
            )
        elif not _readable_top_level(key, value):
            found.extend(_plaintext_leaves(value, _step("", key)))
    return found
