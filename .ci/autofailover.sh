#!/usr/bin/env bash
# pg_auto_failover scenario (issue 28): a real failover manager instead of
# the hand-made promotion of .ci/failover.sh. A pg_auto_failover formation
# (a monitor, a primary and a secondary, each a pg_autoctl keeper with its
# own PostgreSQL) on loopback ports, in a throwaway directory, as the
# postgres user. TestReliabilityPostgresAutoFailover runs its load through
# the formation's multi-host DSN (target_session_attrs=read-write) and
# crashes the node that is primary at that moment (keeper killed, its
# PostgreSQL stopped immediate); the monitor promotes the secondary by
# itself. Everything is stopped and removed at the end. Run by .ci/run
# after the main suite; needs root (or the postgres user) and, when
# pg_autoctl is missing, apt-get to install postgresql-<major>-auto-failover.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

af_pgbin="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1)"
af_major="$(basename "$(dirname "$af_pgbin")")"

# pg_autoctl: Debian's postgresql-<major>-auto-failover (the monitor's
# extension and the keeper), installed when missing.
if ! command -v pg_autoctl >/dev/null || [ ! -f "/usr/share/postgresql/$af_major/extension/pgautofailover.control" ]; then
  echo "ci: installing postgresql-$af_major-auto-failover"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q "postgresql-$af_major-auto-failover" >/dev/null; then
    apt-get update -q >/dev/null
    apt-get install -y -q "postgresql-$af_major-auto-failover" >/dev/null
  fi
fi
af_autoctl="$(command -v pg_autoctl)"

af_dir="$(mktemp -d /tmp/agentstore-autofailover.XXXXXX)"
chmod 755 "$af_dir"
af_as=()
if [ "$(id -u)" = 0 ]; then chown postgres "$af_dir"; af_as=(runuser -u postgres --); fi
# pg_autoctl keeps its configuration, state and pid files under the XDG
# directories: all of them inside af_dir, so nothing is left behind.
af_env=(env "HOME=$af_dir" "XDG_CONFIG_HOME=$af_dir/config" "XDG_DATA_HOME=$af_dir/share" "XDG_RUNTIME_DIR=$af_dir/run" "PGCONNECT_TIMEOUT=2")
af_ctl() { "${af_as[@]}" "${af_env[@]}" "$af_autoctl" "$@"; }
"${af_as[@]}" mkdir -p "$af_dir/config" "$af_dir/share" "$af_dir/run"

af_free_port() { # first of the candidate ports nothing listens on
  for p in "$@"; do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return 0; fi
  done
  return 1
}
pm="$(af_free_port ${AGENTSTORE_AUTOFAILOVER_PORTS:-17432 17442 17452 27432})"
p1="$(af_free_port 17433 17443 17453 27433)"
p2="$(af_free_port 17434 17444 17454 27434)"

# Each keeper's root process id is in af_dir/<node>.pid; the crash and the
# cleanup end exactly the pg_autoctl processes below it (never by name).
af_run() { # node: start `pg_autoctl run` for an already created node
  "${af_as[@]}" "${af_env[@]}" "$af_autoctl" run --pgdata "$af_dir/$1" >>"$af_dir/$1.keeper.log" 2>&1 &
  echo $! >"$af_dir/$1.pid"
}
af_keeper_pids() { # node: the pg_autoctl processes of its keeper (the root's descendants)
  [ -f "$af_dir/$1.pid" ] || return 0
  local todo seen="" p
  todo="$(cat "$af_dir/$1.pid")"
  while [ -n "$todo" ]; do
    set -- $todo; p="$1"; shift; todo="$*"
    seen="$seen $p"
    # PostgreSQL's own processes have no keeper below them: skip them.
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = postgres ] && continue
    todo="$todo $(pgrep -P "$p" | tr '\n' ' ')"
    todo="$(echo $todo)"
  done
  for p in $seen; do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = pg_autoctl ] && echo "$p"
  done
  return 0
}
af_cleanup() {
  set +e
  for n in node2 node1 monitor; do
    pids="$(af_keeper_pids "$n")"
    [ -n "$pids" ] && kill -TERM $pids 2>/dev/null
  done
  sleep 1
  for n in node2 node1 monitor; do
    pids="$(af_keeper_pids "$n")"
    [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
    [ -d "$af_dir/$n" ] && "${af_as[@]}" "$af_pgbin/pg_ctl" -D "$af_dir/$n" -m immediate -w stop >/dev/null 2>&1
  done
  rm -rf "$af_dir"
}
trap af_cleanup EXIT

af_hba() { # node: trust on loopback (and the local socket), replication included
  cat >"$af_dir/$1/pg_hba.conf" <<HBA
local all all trust
host all all 127.0.0.1/32 trust
host replication all 127.0.0.1/32 trust
HBA
  "${af_as[@]}" "$af_pgbin/pg_ctl" -D "$af_dir/$1" reload >/dev/null 2>&1 || true
}
af_psql() { # port db sql
  psql -h 127.0.0.1 -p "$1" -U postgres -d "$2" -XAtqc "$3"
}
af_states() { # the formation as the monitor sees it: port:reported/goal ...
  af_psql "$pm" pg_auto_failover "SELECT string_agg(nodeport || ':' || reportedstate || '/' || goalstate, ' ' ORDER BY nodeid) FROM pgautofailover.node" 2>/dev/null || true
}
af_fail() {
  echo "ci: pg_auto_failover: $*"
  echo "formation: $(af_states)"
  for f in "$af_dir"/*.log; do echo "--- $f"; tail -n 40 "$f"; done
  exit 1
}
af_t0="$(date +%s)"

# The monitor, with health checks shortened from the defaults (check every
# 5 s / 20 s unhealthy / 30 s demote) so the failover takes seconds.
af_ctl create monitor --pgdata "$af_dir/monitor" --pgport "$pm" --hostname 127.0.0.1 \
  --pgctl "$af_pgbin/pg_ctl" --skip-pg-hba --no-ssl >>"$af_dir/monitor.create.log" 2>&1 ||
  af_fail "create monitor failed"
af_ctl config set --pgdata "$af_dir/monitor" postgresql.listen_addresses 127.0.0.1 >>"$af_dir/monitor.create.log" 2>&1 ||
  af_fail "monitor: cannot set listen_addresses"
af_hba monitor
af_run monitor
for _ in $(seq 1 120); do
  [ "$(af_psql "$pm" pg_auto_failover "SELECT 1 FROM pg_extension WHERE extname = 'pgautofailover'" 2>/dev/null)" = 1 ] && break
  sleep 0.5
done
for setting in health_check_period=1000 health_check_timeout=2000 health_check_max_retries=2 \
  health_check_retry_delay=500 node_considered_unhealthy_timeout=3000 primary_demote_timeout=3000 \
  startup_grace_period=1000; do
  af_psql "$pm" pg_auto_failover "ALTER SYSTEM SET pgautofailover.${setting%%=*} = ${setting#*=}" >/dev/null ||
    af_fail "monitor not reachable on :$pm"
done
af_psql "$pm" pg_auto_failover "SELECT pg_reload_conf()" >/dev/null
af_monitor="postgres://autoctl_node@127.0.0.1:$pm/pg_auto_failover?sslmode=disable"

af_node() { # node port: create a keeper and its PostgreSQL (database test)
  af_ctl create postgres --pgdata "$af_dir/$1" --pgport "$2" --listen 127.0.0.1 --hostname 127.0.0.1 \
    --name "$1" --pgctl "$af_pgbin/pg_ctl" --username postgres --dbname test --monitor "$af_monitor" \
    --skip-pg-hba --no-ssl >>"$af_dir/$1.create.log" 2>&1
}
# The primary first (initdb, registered as single) ...
af_node node1 "$p1" || af_fail "create node1 failed"
af_hba node1
af_run node1
for _ in $(seq 1 120); do
  case "$(af_states)" in *"$p1:single/single"* | *"$p1:wait_primary/"* | *"$p1:primary/"*) break ;; esac
  sleep 0.5
done
# ... then the secondary, cloned from it (pg_basebackup, which waits for a
# checkpoint on the primary: ask for one now and then so it is quick).
(af_node node2 "$p2" && af_run node2 || touch "$af_dir/node2.failed") &
af_node2_create=$!
state=""
for i in $(seq 1 240); do
  state="$(af_states)"
  case "$state" in *"$p1:primary/primary"*) case "$state" in *"$p2:secondary/secondary"*) break ;; esac ;; esac
  [ -f "$af_dir/node2.failed" ] && af_fail "create node2 failed"
  [ $((i % 4)) = 1 ] && af_psql "$p1" postgres CHECKPOINT >/dev/null 2>&1 || true
  sleep 0.5
done
wait "$af_node2_create" || true
case "$state" in
  *"$p1:primary/primary"*"$p2:secondary/secondary"*) ;;
  *) af_fail "formation not up after 120 s" ;;
esac
echo "ci: pg_auto_failover formation up in $(( $(date +%s) - af_t0 )) s: monitor :$pm, primary :$p1, secondary :$p2" \
  "(synchronous_standby_names '$(af_psql "$p1" postgres 'SHOW synchronous_standby_names')')"

# The crash: whichever node is primary now loses its keeper (SIGKILL) and
# its PostgreSQL (immediate shutdown), like a machine that goes away; the
# monitor has to notice and promote the other.
{
  echo '#!/usr/bin/env bash'
  echo 'set -u'
  echo "af_dir='$af_dir'"
  declare -f af_keeper_pids
  cat <<CRASH
for n in node1:$p1 node2:$p2; do
  node="\${n%%:*}" port="\${n##*:}"
  if [ "\$(psql -h 127.0.0.1 -p "\$port" -U postgres -d postgres -XAtqc 'SELECT pg_is_in_recovery()' 2>/dev/null)" = f ]; then
    pids="\$(af_keeper_pids "\$node")"
    postmaster="\$(head -n1 "$af_dir/\$node/postmaster.pid")"
    # The keeper first (it would restart PostgreSQL), then PostgreSQL's
    # immediate shutdown (SIGQUIT, as pg_ctl -m immediate sends).
    [ -n "\$pids" ] && kill -KILL \$pids
    kill -QUIT "\$postmaster"
    while kill -0 "\$postmaster" 2>/dev/null; do sleep 0.05; done
    echo "crashed \$node (port \$port, was primary): keeper killed (\$(echo \$pids | wc -w) pg_autoctl processes), PostgreSQL shut down immediate"
    exit 0
  fi
done
echo "no primary to crash" >&2
exit 1
CRASH
} >"$af_dir/crash.sh"
chmod 755 "$af_dir/crash.sh"

export AGENTSTORE_PG_AUTOFAILOVER_TEST=1
export AGENTSTORE_PG_AUTOFAILOVER_DSN="postgres://postgres@127.0.0.1:$p1,127.0.0.1:$p2/test?sslmode=disable&target_session_attrs=read-write"
export AGENTSTORE_PG_AUTOFAILOVER_CRASH_CMD="$af_dir/crash.sh"
set +e
go test -race -count=1 -timeout 8m -run '^TestReliabilityPostgresAutoFailover$' -v . | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|RELIABILITY:|_test.go'
rc="${PIPESTATUS[0]}"
set -e
echo "ci: formation after the test: $(af_states)"
if [ "$rc" != 0 ]; then
  for f in "$af_dir"/*.keeper.log; do echo "--- $f"; tail -n 30 "$f"; done
  exit "$rc"
fi
