"""Certificates and keys for a loopback control plane and the audit webhook that it posts to.

One CA signs everything: the kube-apiserver's serving certificate, the admin client certificate
(group `system:masters`, so impersonation is allowed), the certificate the apiserver presents to
the audit webhook, and the serving certificate of the pipeline's audit ingress. A single trust root
keeps the test wiring obvious; production clusters would use separate CAs.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["ADMIN_CN", "AUDIT_CLIENT_CN", "Pki", "write_pki"]

# The identity kube-apiserver presents to the audit webhook (the ingress may allow-list it).
AUDIT_CLIENT_CN = "kube-apiserver-audit"
ADMIN_CN = "reverser-e2e-admin"
LOOPBACK_DNS = ("localhost", "kubernetes", "kubernetes.default")
LOOPBACK_IPS = ("127.0.0.1", "::1")
SA_KEY_BITS = 2048
VALIDITY_DAYS = 7


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


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization is not None:
        # Kubernetes maps the Organization of a client certificate to the user's groups.
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _write_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


class _Ca:
    """A self-signed ECDSA CA that issues serving and client leaves.

    Written out with `cryptography` rather than a test-CA helper because Go's verifier refuses
    certificates with an empty critical subjectAltName, which client certificates would carry.
    """

    def __init__(self) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = _name("reverser-e2e-ca", "reverser-e2e")
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(self.name)
            .issuer_name(self.name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALIDITY_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )

    def issue(
        self,
        cert_path: Path,
        key_path: Path,
        common_name: str,
        organization: str | None = None,
        server: bool = False,
    ) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server else [ExtendedKeyUsageOID.CLIENT_AUTH]
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organization))
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALIDITY_DAYS))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False
            )
        )
        if server:
            alt_names: list[x509.GeneralName] = [x509.DNSName(n) for n in LOOPBACK_DNS]
            alt_names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in LOOPBACK_IPS]
            builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, key_path)


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
    ca = _Ca()
    pki.ca.write_bytes(ca.cert.public_bytes(serialization.Encoding.PEM))
    ca.issue(pki.apiserver_cert, pki.apiserver_key, "kube-apiserver", server=True)
    ca.issue(pki.admin_cert, pki.admin_key, ADMIN_CN, organization="system:masters")
    ca.issue(pki.audit_client_cert, pki.audit_client_key, AUDIT_CLIENT_CN, organization="reverser-e2e")
    ca.issue(pki.ingress_cert, pki.ingress_key, "reverser-audit-ingress", server=True)
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=SA_KEY_BITS)
    _write_key(sa_key, pki.sa_signing_key)
    pki.sa_public_key.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki
