// Package agentstoretest is agentstore's conformance suite, exported so that
// a new dialect, a user's own deployment (their server, pooler, table prefix
// or schema), a fork, or another implementation of the same contracts can
// run the behaviour tests the project runs on SQLite and PostgreSQL.
//
// The suite is black-box: its tests drive the public interfaces — the
// session API (repo.Sessions, repo.SessionQueue, tenant views) and the
// duroxide provider contract (duroxide.Provider, duroxide.ProviderAdmin and,
// where it is implemented, duroxide.ProviderAdminExt) — of the handles a
// Backend opens. A Harness supplies one private Backend per test.
//
// A few things only the storage underneath can do: plant a row the API
// refuses to write (corrupt JSON, an unknown enum value), count or read
// stored rows no API returns, hold a row lock, fail queries, refresh the
// planner's statistics. A Backend offers them by also implementing the
// optional DatabaseOps; the tests that need them are skipped, with a
// message, on a Backend that does not. Likewise for what a test asks of a
// handle through Config (a clock, timeouts, observed statements): a Backend
// that cannot honour it returns ErrNotSupported and the test is skipped.
// The tests of agentstore's own schema tooling (Migrate, Verify) need a
// StoreBackend. The harnesses of this package (SQLite, Postgres,
// PostgresPgBouncer) implement all of it: on them nothing is skipped.
//
// Run it from a test of your own:
//
//	func TestAgentstoreConformance(t *testing.T) {
//		agentstoretest.Run(t, agentstoretest.Postgres(os.Getenv("DATABASE_URL")))
//	}
//
// Every test runs in parallel with the others (bounded by go test -parallel),
// each on its own backend: with the harnesses of this package a SQLite file
// in t.TempDir(), or a PostgreSQL schema created for the test and dropped at
// its end.
package agentstoretest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// Harness supplies the implementation under test: a backend private to
// each test.
type Harness interface {
	// NewBackend prepares an empty backend (a database, a schema) private
	// to t and returns it. It registers its own clean-up with t.Cleanup and
	// calls t.Fatal when the backend cannot be prepared.
	NewBackend(t testing.TB) Backend
}

// Backend is one test's private backend: the storage every handle opened
// on it shares, as processes share one database.
type Backend interface {
	// Open opens a new handle on the backend configured by cfg, ready for
	// use (its schema in place), and closes it at the end of t. It returns
	// an error matching ErrNotSupported when it cannot honour cfg (the test
	// is then skipped), and an error matching agentstore.ErrInvalidConfig
	// when cfg is invalid (a negative timeout, or one below a millisecond
	// or above 24 hours; a MaxContentBytes out of range).
	Open(t testing.TB, cfg Config) (Store, error)
}

// Config is what a test asks of a handle it opens. The zero value asks for
// nothing: the backend's defaults.
type Config struct {
	// Clock, if not nil, is the handle's time source: every timestamp,
	// lease and lock expiry it computes reads it (agentstore.WithClock).
	Clock func() time.Time
	// TablePrefix, if not empty, sets the handle apart from the handles of
	// other prefixes on the same backend: they see none of each other's
	// data (agentstore.WithTablePrefix).
	TablePrefix string
	// PollInterval, if not 0, is how often a waiting fetch re-checks for
	// work when no wake-up reaches it (agentstore.WithPollInterval).
	PollInterval time.Duration
	// LockTimeout and StatementTimeout, if not 0, bound a lock wait and a
	// statement (agentstore.WithLockTimeout, WithStatementTimeout): the
	// calls then fail with repo.ErrLockTimeout and repo.ErrStatementTimeout.
	LockTimeout, StatementTimeout time.Duration
	// MaxContentBytes, if not 0, is the largest message or queue-item
	// content the handle accepts (agentstore.WithMaxContentBytes); a
	// negative value or one above agentstore.MaxContentBytesLimit is
	// invalid.
	MaxContentBytes int
	// MaxConns, if not 0, limits the handle's open database connections
	// (agentstore.WithPool with MaxOpenConns MaxConns and MinIdleConns 1).
	MaxConns int
	// OnStatement, if not nil, is called with every statement the handle
	// sends, after it ran (agentstore.WithLogger with a GORM logger).
	OnStatement func(Statement)
	// OnRoundTrip, if not nil, is called with every statement the handle
	// sends to the database server, transaction control included (Text and
	// TxControl set): one call per round trip.
	OnRoundTrip func(Statement)
	// ContentCodec, if not nil, encrypts the handle's content at rest
	// (agentstore.WithContentCodec): the Encryption area's handles.
	ContentCodec agentstore.ContentCodec
}

// Statement is one statement a handle sent, as Config.OnStatement reports
// it.
type Statement struct {
	// Text is the statement (for failure messages only).
	Text string
	// Query: the statement reads (it starts with SELECT or WITH).
	Query bool
	// Delete: the statement is a DELETE.
	Delete bool
	// TxControl: the statement begins, ends or configures a transaction.
	TxControl bool
	// Writes are the tables (base names, e.g. models.TableMessages) the
	// statement inserts into, updates or deletes from, in data-modifying
	// WITH items too; not the tables it only reads.
	Writes []string
	// Rows is the number of rows the statement affected, as the driver
	// reports it (for a statement that writes several tables, one count for
	// all of them).
	Rows int64
}

// Store is one handle on a backend: the public interfaces the suite
// exercises. The handles of one backend share its data.
type Store interface {
	// Sessions returns the session repository.
	Sessions() repo.Sessions
	// SessionQueue returns the session queue.
	SessionQueue() repo.SessionQueue
	// Provider returns the durable-orchestration provider.
	Provider() duroxide.Provider
	// ProviderAdmin returns the provider's management API; the suite also
	// tests duroxide.ProviderAdminExt when it implements that.
	ProviderAdmin() duroxide.ProviderAdmin
	// ForTenant returns the repositories scoped to tenant: they see and
	// write only that tenant's sessions (another tenant's are ErrNotFound).
	ForTenant(tenant string) TenantView
	// Close releases the handle; calls on a closed handle fail.
	Close() error
}

// TenantView is a tenant-scoped view of a Store.
type TenantView interface {
	// Sessions returns the tenant's session repository.
	Sessions() repo.Sessions
	// SessionQueue returns the tenant's session queue.
	SessionQueue() repo.SessionQueue
}

// ErrNotSupported is returned by a Backend (wrapped, with the reason) for
// what it cannot do; the test that asked is skipped with the reason.
var ErrNotSupported = errors.New("agentstoretest: not supported by this backend")

// Row names stored rows by column: each entry is a column (of the models'
// tables, package models) and the value it must equal. An empty Row
// selects every row of a table.
type Row map[string]any

// DatabaseOps is the optional interface of a Backend for what only the
// storage underneath can do. Tables are named by their base names (package
// models, e.g. models.TableMessages) and reached through st, so its table
// prefix applies; columns are those of the models. Tests that need an
// operation of a Backend without DatabaseOps are skipped.
type DatabaseOps interface {
	// Insert stores row in table, without the API's validation (the
	// database's own constraints apply: their violation is the error).
	Insert(ctx context.Context, st Store, table string, row Row) error
	// Update sets the columns of set on the rows of table that where
	// selects, without the API's validation. The database's refusal (a
	// JSON column that rejects invalid JSON) is the error.
	Update(ctx context.Context, st Store, table string, where, set Row) error
	// Delete deletes the rows of table that where selects.
	Delete(ctx context.Context, st Store, table string, where Row) error
	// Count returns the number of rows of table that where selects.
	Count(ctx context.Context, st Store, table string, where Row) (int64, error)
	// Values returns column of the rows of table that where selects, as
	// stored, in text form, in the order of the table's primary key.
	Values(ctx context.Context, st Store, table string, where Row, column string) ([]string, error)
	// DropTable drops table.
	DropTable(ctx context.Context, st Store, table string) error
	// RefreshStatistics has the database gather its planner statistics of
	// tables (ANALYZE).
	RefreshStatistics(ctx context.Context, st Store, tables ...string) error
	// LockRows takes the write lock of the rows of table that where
	// selects (where must name at least one column and select at least one
	// row) in a transaction of st, calls hold while it holds the lock and
	// commits when hold returns. On a database with row locks it is the
	// strongest row lock (SELECT ... FOR UPDATE on PostgreSQL): every other
	// transaction's lock or write of those rows waits for it.
	LockRows(ctx context.Context, st Store, table string, where Row, hold func()) error
	// LockTable takes, in a transaction of st, a lock that makes other
	// transactions' writes to table wait (their plain reads go on where the
	// database tells them apart: a table lock in EXCLUSIVE mode on
	// PostgreSQL, the database's one write lock on SQLite), calls hold
	// while it holds the lock and rolls back when hold returns.
	LockTable(ctx context.Context, st Store, table string, hold func()) error
	// BeforeStatement calls hook with the text of every statement st sends
	// as text (raw statements and row queries), before it is sent, from
	// now on (for the rest of the test).
	BeforeStatement(st Store, hook func(text string)) error
	// UnreadableTimestamp makes the timestamp column of the rows of table
	// that where selects unreadable as a timestamp while keeping each
	// row's place in the column's order (the stored text with a suffix),
	// and reports true, on a database whose columns can hold a value of
	// another type (SQLite); on others it changes nothing and reports
	// false.
	UnreadableTimestamp(ctx context.Context, st Store, table string, where Row, column string) (bool, error)
	// InjectFault makes every row query of st call fault first from now on
	// (for the rest of the test); a non-nil error fails the query as if the
	// driver had returned it.
	InjectFault(st Store, fault func() error) error
	// ValidatesJSON reports whether the database itself refuses invalid
	// JSON in its JSON columns (a message's content).
	ValidatesJSON() bool
}

// ContentKeyRotator is the optional interface of a Store handle that
// encrypts content at rest and can move it to its codec's active key
// (agentstore.Store.RotateContentKeys). The Encryption area's rotation
// tests are skipped on handles without it.
type ContentKeyRotator interface {
	RotateContentKeys(ctx context.Context, p agentstore.RotateParams) (agentstore.RotateReport, error)
}

// StoreBackend is the optional interface of a Backend whose handles are
// agentstore Stores: the Schema area (Migrate and Verify, the schema of the
// models) needs it and is skipped on other Backends.
type StoreBackend interface {
	// OpenStore opens an agentstore Store on the backend with the
	// backend's options and then opts, without migrating it, and closes it
	// at the end of t. It returns the Store and the same Store as a handle
	// of this suite (for DatabaseOps).
	OpenStore(t testing.TB, opts ...agentstore.Option) (*agentstore.Store, Store, error)
	// DamageSchema alters the migrated schema of st away from the models in
	// every way agentstore.Verify checks (index, column, type, nullability,
	// foreign key, table) and returns the issues Verify must report, as
	// "kind table object" lines (see testkit.IssueKeys).
	DamageSchema(ctx context.Context, st Store) ([]string, error)
	// ApplyFix runs the fix of a Verify issue on st's database.
	ApplyFix(ctx context.Context, st Store, fix string) error
}

// Area is a named group of the suite's tests; Run's subtests are named
// area/test.
type Area struct {
	Name  string
	Tests []Test
}

// Test is one conformance test.
type Test struct {
	Name string
	fn   func(t *testing.T, h *harness)
}

// test is the element type of the per-file test lists.
type test = Test

// tests returns its arguments: the per-file test lists read as one literal.
func tests(ts ...test) []test { return ts }

// Areas returns the suite's areas, sorted by name, each with its tests.
func Areas() []Area {
	return []Area{
		{"ActivitySessions", concat(activitySessionsTests(), activitySessionsDefectTests(), activitySessionsLeaseTests())},
		{"Admin", concat(adminTests(), adminExtTests(), adminDefectTests(), providerPagingTests())},
		{"ChangeFeed", changeFeedTests()},
		{"Encryption", encryptionTests()},
		{"Errors", concat(errorsTests(), errorsDriverTests(), errorsDefectTests(), closedTests())},
		{"ExportImport", exportImportTests()},
		{"Hostile", hostileTests()},
		{"InTransaction", inTransactionTests()},
		{"KV", kvTests()},
		{"Orchestration", concat(orchestrationTests(), orchestrationDefectTests(), orchestrationContractTests(), orchestrationLeaseTests())},
		{"Schema", schemaTests()},
		{"Search", searchTests()},
		{"SessionErrors", sessionErrorsTests()},
		{"SessionQueue", concat(groupCommitQueueTests(), sessionQueueTests(), sessionQueueRetentionTests(), sessionQueueReadsTests(), sessionQueueWaitTests())},
		{"Sessions", concat(sessionsTests(), sessionsBranchesTests(), sessionsAppendTests(), sessionsDataTests(), sessionsLimitsTests(), sessionsPagingTests(), sessionsReadsTests())},
		{"Tenancy", tenancyTests()},
		{"Timeouts", timeoutsTests()},
		{"WorkerQueue", concat(groupCommitWorkerTests(), workerQueueDefectTests(), workerQueueTests(), workerQueueContractTests(), workerQueueLeaseTests())},
	}
}

func concat(lists ...[]test) []test {
	var out []test
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// AreaNames returns the names of the suite's areas, sorted.
func AreaNames() []string {
	var out []string
	for _, a := range Areas() {
		out = append(out, a.Name)
	}
	return out
}

// Count returns the number of tests Run runs.
func Count() int {
	n := 0
	for _, a := range Areas() {
		n += len(a.Tests)
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
		t.Run(area.Name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range area.Tests {
				t.Run(tc.Name, func(t *testing.T) {
					t.Parallel()
					tc.fn(t, newHarness(t, h))
				})
			}
		})
	}
}

// harness is one test's view of its backend: handles on it and the
// backend's optional operations.
type harness struct {
	b Backend
}

func newHarness(t *testing.T, h Harness) *harness {
	t.Helper()
	return &harness{b: h.NewBackend(t)}
}

// option sets a field of the Config of a handle a test opens.
type option func(*Config)

func withClock(now func() time.Time) option       { return func(c *Config) { c.Clock = now } }
func withTablePrefix(p string) option             { return func(c *Config) { c.TablePrefix = p } }
func withPollInterval(d time.Duration) option     { return func(c *Config) { c.PollInterval = d } }
func withLockTimeout(d time.Duration) option      { return func(c *Config) { c.LockTimeout = d } }
func withStatementTimeout(d time.Duration) option { return func(c *Config) { c.StatementTimeout = d } }
func withMaxConns(n int) option                   { return func(c *Config) { c.MaxConns = n } }
func withMaxContentBytes(n int) option            { return func(c *Config) { c.MaxContentBytes = n } }
func withStatements(r *stmtRecorder) option       { return func(c *Config) { c.OnStatement = r.add } }
func withRoundTrips(fn func(Statement)) option    { return func(c *Config) { c.OnRoundTrip = fn } }
func withCodec(c agentstore.ContentCodec) option  { return func(cfg *Config) { cfg.ContentCodec = c } }

// tryOpen opens a handle configured by opts; the error is the backend's.
func (h *harness) tryOpen(t testing.TB, opts ...option) (Store, error) {
	t.Helper()
	var cfg Config
	for _, o := range opts {
		o(&cfg)
	}
	return h.b.Open(t, cfg)
}

// Open opens a handle on the test's backend configured by opts: skipped
// when the backend cannot honour them, fatal on any other error.
func (h *harness) Open(t testing.TB, opts ...option) Store {
	t.Helper()
	st, err := h.tryOpen(t, opts...)
	if errors.Is(err, ErrNotSupported) {
		t.Skipf("agentstoretest: %v", err)
	}
	if err != nil {
		t.Fatalf("agentstoretest: open a handle: %v", err)
	}
	return st
}

// New opens the test's first handle (the same as Open: every handle is
// ready for use).
func (h *harness) New(t testing.TB, opts ...option) Store {
	t.Helper()
	return h.Open(t, opts...)
}

// ops returns the backend's DatabaseOps, or skips t.
func (h *harness) ops(t testing.TB) DatabaseOps {
	t.Helper()
	ops, ok := h.b.(DatabaseOps)
	if !ok {
		t.Skipf("agentstoretest: %s plants or reads stored rows directly: the backend %T does not implement DatabaseOps", t.Name(), h.b)
	}
	return ops
}

// stores returns the backend as a StoreBackend, or skips t.
func (h *harness) stores(t testing.TB) StoreBackend {
	t.Helper()
	sb, ok := h.b.(StoreBackend)
	if !ok {
		t.Skipf("agentstoretest: %s tests agentstore's schema tooling: the backend %T does not implement StoreBackend", t.Name(), h.b)
	}
	return sb
}

// store opens an agentstore Store (not migrated) with opts, or skips t.
func (h *harness) store(t testing.TB, opts ...agentstore.Option) (*agentstore.Store, Store) {
	t.Helper()
	st, hs, err := h.stores(t).OpenStore(t, opts...)
	if err != nil {
		t.Fatalf("agentstoretest: open a Store: %v", err)
	}
	return st, hs
}

// insert, update, del, count and values run the DatabaseOps of the same
// name, failing t on an error.
func (h *harness) insert(t testing.TB, st Store, table string, row Row) {
	t.Helper()
	if err := h.ops(t).Insert(context.Background(), st, table, row); err != nil {
		t.Fatalf("plant a %s row %v: %v", table, row, err)
	}
}

func (h *harness) update(t testing.TB, st Store, table string, where, set Row) {
	t.Helper()
	if err := h.ops(t).Update(context.Background(), st, table, where, set); err != nil {
		t.Fatalf("set %v on %s rows %v: %v", set, table, where, err)
	}
}

func (h *harness) del(t testing.TB, st Store, table string, where Row) {
	t.Helper()
	if err := h.ops(t).Delete(context.Background(), st, table, where); err != nil {
		t.Fatalf("delete %s rows %v: %v", table, where, err)
	}
}

func (h *harness) count(t testing.TB, st Store, table string, where Row) int64 {
	t.Helper()
	n, err := h.ops(t).Count(context.Background(), st, table, where)
	if err != nil {
		t.Fatalf("count %s rows %v: %v", table, where, err)
	}
	return n
}

func (h *harness) values(t testing.TB, st Store, table string, where Row, column string) []string {
	t.Helper()
	vs, err := h.ops(t).Values(context.Background(), st, table, where, column)
	if err != nil {
		t.Fatalf("read %s.%s of rows %v: %v", table, column, where, err)
	}
	return vs
}

// value returns column of the one row of table that where selects.
func (h *harness) value(t testing.TB, st Store, table string, where Row, column string) string {
	t.Helper()
	vs := h.values(t, st, table, where, column)
	if len(vs) != 1 {
		t.Fatalf("%s rows %v: %d, want 1", table, where, len(vs))
	}
	return vs[0]
}

// allTables are the tables of both domains that tableCounts counts.
func allTables() []string {
	return []string{models.TableSessions, models.TableMessages, models.TableCompacts, models.TableSummaries, models.TableQueue,
		models.TableTodos, models.TablePlans, models.TableInstances, models.TableExecutions, models.TableHistory,
		models.TableOrchestratorQueue, models.TableWorkerQueue, models.TableInstanceLocks, models.TableActivitySessions}
}

// tableCounts counts the rows of every table of both domains.
func (h *harness) tableCounts(t testing.TB, st Store) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, b := range allTables() {
		out[b] = h.count(t, st, b, nil)
	}
	return out
}

// capable reports whether st is an agentstore handle whose capabilities
// include c (false for other implementations).
func capable(st Store, c agentstore.Capability) bool {
	cs, ok := st.(interface{ Capabilities() agentstore.Capability })
	return ok && cs.Capabilities().Has(c)
}

// wakeLimit is how soon a call waiting on st must see another Store's
// write: within a second with a cross-Store wake-up (CapWakeup), else
// within the Store's fallback re-check (pollInterval) and a second (a
// PostgreSQL-wire engine without LISTEN/NOTIFY, or a pooler that cannot
// carry it, polls).
func wakeLimit(st Store, pollInterval time.Duration) time.Duration {
	cs, ok := st.(interface{ Capabilities() agentstore.Capability })
	if !ok || cs.Capabilities().Has(agentstore.CapWakeup) {
		return time.Second
	}
	return pollInterval + time.Second
}
