"""The log seam on Apache Kafka or Redpanda, through aiokafka.

Producing is idempotent with `acks=all`, keyed records are placed by Java-compatible murmur2
(`pipeline.log.partitioner`), so both backends agree on a key's partition. Transactional producers
give atomic, fenced writes (one per transactional id). Readers run with
`auto_offset_reset="none"` and `isolation_level="read_committed"`: a position below log-start
surfaces as a `Gap`, never as a silent reset, and open or aborted transactions are never read.
Every aiokafka exception is translated into the seam's typed errors (`errors`); transient
failures are retried a bounded number of times with jittered exponential backoff (`retry`)
before `LogUnavailableError`.

Modules: `log` (the `KafkaLog`: clients, topics, appends, offsets, group administration),
`produce` (sends and transactions), `read` (readers and the fetch round), `group` (group
members), `clients` (client lifecycle, TLS), `convert` (aiokafka types), `errors`, `retry`.
"""

from __future__ import annotations

from pipeline.log.kafka.log import KafkaLog

__all__ = ["KafkaLog"]
