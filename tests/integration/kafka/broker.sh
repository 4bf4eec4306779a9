#!/usr/bin/env bash
# The Apache Kafka test broker (KRaft, loopback; one node or a cluster); see broker.py and docs/kafka.md.
#
#   broker.sh fetch    copy the broker jars from Maven Central into ~/.cache/reverser-kafka (once)
#   broker.sh start    start it and print its bootstrap address (also written to the bootstrap file)
#   broker.sh stop     stop it (SIGTERM, SIGKILL after a timeout)
#   broker.sh status   exit 0 and print the address when it answers metadata requests
#
# Environment: REVERSER_KAFKA_NODES (1, the default: one broker; 3: a three-node KRaft cluster),
# REVERSER_KAFKA_WORKDIR (data, logs, state; default /tmp/reverser-kafka-broker),
# REVERSER_KAFKA_BOOTSTRAP_FILE (default $REVERSER_KAFKA_WORKDIR/bootstrap),
# REVERSER_KAFKA_LIBS (jar cache), PYTHON (any Python 3; only the standard library is used).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# Run as a module of the repository, so it shares tests/support/net.py (standard library too).
export PYTHONPATH="$(cd "$here/../../.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"
python="${PYTHON:-python3}"
workdir="${REVERSER_KAFKA_WORKDIR:-/tmp/reverser-kafka-broker}"
bootstrap_file="${REVERSER_KAFKA_BOOTSTRAP_FILE:-$workdir/bootstrap}"
nodes="${REVERSER_KAFKA_NODES:-1}"

case "${1:-}" in
  fetch)
    exec "$python" -m tests.integration.kafka.broker fetch
    ;;
  start)
    exec "$python" -m tests.integration.kafka.broker start --workdir "$workdir" --bootstrap-file "$bootstrap_file" --nodes "$nodes"
    ;;
  stop | status)
    exec "$python" -m tests.integration.kafka.broker "$1" --workdir "$workdir" --nodes "$nodes"
    ;;
  *)
    echo "usage: $0 fetch|start|stop|status" >&2
    exit 2
    ;;
esac
