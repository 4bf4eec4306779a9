"""The Kafka broker a benchmark talks to: a configured one, the dev broker, or one started for it."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["kafka_bootstrap"]


def kafka_bootstrap() -> tuple[str, contextlib.AbstractContextManager[Any]]:
    """(bootstrap servers, a context that stops the broker if one was started here).

    `KAFKA_BOOTSTRAP_SERVERS`, else the dev broker's file (`make kafka-start`), else a KRaft
    broker started from the cached jars for the benchmark alone.
    """
    configured = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not configured:
        with contextlib.suppress(OSError):
            configured = Path("/tmp/reverser-dev-kafka").read_text().strip()
    if configured:
        return configured, contextlib.nullcontext()
    from tests.integration.kafka.broker import KafkaBroker

    directory = tempfile.TemporaryDirectory(prefix="bench-kafka-")
    broker = KafkaBroker(Path(directory.name))
    broker.start()
    stack = contextlib.ExitStack()
    stack.enter_context(directory)
    stack.callback(broker.stop)
    return broker.bootstrap, stack
