package agentstore_test

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// longTestsEnv opts in to the long tests: the reliability load, fault and
// process tests (minutes each on a small machine). `go test ./...` skips
// them; CI (.ci/run) sets it and runs every one.
const longTestsEnv = "AGENTSTORE_LONG_TESTS"

// defaultParallel is the -parallel used when the command line gives none:
// the tests mostly wait on the database, so more of them than there are
// cores run at once (GOMAXPROCS when that is larger), fewer when the
// PostgreSQL server has not connsPerTest free connections for each.
const defaultParallel = 6

// connsPerTest is about the most PostgreSQL connections one running test
// holds (several Stores, each with its pool and listener): 6 tests at once
// peaked at 81 connections here. connsSpare are left for other clients of
// a shared server, whose use may grow during the run.
const (
	connsPerTest = 14
	connsSpare   = 10
)

// hotCatalogs are the system catalogs every test's CREATE SCHEMA / DROP
// SCHEMA leaves dead rows in.
const hotCatalogs = "pg_catalog.pg_attribute, pg_catalog.pg_attrdef, pg_catalog.pg_class, pg_catalog.pg_constraint, " +
	"pg_catalog.pg_depend, pg_catalog.pg_index, pg_catalog.pg_namespace, pg_catalog.pg_sequence, " +
	"pg_catalog.pg_statistic, pg_catalog.pg_trigger, pg_catalog.pg_type"

// TestMain runs the package's tests with a default -parallel (see
// setDefaultParallel), and, when PostgreSQL is reachable, vacuums the test
// database's hot system catalogs before and after them: every test
// creates and drops a schema, and a server running without autovacuum
// would otherwise keep every dead catalog row, so that catalog reads slow
// down run after run. With -v it prints pg_attribute's size and dead rows.
// A child process of the process tests (relHelperEnv set) does neither.
func TestMain(m *testing.M) {
	flag.Parse()
	if os.Getenv(relHelperEnv) != "" {
		os.Exit(m.Run())
	}
	db := catalogDB()
	setDefaultParallel(db)
	vacuumCatalogs(db, "before")
	code := m.Run()
	removeTestBinaries()
	vacuumCatalogs(db, "after")
	os.Exit(code)
}

// setDefaultParallel sets -test.parallel unless the command line set it:
// defaultParallel (or GOMAXPROCS if larger), lowered to the number of
// tests the PostgreSQL server's free connections (max_connections less
// the reserved ones, those open now and connsSpare) can carry at
// connsPerTest each, but never below 2.
func setDefaultParallel(db *sql.DB) {
	set := false
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "test.parallel" {
			set = true
		}
	})
	if set {
		return
	}
	n := max(defaultParallel, runtime.GOMAXPROCS(0))
	if free, ok := freeConnections(db); ok && (free-connsSpare)/connsPerTest < n {
		n = max(2, (free-connsSpare)/connsPerTest)
		if testing.Verbose() {
			fmt.Printf("agentstore tests: -parallel %d (%d free PostgreSQL connections)\n", n, free)
		}
	}
	_ = flag.Set("test.parallel", strconv.Itoa(n))
}

// freeConnections returns how many more connections the PostgreSQL server
// accepts from an ordinary user now.
func freeConnections(db *sql.DB) (int, bool) {
	if db == nil {
		return 0, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var free int
	err := db.QueryRowContext(ctx, `SELECT current_setting('max_connections')::int
		- current_setting('superuser_reserved_connections')::int
		- (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int`).Scan(&free)
	return free, err == nil
}

// catalogDB returns the admin pool when PostgreSQL is reachable, else nil.
func catalogDB() *sql.DB {
	db, err := adminDB()
	if err != nil {
		return nil
	}
	return db
}

// vacuumCatalogs vacuums (and analyzes) hotCatalogs of the test database.
// A failure (a user without the privilege: VACUUM then only warns) is
// printed, never fatal. With -v it prints pg_attribute's size and rows
// before and after.
func vacuumCatalogs(db *sql.DB, when string) {
	if db == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	was := attributeStats(ctx, db)
	start := time.Now()
	if _, err := db.ExecContext(ctx, "VACUUM (ANALYZE) "+hotCatalogs); err != nil {
		fmt.Fprintf(os.Stderr, "agentstore tests: vacuum of the system catalogs %s the tests failed: %v\n", when, err)
		return
	}
	if testing.Verbose() {
		fmt.Printf("agentstore tests: system catalogs vacuumed %s the tests in %v: pg_attribute %s -> %s\n",
			when, time.Since(start).Round(time.Millisecond), was, attributeStats(ctx, db))
	}
}

// attributeStats describes pg_attribute's size and live and dead rows.
func attributeStats(ctx context.Context, db *sql.DB) string {
	var size string
	var dead, live int64
	if err := db.QueryRowContext(ctx, `SELECT pg_size_pretty(pg_total_relation_size('pg_catalog.pg_attribute')), n_live_tup, n_dead_tup
		FROM pg_stat_sys_tables WHERE relid = 'pg_catalog.pg_attribute'::regclass`).Scan(&size, &live, &dead); err != nil {
		return "(unknown)"
	}
	return fmt.Sprintf("%s (%d live rows, %d dead)", size, live, dead)
}

// requireSuiteVariant skips t, a further whole run of the conformance
// suite under other options (fast paths off, telemetry, timeouts), unless
// longTestsEnv=1: `go test ./...` runs the suite once per dialect, CI runs
// every variant as well.
func requireSuiteVariant(t testing.TB) {
	t.Helper()
	if os.Getenv(longTestsEnv) != "1" {
		t.Skipf("conformance variant: set %s=1 to run it (CI does)", longTestsEnv)
	}
}

// mariadbOnlyLongTest skips t, one of the root package's MariaDB-only
// tests (TestMariaDB*: query plans, migration internals, the polled change
// feed under load), unless longTestsEnv=1, as the MariaDB half of its
// per-dialect tests (forEachDialect): `go test ./...` runs the conformance
// suite on MariaDB and stays within 5 minutes; CI runs these too.
func mariadbOnlyLongTest(t testing.TB) {
	t.Helper()
	if os.Getenv(longTestsEnv) != "1" {
		t.Skipf("a MariaDB-only test of the root package: set %s=1 to run it (CI does); the conformance suite runs on MariaDB in every run", longTestsEnv)
	}
}

// requireLongTests skips t unless longTestsEnv=1.
func requireLongTests(t testing.TB) {
	t.Helper()
	if os.Getenv(longTestsEnv) != "1" {
		t.Skipf("long test (load, faults, processes): set %s=1 to run it (CI does)", longTestsEnv)
	}
}
