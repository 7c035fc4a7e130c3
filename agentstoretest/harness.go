// Package agentstoretest is agentstore's conformance suite, exported so that
// a new dialect, a user's own deployment (their server, pooler, table prefix
// or schema) or a fork can run the same behaviour tests the project runs on
// SQLite and PostgreSQL.
//
// The suite is black-box: it drives a Store through its public API. A small
// Harness supplies what only the deployment knows: how to get an empty
// database private to one test. A few tests plant rows the API refuses to
// write (corrupt JSON, unknown enum values) through Store.DB, the public
// GORM handle; they need only the table names Store.Table returns.
//
// Run it from a test of your own:
//
//	func TestAgentstoreConformance(t *testing.T) {
//		agentstoretest.Run(t, agentstoretest.Postgres(os.Getenv("DATABASE_URL")))
//	}
//
// Every test runs in parallel with the others (bounded by go test -parallel),
// each in its own database: a SQLite file in t.TempDir(), or a PostgreSQL
// schema created for the test and dropped at its end.
package agentstoretest

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	_ "github.com/jackc/pgx/v5/stdlib" // the admin connection of the Postgres harness

	"github.com/agentstore/agentstore"
)

// Harness supplies the databases the suite runs on.
type Harness interface {
	// NewDatabase prepares an empty database private to t and returns how
	// to open Stores on it. It registers its own clean-up with t.Cleanup
	// and calls t.Fatal when the database cannot be prepared.
	NewDatabase(t testing.TB) Database
}

// Database is one test's private database.
type Database struct {
	// DSN is the agentstore DSN (see agentstore.Open).
	DSN string
	// Options are applied to every Store the test opens, before the
	// test's own options (for example WithSchema, WithTablePrefix, WithPool
	// or a capability switch).
	Options []agentstore.Option
	// Schema is the PostgreSQL schema the Options select, "" for none.
	// Tests that check Verify's report compare it with the report's schema.
	Schema string
	// Pooled reports that DSN goes through a transaction pooler
	// (PgBouncer): a test that opens its own driver handle on DSN (rather
	// than through agentstore.Open with Options) configures it for one
	// (pgx QueryExecModeExec, no statement cache).
	Pooled bool
}

// SQLite returns the harness of a SQLite file per test in t.TempDir(),
// opened with opts.
func SQLite(opts ...agentstore.Option) Harness { return sqliteHarness{opts: opts} }

type sqliteHarness struct{ opts []agentstore.Option }

// NewDatabase returns a new SQLite file in t.TempDir().
func (h sqliteHarness) NewDatabase(t testing.TB) Database {
	return Database{DSN: "sqlite:" + filepath.Join(t.TempDir(), "agentstore.db"), Options: h.opts}
}

// Postgres returns the harness of a fresh schema per test on the
// PostgreSQL database at dsn (postgres://... or key=value), created through
// an admin connection on the same DSN and dropped with CASCADE at the end of
// the test. opts are applied to every Store (do not pass WithSchema: the
// harness selects the test's schema). The DSN's user must be allowed to
// create schemas. For a DSN through PgBouncer in transaction pooling use
// PostgresPgBouncer.
func Postgres(dsn string, opts ...agentstore.Option) Harness {
	return &pgHarness{dsn: dsn, opts: opts}
}

// PostgresPgBouncer returns the harness of a fresh schema per test on the
// PostgreSQL database behind a PgBouncer (or other pooler) in transaction
// or session pooling at dsn, whose server directDSN reaches directly.
// Schemas are created and dropped through dsn; every Store is opened on
// dsn with agentstore.WithPgBouncer() and agentstore.WithDirectDSN(directDSN)
// (LISTEN and Migrate's CONCURRENTLY steps go there) before opts, and
// Database.Pooled is set.
func PostgresPgBouncer(dsn, directDSN string, opts ...agentstore.Option) Harness {
	all := append([]agentstore.Option{agentstore.WithPgBouncer(), agentstore.WithDirectDSN(directDSN)}, opts...)
	return &pgHarness{dsn: dsn, opts: all, pooled: true}
}

type pgHarness struct {
	dsn    string
	opts   []agentstore.Option
	pooled bool
	once   sync.Once
	db     *sql.DB
	err    error
}

func (h *pgHarness) admin() (*sql.DB, error) {
	h.once.Do(func() {
		dsn := strings.TrimPrefix(h.dsn, "postgresql:")
		if strings.HasPrefix(h.dsn, "postgresql:") {
			dsn = "postgres:" + dsn
		}
		h.db, h.err = sql.Open("pgx", dsn)
		if h.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h.err = h.db.PingContext(ctx)
	})
	return h.db, h.err
}

// NewDatabase creates a schema private to t.
func (h *pgHarness) NewDatabase(t testing.TB) Database {
	t.Helper()
	db, err := h.admin()
	if err != nil {
		t.Fatalf("agentstoretest: PostgreSQL at %s: %v", agentstore.RedactDSN(h.dsn), err)
	}
	schema := "t_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = db.ExecContext(ctx, `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`)
	})
	opts := append([]agentstore.Option{agentstore.WithSchema(schema)}, h.opts...)
	return Database{DSN: h.dsn, Options: opts, Schema: schema, Pooled: h.pooled}
}

// test is one conformance test.
type test struct {
	name string
	fn   func(t *testing.T, h *harness)
}

var (
	registryMu sync.Mutex
	registry   = map[string][]test{}
)

// register adds tests to an area of the suite (called from init).
func register(area string, tests ...test) {
	registryMu.Lock()
	defer registryMu.Unlock()
	registry[area] = append(registry[area], tests...)
}

// Areas returns the names of the suite's areas, sorted ("Sessions",
// "SessionQueue", "Orchestration", ...). Run's subtests are named
// area/test.
func Areas() []string {
	registryMu.Lock()
	defer registryMu.Unlock()
	out := make([]string, 0, len(registry))
	for a := range registry {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// Count returns the number of tests Run runs.
func Count() int {
	registryMu.Lock()
	defer registryMu.Unlock()
	n := 0
	for _, ts := range registry {
		n += len(ts)
	}
	return n
}

// Run runs every conformance test against h, as parallel subtests of t
// named area/test (select some with go test -run, e.g.
// -run 'TestConformance/sqlite/Sessions/').
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h == nil {
		t.Fatal("agentstoretest.Run: nil Harness")
	}
	for _, area := range Areas() {
		registryMu.Lock()
		tests := append([]test(nil), registry[area]...)
		registryMu.Unlock()
		t.Run(area, func(t *testing.T) {
			t.Parallel()
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					tc.fn(t, newHarness(t, h))
				})
			}
		})
	}
}

// harness is one test's view of its database: the dialect, DSN and schema,
// and constructors of Stores on it.
type harness struct {
	// Dialect is the database's dialect, from the DSN.
	Dialect agentstore.Dialect
	// DSN is the agentstore DSN of the test's database; Schema the
	// PostgreSQL schema private to the test ("" on SQLite).
	DSN    string
	Schema string
	// pooled: DSN goes through a transaction pooler (Database.Pooled).
	pooled bool
	opts   []agentstore.Option
}

func newHarness(t *testing.T, h Harness) *harness {
	t.Helper()
	db := h.NewDatabase(t)
	d, _, err := agentstore.ParseDSN(db.DSN)
	if err != nil {
		t.Fatalf("agentstoretest: harness DSN: %v", err)
	}
	return &harness{Dialect: d, DSN: db.DSN, Schema: db.Schema, pooled: db.Pooled, opts: db.Options}
}

// Open opens another store on the test's database (not migrated).
func (h *harness) Open(t testing.TB, opts ...agentstore.Option) *agentstore.Store {
	t.Helper()
	all := append(append([]agentstore.Option(nil), h.opts...), opts...)
	st, err := agentstore.Open(context.Background(), h.DSN, all...)
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

// testClock is a settable clock for WithClock.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newTestClock() *testClock {
	return &testClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

// Now returns the clock's time.
func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// String names the clock's time (for failure messages).
func (c *testClock) String() string { return fmt.Sprint(c.Now()) }
