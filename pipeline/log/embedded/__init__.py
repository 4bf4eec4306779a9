"""The embedded log: Kafka's semantics on local files, for one process with no broker to run.

Modules: `log` (the `EmbeddedLog`: lifecycle, topics, appends, offsets, retention), `segments`
(on-disk partitions), `reading` (readers and the fetch loop), `groups` (consumer groups),
`transactions` (fenced, crash-atomic transactions), `files` (atomically replaced JSON files).
"""

from __future__ import annotations

from pipeline.log.embedded.log import EmbeddedLog, RetentionReport

__all__ = ["EmbeddedLog", "RetentionReport"]
