package agentstore_test

import (
	"os"
	"testing"

	"github.com/agentstore/agentstore/agentstoretest"
)

// TestConformancePgBouncer runs the exported conformance suite through
// PgBouncer in transaction pooling (AGENTSTORE_TEST_PGBOUNCER_DSN, started
// by .ci/pgbouncer.sh) with WithPgBouncer, and WithDirectDSN naming the
// direct server (AGENTSTORE_TEST_POSTGRES_DSN) for LISTEN and Migrate's
// CONCURRENTLY steps. Schemas are created and dropped through the pooler.
// It is skipped without the variable, and fails then if
// AGENTSTORE_REQUIRE_PGBOUNCER=1.
func TestConformancePgBouncer(t *testing.T) {
	dsn := os.Getenv("AGENTSTORE_TEST_PGBOUNCER_DSN")
	if dsn == "" {
		if os.Getenv("AGENTSTORE_REQUIRE_PGBOUNCER") == "1" {
			t.Fatal("PgBouncer required (AGENTSTORE_REQUIRE_PGBOUNCER=1) but AGENTSTORE_TEST_PGBOUNCER_DSN is not set: run .ci/pgbouncer.sh")
		}
		t.Skip("NOTICE: AGENTSTORE_TEST_PGBOUNCER_DSN not set (see .ci/pgbouncer.sh); skipping the PgBouncer conformance run")
	}
	requirePostgres(t)
	agentstoretest.Run(t, agentstoretest.PostgresPgBouncer(dsn, postgresDSN()))
}
