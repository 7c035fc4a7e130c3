package agentstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/agentstoretest"
)

// TestConformancePostgresTimeouts runs the whole conformance suite on
// PostgreSQL with generous statement and lock timeouts, so that every
// transaction and every single statement goes through the timeout path
// (SET LOCAL in the BEGIN message, autocommit statements in a transaction
// of their own): nothing may behave differently. The round-trip count test
// is skipped: it wraps its own handle with New, which refuses the options
// on PostgreSQL, and counts round trips the timeouts add on purpose.
func TestConformancePostgresTimeouts(t *testing.T) {
	requirePostgres(t)
	agentstoretest.Run(t, skipNew{agentstoretest.Postgres(postgresDSN(),
		agentstore.WithStatementTimeout(time.Minute), agentstore.WithLockTimeout(30*time.Second))})
}

// skipNew skips the suite's tests that make their Store with New.
type skipNew struct{ agentstoretest.Harness }

func (h skipNew) NewDatabase(t testing.TB) agentstoretest.Database {
	if strings.HasSuffix(t.Name(), "/ProviderRoundTripsPerTurn") {
		t.Skip("makes its Store with New, which refuses WithStatementTimeout/WithLockTimeout on PostgreSQL")
	}
	return h.Harness.NewDatabase(t)
}

// TestConformanceSQLiteTimeouts runs the whole conformance suite on SQLite
// with generous statement and lock timeouts (every statement bounded, the
// busy timeout set by WithLockTimeout).
func TestConformanceSQLiteTimeouts(t *testing.T) {
	agentstoretest.Run(t, agentstoretest.SQLite(agentstore.WithStatementTimeout(time.Minute), agentstore.WithLockTimeout(20*time.Second)))
}
