#!/usr/bin/env bash
# Failover scenario (issue 14): a throwaway primary with a synchronous hot
# standby (pg_basebackup + streaming replication), each on its own port.
# The restart reliability test runs against a multi-host DSN
# (target_session_attrs=read-write); its "stop" stops the primary
# (immediate: a crash) and its "start" promotes the standby. Both clusters
# are stopped and removed at the end. Sourced by .ci/run after the main
# suite; needs PostgreSQL's server binaries and root or the postgres user.
set -euo pipefail

fo_pgbin="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1)"
fo_dir="$(mktemp -d /tmp/agentstore-failover.XXXXXX)"
fo_as=()
if [ "$(id -u)" = 0 ]; then chown postgres "$fo_dir"; fo_as=(runuser -u postgres --); fi
fo_cleanup() {
  "${fo_as[@]}" "$fo_pgbin/pg_ctl" -D "$fo_dir/primary" -m immediate -w stop >/dev/null 2>&1 || true
  "${fo_as[@]}" "$fo_pgbin/pg_ctl" -D "$fo_dir/standby" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$fo_dir"
}
trap fo_cleanup EXIT

fo_free_port() { # first of the candidate ports nothing listens on
  for p in "$@"; do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return 0; fi
  done
  return 1
}
p1="$(fo_free_port ${AGENTSTORE_FAILOVER_PORTS:-16432 16442 16452 26432})"
p2="$(fo_free_port 16433 16443 16453 26433)"

"${fo_as[@]}" "$fo_pgbin/initdb" -D "$fo_dir/primary" -A trust -U postgres >/dev/null
cat >> "$fo_dir/primary/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $p1
unix_socket_directories = '$fo_dir'
wal_level = replica
max_wal_senders = 5
hot_standby = on
synchronous_commit = on
CONF
echo "host replication postgres 127.0.0.1/32 trust" >> "$fo_dir/primary/pg_hba.conf"
"${fo_as[@]}" "$fo_pgbin/pg_ctl" -D "$fo_dir/primary" -l "$fo_dir/primary.log" -w start >/dev/null
# The database exists before the standby is cloned; synchronous replication
# is switched on once the standby streams (a commit would wait for a
# standby that is not there yet).
psql -h 127.0.0.1 -p "$p1" -U postgres -d postgres -qc 'CREATE DATABASE test' >/dev/null
"${fo_as[@]}" "$fo_pgbin/pg_basebackup" -h 127.0.0.1 -p "$p1" -U postgres -D "$fo_dir/standby" -R -X stream >/dev/null
cat >> "$fo_dir/standby/postgresql.conf" <<CONF
port = $p2
CONF
# Once promoted, the standby has no standby of its own: it must not wait for one.
echo "synchronous_standby_names = ''" >> "$fo_dir/standby/postgresql.auto.conf"
"${fo_as[@]}" "$fo_pgbin/pg_ctl" -D "$fo_dir/standby" -l "$fo_dir/standby.log" -w start >/dev/null
psql -h 127.0.0.1 -p "$p1" -U postgres -d postgres -qc "ALTER SYSTEM SET synchronous_standby_names = '*'" -c 'SELECT pg_reload_conf()' >/dev/null
for _ in $(seq 1 60); do
  state="$(psql -h 127.0.0.1 -p "$p1" -U postgres -d postgres -Atc "SELECT sync_state FROM pg_stat_replication" 2>/dev/null || true)"
  [ "$state" = "sync" ] && break
  sleep 0.5
done
[ "$state" = "sync" ] || { echo "ci: standby not in sync replication (state '$state')"; cat "$fo_dir/standby.log"; exit 1; }
echo "ci: failover clusters up: primary :$p1, synchronous standby :$p2"

export AGENTSTORE_PG_RESTART_TEST=1
export AGENTSTORE_PG_FAULT=failover
export AGENTSTORE_PG_RESTART_DSN="postgres://postgres@127.0.0.1:$p1,127.0.0.1:$p2/test?sslmode=disable&target_session_attrs=read-write"
export AGENTSTORE_PG_STOP_CMD="${fo_as[*]} $fo_pgbin/pg_ctl -D $fo_dir/primary -m immediate -w stop"
export AGENTSTORE_PG_START_CMD="${fo_as[*]} $fo_pgbin/pg_ctl -D $fo_dir/standby -w promote"
go test -race -count=1 -timeout 10m -run '^TestReliabilityPostgresRestart$' -v . | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|RELIABILITY:|_test.go'
