package agentstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/agentstore/agentstore/models"
	"gorm.io/gorm"
)

// The dialect layer.
//
// Everything that differs between the databases agentstore runs on lives
// behind the dialect interface below, one implementation per database in
// its own files (dialect_postgres*.go, dialect_sqlite*.go). Open and New
// resolve the dialect once; repository code asks the Store what the
// database can do (s.has(CapX)) and for SQL fragments (s.forUpdate(), ...)
// and never compares dialect names. See ARCHITECTURE.md.

// Capability is one feature a dialect's database may have. A Store's
// capabilities are the dialect's, less those switched off with
// WithoutCapabilities; Store.Capabilities reports them.
type Capability uint32

// The capabilities repository code asks for.
const (
	// CapRowLocks: SELECT ... FOR UPDATE locks rows until commit, so
	// concurrent writers of one row queue behind each other. Without it
	// the dialect must be CapSingleWriter (one write transaction at a time
	// serialises every read-modify-write). A property of the database; it
	// cannot be switched off.
	CapRowLocks Capability = 1 << iota
	// CapSkipLocked: FOR UPDATE SKIP LOCKED, so queue claims pass over
	// rows other transactions hold instead of waiting for them. Off: claims
	// use plain FOR UPDATE (correct, but concurrent claimers queue).
	CapSkipLocked
	// CapAsyncCommit: a transaction may commit without waiting for its WAL
	// flush (PostgreSQL synchronous_commit = off, scoped to the
	// transaction). Used only for lease and lock claims, whose loss in a
	// crash is the at-least-once redelivery a lease expiry gives anyway.
	// Off: every commit is synchronous.
	CapAsyncCommit
	// CapAdvisoryLocks: transaction-scoped advisory locks
	// (pg_advisory_xact_lock). Migrate serialises concurrent callers with
	// one; the provider's one-statement orchestration fetch needs them.
	// Off: Migrate retries a run that collided with a concurrent one, and
	// the general fetch path is used.
	CapAdvisoryLocks
	// CapWakeup: a waiting fetch is woken when another Store or process
	// commits work (LISTEN/NOTIFY on PostgreSQL, a PRAGMA data_version
	// watcher on SQLite). Off: fetches see other Stores' work at their
	// fallback re-check (WithPollInterval).
	CapWakeup
	// CapSnapshotReads: read-only REPEATABLE READ transactions that do not
	// block writers, so a multi-statement read (Load, Verify) sees one
	// snapshot. Off: reads run statement by statement (SQLite: a read
	// transaction would take the write lock).
	CapSnapshotReads
	// CapValidatedJSON: the database validates JSON columns on write
	// (jsonb), so reads need not validate stored message content again.
	// Off: every read validates it.
	CapValidatedJSON
	// CapPartialIndexes: CREATE INDEX ... WHERE. The models' queue indexes
	// are partial; a property of the dialect's DDL that cannot be switched
	// off.
	CapPartialIndexes
	// CapSingleWriter: the database admits one write transaction at a
	// time (SQLite). Writes of a Store go through one write connection
	// (Open) or a per-Store mutex (New). A property of the database; it
	// cannot be switched off.
	CapSingleWriter
	// CapAlterColumns: ALTER TABLE can change a column's type, nullability
	// and constraints in place. Off (SQLite): Verify's fixes rebuild the
	// table. A property of the database.
	CapAlterColumns
	// CapFastPaths: the dialect's optional one-statement implementations
	// of hot steps (PostgreSQL: append's lock-and-advance, the
	// orchestration fetch and ack, the worker ack) are used. Off: the
	// general transaction paths, which every dialect has. The conformance
	// suite runs on PostgreSQL both ways.
	CapFastPaths
	// CapGroupCommit: concurrent SessionQueue.Dequeue, SessionQueue.Complete
	// and Provider.AckWorkItem calls of one Store are coalesced: the
	// Dequeues of one session into one claim statement (each call leased
	// its own item, with its own token, owner and lease end), the
	// Completes and acks into one statement or transaction (one commit,
	// one WAL flush), each item checked on its own and each caller told
	// its own outcome after the commit (see groupcommit.go); so are
	// concurrent Sessions.AppendMessages(With) calls on the transaction path
	// (one write transaction, the appends applied one after the other, each
	// with the outcome it would get alone). Batches form only while an earlier
	// flush of the same kind runs, or from calls that arrive while a new
	// leader yields the processor once (no timer); a call alone runs at once
	// after that yield. Off: every call runs its own statement and commit.
	// Both dialects have it: on SQLite concurrent commits queue for the one
	// writer anyway; on PostgreSQL one claim and one completion statement for
	// several items cost the server a fraction of one per item
	// (BENCHMARKS.md).
	CapGroupCommit
)

// capNames names every capability, in bit order.
var capNames = []struct {
	c    Capability
	name string
	// fixed capabilities describe the database itself; switching them
	// off would make agentstore wrong, not slower.
	fixed bool
}{
	{CapRowLocks, "row_locks", true},
	{CapSkipLocked, "skip_locked", false},
	{CapAsyncCommit, "async_commit", false},
	{CapAdvisoryLocks, "advisory_locks", false},
	{CapWakeup, "wakeup", false},
	{CapSnapshotReads, "snapshot_reads", false},
	{CapValidatedJSON, "validated_json", false},
	{CapPartialIndexes, "partial_indexes", true},
	{CapSingleWriter, "single_writer", true},
	{CapAlterColumns, "alter_columns", true},
	{CapFastPaths, "fast_paths", false},
	{CapGroupCommit, "group_commit", false},
}

// Has reports whether every capability in x is in c.
func (c Capability) Has(x Capability) bool { return c&x == x }

// String lists the capabilities in c, e.g. "row_locks|skip_locked".
func (c Capability) String() string {
	var parts []string
	for _, n := range capNames {
		if c&n.c != 0 {
			parts = append(parts, n.name)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "|")
}

// WithoutCapabilities switches capabilities of the dialect off, for a
// database that speaks a dialect's protocol but lacks a feature (a
// PostgreSQL-wire database without LISTEN/NOTIFY or advisory locks), for a
// pooler that cannot carry one (WithoutCapabilities(CapWakeup) behind a
// transaction pooler), or to run the general code paths
// (WithoutCapabilities(CapFastPaths)). CapRowLocks, CapSingleWriter,
// CapPartialIndexes and CapAlterColumns describe the database itself and
// are refused with ErrInvalidConfig. Switching off a capability the dialect
// does not have is allowed and changes nothing.
func WithoutCapabilities(caps ...Capability) Option {
	return optionFunc(func(c *config) error {
		for _, x := range caps {
			for _, n := range capNames {
				if x&n.c != 0 && n.fixed {
					return configf("capability %s describes the database and cannot be switched off", n.name)
				}
			}
			if x&^allCapabilities != 0 {
				return configf("unknown capability %#x", uint32(x&^allCapabilities))
			}
			c.capsOff |= x
		}
		return nil
	})
}

// allCapabilities is the union of every defined capability.
var allCapabilities = func() Capability {
	var all Capability
	for _, n := range capNames {
		all |= n.c
	}
	return all
}()

// dialect is one database's implementation of everything that differs
// between databases. Implementations: pgDialect (dialect_postgres.go),
// liteDialect (dialect_sqlite.go, built with cgo).
type dialect interface {
	// name is the dialect's name, for reports and errors only.
	name() Dialect
	// title spells the database's name for messages ("PostgreSQL").
	title() string
	// columnTypes spells the models' logical column types (see
	// models.ColumnTypes); installed on every GORM handle the Store opens.
	columnTypes() models.ColumnTypes
	// semconvSystem is the OpenTelemetry db.system.name of the database
	// ("postgresql", "sqlite").
	semconvSystem() string
	// capabilities is what the database can do (before WithoutCapabilities).
	capabilities() Capability
	// matchDSN reports whether dsn is this dialect's, and returns the
	// driver's target (the DSN without the agentstore scheme, or as is).
	// An error means the DSN is this dialect's but malformed.
	matchDSN(dsn string) (target string, ok bool, err error)
	// ownsGorm reports whether a GORM dialector called name (New's
	// handle) is this dialect's.
	ownsGorm(name string) bool
	// open opens the pools for target (Open).
	open(ctx context.Context, target string, cfg *config) (*dialectConn, error)
	// wrap adopts a pool the caller owns (New).
	wrap(db *gorm.DB, cfg *config) (*dialectConn, error)
	// offline returns a GORM dialector that never connects, for DDL
	// generation in dry-run mode, and a function releasing it.
	offline() (gorm.Dialector, func() error, error)
	// checkConfig refuses options the dialect cannot honour.
	checkConfig(cfg *config) error
	// castParam returns a placeholder for a parameter of SQL type typ
	// where the database cannot infer it (a SELECT list).
	castParam(typ string) string
	// migrateLock serialises concurrent Migrate calls inside tx (and
	// creates the schema if needed). It runs first in Migrate's transaction.
	migrateLock(tx *gorm.DB, s *Store) error
	// newWaker returns the cross-Store wake-up mechanism (CapWakeup), or nil.
	newWaker(s *Store, onWake func(kind string)) waker
	// catalog reads the live schema for Verify.
	catalog() catalogReader
	// normalizeDDL rewrites one statement GORM generated into the
	// dialect's canonical spelling (SQLite: standard quoting).
	normalizeDDL(stmt string) string
	// applyNoTx applies a migration that cannot run in a transaction
	// (PostgreSQL CREATE INDEX CONCURRENTLY), serialised against other
	// migrators; it re-checks the recorded version first and repairs what
	// an interrupted earlier attempt left (INVALID indexes).
	applyNoTx(ctx context.Context, s *Store, version int64, stmts []string) error
}

// dialectConn is what a dialect's open or wrap hands the Store.
type dialectConn struct {
	gorm  gorm.Dialector
	sqlDB *sql.DB // the pool Store.SQLDB returns (reads on SQLite)
	// writeDB, when set and not sqlDB, is a dedicated write pool (SQLite
	// files opened by Open); Close closes it too.
	writeDB *sql.DB
	// guard is the pool the gorm Dialector runs on (see closeGuard);
	// Store.Close closes it first.
	guard *closeGuard
}

// catalogReader is the dialect's part of Verify.
type catalogReader interface {
	// schemaName returns the schema Verify inspects ("" when the database
	// has no schemas).
	schemaName(db *gorm.DB, configured string) (string, error)
	// load reads every table, column, index and foreign key of schema nsp.
	load(db *gorm.DB, nsp string) (map[string]*liveTable, error)
	// connectionIssues reports per-connection settings that break the
	// schema's guarantees (SQLite: foreign_keys OFF).
	connectionIssues(db *gorm.DB) ([]SchemaIssue, error)
	// normType normalises a column type as the catalog or the models spell it.
	normType(t string) string
	// pkNotNull reports whether a primary-key column is NOT NULL in the
	// catalog whatever it declares.
	pkNotNull() bool
	// namedForeignKeys reports whether the catalog keeps the models'
	// foreign-key names (so a key is matched by name, not shape).
	namedForeignKeys() bool
}

// waker carries "work arrived" between Stores and processes.
type waker interface {
	// publish tells other Stores that work of kind (notifyOrch,
	// notifyWork) was committed.
	publish(kind string)
	// waiting records that a fetcher starts (+1) or stops (-1) waiting.
	waiting(delta int32)
	// start starts the mechanism (first long poll); idempotent.
	start()
	// wait blocks until its goroutines stopped (after the Store's
	// background context is cancelled).
	wait()
}

// driverErrorTranslator is implemented by a dialect whose driver errors
// need mapping onto the sentinels (see translateError).
type driverErrorTranslator interface {
	// translateDriverError maps err when it is this dialect's driver
	// error; ok is false otherwise.
	translateDriverError(err error) (mapped error, ok bool)
}

// statsReader is implemented by a dialect whose database keeps table
// statistics: ProviderAdminExt's estimates read them for a figure whose
// bounded count reached its cap (see GetSystemMetricsEstimate). Without
// it such figures are lower bounds.
type statsReader interface {
	// tableRows returns the statistics' row count of the table with base
	// name base (models.Table*); ok is false when there is none.
	tableRows(db *gorm.DB, s *Store, base string) (n int64, ok bool, err error)
	// valueFraction returns the statistics' fraction of the rows of table
	// base whose column equals value; ok is false when there is none.
	valueFraction(db *gorm.DB, s *Store, base, column, value string) (f float64, ok bool, err error)
}

// connectFailureClassifier is implemented by a dialect whose driver marks
// failed connection attempts (see translateError).
type connectFailureClassifier interface {
	// isConnectFailure reports whether err is a failed attempt to connect.
	isConnectFailure(err error) bool
}

// dialects is the closed list of dialects, in DSN-matching order. SQLite
// is the stand-in of dialect_sqlite_nocgo.go in a CGO_ENABLED=0 build.
func dialects() []dialect { return []dialect{pgDialect{}, sqliteDialect()} }

// dialectNamed returns the registered dialect called name.
func dialectNamed(name Dialect) (dialect, error) {
	for _, d := range dialects() {
		if d.name() == name {
			return d, nil
		}
	}
	return nil, configf("unknown dialect %q (want %s)", clip(string(name)), dialectList())
}

func dialectList() string {
	var names []string
	for _, d := range dialects() {
		names = append(names, string(d.name()))
	}
	return strings.Join(names, " or ")
}

// ErrDialectUnavailable is returned by Open and New for a dialect this
// binary was built without (SQLite in a CGO_ENABLED=0 build: the SQLite
// driver needs cgo). It also matches ErrInvalidConfig; no SQL has run.
var ErrDialectUnavailable = errors.New("agentstore: dialect not available in this build")

// unavailableError is an ErrDialectUnavailable naming the dialect and the fix.
func unavailableError(d Dialect, how string) error {
	return fmt.Errorf("%w: %w: %s: %s", ErrInvalidConfig, ErrDialectUnavailable, d, how)
}

// has reports whether the store's database has every capability in c.
func (s *Store) has(c Capability) bool { return s.caps.Has(c) }

// Capabilities returns the capabilities in force: the dialect's, less those
// switched off with WithoutCapabilities.
func (s *Store) Capabilities() Capability { return s.caps }

// forUpdate is appended to a SELECT that must lock its rows: " FOR UPDATE"
// with CapRowLocks; nothing on a single-writer database, where the
// enclosing write transaction already holds the database's write lock.
func (s *Store) forUpdate() string {
	if s.has(CapRowLocks) {
		return " FOR UPDATE"
	}
	return ""
}

// forUpdateSkip is appended to a queue claim's SELECT: " FOR UPDATE [OF
// alias] SKIP LOCKED" with CapRowLocks and CapSkipLocked, without SKIP
// LOCKED when only CapRowLocks, nothing on a single-writer database. of
// ("" or an alias) names the table whose rows are locked.
func (s *Store) forUpdateSkip(of string) string {
	if !s.has(CapRowLocks) {
		return ""
	}
	f := " FOR UPDATE"
	if of != "" {
		f += " OF " + of
	}
	if s.has(CapSkipLocked) {
		f += " SKIP LOCKED"
	}
	return f
}

// asyncCommitCTE returns, with CapAsyncCommit, a WITH clause that makes the
// statement's own (autocommit) transaction commit asynchronously and the
// condition that forces it to be evaluated; "", "" without.
func (s *Store) asyncCommitCTE() (with, cond string) {
	if !s.has(CapAsyncCommit) {
		return "", ""
	}
	return "WITH async AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true) AS v) ",
		" AND (SELECT v FROM async) IS NOT NULL"
}

// asyncCommitTx makes the current transaction commit asynchronously
// (CapAsyncCommit); a no-op without.
func (s *Store) asyncCommitTx(tx *gorm.DB) error {
	if !s.has(CapAsyncCommit) {
		return nil
	}
	return tx.Exec(`SET LOCAL synchronous_commit = off`).Error
}

// castParam returns a placeholder typed as typ where the database cannot
// infer a parameter's type (a SELECT list).
func (s *Store) castParam(typ string) string { return s.d.castParam(typ) }

// readTx runs fn as one consistent read: in a read-only REPEATABLE READ
// transaction with CapSnapshotReads, statement by statement without.
func (s *Store) readTx(db *gorm.DB, fn func(tx *gorm.DB) error) error {
	if !s.has(CapSnapshotReads) {
		return fn(db)
	}
	return db.Transaction(fn, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
}
