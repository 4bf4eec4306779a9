"""The `audit` section: the audit webhook ingress, its routes, TLS and the admission fact source."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field, model_validator

from pipeline.authormode import AttributionMode
from pipeline.config.addresses import HostPort
from pipeline.config.section import Section, unique_names


class AuditRoute(Section):
    """A route the apiserver may post to.

    A route with neither allowed identities nor tokens accepts any client the listener accepts;
    on a non-loopback listener that needs `allow_unauthenticated: true` (see docs/security.md).
    """

    name: str = Field(pattern=r"^[^/]+$")
    """The route's name: the apiserver posts to /audit-webhook/<name>; a cluster's audit_route names it."""
    allowed_identities: list[str] = []
    """Client-certificate CN/SAN names allowed to post to this route (mTLS)."""
    bearer_tokens_env: list[str] = []
    """Environment variables holding bearer tokens accepted on this route."""
    allow_unauthenticated: bool = False
    """Accept unauthenticated clients on a non-loopback listener (docs/security.md)."""
    attribution: AttributionMode | None = None
    """The attribution mode of the clusters whose audit facts arrive on this route and that set
    none; none: `audit` (docs/attribution.md)."""

    @property
    def restricted(self) -> bool:
        return bool(self.allowed_identities or self.bearer_tokens_env)


class AuditTls(Section):
    """Server TLS of the audit ingress; a client CA turns on mandatory client certificates (mTLS)."""

    cert_file: Path | None = None
    """Serving certificate (PEM) of the audit ingress; with key_file it turns on HTTPS."""
    key_file: Path | None = None
    """Private key (PEM) of cert_file."""
    client_ca_file: Path | None = None
    """CA (PEM) that signs the apiserver's client certificate; makes client certificates mandatory."""
    reload_interval_s: float = Field(default=60.0, gt=0)
    """How often the certificate files are checked for renewal, in seconds."""

    @model_validator(mode="after")
    def _pairs(self) -> AuditTls:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file must be set together")
        if self.client_ca_file is not None and self.cert_file is None:
            raise ValueError("client_ca_file needs cert_file and key_file (mTLS runs over TLS)")
        return self


class AdmissionSettings(Section):
    """The admission fact source on the audit ingress (docs/audit-ingress.md, "Admission facts")."""

    enabled: bool = False
    """Serve POST /admission-webhook/<route>: a validating webhook whose reviews become author facts
    (for clusters whose audit webhook cannot be configured); always answers allowed."""
    publish_timeout_s: float = Field(default=2.0, gt=0)
    """Time allowed for the log to acknowledge a review's fact, in seconds; keep it below the
    webhook's timeoutSeconds (the review is allowed either way, the fact is then lost)."""


class AuditSettings(Section):
    """The audit webhook ingress."""

    enabled: bool = True
    """Start the audit webhook ingress."""
    addr: HostPort = "127.0.0.1:9444"
    """Listen address HOST:PORT of the ingress (`--audit-addr`); port 0 picks a free port."""
    allow_plain_http: bool = False
    """Allow plain HTTP on a non-loopback address (loopback always may)."""
    max_body_bytes: int = Field(default=3 * 1024 * 1024, gt=0)
    """Request body limit in bytes (413 above it)."""
    max_events_per_request: int = Field(default=4096, gt=0)
    """Items of one EventList (413 above it; the apiserver sends at most its batch size)."""
    max_connections: int = Field(default=256, gt=0)
    """Open connections; at the cap a new one replaces the longest-idle one (refused only when none is
    idle)."""
    max_connections_per_peer: int = Field(default=64, gt=0)
    """Open connections from one client IP address; more are closed at once and counted."""
    max_inflight_body_bytes: int = Field(default=32 * 1024 * 1024, gt=0)
    """Request body bytes held by all requests at once, in bytes (503 with Retry-After above it)."""
    tls_handshake_timeout_s: float = Field(default=5.0, gt=0)
    """A TLS handshake not finished by then is dropped, in seconds."""
    tls: AuditTls = AuditTls()
    """Server TLS of the ingress."""
    routes: Annotated[list[AuditRoute], unique_names("audit route")] = [AuditRoute(name="default")]
    """Declared routes the apiservers post to; names unique, no `/`."""
    collection_uid_cap: int = Field(default=10_000, gt=0)
    """Most items of a deletecollection response kept as the fact's uid set."""
    read_timeout_s: float = Field(default=15.0, gt=0)
    """Time allowed to receive one request body, in seconds (408 after)."""
    idle_timeout_s: float = Field(default=60.0, gt=0)
    """Keep-alive idle timeout, in seconds."""
    publish_timeout_s: float = Field(default=10.0, gt=0)
    """Time allowed for the log to acknowledge a request's facts, in seconds (503 after)."""
    admission: AdmissionSettings = AdmissionSettings()
    """The admission fact source on the same listener and routes."""

    @model_validator(mode="after")
    def _budget_holds_a_body(self) -> AuditSettings:
        if self.max_inflight_body_bytes < self.max_body_bytes:
            raise ValueError("max_inflight_body_bytes must be >= max_body_bytes")
        return self
