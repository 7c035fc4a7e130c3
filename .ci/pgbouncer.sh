#!/usr/bin/env bash
# PgBouncer in TRANSACTION pooling in front of the local PostgreSQL (issue 14).
#
# Source it from .ci/run (bash), then:
#
#   pgbouncer_start      # installs pgbouncer if missing, starts it as the
#                        # postgres user with its own config in a temp dir,
#                        # waits until it accepts connections and exports
#                        # AGENTSTORE_TEST_PGBOUNCER_DSN (also printed as an
#                        # export line)
#   ...                  # go test -run '^TestConformancePostgresTimeouts$' .
#   pgbouncer_stop       # stops it and removes its directory
#
# Or run it directly: `.ci/pgbouncer.sh start` prints the export line and
# leaves PgBouncer running; `.ci/pgbouncer.sh stop DIR` stops the one whose
# directory start printed (PGBOUNCER_DIR=...).
#
# Settings: PGBOUNCER_PORT (first port tried; default 6432, then 6433-6439),
# PGBOUNCER_UPSTREAM_HOST/PORT/DB (default 127.0.0.1 5432 test).
# PgBouncer never runs as root: as root the script runs it with
# `runuser -u postgres --`; as another user it runs it as that user.

pgbouncer_start() {
  local up_host="${PGBOUNCER_UPSTREAM_HOST:-127.0.0.1}" up_port="${PGBOUNCER_UPSTREAM_PORT:-5432}"
  local up_db="${PGBOUNCER_UPSTREAM_DB:-test}"
  if ! command -v pgbouncer >/dev/null 2>&1; then
    echo "ci: installing pgbouncer" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q pgbouncer >/dev/null ||
      { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q pgbouncer >/dev/null; }
  fi
  local asuser=()
  PGBOUNCER_DIR="$(mktemp -d /tmp/agentstore-pgbouncer.XXXXXX)"
  if [ "$(id -u)" = 0 ]; then chown postgres "$PGBOUNCER_DIR"; asuser=(runuser -u postgres --); fi
  local first="${PGBOUNCER_PORT:-6432}" port started=""
  for port in "$first" $(seq 6433 6439); do
    # skip a port something already listens on
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then continue; fi
    cat >"$PGBOUNCER_DIR/pgbouncer.ini" <<EOF
[databases]
$up_db = host=$up_host port=$up_port dbname=$up_db

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir = $PGBOUNCER_DIR
pidfile = $PGBOUNCER_DIR/pgbouncer.pid
logfile = $PGBOUNCER_DIR/pgbouncer.log
auth_type = trust
auth_file = $PGBOUNCER_DIR/userlist.txt
pool_mode = transaction
default_pool_size = 5
reserve_pool_size = 0
max_client_conn = 200
admin_users = postgres
max_db_connections = 20
ignore_startup_parameters = extra_float_digits
server_reset_query =
query_wait_timeout = 120
EOF
    echo '"postgres" ""' >"$PGBOUNCER_DIR/userlist.txt"
    [ "$(id -u)" = 0 ] && chown postgres "$PGBOUNCER_DIR"/*
    if "${asuser[@]}" pgbouncer -d "$PGBOUNCER_DIR/pgbouncer.ini"; then
      local i
      for i in $(seq 1 50); do
        if psql -h 127.0.0.1 -p "$port" -U postgres -d "$up_db" -Atqc 'select 1' >/dev/null 2>&1; then
          started=1; break
        fi
        sleep 0.2
      done
      [ -n "$started" ] && break
      pgbouncer_stop_only
    fi
    echo "ci: pgbouncer could not start on port $port; trying the next" >&2
  done
  if [ -z "$started" ]; then
    cat "$PGBOUNCER_DIR/pgbouncer.log" >&2 2>/dev/null || true
    rm -rf "$PGBOUNCER_DIR"
    return 1
  fi
  PGBOUNCER_PORT_USED="$port"
  export AGENTSTORE_TEST_PGBOUNCER_DSN="postgres://postgres@127.0.0.1:$port/$up_db?sslmode=disable"
  echo "export AGENTSTORE_TEST_PGBOUNCER_DSN='$AGENTSTORE_TEST_PGBOUNCER_DSN' PGBOUNCER_DIR='$PGBOUNCER_DIR'"
}

# pgbouncer_stop_only stops the PgBouncer of $PGBOUNCER_DIR (SIGINT: safe
# shutdown) and waits for it to exit.
pgbouncer_stop_only() {
  local pidf="$PGBOUNCER_DIR/pgbouncer.pid" pid i
  [ -f "$pidf" ] || return 0
  pid="$(cat "$pidf")"
  kill -INT "$pid" 2>/dev/null || return 0
  for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -TERM "$pid" 2>/dev/null || true
}

# pgbouncer_stop stops PgBouncer and removes its directory.
pgbouncer_stop() {
  [ -n "${PGBOUNCER_DIR:-}" ] || return 0
  pgbouncer_stop_only
  rm -rf "$PGBOUNCER_DIR"
  PGBOUNCER_DIR=""
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  case "${1:-start}" in
  start) pgbouncer_start ;;
  stop)
    PGBOUNCER_DIR="${2:?usage: $0 stop PGBOUNCER_DIR}"
    pgbouncer_stop
    ;;
  *) echo "usage: $0 start | stop PGBOUNCER_DIR" >&2; exit 2 ;;
  esac
fi
