// Package dialect is the contract between agentstore's engine and the
// databases it runs on: what a dialect provides (capabilities, connection
// set-up, DSN matching, catalog reading, error translation, wake-up,
// migration locking) and the few types both sides speak. Each database
// implements it in its own package (internal/dialect/postgres,
// internal/dialect/sqlite), which imports only this package, models and
// its driver. See ARCHITECTURE.md.
package dialect

import (
	"context"
	"database/sql"
	"time"

	"gorm.io/gorm"

	"github.com/agentstore/agentstore/models"
)

// Name names a supported database. The root package re-exports it as
// agentstore.Dialect.
type Name string

// The supported dialects.
const (
	Postgres Name = "postgres"
	SQLite   Name = "sqlite"
	MariaDB  Name = "mariadb"
)

// Dialect is one database's implementation of everything that differs
// between databases.
type Dialect interface {
	// Name is the dialect's name, for reports and errors only.
	Name() Name
	// Title spells the database's name for messages ("PostgreSQL").
	Title() string
	// ColumnTypes spells the models' logical column types (see
	// models.ColumnTypes); installed on every GORM handle the Store opens.
	ColumnTypes() models.ColumnTypes
	// SemconvSystem is the OpenTelemetry db.system.name of the database
	// ("postgresql", "sqlite").
	SemconvSystem() string
	// Capabilities is what the database can do (before WithoutCapabilities).
	Capabilities() Capability
	// MatchDSN reports whether dsn is this dialect's, and returns the
	// driver's target (the DSN without the agentstore scheme, or as is).
	// An error means the DSN is this dialect's but malformed.
	MatchDSN(dsn string) (target string, ok bool, err error)
	// OwnsGorm reports whether a GORM dialector called name (New's
	// handle) is this dialect's.
	OwnsGorm(name string) bool
	// Open opens the pools for target (Open).
	Open(ctx context.Context, target string, cfg *Config) (*Conn, error)
	// Wrap adopts a pool the caller owns (New).
	Wrap(db *gorm.DB, cfg *Config) (*Conn, error)
	// Offline returns a GORM dialector that never connects, for DDL
	// generation in dry-run mode, and a function releasing it.
	Offline() (gorm.Dialector, func() error, error)
	// CheckConfig refuses options the dialect cannot honour.
	CheckConfig(cfg *Config) error
	// CastParam returns a placeholder for a parameter of SQL type typ
	// where the database cannot infer it (a SELECT list).
	CastParam(typ string) string
	// MigrateLock serialises concurrent Migrate calls inside tx (and
	// creates the schema if needed). It runs first in Migrate's transaction.
	MigrateLock(tx *gorm.DB, env *Env) error
	// NewWaker returns the cross-Store wake-up mechanism (CapWakeup), or nil.
	NewWaker(env *Env, onWake func(kind string)) Waker
	// Catalog reads the live schema for Verify.
	Catalog() Catalog
	// NormalizeDDL rewrites one statement GORM generated into the
	// dialect's canonical spelling (SQLite: standard quoting).
	NormalizeDDL(stmt string) string
	// ApplyNoTx applies a migration that cannot run in a transaction
	// (PostgreSQL CREATE INDEX CONCURRENTLY), serialised against other
	// migrators; it re-checks the recorded version first and repairs what
	// an interrupted earlier attempt left (INVALID indexes).
	ApplyNoTx(ctx context.Context, env *Env, version int64, stmts []string) error
}

// Conn is what a dialect's Open or Wrap hands the Store.
type Conn struct {
	// Gorm is the GORM dialector over the pool.
	Gorm gorm.Dialector
	// SQLDB is the pool Store.SQLDB returns (reads on SQLite).
	SQLDB *sql.DB
	// WriteDB, when set and not SQLDB, is a dedicated write pool (SQLite
	// files opened by Open); Close closes it too.
	WriteDB *sql.DB
}

// Env is what a dialect sees of the Store it serves.
type Env struct {
	// Config is the Store's configuration.
	Config *Config
	// Caps are the capabilities in force.
	Caps Capability
	// SQLDB is the Store's pool.
	SQLDB *sql.DB
	// WriteDB is the Store's one-connection write pool (a SQLite file
	// opened by Open: every write of the Store goes through it), nil
	// when it has none.
	WriteDB *sql.DB
	// OwnTxWrites returns how many write calls through the Store's
	// views of application transactions (InTx) have succeeded: such a
	// commit wakes nothing in-process.
	OwnTxWrites func() uint64
	// BG lives until the Store is closed; background goroutines stop
	// when it is cancelled.
	BG context.Context
	// MigrateLockKey is the advisory-lock key of this schema and prefix.
	MigrateLockKey int64
	// Quote returns the quoted, schema-qualified name of the table with
	// base name base (models.Table*).
	Quote func(base string) string
}

// Has reports whether every capability in c is in force.
func (e *Env) Has(c Capability) bool { return e.Caps.Has(c) }

// Payloads of the wake-up mechanism: which queue received work.
const (
	// NotifyOrch: orchestrator-queue work was committed.
	NotifyOrch = "o"
	// NotifyWork: worker-queue work was committed.
	NotifyWork = "w"
	// NotifySessionQueue: a session-queue item became claimable (an
	// enqueue or a release was committed).
	NotifySessionQueue = "q"
)

// Waker carries "work arrived" between Stores and processes.
type Waker interface {
	// Publish tells other Stores that work of kind (NotifyOrch,
	// NotifyWork, NotifySessionQueue) was committed.
	Publish(kind string)
	// Waiting records that a fetcher starts (+1) or stops (-1) waiting.
	Waiting(delta int32)
	// Start starts the mechanism (first long poll); idempotent.
	Start()
	// Wait blocks until its goroutines stopped (after the Store's
	// background context is cancelled).
	Wait()
}

// DDLPreamble is implemented by a dialect whose exported DDL must first
// set up the client's session: ModelsDDL writes DDLPreamble() as its first
// statement (MariaDB: ANSI_QUOTES, so that the double-quoted identifiers
// of the statements outside the models read as identifiers in the mysql
// client, as each file of its migration chain does).
type DDLPreamble interface {
	DDLPreamble() string
}

// ClientScript is implemented by a dialect whose command-line client (and
// Flyway) ends a statement at every ";" unless told otherwise: a compound
// statement of a migration (a stored function's BEGIN ... END, whose body
// holds ";") must then be written between DELIMITER lines in an exported
// script. WrapCompound returns stmt (without its final ";") as the script
// writes it, ending its own statement, or ok false when stmt needs nothing.
type ClientScript interface {
	WrapCompound(stmt string) (script string, ok bool)
}

// PollFallback is implemented by a dialect with no cross-Store wake-up
// mechanism (no Waker: MariaDB has no LISTEN/NOTIFY and no file to watch).
// DefaultPollInterval replaces the engine's default poll interval for a
// Store not given WithPollInterval: waiting calls (fetches, Dequeue with a
// Wait, a change-feed Watch) then re-check the database at that interval,
// the idle-cost limit (about one query per second per waiting call).
type PollFallback interface {
	DefaultPollInterval() time.Duration
}

// Catalog is the dialect's part of Verify.
type Catalog interface {
	// SchemaName returns the schema Verify inspects ("" when the database
	// has no schemas).
	SchemaName(db *gorm.DB, configured string) (string, error)
	// Load reads the columns, indexes and foreign keys of the tables of
	// schema nsp named in names (at least those; absent when missing).
	Load(db *gorm.DB, nsp string, names []string) (map[string]*LiveTable, error)
	// LoadIndexes reads only the indexes of the named tables that exist
	// (Migrate's check at head).
	LoadIndexes(db *gorm.DB, nsp string, names []string) (map[string]*LiveTable, error)
	// HasTable reports whether table name exists in schema nsp ("" = the
	// connection's current schema), as the statement's snapshot sees it.
	HasTable(db *gorm.DB, nsp, name string) (bool, error)
	// ConnectionIssues reports per-connection settings that break the
	// schema's guarantees (SQLite: foreign_keys OFF).
	ConnectionIssues(db *gorm.DB) ([]SchemaIssue, error)
	// NormType normalises a column type as the catalog or the models spell
	// it; t is already lower case with single spaces.
	NormType(t string) string
	// PKNotNull reports whether a primary-key column is NOT NULL in the
	// catalog whatever it declares.
	PKNotNull() bool
	// NamedForeignKeys reports whether the catalog keeps the models'
	// foreign-key names (so a key is matched by name, not shape).
	NamedForeignKeys() bool
}

// SchemaFixer is implemented by a dialect whose schema repairs are not the
// ALTER TABLE spellings Verify suggests by default (PostgreSQL's ALTER
// COLUMN ... TYPE / SET NOT NULL, DROP INDEX name, DROP CONSTRAINT):
// MariaDB. table and index are quoted (and qualified) names, column and
// name bare ones.
type SchemaFixer interface {
	// RedefineColumnSQL returns the statement that gives column of table
	// definition (its whole definition as GORM renders the model: type,
	// NULL / NOT NULL, DEFAULT, AUTO_INCREMENT): the fix of a column's type,
	// nullability or lost auto-increment.
	RedefineColumnSQL(table, column, definition string) string
	// DropIndexSQL returns the statement that drops index of table.
	DropIndexSQL(table, index string) string
	// DropForeignKeySQL returns the statement that drops the foreign key
	// name of table.
	DropForeignKeySQL(table, name string) string
}

// DriverErrorTranslator is implemented by a dialect whose driver errors
// need mapping onto the sentinels (see internal/errmap).
type DriverErrorTranslator interface {
	// TranslateDriverError maps err when it is this dialect's driver
	// error; ok is false otherwise.
	TranslateDriverError(err error) (mapped error, ok bool)
}

// ConnectFailureClassifier is implemented by a dialect whose driver marks
// failed connection attempts.
type ConnectFailureClassifier interface {
	// IsConnectFailure reports whether err is a failed attempt to connect.
	IsConnectFailure(err error) bool
}

// StatsReader is implemented by a dialect whose database keeps table
// statistics: ProviderAdminExt's estimates read them for a figure whose
// bounded count reached its cap. Without it such figures are lower bounds.
type StatsReader interface {
	// TableRows returns the statistics' row count of the table with base
	// name base (models.Table*); ok is false when there is none.
	TableRows(db *gorm.DB, env *Env, base string) (n int64, ok bool, err error)
	// ValueFraction returns the statistics' fraction of the rows of table
	// base whose column equals value; ok is false when there is none.
	ValueFraction(db *gorm.DB, env *Env, base, column, value string) (f float64, ok bool, err error)
}

// UpdateChain is implemented by a dialect whose statements may chain
// data-modifying CTEs (WITH a AS (UPDATE ... RETURNING ...), b AS (...)
// SELECT ...): several single-row updates in one statement and one commit,
// each planned as a probe of its own key whatever the table's statistics
// say (PostgreSQL). The engine ends several session-queue leases so
// (CapGroupCommit with CapFastPaths) instead of an UPDATE joined to a
// VALUES list, which PostgreSQL plans as a hash join over the whole queue
// table while the table has no statistics.
type UpdateChain interface {
	// ChainsUpdates reports that the chained form is available.
	ChainsUpdates() bool
}

// InProcess is implemented by a dialect whose database engine runs inside
// the client's process (SQLite): a statement costs no round trip, and what
// a commit costs is the pages it writes. The engine runs a group-commit
// flush of several session-queue calls (Dequeue, Complete) or worker-queue
// fetches as one transaction of the calls' single-call statements: one
// commit for all, each statement the single-call form SQLite plans best,
// where one statement joined to a VALUES list cost a single call two to
// several times its single form.
type InProcess interface {
	// InProcess reports that statements run in the client's process.
	InProcess() bool
}

// AppendStatement is implemented by a dialect with a one-statement form of
// the session store's append (used with CapFastPaths).
type AppendStatement interface {
	// AppendOneSQL returns one statement that does a whole append: with
	// the WITH item vals (the message rows, parameters first), it locks
	// session row id (table st, extra condition tc), advances last_seq by
	// the next parameter, applies the SET list set (its parameters next,
	// then the id and tc's), inserts the rows with ins (an INSERT ...
	// SELECT for source alias "a": the session row's id, old last_seq and
	// old current_leaf_id) and returns the old last_seq and
	// current_leaf_id; no row when the session is not advanced (missing,
	// outside tc). The general path does the same in a transaction of
	// three statements (lock, UPDATE, INSERT).
	AppendOneSQL(vals, st, set, tc, ins string) string
}

// ClaimLockWait is implemented by a dialect whose queue claims can wait on
// row locks another transaction holds (an instance lock row under an ack
// in flight, a user's long transaction) and that can bound those waits for
// one transaction. The provider's fetches apply it so that no fetch waits
// unboundedly on another holder.
type ClaimLockWait interface {
	// ClaimSettingsSQL returns a SELECT list (no SELECT keyword) whose
	// evaluation bounds every later lock wait of the current transaction
	// to waitMS milliseconds (a wait beyond it fails the statement with
	// ErrLockTimeout) and, with async, makes the transaction commit
	// asynchronously (CapAsyncCommit). It has a non-NULL column named w.
	ClaimSettingsSQL(async bool, waitMS int64) string
}

// ClaimLockWaitSession is implemented by a dialect that bounds a
// transaction's lock waits with a session setting a SELECT cannot make
// (MariaDB: innodb_lock_wait_timeout, whole seconds), in place of
// ClaimLockWait. The provider's fetch transactions run set first and reset
// last, before COMMIT or ROLLBACK (whether the fetch succeeded or not), so
// the pooled connection goes back with its own value.
type ClaimLockWaitSession interface {
	// ClaimWaitSQL returns the statement that bounds every later lock wait
	// of the session to waitMS milliseconds at least (a wait beyond the
	// bound fails the statement, not the transaction, with ErrLockTimeout)
	// and the statement that restores the session's previous bound.
	ClaimWaitSQL(waitMS int64) (set, reset string)
}

// HealthReporter is implemented by a Waker that knows whether it currently
// delivers wake-ups (a connected LISTEN, a running watcher): a fetch then
// waits for a wake-up or its next due time instead of polling.
type HealthReporter interface {
	// Healthy reports whether wake-ups are delivered now.
	Healthy() bool
}
