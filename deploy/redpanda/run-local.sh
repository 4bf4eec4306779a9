#!/usr/bin/env bash
# Run a single-node Redpanda on loopback for `reverser run`, without containers or compose.
#
#   deploy/redpanda/run-local.sh start   # starts Redpanda, creates the pipeline's topics
#   deploy/redpanda/run-local.sh stop
#   deploy/redpanda/run-local.sh status
#
# Needs `rpk` (which starts the `redpanda` binary) on PATH, installed from Redpanda's packages.
# State lives in $REDPANDA_HOME (default ~/.local/state/reverser-redpanda). Topics are created with
# the project's own `reverser topics create`, so they get exactly the configuration the pipeline
# expects (LogAppendTime and TTL retention for audit facts, compaction for cursors).
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REDPANDA_HOME="${REDPANDA_HOME:-$HOME/.local/state/reverser-redpanda}"
BOOTSTRAP="127.0.0.1:19092"
PID_FILE="$REDPANDA_HOME/redpanda.pid"
REVERSER="${REVERSER:-reverser}"
READY_TIMEOUT_S=60

need() { command -v "$1" >/dev/null || { echo "run-local.sh: $1 is not on PATH ($2)" >&2; exit 1; }; }

running() { [[ -f "$PID_FILE" ]] && kill -0 "$(cat "$PID_FILE")" 2>/dev/null; }

start() {
  need rpk "install Redpanda's rpk/redpanda packages"
  need "$REVERSER" "install this project: make install, then use .venv/bin/reverser or set REVERSER"
  if running; then
    echo "redpanda already running (pid $(cat "$PID_FILE")) on $BOOTSTRAP"
    return 0
  fi
  mkdir -p "$REDPANDA_HOME/data"
  [[ -f "$REDPANDA_HOME/redpanda.yaml" ]] || sed "s#^redpanda:#redpanda:\n  data_directory: $REDPANDA_HOME/data#" \
    "$HERE/redpanda.yaml" > "$REDPANDA_HOME/redpanda.yaml"
  cp "$HERE/bootstrap.yaml" "$REDPANDA_HOME/.bootstrap.yaml"
  # Only the rpk process goes to the background, so the PID file names Redpanda itself.
  cd "$REDPANDA_HOME"
  nohup rpk redpanda start --config "$REDPANDA_HOME/redpanda.yaml" \
    --mode dev-container --smp 1 --memory 1G --default-log-level=warn \
    < /dev/null > "$REDPANDA_HOME/redpanda.log" 2>&1 &
  echo $! > "$PID_FILE"
  local waited=0
  until rpk cluster health --config "$REDPANDA_HOME/redpanda.yaml" --exit-when-healthy --watch=false >/dev/null 2>&1; do
    if ! running; then
      echo "run-local.sh: redpanda exited; last lines of $REDPANDA_HOME/redpanda.log:" >&2
      tail -20 "$REDPANDA_HOME/redpanda.log" >&2
      exit 1
    fi
    (( waited++ < READY_TIMEOUT_S )) || { echo "run-local.sh: redpanda not healthy after ${READY_TIMEOUT_S}s" >&2; exit 1; }
    sleep 1
  done
  REVERSER_LOG__BOOTSTRAP_SERVERS="$BOOTSTRAP" "$REVERSER" topics create
  echo "redpanda ready on $BOOTSTRAP; run: REVERSER_LOG__BOOTSTRAP_SERVERS=$BOOTSTRAP reverser run"
}

stop() {
  if ! running; then
    echo "redpanda not running"
    rm -f "$PID_FILE"
    return 0
  fi
  local pid
  pid="$(cat "$PID_FILE")"
  kill -TERM "$pid"
  for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  rm -f "$PID_FILE"
  echo "redpanda stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) if running; then echo "running (pid $(cat "$PID_FILE")) on $BOOTSTRAP"; else echo "stopped"; exit 1; fi ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
