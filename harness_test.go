package agentstore_test

import (
	"context"
	"database/sql"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
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

// mariaAdminDB is the MariaDB admin pool (a lazily opened test global like
// adminDB): it creates and drops the tests' private databases.
var mariaAdminDB = sync.OnceValues(func() (*sql.DB, error) {
	_, target, err := agentstore.ParseDSN(mariadbDSN())
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("mysql", target)
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
		requireMariaDB(t)
		db, err := mariaAdminDB()
		if err != nil {
			t.Fatalf("MariaDB admin connection at %s: %v", agentstore.RedactDSN(mariadbDSN()), err)
		}
		name := "t_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:24]
		if _, err := db.Exec("CREATE DATABASE `" + name + "` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
			t.Fatalf("create database %s: %v", name, err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			_, _ = db.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`")
		})
		u, err := url.Parse(mariadbDSN())
		if err != nil {
			t.Fatalf("MariaDB DSN %s: %v", agentstore.RedactDSN(mariadbDSN()), err)
		}
		u.Path = "/" + name
		return &harness{Dialect: d, DSN: u.String()}
	}
	t.Fatalf("unknown dialect %q", d)
	return nil
}

// dialects lists every dialect the conformance suite runs on.
var dialects = []agentstore.Dialect{agentstore.SQLite, agentstore.Postgres, agentstore.MariaDB}

// forEachDialect runs fn as a parallel subtest per dialect, each with its
// own private database. This is the conformance pattern: every behaviour
// test is written once and runs on SQLite and PostgreSQL.
func forEachDialect(t *testing.T, fn func(t *testing.T, h *harness)) {
	t.Helper()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			if d == agentstore.MariaDB {
				if why, ok := mariadbRootNotYet()[strings.SplitN(t.Name(), "/", 2)[0]]; ok {
					t.Skipf("MariaDB: not passing yet (issue 26): %s", why)
				}
				// The root package's per-dialect tests on MariaDB repeat
				// what the conformance suite checks there, through the
				// root's own harness (migrate, DDL, CLI, telemetry, idle
				// cost, reliability): they run with the long tests, so
				// that a plain `go test ./...` stays within 5 minutes.
				if os.Getenv(longTestsEnv) != "1" {
					t.Skipf("the MariaDB half of the root package's per-dialect tests runs with %s=1 (CI does); the conformance suite runs on MariaDB in every run", longTestsEnv)
				}
			}
			fn(t, newHarness(t, d))
		})
	}
}

// placeholders returns q with PostgreSQL's numbered placeholders ($1, $2,
// ...; SQLite takes them too) as MariaDB's ?, for raw statements whose
// arguments come in number order.
func placeholders(h *harness, q string) string {
	if h.Dialect != agentstore.MariaDB {
		return q
	}
	return dollarParamRE.ReplaceAllString(q, "?")
}

var dollarParamRE = regexp.MustCompile(`\$[0-9]+`)

// mariadbRootNotYet are the root package's per-dialect tests that do not
// run on MariaDB yet, each with its reason (as mariadbNotYet for the
// conformance suite); the list only shrinks.
func mariadbRootNotYet() map[string]string {
	return map[string]string{
		"TestSchemaBehindIsTyped":     "MariaDB's chain starts at the schema of version 11 (its V1): a V2 database already has the column the test removes by migrating to V2",
		"TestPerfTelemetryGaugePlans": "checks PostgreSQL's and SQLite's query plans; MariaDB's gauges are measured by bench -scale",
	}
}

// sqliteConn opens a connection of its own (testSQLiteDriver) to the
// SQLite database at dsn (a path or a file: URI), closed at the end of
// the test: the other writer of tests that hold the database's write
// lock with BEGIN IMMEDIATE.
func sqliteConn(t *testing.T, dsn string) *sql.Conn {
	t.Helper()
	db, err := sql.Open(testSQLiteDriver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
