"""Who may post audit events: server TLS, client certificates, per-route identities and tokens.

Audit events name every user and carry request bodies, so the ingress refuses plain HTTP on a
non-loopback address unless the operator explicitly allows it, and each route can be bound to the
client-certificate identities or bearer tokens of the one apiserver that should post to it.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import logging
import os
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from pipeline.audit.rejections import Rejection
from pipeline.config import AuditRoute, AuditSettings, AuditTls, ConfigError

__all__ = [
    "Denied",
    "RoutePolicy",
    "authorize",
    "bearer_token",
    "check_listener",
    "is_loopback_host",
    "load_route_policies",
    "peer_identities",
    "server_ssl_context",
    "watch_certificate",
]

logger = logging.getLogger(__name__)


class RoutePolicy(NamedTuple):
    """The credentials one route accepts; both empty means any client the listener accepted."""

    name: str
    identities: frozenset[str]
    tokens: tuple[bytes, ...]

    @property
    def restricted(self) -> bool:
        return bool(self.identities or self.tokens)


class Denied(NamedTuple):
    """Why a request was refused: unauthenticated (401, no usable credential) or forbidden (403)."""

    rejection: Rejection
    reason: str

    @property
    def status(self) -> int:
        return self.rejection.status


def load_route_policies(
    routes: list[AuditRoute], environ: Mapping[str, str] | None = None
) -> dict[str, RoutePolicy]:
    """Resolve token environment variables once at start; a missing or empty one is a config error."""
    env = os.environ if environ is None else environ
    policies: dict[str, RoutePolicy] = {}
    for route in routes:
        tokens: list[bytes] = []
        for name in route.bearer_tokens_env:
            value = env.get(name, "")
            if not value.strip():
                raise ConfigError(
                    f"audit.routes[{route.name}].bearer_tokens_env: "
                    f"environment variable {name} is unset or empty"
                )
            tokens.append(value.strip().encode())
        policies[route.name] = RoutePolicy(route.name, frozenset(route.allowed_identities), tuple(tokens))
    return policies


def is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_listener(audit: AuditSettings, host: str) -> None:
    """Refuse an exposed listener that would take audit events from strangers.

    Off loopback, plain HTTP needs `allow_plain_http`, and every route needs allowed identities or
    bearer tokens unless it says `allow_unauthenticated: true`: an open route lets anyone who can
    reach the port post facts that name any author.
    """
    if is_loopback_host(host):
        return
    if audit.tls.cert_file is None and not audit.allow_plain_http:
        raise ConfigError(
            f"audit.addr {audit.addr}: refusing plain HTTP on a non-loopback address; "
            "set audit.tls.cert_file/key_file (and client_ca_file for mTLS), "
            "or audit.allow_plain_http: true to accept unencrypted audit events"
        )
    for route in audit.routes:
        if not route.restricted and not route.allow_unauthenticated:
            raise ConfigError(
                f"audit.routes[{route.name}]: refusing an unauthenticated route on the non-loopback "
                f"address {audit.addr}; set allowed_identities or bearer_tokens_env, "
                "or allow_unauthenticated: true on this route"
            )


def server_ssl_context(tls: AuditTls) -> ssl.SSLContext | None:
    """TLS >= 1.2 with the server certificate; with a client CA, client certificates are mandatory."""
    if tls.cert_file is None or tls.key_file is None:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(tls.cert_file, tls.key_file)
        if tls.client_ca_file is not None:
            context.load_verify_locations(cafile=tls.client_ca_file)
            context.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"audit.tls: cannot load certificates: {exc}") from exc
    return context


def _mtimes(paths: list[Path]) -> tuple[float, ...]:
    stamps: list[float] = []
    for path in paths:
        try:
            stamps.append(path.stat().st_mtime)
        except OSError:
            stamps.append(-1.0)
    return tuple(stamps)


async def watch_certificate(context: ssl.SSLContext, tls: AuditTls) -> None:
    """Reload the server certificate when its files change (cert-manager rotates them in place).

    New handshakes use the new chain; a half-written or invalid pair is logged and the old one kept.
    """
    if tls.cert_file is None or tls.key_file is None:
        return
    paths = [tls.cert_file, tls.key_file]
    seen = _mtimes(paths)
    while True:
        await asyncio.sleep(tls.reload_interval_s)
        current = _mtimes(paths)
        if current == seen:
            continue
        try:
            context.load_cert_chain(tls.cert_file, tls.key_file)
        except (OSError, ssl.SSLError) as exc:
            logger.warning(
                "audit TLS certificate changed but could not be loaded (keeping the old one): %s", exc
            )
            continue
        seen = current
        logger.info("audit TLS certificate reloaded from %s", tls.cert_file)


def peer_identities(peercert: Any) -> frozenset[str]:
    """Subject CNs and subjectAltName values of a verified client certificate."""
    if not isinstance(peercert, dict):
        return frozenset()
    found: set[str] = set()
    for rdn in peercert.get("subject", ()):
        for attribute in rdn:
            if len(attribute) == 2 and attribute[0] == "commonName":
                found.add(str(attribute[1]))
    for entry in peercert.get("subjectAltName", ()):
        if len(entry) == 2:
            found.add(str(entry[1]))
    return frozenset(found)


def bearer_token(authorization: str | None) -> bytes | None:
    """The token of an `Authorization: Bearer <token>` header, or None.

    aiohttp decodes header bytes that are not UTF-8 as lone surrogates (surrogateescape); encoding
    them back the same way gives the bytes the client sent, which then simply match no token.
    """
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip().encode("utf-8", "surrogateescape")


def authorize(policy: RoutePolicy, identities: frozenset[str], token: bytes | None) -> Denied | None:
    """None when the route accepts the caller; tokens are compared in constant time."""
    if not policy.restricted:
        return None
    if identities & policy.identities:
        return None
    if token is not None:
        matched = False
        for allowed in policy.tokens:
            matched |= hmac.compare_digest(token, allowed)
        if matched:
            return None
        return Denied(Rejection.FORBIDDEN, "bearer token not allowed on this route")
    if identities:
        return Denied(Rejection.FORBIDDEN, "client certificate identity not allowed on this route")
    return Denied(Rejection.UNAUTHENTICATED, "this route needs a client certificate or a bearer token")
