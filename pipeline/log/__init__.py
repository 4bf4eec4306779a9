"""The log seam (see `pipeline.log.api`) and the factory that picks a backend from configuration."""

from __future__ import annotations

from pipeline.config import LogBackend, Settings
from pipeline.log.api import (
    DEFAULT_MAX_MESSAGE_BYTES,
    RECORD_OVERHEAD_BYTES,
    AppendResult,
    FencedError,
    Fetched,
    Gap,
    GroupConsumer,
    GroupOffsets,
    Headers,
    Log,
    LogError,
    LogInUseError,
    LogUnavailableError,
    PendingRecord,
    Placement,
    Reader,
    RebalanceListener,
    Record,
    RecordTooLargeError,
    TopicDescription,
    TopicLimits,
    TopicNotFoundError,
    TopicPartition,
    TopicSpec,
    TransactionalProducer,
    default_replication,
    max_value_bytes,
)

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "RECORD_OVERHEAD_BYTES",
    "AppendResult",
    "FencedError",
    "Fetched",
    "Gap",
    "GroupConsumer",
    "GroupOffsets",
    "Headers",
    "Log",
    "LogError",
    "LogInUseError",
    "LogUnavailableError",
    "PendingRecord",
    "Placement",
    "Reader",
    "RebalanceListener",
    "Record",
    "RecordTooLargeError",
    "TopicDescription",
    "TopicLimits",
    "TopicNotFoundError",
    "TopicPartition",
    "TopicSpec",
    "TransactionalProducer",
    "default_replication",
    "max_value_bytes",
    "open_log",
]


def open_log(settings: Settings) -> Log:
    """The configured log, not yet started: Kafka when bootstrap servers are set, else embedded."""
    if settings.log.effective_backend == LogBackend.KAFKA:
        from pipeline.log.kafka import KafkaLog

        return KafkaLog(settings.log)
    from pipeline.log.embedded import EmbeddedLog

    return EmbeddedLog(settings.embedded_log_dir, fsync=settings.log.fsync)
