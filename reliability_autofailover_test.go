package agentstore_test

import (
	"os"
	"testing"
)

// The pg_auto_failover test crashes the primary of a real failover
// formation (a monitor, a primary and a secondary, each a pg_autoctl
// keeper), so it only runs when AGENTSTORE_PG_AUTOFAILOVER_TEST=1, against
// the formation named by the multi-host DSN in AGENTSTORE_PG_AUTOFAILOVER_DSN
// (target_session_attrs=read-write), crashed by the shell command in
// AGENTSTORE_PG_AUTOFAILOVER_CRASH_CMD. .ci/autofailover.sh (run by .ci/run
// after the hand-made failover) builds the formation on loopback ports,
// sets these and stops everything afterwards.
const (
	pgAutoFailoverGateEnv  = "AGENTSTORE_PG_AUTOFAILOVER_TEST"
	pgAutoFailoverDSNEnv   = "AGENTSTORE_PG_AUTOFAILOVER_DSN"
	pgAutoFailoverCrashEnv = "AGENTSTORE_PG_AUTOFAILOVER_CRASH_CMD"
)

// TestReliabilityPostgresAutoFailover: the load of the restart test
// (session queue, worker queue, appends and orchestrations on Stores that
// are never reopened) runs through the formation's multi-host DSN while the
// primary node is crashed (its keeper killed, its PostgreSQL stopped
// immediate). Nobody promotes by hand: the pg_auto_failover monitor notices
// and promotes the secondary. Every failing call must be retryable, no
// acknowledged enqueue, completion or append may be lost or acknowledged
// twice, every orchestration completes, and afterwards the DSN reaches the
// new primary (see runServerFaultLoad).
func TestReliabilityPostgresAutoFailover(t *testing.T) {
	if os.Getenv(pgAutoFailoverGateEnv) != "1" {
		t.Skipf("crashes the primary of a pg_auto_failover formation: set %s=1 with %s and %s (.ci/autofailover.sh does)", pgAutoFailoverGateEnv, pgAutoFailoverDSNEnv, pgAutoFailoverCrashEnv)
	}
	dsn, crash := os.Getenv(pgAutoFailoverDSNEnv), os.Getenv(pgAutoFailoverCrashEnv)
	if dsn == "" || crash == "" {
		t.Fatalf("%s=1 needs %s (the formation's multi-host DSN) and %s (the command that crashes its primary)", pgAutoFailoverGateEnv, pgAutoFailoverDSNEnv, pgAutoFailoverCrashEnv)
	}
	runServerFaultLoad(t, serverFault{name: "autofailover", dsn: dsn, fail: crash, newPrimary: true})
}
