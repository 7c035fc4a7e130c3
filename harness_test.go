package agentstore_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/internal/testkit"
)

// defaultPostgresDSN is used when AGENTSTORE_TEST_POSTGRES_DSN is not set.
const defaultPostgresDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

func postgresDSN() string {
	if v := os.Getenv("AGENTSTORE_TEST_POSTGRES_DSN"); v != "" {
		return v
	}
	return defaultPostgresDSN
}

// defaultMariaDBDSN is used when AGENTSTORE_TEST_MARIADB_DSN is not set.
const defaultMariaDBDSN = "mysql://root@127.0.0.1:3306/test"

func mariadbDSN() string {
	if v := os.Getenv("AGENTSTORE_TEST_MARIADB_DSN"); v != "" {
		return v
	}
	return defaultMariaDBDSN
}

// requireMariaDB skips (fails when AGENTSTORE_REQUIRE_MARIADB=1) when the
// MariaDB server of mariadbDSN is unreachable.
func requireMariaDB(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := agentstore.Open(ctx, mariadbDSN())
	if err == nil {
		err = st.SQLDB().PingContext(ctx)
		_ = st.Close()
	}
	if err != nil {
		if os.Getenv("AGENTSTORE_REQUIRE_MARIADB") == "1" {
			t.Fatalf("MariaDB required (AGENTSTORE_REQUIRE_MARIADB=1) but unreachable at %s: %v", agentstore.RedactDSN(mariadbDSN()), err)
		}
		t.Skipf("NOTICE: MariaDB unreachable at %s (%v); skipping the MariaDB half. Set AGENTSTORE_REQUIRE_MARIADB=1 to fail instead.",
			agentstore.RedactDSN(mariadbDSN()), err)
	}
}

// adminDB is the one tolerated test global: a lazily opened admin pool.
var adminDB = sync.OnceValues(func() (*sql.DB, error) {
	db, err := sql.Open("pgx", postgresDSN())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, err
	}
	return db, nil
})

// requirePostgres returns the admin pool, or skips (fails when
// AGENTSTORE_REQUIRE_POSTGRES=1) when PostgreSQL is unreachable.
func requirePostgres(t testing.TB) *sql.DB {
	t.Helper()
	db, err := adminDB()
	if err != nil {
		if os.Getenv("AGENTSTORE_REQUIRE_POSTGRES") == "1" {
			t.Fatalf("PostgreSQL required (AGENTSTORE_REQUIRE_POSTGRES=1) but unreachable at %s: %v",
				agentstore.RedactDSN(postgresDSN()), err)
		}
		t.Skipf("NOTICE: PostgreSQL unreachable at %s (%v); skipping the PostgreSQL half. Set AGENTSTORE_REQUIRE_POSTGRES=1 to fail instead.",
			agentstore.RedactDSN(postgresDSN()), err)
	}
	return db
}

// testClock is a settable clock for WithClock.
type testClock = testkit.Clock

func newTestClock() *testClock { return testkit.NewClock() }

// harness builds stores of one dialect for one test.
type harness struct {
	Dialect agentstore.Dialect
	// DSN is the agentstore DSN of the test's database; Schema the
	// PostgreSQL schema private to the test ("" on SQLite).
	DSN    string
	Schema string
}

// Open opens another store on the test's database (not migrated).
func (h *harness) Open(t testing.TB, opts ...agentstore.Option) *agentstore.Store {
	t.Helper()
	if h.Schema != "" {
		opts = append([]agentstore.Option{agentstore.WithSchema(h.Schema)}, opts...)
	}
	st, err := agentstore.Open(context.Background(), h.DSN, opts...)
	if err != nil {
		t.Fatalf("open %s store: %v", h.Dialect, err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// New opens a migrated store on the test's database.
func (h *harness) New(t testing.TB, opts ...agentstore.Option) *agentstore.Store {
	t.Helper()
	st := h.Open(t, opts...)
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate %s: %v", h.Dialect, err)
	}
	return st
}

// newHarness prepares a private database for t: a SQLite file in
// t.TempDir(), or a fresh PostgreSQL schema dropped at cleanup.
func newHarness(t testing.TB, d agentstore.Dialect) *harness {
	t.Helper()
	switch d {
	case agentstore.SQLite:
		return &harness{Dialect: d, DSN: "sqlite:" + filepath.Join(t.TempDir(), "agentstore.db")}
	case agentstore.Postgres:
		db := requirePostgres(t)
		schema := "t_" + strings.ReplaceAll(uuid.NewString(), "-", "")
		t.Cleanup(func() {
			_, _ = db.ExecContext(context.Background(), `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`)
		})
		return &harness{Dialect: d, DSN: postgresDSN(), Schema: schema}
	case agentstore.MariaDB:
		return newMariaDBHarness(t)
	}
	t.Fatalf("unknown dialect %q", d)
	return nil
}

// dialects lists every dialect the conformance suite runs on.
var dialects = []agentstore.Dialect{agentstore.SQLite, agentstore.Postgres}

// forEachDialect runs fn as a parallel subtest per dialect, each with its
// own private database. This is the conformance pattern: every behaviour
// test is written once and runs on SQLite and PostgreSQL.
func forEachDialect(t *testing.T, fn func(t *testing.T, h *harness)) {
	t.Helper()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			fn(t, newHarness(t, d))
		})
	}
}
