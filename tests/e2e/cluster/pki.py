"""Certificates and keys for a loopback control plane and the audit webhook that it posts to.

One CA signs everything: the kube-apiserver's serving certificate, the admin client certificate
(group `system:masters`, so impersonation is allowed), the certificate the apiserver presents to
the audit webhook, and the serving certificate of the pipeline's audit ingress. A single trust root
keeps the test wiring obvious; production clusters would use separate CAs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import trustme
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

__all__ = ["AUDIT_CLIENT_CN", "Pki", "write_pki"]

# The identity kube-apiserver presents to the audit webhook (the ingress may allow-list it).
AUDIT_CLIENT_CN = "kube-apiserver-audit"
ADMIN_CN = "reverser-e2e-admin"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
SA_KEY_BITS = 2048


@dataclass(frozen=True, slots=True)
class Pki:
    """Paths of every PEM file the control plane and the ingress need."""

    ca: Path
    apiserver_cert: Path
    apiserver_key: Path
    admin_cert: Path
    admin_key: Path
    audit_client_cert: Path
    audit_client_key: Path
    ingress_cert: Path
    ingress_key: Path
    sa_signing_key: Path
    sa_public_key: Path


def _write_leaf(leaf: trustme.LeafCert, cert_path: Path, key_path: Path) -> None:
    # Only the leaf itself: the CA is distributed separately through `ca.pem`.
    cert_path.write_bytes(leaf.cert_chain_pems[0].bytes())
    leaf.private_key_pem.write_to_path(str(key_path))
    key_path.chmod(0o600)


def write_pki(directory: Path) -> Pki:
    """Generate a fresh CA, leaf certificates and a service-account key pair under `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki(
        ca=directory / "ca.pem",
        apiserver_cert=directory / "apiserver.pem",
        apiserver_key=directory / "apiserver-key.pem",
        admin_cert=directory / "admin.pem",
        admin_key=directory / "admin-key.pem",
        audit_client_cert=directory / "audit-client.pem",
        audit_client_key=directory / "audit-client-key.pem",
        ingress_cert=directory / "ingress.pem",
        ingress_key=directory / "ingress-key.pem",
        sa_signing_key=directory / "sa.key",
        sa_public_key=directory / "sa.pub",
    )
    ca = trustme.CA(organization_name="reverser-e2e")
    ca.cert_pem.write_to_path(str(pki.ca))
    _write_leaf(
        ca.issue_cert(*LOOPBACK_NAMES, "kubernetes", "kubernetes.default", common_name="kube-apiserver"),
        pki.apiserver_cert,
        pki.apiserver_key,
    )
    _write_leaf(
        ca.issue_cert(common_name=ADMIN_CN, organization_name="system:masters"),
        pki.admin_cert,
        pki.admin_key,
    )
    _write_leaf(
        ca.issue_cert(common_name=AUDIT_CLIENT_CN, organization_name="reverser-e2e"),
        pki.audit_client_cert,
        pki.audit_client_key,
    )
    _write_leaf(
        ca.issue_cert(*LOOPBACK_NAMES, common_name="reverser-audit-ingress"),
        pki.ingress_cert,
        pki.ingress_key,
    )
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=SA_KEY_BITS)
    pki.sa_signing_key.write_bytes(
        sa_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    pki.sa_signing_key.chmod(0o600)
    pki.sa_public_key.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki
