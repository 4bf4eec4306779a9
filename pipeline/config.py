"""The one YAML configuration file, validated by pydantic.

Every option can also be set from the environment: `REVERSER_<SECTION>__<FIELD>` (nested with
double underscores), e.g. `REVERSER_LOG__BOOTSTRAP_SERVERS=k:9092`. A value for a string field is
taken verbatim (a password may look like YAML: `*x`, `NO`, `0x1F`, `a #b`); any other value is
parsed as YAML. An invalid file exits with the path of the offending field and the reason; an
invalid environment value is named by its variable and never echoed, since it may be a secret.
"""

from __future__ import annotations

import difflib
import logging
import math
import os
import re
import types
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from pipeline.authormode import DEFAULT_ATTRIBUTION_MODE, AttributionMode, effective_mode
from pipeline.gitnames import (
    check_branch_name,
    check_remote_url,
    check_url_without_password,
    normalize_target_path,
    origin_of,
    paths_overlap,
    repository_key,
)
from pipeline.globs import GlobError, check_glob
from pipeline.gotemplate.commitdata import GoTemplateError, MessageKind
from pipeline.gotemplate.commitdata import check as check_go_template
from pipeline.logoutput import LOG_FORMAT_VARIABLE, LOG_LEVEL_VARIABLE
from pipeline.msgtemplate import check_template
from pipeline.operation import Operation
from pipeline.placement import NO_PLACEMENT, Placement, PlacementError, compile_placement
from pipeline.prune import Prune

ENV_PREFIX = "REVERSER_"
#: `REVERSER_*` variables that are the command line's, not settings: neither read nor warned about.
_COMMAND_LINE_VARIABLES = frozenset({LOG_LEVEL_VARIABLE, LOG_FORMAT_VARIABLE})
#: How close a single-segment `REVERSER_*` name must be to a top-level field to be taken for its typo
#: (others, like the test harness's `REVERSER_NO_SKIPS`, belong to other tools and are left alone).
_TYPO_CUTOFF = 0.8
#: How close an unknown name must be to a known one to be suggested ("did you mean ...?").
_SUGGEST_CUTOFF = 0.6
logger = logging.getLogger(__name__)
# A Kubernetes namespace (an RFC 1123 DNS label) and an object name (a DNS subdomain).
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_OBJECT_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
# An OpenPGP key as gpg's `--local-user` takes it: a key id (8 or 16 hex digits) or a fingerprint
# (40: v4, 64: v5/v6), optionally `0x`-prefixed; or the email address of one of its user ids.
_OPENPGP_KEY_ID = re.compile(r"(0[xX])?([0-9A-Fa-f]{8}|[0-9A-Fa-f]{16}|[0-9A-Fa-f]{40}|[0-9A-Fa-f]{64})")
_OPENPGP_EMAIL = re.compile(r"(<)?[A-Za-z0-9_.+=][A-Za-z0-9_.+=-]*@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*(?(1)>)")


def split_host_port(addr: str) -> tuple[str, int]:
    """`HOST:PORT` (or `[v6]:PORT`) into its parts; an empty host means every interface.

    Raises ValueError naming the problem (pydantic then names the field).
    """
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"address {addr!r} is not HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


def _check_host_port(addr: str) -> str:
    split_host_port(addr)
    return addr


#: A listen address `HOST:PORT`, checked when the configuration is read.
HostPort = Annotated[str, AfterValidator(_check_host_port)]


def check_bootstrap_servers(servers: str) -> str:
    """`HOST:PORT[,HOST:PORT...]`, or empty for the embedded log: the one rule for Kafka's brokers,
    shared by `log.bootstrap_servers` and `--bootstrap-server` so the two cannot disagree.

    Raises ValueError naming the address that is not HOST:PORT (pydantic then names the field)."""
    if servers:
        for server in servers.split(","):
            split_host_port(server.strip())
    return servers


#: Kafka's brokers, comma-separated `HOST:PORT`; empty selects the embedded log.
BootstrapServers = Annotated[str, AfterValidator(check_bootstrap_servers)]


def _closed_set(values: type[StrEnum]) -> WithJsonSchema:
    """The schema of a field typed by a StrEnum: its values inline, as a Literal's would be.

    The enum owns the set; helm reads the schema without `$defs`, so the values are written in
    place (no title, no description taken from the enum's docstring).
    """
    return WithJsonSchema({"enum": [member.value for member in values], "type": "string"})


class _Section(BaseModel):
    # A field's docstring is its description: `reverser config schema` prints them.
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


def _check_openpgp_key_id(key_id: str | None) -> str | None:
    """A key id gpg can only read as a key: hex, or an email address (never an option).

    The value reaches gpg's command line (`pipeline/commit/git/signing.py`, as `--local-user=ID` and
    after `--`), where anything starting with `-` would be an option such as `--logger-file`.
    """
    if key_id is None or _OPENPGP_KEY_ID.fullmatch(key_id) or _OPENPGP_EMAIL.fullmatch(key_id):
        return key_id
    raise ValueError(
        "not an OpenPGP key id: give 8 or 16 hex digits, a 40- or 64-digit fingerprint (0x optional), "
        "or the email address of one of the key's user ids"
    )


def _reject_duplicates(what: str, names: list[str]) -> None:
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"duplicate {what} names: {', '.join(duplicates)}")


class TlsSettings(_Section):
    """Client TLS towards Kafka."""

    ca_file: Path | None = None
    """CA bundle (PEM) that signs the brokers' certificates; none: the system trust store."""
    cert_file: Path | None = None
    """Client certificate (PEM) for mutual TLS with the brokers."""
    key_file: Path | None = None
    """Private key (PEM) of `cert_file`."""
    check_hostname: bool = True
    """Check that a broker's certificate names the host connected to."""


class SaslSettings(_Section):
    """SASL towards Kafka; the password is a SecretStr so no repr, log line or error shows it."""

    mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = "PLAIN"
    """SASL mechanism towards the brokers."""
    username: str = ""
    """SASL user name."""
    password: SecretStr = SecretStr("")
    """SASL password; set it through REVERSER_LOG__SASL__PASSWORD, never in the file."""


class TopicSettings(_Section):
    """Partitions and retention of the pipeline's topics (names are `<prefix>.<topic>`)."""

    audit_facts_partitions: int = Field(default=6, gt=0)
    """Partitions of `<prefix>.audit-facts`, created by `reverser topics create`."""
    watch_events_partitions: int = Field(default=6, gt=0)
    """Partitions of `<prefix>.watch-events`."""
    branch_work_partitions: int = Field(default=12, gt=0)
    """Partitions of `<prefix>.branch-work` (branches are spread over them)."""
    watch_cursors_partitions: int = Field(default=3, gt=0)
    """Partitions of the compacted `<prefix>.watch-cursors`."""
    object_state_partitions: int = Field(default=6, gt=0)
    """Partitions of the compacted `<prefix>.object-state`."""
    # History is bounded: a consumer starting cold reads `<prefix>.object-state` instead. -1 keeps
    # forever; `reverser topics check` flags a retention under a day (docs/log.md, "Bounded history").
    watch_events_retention_ms: int = Field(default=7 * 24 * 3600 * 1000, ge=-1)
    """Retention of `<prefix>.watch-events` in ms; -1 keeps forever."""
    branch_work_retention_ms: int = Field(default=14 * 24 * 3600 * 1000, ge=-1)
    """Retention of `<prefix>.branch-work` in ms; -1 keeps forever."""
    max_message_bytes: int = Field(default=4 * 1024 * 1024, gt=1024)
    """Largest record a topic accepts (max.message.bytes); records are split or refused to fit."""
    # None: 3 copies with min.insync.replicas 2 on a cluster of 3 or more brokers, fewer on a smaller
    # one (`pipeline.log.api.default_replication`); set them to override.
    replication_factor: int | None = Field(default=None, gt=0)
    """Copies of every partition; none: 3 on a cluster of 3 or more brokers, fewer on a smaller one."""
    min_insync_replicas: int | None = Field(default=None, gt=0)
    """Copies that must acknowledge an append; none: 2 with 3 copies, fewer on a smaller cluster."""

    @model_validator(mode="after")
    def _min_insync_fits(self) -> TopicSettings:
        factor, min_insync = self.replication_factor, self.min_insync_replicas
        if factor is not None and min_insync is not None and min_insync > factor:
            raise ValueError(
                f"min_insync_replicas ({min_insync}) cannot exceed replication_factor ({factor})"
            )
        return self


class Compression(StrEnum):
    """Codec of the record batches producers write to Kafka (the broker keeps the producer's)."""

    NONE = "none"
    GZIP = "gzip"
    SNAPPY = "snappy"
    LZ4 = "lz4"
    ZSTD = "zstd"


class LogSettings(_Section):
    """Which log backs the pipeline. No bootstrap servers means the embedded file log."""

    backend: Literal["auto", "kafka", "embedded"] = "auto"
    """`kafka`, `embedded`, or `auto`: Kafka when bootstrap_servers is set, else the embedded file log."""
    bootstrap_servers: BootstrapServers = ""
    """Comma-separated Kafka brokers HOST:PORT; empty: the embedded log under workdir."""
    topic_prefix: str = Field(default="reverser", pattern=r"^[A-Za-z0-9._-]{1,200}$")
    """Every topic is named `<prefix>.<topic>`; consumer groups and transactional ids use it too."""
    client_id: str = "reverser"
    """Kafka client id the pipeline's clients announce."""
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    """How the Kafka clients connect: plain, TLS, SASL, or SASL over TLS."""
    tls: TlsSettings = TlsSettings()
    """Client TLS towards Kafka (security_protocol SSL or SASL_SSL)."""
    sasl: SaslSettings = SaslSettings()
    """SASL towards Kafka (security_protocol SASL_PLAINTEXT or SASL_SSL)."""
    request_timeout_ms: int = Field(default=15_000, gt=0)
    """Kafka: how long one request may take before it is retried."""
    connect_retries: int = Field(default=5, ge=0)
    """Kafka: connection attempts at start before the log counts as unavailable."""
    retry_backoff_ms: int = Field(default=200, gt=0)
    """Kafka: pause before a failed request is retried."""
    topics: TopicSettings = TopicSettings()
    """Partitions, retention and replication of the pipeline's topics."""
    fsync: bool = True
    """Embedded log: fsync records, group offsets and their directories before acknowledging them
    (survives a power loss). Off only where losing the newest records is acceptable (the demo)."""
    transaction_timeout_ms: int = Field(default=60_000, gt=0)
    """Kafka: how long the broker lets a transaction stay open before aborting it."""
    session_timeout_ms: int = Field(default=30_000, ge=1_000)
    """Kafka: how long a silent group member (a crashed process) keeps its partitions before the group
    hands them to the others; the broker allows 6 s to 30 min by default."""
    compression: Compression = Compression.ZSTD
    """Kafka: codec of produced record batches. zstd (Kafka >= 2.1, Redpanda) packs YAML-like objects
    best; lz4 is cheaper on CPU; none for a broker that refuses both. The embedded log ignores it."""

    @property
    def effective_backend(self) -> Literal["kafka", "embedded"]:
        if self.backend == "auto":
            return "kafka" if self.bootstrap_servers else "embedded"
        return self.backend

    @model_validator(mode="after")
    def _kafka_needs_servers(self) -> LogSettings:
        if self.backend == "kafka" and not self.bootstrap_servers:
            raise ValueError("backend 'kafka' needs bootstrap_servers")
        return self


class MetricsSettings(_Section):
    """The metrics and health server; `/readyz` probes the log every `log_probe_interval_s`."""

    addr: HostPort = "127.0.0.1:9464"
    """Listen address HOST:PORT of /metrics, /healthz and /readyz (`--metrics-addr`); port 0 picks a free
    port."""
    log_probe_interval_s: float = Field(default=5.0, gt=0)
    """How often /readyz probes the log, in seconds."""
    log_probe_timeout_s: float = Field(default=5.0, gt=0)
    """How long one log probe may take before the replica counts as not ready, in seconds."""
    loop_stall_fail_s: float = Field(default=30.0, gt=0)
    """How long the event loop may go without running before /healthz and /readyz fail, in seconds.
    They are served from a thread of their own and answer during any stall; past this one the
    process counts as wedged and a liveness probe restarts it."""


class AuditRoute(_Section):
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


class AuditTls(_Section):
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


class AdmissionSettings(_Section):
    """The admission fact source on the audit ingress (docs/audit-ingress.md, "Admission facts")."""

    enabled: bool = False
    """Serve POST /admission-webhook/<route>: a validating webhook whose reviews become author facts
    (for clusters whose audit webhook cannot be configured); always answers allowed."""
    publish_timeout_s: float = Field(default=2.0, gt=0)
    """Time allowed for the log to acknowledge a review's fact, in seconds; keep it below the
    webhook's timeoutSeconds (the review is allowed either way, the fact is then lost)."""


class AuditSettings(_Section):
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
    routes: list[AuditRoute] = [AuditRoute(name="default")]
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

    @field_validator("routes")
    @classmethod
    def _unique_routes(cls, routes: list[AuditRoute]) -> list[AuditRoute]:
        _reject_duplicates("audit route", [r.name for r in routes])
        return routes

    @model_validator(mode="after")
    def _budget_holds_a_body(self) -> AuditSettings:
        if self.max_inflight_body_bytes < self.max_body_bytes:
            raise ValueError("max_inflight_body_bytes must be >= max_body_bytes")
        return self


class AttributionSettings(_Section):
    """The fact index and the join (see docs/attribution.md)."""

    ttl_s: float = Field(default=600.0, gt=0)
    """A fact is dead once its append time is older than now - ttl (seconds); also the replay horizon."""
    grace_ms: int = Field(default=3000, ge=0)
    """How long a resolution waits for a better fact, in ms (0: one lookup)."""
    max_wait_ms: int = Field(default=15000, ge=0)
    """How long a resolution may be held while the route's audit watermark is behind the event, in ms."""
    reorder_ms: int = Field(default=5000, ge=0)
    """How far audit time must pass an event before its resolution stops waiting, in ms: audit
    batches overtake each other across replicas by up to this much."""
    max_facts_per_type: int = Field(default=4096, gt=0)
    """Index entries per (route, group/resource)."""
    max_facts: int = Field(default=65536, gt=0)
    """Index entries in all (at least max_facts_per_type)."""
    collection_window_s: float = Field(default=30.0, gt=0)
    """How long a body-less deletecollection may match by label selector, in seconds."""
    sweep_interval_s: float = Field(default=30.0, gt=0)
    """How often expired facts are dropped from memory, in seconds."""

    @model_validator(mode="after")
    def _caps(self) -> AttributionSettings:
        if self.max_facts < self.max_facts_per_type:
            raise ValueError("max_facts must be >= max_facts_per_type")
        return self


class KubeconfigSecretReference(_Section):
    """A Secret holding a source cluster's kubeconfig (gitops-reverser's ClusterProvider
    `spec.kubeConfig.secretRef`), read through the API server of the cluster the custom resources
    live in (`custom_resources.cluster`, else the first of `clusters`), so a remote cluster's
    credential never has to be a file in the pod. Only this reference is in the configuration."""

    namespace: str = Field(pattern=_DNS_LABEL)
    """Namespace of the Secret."""
    name: str = Field(pattern=_OBJECT_NAME)
    """Name of the Secret."""
    key: str | None = Field(default=None, min_length=1)
    """The Secret key holding the kubeconfig; none: `value`, else `value.yaml` (Flux's order)."""

    def describe(self) -> str:
        return f"Secret {self.namespace}/{self.name}"


class ClusterSettings(_Section):
    """A source cluster; its name is the audit route its facts arrive on."""

    name: str
    """The source cluster's name; its audit facts arrive on the route of the same name unless audit_route
    says otherwise."""
    kubeconfig: Path | None = None
    """Kubeconfig file to reach the cluster's API server."""
    context: str | None = None
    """Context of the kubeconfig to use; none: its current context."""
    in_cluster: bool = False
    """Use the pod's service account (when running inside the cluster)."""
    kubeconfig_secret: KubeconfigSecretReference | None = None
    """A Secret holding the kubeconfig, instead of `kubeconfig` or `in_cluster` (a remote cluster)."""
    qps: float | None = Field(default=None, gt=0)
    """Requests per second this process sends the cluster's API server (LIST, WATCH, discovery),
    averaged; none: unthrottled."""
    burst: int | None = Field(default=None, ge=1)
    """Requests that may go at once above `qps`; none: `qps` rounded up (needs `qps`)."""
    audit_route: str | None = None
    """The audit route this cluster's facts arrive on; none: the cluster's name."""
    attribution: AttributionMode | None = None
    """Who authors its targets' commits: `audit` (the audit facts name the author) or `configured-author`
    (the provider's committer, no wait: a cluster without audit delivery, such as EKS, GKE or AKS);
    none: its audit route's (`audit.routes[].attribution`), else `audit`."""
    watch_backoff_initial_s: float = Field(default=1.0, gt=0)
    """First pause before a failed watch is retried, in seconds (doubles up to the max)."""
    watch_backoff_max_s: float = Field(default=60.0, gt=0)
    """Longest pause between watch retries, in seconds."""
    watch_timeout_s: int = Field(default=300, gt=0)
    """Server-side timeout of one watch request, in seconds."""
    watch_rediscover_s: float = Field(default=300.0, gt=0)
    """How often API discovery is repeated to pick up new resource types, in seconds."""
    watch_list_page_size: int = Field(default=500, gt=0, le=10_000)
    """Objects per LIST page when a snapshot falls back to LIST (a server without WatchList); one
    page at a time is held in memory, so this bounds a snapshot's memory, in objects."""
    watch_slice_ms: float = Field(default=20.0, gt=0, le=1000)
    """Longest run of snapshot or event processing before a stream gives the event loop back (so
    `/healthz` answers during a large sync), in milliseconds."""
    leader_election: bool = False
    """Watch this cluster only while holding its Lease (needed with more than one replica)."""
    lease_namespace: str | None = Field(default=None, pattern=_DNS_LABEL)
    """Namespace of the Lease; none: the namespace the process runs in."""
    lease_name: str | None = None
    """Name of the Lease; none: reverser-watch-<cluster name>."""
    lease_duration_s: float = Field(default=15.0, gt=0)
    """How long a Lease holder keeps leadership without renewing, in seconds."""
    lease_renew_s: float = Field(default=2.0, gt=0)
    """How often the holder renews its Lease, in seconds."""
    watch_claim_interval_s: float = Field(default=5.0, gt=0)
    """How often a watcher writes its claim on watch-claims (detects a second watcher), in seconds."""

    @property
    def route(self) -> str:
        return self.audit_route or self.name

    @property
    def effective_lease_name(self) -> str:
        """The Lease that elects the one replica watching this cluster."""
        return self.lease_name or f"reverser-watch-{self.name}"

    @property
    def effective_burst(self) -> int | None:
        """The throttle's burst, in requests; None: no throttle."""
        if self.qps is None:
            return None
        return self.burst if self.burst is not None else max(1, math.ceil(self.qps))

    @model_validator(mode="after")
    def _connection(self) -> ClusterSettings:
        if self.kubeconfig_secret is not None:
            other = next(
                (f for f, set_ in (("kubeconfig", self.kubeconfig), ("in_cluster", self.in_cluster)) if set_),
                None,
            )
            if other is not None:
                raise ValueError(
                    f"kubeconfig_secret and {other} are exclusive: choose one way to reach the cluster"
                )
            if self.context is not None:
                raise ValueError(
                    "context applies to a kubeconfig file; kubeconfig_secret uses its current context"
                )
        if self.burst is not None and self.qps is None:
            raise ValueError("burst needs qps (the rate the burst is taken above)")
        return self

    @model_validator(mode="after")
    def _timing_ranges(self) -> ClusterSettings:
        if self.watch_backoff_max_s < self.watch_backoff_initial_s:
            raise ValueError("watch_backoff_max_s must be >= watch_backoff_initial_s")
        if self.lease_renew_s >= self.lease_duration_s:
            raise ValueError("lease_renew_s must be shorter than lease_duration_s")
        return self


class CommitterSettings(_Section):
    """The identity every commit names as committer (the author is the person who made the change)."""

    name: str = "Reverser Pipeline"
    """Committer name on every commit."""
    email: str = "noreply@reverser.invalid"
    """Committer email on every commit."""


class SecretReference(_Section):
    """A Secret holding a provider's Git credentials or signing key (keys: docs/secrets.md).

    Read by the commit worker from the cluster custom resources live in (`custom_resources.cluster`,
    else the first of `clusters`) when it first needs the remote, and again after the remote
    refuses them; only this reference is in the configuration, never a value.
    """

    namespace: str = Field(pattern=_DNS_LABEL)
    """Namespace of the Secret."""
    name: str = Field(pattern=_OBJECT_NAME)
    """Name of the Secret."""

    def describe(self) -> str:
        return f"{self.namespace}/{self.name}"


class KnownHostsReference(_Section):
    """A ConfigMap or Secret whose `known_hosts` (or `ssh_known_hosts`) key lists the SSH host keys."""

    kind: Literal["ConfigMap", "Secret"] = "ConfigMap"
    """ConfigMap (default) or Secret."""
    namespace: str = Field(pattern=_DNS_LABEL)
    """Namespace of the object."""
    name: str = Field(pattern=_OBJECT_NAME)
    """Name of the object."""

    def describe(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


class SshSettings(_Section):
    """How an `ssh://` or `user@host:path` remote is reached (docs/commit-worker.md, SSH remotes).

    The key comes from a file, from an environment variable (never this file) or from the
    provider's `credentials_secret`. Host keys are checked strictly against `known_hosts_file` (or
    the Secret's or `known_hosts_ref`'s); an unknown host is refused unless
    `allow_unknown_host_keys` (then the first key seen is pinned in the workdir).
    """

    private_key_file: Path | None = None
    """SSH private key file for the remote."""
    private_key_env: str | None = None
    """Environment variable holding the SSH private key."""
    known_hosts_file: Path | None = None
    """known_hosts file the remote's host key is checked against."""
    allow_unknown_host_keys: bool = False
    """Accept any host key (unsafe; for tests and first contact only)."""

    @model_validator(mode="after")
    def _one_key(self) -> SshSettings:
        if self.private_key_file is not None and self.private_key_env is not None:
            raise ValueError("give exactly one of private_key_file and private_key_env")
        return self

    @property
    def has_key(self) -> bool:
        return self.private_key_file is not None or self.private_key_env is not None


class SigningSettings(_Section):
    """Commit signing: `ssh` (gpg.format=ssh, a private key) or `openpgp` (a GnuPG secret key).

    The committer identity must match the key: for OpenPGP the key needs a user id with the
    committer's email; for SSH the verifier's allowed-signers file maps that email to the key.
    """

    format: Literal["ssh", "openpgp"]
    """`ssh` (gpg.format=ssh with a private key) or `openpgp` (a GnuPG secret key)."""
    key_file: Path | None = None
    """Signing key file."""
    key_env: str | None = None
    """Environment variable holding the signing key."""
    key_secret: SecretReference | None = None
    """A Kubernetes Secret holding the SSH signing key (a GitProvider's spec.commit.signing.secretRef;
    keys: docs/secrets.md, Commit signing key from a Secret); needs a cluster."""
    gpg_home: Path | None = None
    """GnuPG home directory holding the OpenPGP secret key."""
    key_id: Annotated[str | None, AfterValidator(_check_openpgp_key_id)] = None
    """OpenPGP key to sign with: its key id or fingerprint (hex), or a user id's email address;
    none: the committer email."""

    @model_validator(mode="after")
    def _key_for_format(self) -> SigningSettings:
        given = [v for v in (self.key_file, self.key_env, self.key_secret) if v is not None]
        if self.format == "ssh" and len(given) != 1:
            raise ValueError("ssh signing needs exactly one of key_file, key_env and key_secret")
        if self.format == "ssh" and self.key_id is not None:
            raise ValueError("key_id names an OpenPGP key; ssh signing takes key_file, key_env or key_secret")
        if self.format == "openpgp" and given:
            raise ValueError("openpgp signing uses gpg_home and key_id, not key_file/key_env/key_secret")
        return self


class ProviderSettings(_Section):
    """A Git remote; credentials come from environment variables or a Kubernetes Secret, never
    from this file.

    Basic credentials over plain `http://` would travel readable by anyone on the path, so they
    need `allow_plain_http_credentials: true`.
    """

    name: str
    """The provider's name; targets refer to it."""
    url: str
    """The Git remote: https://, http://, ssh://, user@host:path or a local path."""
    default_branch: str = "main"
    """Branch a target writes to when it names none."""
    username_env: str | None = None
    """Environment variable holding the HTTP user name."""
    password_env: str | None = None
    """Environment variable holding the HTTP password or token."""
    allow_plain_http_credentials: bool = False
    """Send Basic credentials over plain http:// (unsafe)."""
    committer: CommitterSettings = CommitterSettings()
    """The committer every commit names (the author is who made the change)."""
    commit_window_s: float = Field(default=5.0, ge=0)
    """Silence in seconds that closes a commit window (0: one commit per change)."""
    commit_window_max_s: float | None = Field(default=None, gt=0)
    """Longest a commit window stays open, in seconds, however steadily writes keep coming; none: its
    own commit_window_s (the provider's or the target's)."""
    push_cooldown_s: float = Field(default=5.0, ge=0)
    """Least time between two pushes of one branch, in seconds."""
    window_max_bytes: int = Field(default=8 * 1024 * 1024, gt=0)
    """Largest commit window in bytes of objects; a larger one is closed early."""
    push_max_backoff_s: float = Field(default=60.0, gt=0)
    """Longest pause between retries of a failing push, in seconds."""
    ssh: SshSettings | None = None
    """How an SSH remote is reached."""
    credentials_secret: SecretReference | None = None
    """A Kubernetes Secret with the credentials (SSH key, user name and password, or bearer token),
    instead of username_env/password_env/ssh keys; needs a cluster (docs/secrets.md)."""
    known_hosts_ref: KnownHostsReference | None = None
    """A ConfigMap or Secret with the SSH known_hosts, when the credentials Secret has none."""
    credentials_refresh_s: float = Field(default=300.0, ge=0)
    """Seconds after which the next push reads credentials_secret (and known_hosts_ref) again, so a
    rotated Secret is used before the old credentials are revoked (0: only after a refusal)."""
    signing: SigningSettings | None = None
    """Commit signing; none: commits are not signed."""

    @field_validator("url")
    @classmethod
    def _safe_url(cls, url: str) -> str:
        return check_url_without_password(check_remote_url(url))

    @field_validator("default_branch")
    @classmethod
    def _branch_name(cls, branch: str) -> str:
        return check_branch_name(branch)

    @model_validator(mode="after")
    def _no_plain_http_credentials(self) -> ProviderSettings:
        origin = origin_of(self.url)
        plain = origin is not None and origin.scheme == "http"
        sends = self.password_env is not None or self.credentials_secret is not None
        if plain and sends and not self.allow_plain_http_credentials:
            raise ValueError(
                f"provider {self.name}: refusing to send Basic credentials over plain http://; "
                "use https:// or set allow_plain_http_credentials: true"
            )
        return self

    @model_validator(mode="after")
    def _one_credentials_source(self) -> ProviderSettings:
        """Credentials from the environment or from a Secret, never both; SSH host trust from one place."""
        ssh = self.ssh
        if self.credentials_secret is not None:
            env_fields = [
                name
                for name, value in (
                    ("username_env", self.username_env),
                    ("password_env", self.password_env),
                    ("ssh.private_key_env", ssh.private_key_env if ssh else None),
                    ("ssh.private_key_file", ssh.private_key_file if ssh else None),
                )
                if value is not None
            ]
            if env_fields:
                raise ValueError(
                    f"credentials_secret and {', '.join(env_fields)} both give credentials; keep one"
                )
        elif ssh is not None and not ssh.has_key:
            raise ValueError("ssh: give exactly one of private_key_file and private_key_env")
        if ssh is not None and ssh.known_hosts_file is not None and self.known_hosts_ref is not None:
            raise ValueError("ssh.known_hosts_file and known_hosts_ref both give known hosts; keep one")
        from_cluster = self.credentials_secret is not None or self.known_hosts_ref is not None
        trusted = ssh is None or ssh.known_hosts_file is not None or ssh.allow_unknown_host_keys
        if not trusted and not from_cluster:
            raise ValueError("ssh: known_hosts_file is required (or set allow_unknown_host_keys: true)")
        return self

    @property
    def credentials_from_cluster(self) -> bool:
        """Whether the commit worker reads the credentials (or the known hosts) from the cluster."""
        return self.credentials_secret is not None or self.known_hosts_ref is not None

    @property
    def signing_secret(self) -> SecretReference | None:
        """The Secret holding the SSH signing key, if the provider signs with one."""
        return None if self.signing is None else self.signing.key_secret

    @property
    def reads_cluster(self) -> bool:
        """Whether the commit worker reads anything of this provider from the cluster."""
        return self.credentials_from_cluster or self.signing_secret is not None


class WatchRule(_Section):
    """Resources (`resource` or `group/resource`) to mirror, in some namespaces or cluster-wide."""

    resources: list[Annotated[str, Field(pattern=r"^(\*|[a-z0-9.-]+)(/(\*|[a-z0-9.-]+))?$|^/\*$")]] = Field(
        min_length=1
    )
    """Resources to mirror, as `resource` or `group/resource`; or a pattern: `*` (every resource of
    every group), `group/*` (`/*`: the core group), `*/resource` (that resource in every group)."""
    namespaces: list[Annotated[str, Field(pattern=_DNS_LABEL)]] = []
    """Namespaces to mirror them in; empty with cluster_wide: every namespace."""
    cluster_wide: bool = False
    """Mirror cluster-scoped resources, or namespaced ones in every namespace."""
    label_selector: str = ""
    """Kubernetes label selector the objects must match; empty: all."""
    operations: list[Annotated[Operation, _closed_set(Operation)]] = []
    """Which changes of these resources reach Git (CREATE adds a file, UPDATE changes one, DELETE
    removes one, whether seen as a watch event or inferred from a snapshot); empty: all."""
    versions: list[Annotated[str, Field(pattern=r"^v[0-9]+((alpha|beta)[0-9]+)?$")]] = []
    """API versions to watch these resources at, in order of preference: the first one their
    group serves is watched (files carry that apiVersion); empty: the group's preferred version."""

    @model_validator(mode="after")
    def _one_scope(self) -> WatchRule:
        if self.cluster_wide and self.namespaces:
            raise ValueError("give either namespaces or cluster_wide, not both")
        return self


class EncryptionSettings(_Section):
    """SOPS + age encryption of a target's Secrets and other sensitive resources (docs/secrets.md).

    Recipients come from `age_recipients`, or from the creation rules of `sops_config` (a copy of the
    repository's `.sops.yaml`). The digest key (from the environment, never this file) keys the
    content digest that lets unchanged Secrets produce no commit.
    """

    age_recipients: list[Annotated[str, Field(pattern=r"^age1[02-9ac-hj-np-z]{58}$")]] = []
    """age public keys the SOPS files are encrypted to."""
    sops_config: Path | None = None
    """A .sops.yaml to use instead of age_recipients."""
    digest_key_env: str = "REVERSER_SECRETS_DIGEST_KEY"
    """Environment variable holding the key of the content digests of sealed objects."""
    sensitive_resources: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9.-]+(/[A-Za-z0-9.-]+)?$")]] = []
    """Resources encrypted besides Secrets, as `resource` or `group/resource`."""
    age_key_secret: SecretReference | None = None
    """A Secret of `*.agekey` entries (age private keys, as Flux keeps them) whose public keys are
    added to age_recipients by the configuration controller (custom resources only); the private
    keys are never on the log."""
    generate_age_key: bool = False
    """Let the configuration controller create age_key_secret (one dated `*.agekey` entry) when it
    does not exist or holds no `*.agekey` entry."""

    @model_validator(mode="after")
    def _some_recipient(self) -> EncryptionSettings:
        if not self.age_recipients and self.sops_config is None and self.age_key_secret is None:
            raise ValueError("encryption needs age_recipients, sops_config or age_key_secret")
        if self.generate_age_key and self.age_key_secret is None:
            raise ValueError("generate_age_key needs age_key_secret")
        return self


class CommitMessageSettings(_Section):
    """A target's commit message templates (docs/commit-worker.md, Messages).

    `subject`/`body` in `${variable}` syntax: `${operation}`, `${resource}`, `${api_version}`,
    `${namespace}`, `${name}`, `${author}`, `${count}`, `${target}` and `${objects}` (one line per
    object). Or gitops-reverser's Go templates, which write the whole message: `event_template`
    (a window of one object), `group_template` (several) and `reconcile_template` (a snapshot),
    with GR's variables. The `Reverser-*` trailers are always appended by the worker and cannot
    be written by a template.
    """

    subject: str | None = None
    """Subject line template; none: the built-in subject."""
    body: str | None = None
    """Body template; none: the built-in body."""
    event_template: str | None = None
    """Go text/template for a window of one object (GR's `eventTemplate`); none: the built-in message."""
    group_template: str | None = None
    """Go text/template for a window of several objects (GR's `groupTemplate`); none: built-in."""
    reconcile_template: str | None = None
    """Go text/template for a snapshot's commit (GR's `reconcileTemplate`); none: built-in."""

    @field_validator("subject", "body")
    @classmethod
    def _known_variables(cls, text: str | None) -> str | None:
        return None if text is None else check_template(text)

    @field_validator("event_template", "group_template", "reconcile_template")
    @classmethod
    def _go_template(cls, text: str | None, info: ValidationInfo) -> str | None:
        if text is None:
            return None
        try:
            return check_go_template(MessageKind(str(info.field_name).removesuffix("_template")), text)
        except GoTemplateError as exc:
            raise ValueError(f"Go template: {exc}") from None

    @model_validator(mode="after")
    def _one_style(self) -> CommitMessageSettings:
        if (self.subject is not None or self.body is not None) and (
            self.event_template is not None or self.group_template is not None
        ):
            raise ValueError(
                "subject/body and event_template/group_template both write a window's message; keep one"
            )
        return self


class PlacementSettings(_Section):
    """gitops-reverser's `placement`: where the file of a new object goes in the target folder
    (an object that already has a home file is edited there; docs/intent.md)."""

    by_type: dict[str, str] = {}
    """Path template per type, keyed `group/version/resource` (`v1/configmaps` for the core group),
    e.g. `{namespace}/{resource}/{name}.yaml`."""
    default: str | None = None
    """Path template for the types `by_type` does not name; none: beside the folder's single
    kustomization, else the canonical path."""
    _compiled: Placement = PrivateAttr(default=NO_PLACEMENT)

    @model_validator(mode="after")
    def _compile(self) -> PlacementSettings:
        try:
            self._compiled = compile_placement(self.by_type, self.default, fields=("by_type", "default"))
        except PlacementError as exc:
            raise ValueError(str(exc)) from None
        return self

    @property
    def compiled(self) -> Placement:
        """The templates, parsed and checked (`pipeline.placement`)."""
        return self._compiled


class KustomizeRender(StrEnum):
    """Whether the commit worker runs `kustomize build` on the folders an edit touches."""

    ON = "on"
    OFF = "off"


class KustomizeSettings(_Section):
    """The real `kustomize build` of every kustomization an in-place edit touches, before and after:
    the edit is committed only when the rendering changes exactly as the cluster did
    (docs/commit-worker.md)."""

    render: Annotated[KustomizeRender, _closed_set(KustomizeRender)] = KustomizeRender.OFF
    """on: render before and after each edit of a kustomize folder and refuse one that renders
    otherwise (RenderMismatch) or cannot be rendered (RenderFailed); off: edit without rendering."""
    binary: str = "kustomize"
    """The kustomize executable: a path, or a name looked up on PATH."""
    timeout_s: float = Field(default=30.0, gt=0, le=600)
    """How long one `kustomize build` may take before the edit is refused (RenderFailed)."""

    @field_validator("render", mode="before")
    @classmethod
    def _yaml_switch(cls, render: Any) -> Any:
        """YAML 1.1 reads a bare `on`/`off` as a boolean; it means the same here."""
        if isinstance(render, bool):
            return KustomizeRender.ON if render else KustomizeRender.OFF
        return render


class TargetSettings(_Section):
    """Where one cluster's resources land: a path on a branch of a provider."""

    name: str
    """The target's name (unique)."""
    provider: str
    """The provider whose remote this target writes to."""
    branch: str | None = None
    """Branch on the remote; none: the provider's default_branch."""
    path: str = "."
    """Folder on the branch the cluster's objects are written under."""
    cluster: str = "default"
    """The source cluster this target mirrors."""
    prune: Annotated[Prune, _closed_set(Prune)] = Prune.ON_EVENT
    """When objects that no longer exist are removed from the branch: Never, OnEvent (deletions only) or
    Always (also after a snapshot)."""
    commit_window_s: float | None = Field(default=None, ge=0)
    """Overrides the provider's commit_window_s for this target."""
    rules: list[WatchRule] = []
    """Which resources of the cluster are mirrored."""
    encryption: EncryptionSettings | None = None
    """SOPS encryption of Secrets and other sensitive resources; none: they are not written."""
    commit_message: CommitMessageSettings | None = None
    """Commit message templates; none: the built-in messages."""
    attribution: AttributionMode | None = None
    """Overrides its cluster's attribution mode for this target; none: the cluster's."""
    placement: PlacementSettings | None = None
    """Where new objects' files go (gitops-reverser's `spec.placement`); none: beside the folder's
    single kustomization, else the canonical path."""
    kustomize: KustomizeSettings = KustomizeSettings()
    """Rendering kustomize folders before and after an in-place edit."""

    @property
    def placement_policy(self) -> Placement:
        """The compiled `placement` (no templates when it is not set)."""
        return self.placement.compiled if self.placement is not None else NO_PLACEMENT

    @field_validator("branch")
    @classmethod
    def _branch_name(cls, branch: str | None) -> str | None:
        return None if branch is None else check_branch_name(branch)

    @model_validator(mode="after")
    def _sensitive_placement(self) -> TargetSettings:
        """No placement template may bundle objects of the target's sensitive types: their SOPS
        documents each need a file of their own (`Placement.check_sensitive`)."""
        if self.placement is None or self.encryption is None:
            return self
        # `group/resource` or `resource`, as `pipeline.models.GroupResource.parse` reads them
        extra = [entry.strip().lower().rpartition("/") for entry in self.encryption.sensitive_resources]
        try:
            self.placement.compiled.check_sensitive(
                ((group, resource) for group, _, resource in extra),
                ("placement.by_type", "placement.default"),
            )
        except PlacementError as exc:
            raise ValueError(str(exc)) from None
        return self

    @field_validator("path")
    @classmethod
    def _safe_path(cls, path: str) -> str:
        normalize_target_path(path)
        return path


def _check_pattern(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
    return pattern


class LagThreshold(_Section):
    """A lag-seconds limit for the groups matching `group` (re.search; the first matching entry wins)."""

    group: str
    """Regular expression (re.search) of the consumer groups the limit applies to."""
    max_lag_s: float = Field(gt=0)
    """Lag in seconds above which the group is reported over its limit."""

    @field_validator("group")
    @classmethod
    def _pattern(cls, pattern: str) -> str:
        return _check_pattern(pattern)


class LagSettings(_Section):
    """The consumer-lag monitor (see docs/lag.md).

    `allow`/`deny` are regular expressions (re.search) over group names; they bound the metric
    label cardinality. `window` is the number of commits Burrow's rules look at; `history_points`
    bounds the per-partition log-end offset history behind lag in seconds. `thresholds` give
    groups a lag-seconds limit; `cluster_name` names the cluster in Burrow's HTTP API, served on
    the metrics port while `burrow_api` is true.
    """

    enabled: bool = True
    """Run the consumer-lag monitor inside `reverser run`."""
    poll_interval_s: float = Field(default=30.0, gt=0)
    """How often offsets are read, in seconds."""
    window: int = Field(default=10, ge=2)
    """Offset snapshots a partition's status is judged over (Burrow's window)."""
    history_points: int = Field(default=60, ge=2, le=10_000)
    """Snapshots kept per partition for lag-in-seconds estimates."""
    allow: list[str] = [".*"]
    """Regular expressions of the consumer groups monitored."""
    deny: list[str] = []
    """Regular expressions of consumer groups left out (checked after allow)."""
    thresholds: list[LagThreshold] = []
    """Lag-seconds limits per group pattern; the first matching entry wins."""
    kafka_lag_exporter_names: bool = False
    """Also export the metrics under kafka-lag-exporter's names."""
    cluster_name: str = Field(default="local", pattern=r"^[A-Za-z0-9._-]+$")
    """Cluster name in Burrow's API paths and the metrics."""
    burrow_api: bool = True
    """Serve Burrow's v3 read API on the metrics port."""

    @field_validator("allow", "deny")
    @classmethod
    def _patterns(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            _check_pattern(pattern)
        return patterns


#: What `{namespace}` in a tenant grant's prefixes stands for: the object's own namespace.
NAMESPACE_PLACEHOLDER = "{namespace}"


class TenantGrant(_Section):
    """What GitProviders and GitTargets in some tenant namespaces may point at (docs/security.md, Tenants).

    Deny by default, as gitops-reverser's ClusterProvider `allowedNamespaces`: an object outside
    `custom_resources.namespace` whose namespace no grant matches gets no provider and no target.
    `{namespace}` in a prefix stands for the object's own namespace, so one grant serves every team.
    """

    namespaces: list[str] = Field(min_length=1)
    """Namespaces the grant is for, as Go path.Match globs (`team-*`)."""
    url_prefixes: list[str] = Field(min_length=1)
    """A GitProvider's `spec.url` must start with one of these, ending at a `/` (or be one), such as
    `https://git.example.com/{namespace}/`."""
    path_prefixes: list[str] = [NAMESPACE_PLACEHOLDER]
    """A GitTarget's `spec.path` must be one of these folders or inside one (`.`: anywhere in the
    repository); default `{namespace}`."""
    clusters: list[str] = []
    """Entries of `clusters` a GitTarget there may mirror (its namespace there); empty: only the
    cluster the custom resources live in."""

    @field_validator("namespaces")
    @classmethod
    def _globs(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                check_glob(pattern)
            except GlobError as exc:
                raise ValueError(f"namespace pattern {pattern!r}: {exc}") from None
        return patterns

    @field_validator("url_prefixes")
    @classmethod
    def _urls(cls, prefixes: list[str]) -> list[str]:
        for prefix in prefixes:
            check_url_without_password(check_remote_url(prefix.replace(NAMESPACE_PLACEHOLDER, "x")))
        return prefixes

    @field_validator("path_prefixes")
    @classmethod
    def _paths(cls, prefixes: list[str]) -> list[str]:
        for prefix in prefixes:
            normalize_target_path(prefix.replace(NAMESPACE_PLACEHOLDER, "x"))
        return prefixes


class CustomResourceSettings(_Section):
    """Providers, targets and rules from `configbutler.ai` custom resources (docs/custom-resources.md).

    Enabled, the file keeps everything else (log, clusters, audit, ...) but may not list providers
    or targets: the two sources are never mixed. `cluster` names the entry of `clusters` the
    objects live in (default: the first); objects in `namespace` keep their names, others are
    named `namespace/name`.
    """

    enabled: bool = False
    """Read providers, targets and rules from configbutler.ai custom resources instead of this file."""
    cluster: str | None = None
    """The entry of `clusters` whose API holds the custom resources; none: the first."""
    namespace: str = Field(default="reverser", pattern=_DNS_LABEL)
    """The controller's namespace: objects there keep their names, others are named `namespace/name`."""
    tenants: list[TenantGrant] = []
    """Repositories and folders the objects of other namespaces may use; none: no other namespace
    gets a provider or a target (docs/security.md, Tenants)."""


def shares_folder(first: tuple[str, str, str], second: tuple[str, str, str]) -> bool:
    """Whether two destinations (`Settings.destination`) are the same or nested folders of one branch."""
    return first[:2] == second[:2] and paths_overlap(first[2], second[2])


class Settings(_Section):
    """The whole configuration file."""

    workdir: Path = Path(".reverser")
    """State directory: the embedded log and the Git clones."""
    log: LogSettings = LogSettings()
    """The log backing the pipeline (Kafka or the embedded file log)."""
    metrics: MetricsSettings = MetricsSettings()
    """The metrics and health server."""
    audit: AuditSettings = AuditSettings()
    """The audit webhook ingress the apiservers post their audit events to."""
    attribution: AttributionSettings = AttributionSettings()
    """The fact index and the join of watch events with audit facts."""
    clusters: list[ClusterSettings] = []
    """Source clusters to watch."""
    providers: list[ProviderSettings] = []
    """Git remotes to write to."""
    targets: list[TargetSettings] = []
    """Which cluster's resources land where."""
    lag: LagSettings = LagSettings()
    """The consumer-lag monitor."""
    custom_resources: CustomResourceSettings = CustomResourceSettings()
    """Providers, targets and rules from custom resources."""

    @field_validator("targets")
    @classmethod
    def _unique_targets(cls, targets: list[TargetSettings]) -> list[TargetSettings]:
        _reject_duplicates("target", [t.name for t in targets])
        return targets

    @model_validator(mode="after")
    def _one_source(self) -> Settings:
        """Providers and targets come from the file or from custom resources, never from both."""
        resources = self.custom_resources
        if not resources.enabled:
            return self
        if self.providers or self.targets:
            raise ValueError(
                "custom_resources.enabled: providers and targets come from the configbutler.ai "
                "custom resources; remove providers and targets from the file, or set "
                "custom_resources.enabled: false (`reverser config export` prints the resources)"
            )
        if not self.clusters:
            raise ValueError("custom_resources.enabled needs a cluster in clusters to read them from")
        if resources.cluster is not None and resources.cluster not in {c.name for c in self.clusters}:
            raise ValueError(f"custom_resources.cluster: unknown cluster {resources.cluster!r}")
        return self

    @property
    def resources_cluster(self) -> ClusterSettings:
        """The cluster the custom resources are read from (custom_resources.enabled only)."""
        wanted = self.custom_resources.cluster
        return next(c for c in self.clusters if wanted is None or c.name == wanted)

    @model_validator(mode="after")
    def _references(self) -> Settings:
        providers = {p.name for p in self.providers}
        clusters = {c.name for c in self.clusters}
        for index, target in enumerate(self.targets):
            if target.provider not in providers:
                raise ValueError(f"targets.{index}.provider: unknown provider {target.provider!r}")
            if clusters and target.cluster not in clusters:
                raise ValueError(f"targets.{index}.cluster: unknown cluster {target.cluster!r}")
        if self.clusters and self.resources_cluster.kubeconfig_secret is not None:
            raise ValueError(
                f"clusters.{self.resources_cluster.name}.kubeconfig_secret: this cluster holds the Secrets "
                "other clusters' kubeconfigs are read from, so it needs kubeconfig or in_cluster itself"
            )
        self._no_shared_folders()
        return self

    def _no_shared_folders(self) -> None:
        """Two targets writing the same or nested folders of one branch would sweep each other's files."""
        seen: list[tuple[str, tuple[str, str, str]]] = []
        for target in self.targets:
            here = self.destination(target)
            _, branch, path = here
            for name, other in seen:
                if shares_folder(here, other):
                    raise ValueError(
                        f"targets {name} and {target.name} write overlapping paths "
                        f"({other[2] or '/'} and {path or '/'}) on branch {branch} of the same repository"
                    )
            seen.append((target.name, here))

    def destination(self, target: TargetSettings) -> tuple[str, str, str]:
        """(repository, branch, normalized folder) a target writes to; its provider must exist.

        The repository is `repository_key` of the URL, so two spellings of one remote are one.
        """
        provider = self.provider(target.provider)
        return (
            repository_key(provider.url),
            target.branch or provider.default_branch,
            normalize_target_path(target.path),
        )

    def cluster_attribution_mode(self, cluster: ClusterSettings) -> AttributionMode:
        """The cluster's own attribution mode, else its audit route's, else the default."""
        if cluster.attribution is not None:
            return cluster.attribution
        route = next((r for r in self.audit.routes if r.name == cluster.route), None)
        if route is not None and route.attribution is not None:
            return route.attribution
        return DEFAULT_ATTRIBUTION_MODE

    def attribution_mode(self, target: TargetSettings) -> AttributionMode:
        """The target's own attribution mode, else its cluster's (a cluster not listed: the default)."""
        cluster = next((c for c in self.clusters if c.name == target.cluster), None)
        default = DEFAULT_ATTRIBUTION_MODE if cluster is None else self.cluster_attribution_mode(cluster)
        return effective_mode(target.attribution, default)

    def provider(self, name: str) -> ProviderSettings:
        for provider in self.providers:
            if provider.name == name:
                return provider
        raise KeyError(name)

    @property
    def embedded_log_dir(self) -> Path:
        """Where the embedded log keeps its topics and offsets, under the workdir."""
        return self.workdir / "log"

    def topic(self, name: str) -> str:
        """Full topic name for a pipeline topic such as `audit-facts`."""
        return f"{self.log.topic_prefix}.{name}"


class ConfigError(Exception):
    """The configuration is invalid; the message names the field path and the reason."""


_TEXT_TYPES: tuple[type, ...] = (str, Path, SecretStr)


def _is_text(annotation: Any) -> bool:
    """Whether a field takes a string: str, Path, SecretStr, a Literal of strings, or Optional of one."""
    if get_origin(annotation) is Literal:
        return all(isinstance(value, str) for value in get_args(annotation))
    if get_origin(annotation) in (Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        return bool(members) and all(_is_text(member) for member in members)
    return isinstance(annotation, type) and issubclass(annotation, _TEXT_TYPES)


def _is_text_field(path: list[str]) -> bool:
    """Whether `path` (lower-cased env segments) names a string field of Settings."""
    model: type[BaseModel] = Settings
    for depth, part in enumerate(path):
        field = model.model_fields.get(part)
        if field is None:
            return False
        if depth == len(path) - 1:
            return _is_text(field.annotation)
        annotation = field.annotation
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return False
        model = annotation
    return False


def _closest(given: str, known: list[str], cutoff: float = _SUGGEST_CUTOFF) -> str | None:
    matches = difflib.get_close_matches(given, known, n=1, cutoff=cutoff)
    return matches[0] if matches else None


def _model_at(path: tuple[str, ...]) -> type[BaseModel] | None:
    """The section model at a validation error's location (list indices skipped), if any."""
    model: type[BaseModel] = Settings
    for part in path:
        if part.isdigit():
            continue
        field = model.model_fields.get(part)
        if field is None:
            return None
        found = _model_in(field.annotation)
        if found is None:
            return None
        model = found
    return model


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds: itself, or the member of a list or an Optional."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


class _EnvOverrides:
    """The `REVERSER_*` variables as a settings tree, remembering which variable set which field.

    A variable in the setting syntax (`REVERSER_<SECTION>__...`) whose section is unknown, or a
    one-word one that is a near miss of a top-level field, is a typo that would otherwise be
    ignored in silence: it is warned about, with the nearest setting's variable."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.tree: dict[str, Any] = {}
        self.sources: dict[tuple[str, ...], tuple[str, str]] = {}
        self.unknown: list[str] = []
        sections = list(Settings.model_fields)
        for name, raw in sorted(environ.items()):
            if not name.startswith(ENV_PREFIX):
                continue
            path = [part.lower() for part in name[len(ENV_PREFIX) :].split("__")]
            if name in _COMMAND_LINE_VARIABLES:
                continue
            if path[0] not in Settings.model_fields:
                nested = len(path) > 1
                near = _closest(path[0], sections, _SUGGEST_CUTOFF if nested else _TYPO_CUTOFF)
                if nested or near is not None:
                    hint = f" (did you mean {self.variable([near, *path[1:]])}?)" if near else ""
                    self.unknown.append(f"environment variable {name} names no setting and is ignored{hint}")
                continue
            node = self.tree
            for part in path[:-1]:
                node = node.setdefault(part, {})
            node[path[-1]] = self._value(name, path, raw)
            self.sources[tuple(path)] = (name, raw)

    @staticmethod
    def variable(path: list[str]) -> str:
        """The variable that sets the field at `path`."""
        return ENV_PREFIX + "__".join(part.upper() for part in path)

    @staticmethod
    def _value(name: str, path: list[str], raw: str) -> Any:
        if not raw or _is_text_field(path):
            return raw
        try:
            return yaml.safe_load(raw)
        except yaml.YAMLError:
            raise ConfigError(f"environment variable {name}: not a valid YAML value") from None

    def source_of(self, loc: tuple[str, ...]) -> str | None:
        """The variable that set the field at `loc` (or a section holding it), if one did."""
        return next((n for path, (n, _) in self.sources.items() if loc[: len(path)] == path), None)

    def redact(self, message: str) -> str:
        """`message` with every override's value taken out where it stands whole (not inside a word:
        a value `x` must not turn "Extra inputs" into a riddle)."""
        for name, raw in self.sources.values():
            if raw:
                message = re.sub(rf"(?<!\w){re.escape(raw)}(?!\w)", f"<value of {name}>", message)
        return message


def _merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


#: pydantic's prefixes of the messages that the validators wrote themselves.
_VALIDATOR_PREFIXES = ("Value error, ", "Assertion failed, ")
#: A validator's message that names the field it is about first: `targets.0.provider: unknown ...`.
_LEADING_PATH = re.compile(r"^(?P<path>[a-z_]+(?:\.[a-z0-9_]+)+): (?P<rest>.*)$", re.DOTALL)


def _describe(error: ValidationError, source: str, env: _EnvOverrides) -> str:
    """Every error as `  <field path>: <plain message>`, in the words of this configuration rather
    than pydantic's (`(top level): Value error, targets.0.provider: ...` names no field)."""
    lines = [f"invalid configuration in {source}:"]
    for item in error.errors():
        loc = tuple(str(part) for part in item["loc"])
        message = str(item["msg"])
        for prefix in _VALIDATOR_PREFIXES:
            message = message.removeprefix(prefix)
        leading = _LEADING_PATH.match(message)
        if leading is not None:
            loc = (*loc, *leading["path"].split("."))
            message = leading["rest"]
        variable = env.source_of(loc)
        if item["type"] == "extra_forbidden":
            message = "unknown field" + _field_hint(loc, variable)
        message = env.redact(message)
        where = ".".join(loc) or "(top level)"
        lines.append(f"  {where}: {message}" + (f" (from {variable})" if variable else ""))
    return "\n".join(lines)


def _field_hint(loc: tuple[str, ...], variable: str | None) -> str:
    """` (did you mean X?)` for an unknown field: the nearest field of its section, spelled as the
    variable when an environment variable set it."""
    model = _model_at(loc[:-1]) if loc else None
    near = _closest(loc[-1], list(model.model_fields)) if model is not None and loc else None
    if near is None:
        return ""
    if variable is not None:
        return f" (did you mean {_EnvOverrides.variable([*loc[:-1], near])}?)"
    return f" (did you mean {near}?)"


def revalidate(settings: Settings, source: str) -> Settings:
    """`settings` checked again as a whole (after parts of it were replaced); raises ConfigError."""
    try:
        return Settings.model_validate(settings.model_dump())
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source, _EnvOverrides({}))) from None


def load_settings(path: Path | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Read the file (if any), apply environment overrides, validate; raises ConfigError."""
    data: dict[str, Any] = {}
    source = "defaults"
    if path is not None:
        source = str(path)
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read configuration {path}: {exc.strerror}") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"configuration {path} is not valid YAML: {exc}") from exc
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"configuration {path}: the top level must be a mapping")
        data = loaded
    env = _EnvOverrides(os.environ if environ is None else environ)
    for warning in env.unknown:
        logger.warning("%s", warning)
    data = _merge(data, env.tree)
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source, env)) from None
