"""The `log` section: which log backs the pipeline, how its clients connect, its topics."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, model_validator

from pipeline.config.addresses import BootstrapServers
from pipeline.config.section import Section, closed_set


class TlsSettings(Section):
    """Client TLS towards Kafka."""

    ca_file: Path | None = None
    """CA bundle (PEM) that signs the brokers' certificates; none: the system trust store."""
    cert_file: Path | None = None
    """Client certificate (PEM) for mutual TLS with the brokers."""
    key_file: Path | None = None
    """Private key (PEM) of `cert_file`."""
    check_hostname: bool = True
    """Check that a broker's certificate names the host connected to."""


class SaslSettings(Section):
    """SASL towards Kafka; the password is a SecretStr so no repr, log line or error shows it."""

    mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = "PLAIN"
    """SASL mechanism towards the brokers."""
    username: str = ""
    """SASL user name."""
    password: SecretStr = SecretStr("")
    """SASL password; set it through REVERSER_LOG__SASL__PASSWORD, never in the file."""


class TopicSettings(Section):
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


class LogBackend(StrEnum):
    """Which log backs the pipeline; a `Log`'s `kind` is one of the two concrete ones."""

    AUTO = "auto"
    KAFKA = "kafka"
    EMBEDDED = "embedded"


class LogSettings(Section):
    """Which log backs the pipeline. No bootstrap servers means the embedded file log."""

    backend: Annotated[LogBackend, closed_set(LogBackend)] = LogBackend.AUTO
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
    def effective_backend(self) -> LogBackend:
        """`KAFKA` or `EMBEDDED`: `AUTO` resolved by whether bootstrap servers are set."""
        if self.backend == LogBackend.AUTO:
            return LogBackend.KAFKA if self.bootstrap_servers else LogBackend.EMBEDDED
        return LogBackend(self.backend)

    @model_validator(mode="after")
    def _kafka_needs_servers(self) -> LogSettings:
        if self.backend == "kafka" and not self.bootstrap_servers:
            raise ValueError("backend 'kafka' needs bootstrap_servers")
        return self
