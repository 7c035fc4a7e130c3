package langchaingo_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore"
)

const defaultPostgresDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// postgresDSN is the server the PostgreSQL half runs on.
func postgresDSN() string {
	if v := os.Getenv("AGENTSTORE_TEST_POSTGRES_DSN"); v != "" {
		return v
	}
	return defaultPostgresDSN
}

// dialects runs fn once per dialect, each as a subtest with a migrated
// Store on a fresh empty database: "sqlite" and "postgres".
func dialects(t *testing.T, fn func(t *testing.T, st *agentstore.Store)) {
	t.Run("sqlite", func(t *testing.T) { fn(t, newSQLite(t)) })
	t.Run("postgres", func(t *testing.T) { fn(t, newPostgres(t)) })
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newSQLite returns a migrated Store on a new SQLite file in t.TempDir(),
// closed at the end of the test.
func newSQLite(t *testing.T) *agentstore.Store {
	t.Helper()
	return openMigrated(t, "sqlite:"+filepath.Join(t.TempDir(), "history.db"))
}

// newPostgres returns a migrated Store in the new schema lc_<uuid>, dropped
// (CASCADE) at the end of the test, or skips t when the server is
// unreachable (fails with AGENTSTORE_REQUIRE_POSTGRES=1).
func newPostgres(t *testing.T) *agentstore.Store {
	t.Helper()
	ctx := testContext(t)
	admin, err := agentstore.Open(ctx, postgresDSN())
	if err == nil {
		err = admin.SQLDB().PingContext(ctx)
	}
	if err != nil {
		if os.Getenv("AGENTSTORE_REQUIRE_POSTGRES") == "1" {
			t.Fatalf("PostgreSQL required (AGENTSTORE_REQUIRE_POSTGRES=1) but unreachable at %s: %v", agentstore.RedactDSN(postgresDSN()), err)
		}
		t.Skipf("NOTICE: PostgreSQL unreachable at %s (%v); skipping the PostgreSQL half. Set AGENTSTORE_REQUIRE_POSTGRES=1 to fail instead.",
			agentstore.RedactDSN(postgresDSN()), err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	schema := "lc_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.SQLDB().ExecContext(ctx, `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return openMigrated(t, postgresDSN(), agentstore.WithSchema(schema))
}

// openMigrated opens and migrates a Store, closed at the end of the test.
func openMigrated(t *testing.T, dsn string, opts ...agentstore.Option) *agentstore.Store {
	t.Helper()
	ctx := testContext(t)
	st, err := agentstore.Open(ctx, dsn, opts...)
	if err != nil {
		t.Fatalf("agentstore.Open(%s): %v", agentstore.RedactDSN(dsn), err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return st
}
