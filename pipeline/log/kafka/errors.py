"""aiokafka failures as the seam's typed errors: which are transient, which mean fenced or too large."""

from __future__ import annotations

from aiokafka import errors as kafka_errors
from prometheus_client import Counter

from pipeline.failures import os_cause, plain
from pipeline.log.api import (
    FencedError,
    LogError,
    LogUnavailableError,
    RecordTooLargeError,
    TopicNotFoundError,
)

ERRORS = Counter(
    "reverser_log_kafka_errors",
    "Failed log operations on Kafka, by the typed error the caller got.",
    ["kind"],
)
RETRIES = Counter(
    "reverser_log_kafka_retries",
    "Retries of Kafka operations after a transient failure, by operation.",
    ["operation"],
)

TOO_LARGE = (
    kafka_errors.MessageSizeTooLargeError,
    kafka_errors.RecordTooLargeError,
    kafka_errors.RecordListTooLargeError,
)


#: Broker answers that mean a newer producer owns the transactional id (or the old one timed out).
FENCED = (
    kafka_errors.ProducerFenced,
    kafka_errors.InvalidProducerEpoch,
    kafka_errors.InvalidProducerIdMapping,
    kafka_errors.TransactionalIdAuthorizationFailed,
)


def is_transient(exc: BaseException) -> bool:
    """Whether retrying later may succeed: connection loss, timeouts, leadership moving."""
    if isinstance(exc, kafka_errors.KafkaError):
        return bool(exc.retriable) or isinstance(
            exc, kafka_errors.KafkaTimeoutError | kafka_errors.KafkaUnavailableError
        )
    return isinstance(exc, TimeoutError | ConnectionError)


#: What to check when the brokers cannot be reached, said once for every such error.
UNREACHABLE_HINT = "check log.bootstrap_servers (REVERSER_LOG__BOOTSTRAP_SERVERS) and that the brokers are up"


def describe(exc: BaseException) -> str:
    """An aiokafka failure in words: the OS error at its root when there is one, never aiokafka's
    reprs (`Unable to bootstrap from [('127.0.0.1', 1, <AddressFamily.AF_INET: 2>)]`)."""
    if isinstance(exc, kafka_errors.KafkaConnectionError) and os_cause(exc) is None:
        return "no bootstrap server answered"
    return plain(exc)


def translate(exc: BaseException, what: str) -> LogError:
    """The seam's typed error for an aiokafka (or socket) failure, counted by kind."""
    if isinstance(exc, LogError):
        return exc
    error: LogError
    if isinstance(exc, FENCED):
        error = FencedError(f"{what}: fenced by a newer producer with the same transactional id ({exc})")
        kind = "fenced"
    elif isinstance(exc, kafka_errors.UnknownTopicOrPartitionError):
        error = TopicNotFoundError(f"{what}: unknown topic or partition")
        kind = "topic_not_found"
    elif isinstance(exc, TOO_LARGE):
        error = RecordTooLargeError(f"{what}: record exceeds the size the broker accepts ({exc})")
        kind = "record_too_large"
    elif is_transient(exc):
        error = LogUnavailableError(f"{what}: Kafka unavailable ({describe(exc)}): {UNREACHABLE_HINT}")
        kind = "unavailable"
    else:
        error = LogError(f"{what}: {type(exc).__name__}: {exc}")
        kind = "other"
    ERRORS.labels(kind).inc()
    return error
