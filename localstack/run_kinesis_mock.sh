#!/usr/bin/env bash
# kinesis-mock alone: LocalStack's Kinesis engine (npm `kinesis-local`) without LocalStack.
# Plain JavaScript on Node; no docker, no Java, no Python.
#
#   localstack/run_kinesis_mock.sh run   [PORT]   foreground (Ctrl-C stops)
#   localstack/run_kinesis_mock.sh start [PORT]   background; prints the endpoint URL
#   localstack/run_kinesis_mock.sh stop
#   localstack/run_kinesis_mock.sh status
#
# PORT defaults to 4567 (plain HTTP); the TLS port is PORT+1. kinesis-mock listens on all
# interfaces (it has no setting for the address). Files: $KINESIS_MOCK_RUN_DIR (log, pid),
# default .cache/kinesis-mock-run/.
# Installs kinesis-local@$KINESIS_LOCAL_VERSION (default 0.6.2, the version the tests use)
# into .cache/ first if it is missing. Durations of stream operations are shortened (50 ms
# to create or delete a stream, 200 ms to reshard) and nothing is persisted, as in the tests.
set -euo pipefail
cd "$(dirname "$0")/.."

KINESIS_LOCAL_VERSION="${KINESIS_LOCAL_VERSION:-0.6.2}"
MAIN_JS="${KINESIS_MOCK_MAIN:-.cache/node_modules/kinesis-local/main.js}"
RUN_DIR="${KINESIS_MOCK_RUN_DIR:-.cache/kinesis-mock-run}"
PID_FILE="$RUN_DIR/kinesis-mock.pid"
LOG_FILE="$RUN_DIR/kinesis-mock.log"

usage() {
  sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

ensure_installed() {
  if [[ ! -f "$MAIN_JS" ]]; then
    echo "installing kinesis-local@$KINESIS_LOCAL_VERSION into .cache/" >&2
    mkdir -p .cache
    npm install --prefix .cache --no-audit --no-fund --silent "kinesis-local@$KINESIS_LOCAL_VERSION"
  fi
  command -v node >/dev/null || { echo "kinesis-mock needs Node.js: node is not on PATH" >&2; exit 1; }
}

mock_env() {  # $1: port
  export KINESIS_MOCK_PLAIN_PORT="$1"
  export KINESIS_MOCK_TLS_PORT="$(($1 + 1))"
  export KINESIS_MOCK_CERT_PATH
  KINESIS_MOCK_CERT_PATH="$(dirname "$MAIN_JS")/server.json"
  export CREATE_STREAM_DURATION=50ms DELETE_STREAM_DURATION=50ms
  export SPLIT_SHARD_DURATION=200ms MERGE_SHARDS_DURATION=200ms UPDATE_SHARD_COUNT_DURATION=200ms
  export LOG_LEVEL="${LOG_LEVEL:-WARN}" SHOULD_PERSIST_DATA=false
}

alive() {  # $1: pid; a zombie (exited, not yet reaped) counts as gone
  local state
  state="$(ps -o stat= -p "$1" 2>/dev/null)" || return 1
  [[ -n "$state" && "$state" != Z* ]]
}

running_pid() {
  [[ -f "$PID_FILE" ]] || return 1
  local pid
  pid="$(cut -d' ' -f1 "$PID_FILE")"
  alive "$pid" && echo "$pid"
}

port_open() {  # $1: port
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

stop_pid() {  # $1: pid, $2: port
  kill "$1" 2>/dev/null || true
  for _ in $(seq 1 20); do  # 2 s for a clean exit (it waits for open connections), then SIGKILL
    alive "$1" || break
    sleep 0.1
  done
  if alive "$1"; then
    kill -9 "$1" 2>/dev/null || true
  fi
  # A killed multi-threaded node stays a zombie until its last thread is gone, and its port
  # closes only then.
  for _ in $(seq 1 100); do
    port_open "$2" || break
    sleep 0.1
  done
}

cmd="${1:-}"
port="${2:-4567}"
case "$cmd" in
  run)
    ensure_installed
    mock_env "$port"
    echo "kinesis-mock on http://127.0.0.1:$port (Ctrl-C stops)" >&2
    exec node "$MAIN_JS"
    ;;
  start)
    if pid="$(running_pid)"; then
      echo "kinesis-mock already running (pid $pid); stop it first" >&2
      exit 1
    fi
    if port_open "$port"; then
      echo "port $port is in use; pass another port" >&2
      exit 1
    fi
    ensure_installed
    mkdir -p "$RUN_DIR"
    mock_env "$port"
    setsid node "$MAIN_JS" >"$LOG_FILE" 2>&1 </dev/null &
    pid=$!
    echo "$pid $port" >"$PID_FILE"
    for _ in $(seq 1 200); do  # up to 20 s
      if port_open "$port"; then
        echo "http://127.0.0.1:$port"
        exit 0
      fi
      if ! alive "$pid"; then
        echo "kinesis-mock exited while starting; log $LOG_FILE:" >&2
        tail -20 "$LOG_FILE" >&2
        rm -f "$PID_FILE"
        exit 1
      fi
      sleep 0.1
    done
    echo "kinesis-mock did not open port $port in 20 s; log $LOG_FILE" >&2
    stop_pid "$pid" "$port"
    rm -f "$PID_FILE"
    exit 1
    ;;
  stop)
    if ! pid="$(running_pid)"; then
      echo "kinesis-mock is not running" >&2
      rm -f "$PID_FILE"
      exit 0
    fi
    stop_pid "$pid" "$(cut -d' ' -f2 "$PID_FILE")"
    rm -f "$PID_FILE"
    echo "stopped kinesis-mock (pid $pid)" >&2
    ;;
  status)
    if pid="$(running_pid)"; then
      echo "running: pid $pid, http://127.0.0.1:$(cut -d' ' -f2 "$PID_FILE")"
    else
      echo "not running"
      exit 1
    fi
    ;;
  *)
    usage
    ;;
esac
