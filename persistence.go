// Package agentstore is the persistence layer for Go AI-agent applications:
// agent sessions (messages, compactions, summaries, a per-session priority
// queue, todos and plans) and a durable-orchestration provider (instances,
// executions, history, orchestrator and worker peek-lock queues, activity
// sessions), on SQLite for development and PostgreSQL in production, from one
// GORM codebase.
//
// Open a store with a DSN, create or check the schema, then use the
// repositories:
//
//	st, err := agentstore.Open(ctx, "sqlite:./dev.db")
//	...
//	defer st.Close()
//	if err := st.Migrate(ctx); err != nil { ... }
package agentstore

import (
	"context"
	"database/sql"
	"log/slog"
	"time"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/internal/dialect/mariadb"
	"github.com/agentstore/agentstore/internal/dialect/postgres"
	"github.com/agentstore/agentstore/internal/dialect/sqlite"
	"github.com/agentstore/agentstore/internal/engine"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// Dialect names a supported database: Postgres, SQLite or MariaDB.
type Dialect = engine.Dialect

// The supported dialects.
const (
	Postgres = engine.Postgres
	SQLite   = engine.SQLite
	// MariaDB is MariaDB 10.6+ (tested on 10.11): mysql://, mariadb:// or
	// go-sql-driver/mysql DSNs (docs/mariadb.md).
	MariaDB = engine.MariaDB
)

// DefaultTablePrefix is the table prefix used when WithTablePrefix is not given.
const DefaultTablePrefix = engine.DefaultTablePrefix

// Limits on identifiers accepted by WithTablePrefix and WithSchema. The
// prefix is short so that prefixed table and index names stay within
// PostgreSQL's 63-byte identifier limit.
const (
	MaxTablePrefixLen = engine.MaxTablePrefixLen
	MaxSchemaLen      = engine.MaxSchemaLen
)

// PoolConfig sets the connection pool of a Store made by Open (New keeps
// the caller's pool as it is): MaxOpenConns, MinIdleConns, ConnectTimeout,
// IdleTimeout and MaxLifetime. The zero value of a field keeps the
// DefaultPool value, except MinIdleConns, where 0 means none.
//
// MinIdleConns connections are kept open and idle, ready for a burst: a
// background keeper (one goroutine per Store, stopped by Close) opens them
// within about a second of Open and replaces them when they are closed
// (MaxLifetime, the server, a broken connection), and uses each one at
// least every IdleTimeout/2 (a ping) so IdleTimeout does not close them;
// it never opens more than MaxOpenConns in all. Idle connections beyond
// MinIdleConns (up to MaxOpenConns) are kept until IdleTimeout. On SQLite
// the read pool is kept (the one write connection is always open); an
// in-memory database is one connection and needs none.
type PoolConfig = engine.PoolConfig

// DefaultPool is the pool of a Store opened without WithPool: at most 10
// connections, 1 kept idle, 30 s connect timeout, 600 s idle timeout,
// 1800 s lifetime.
func DefaultPool() PoolConfig {
	return engine.DefaultPool()
}

// HighThroughputPool is a preset for busy services: at most 50
// connections, 5 kept idle, 10 s connect timeout, 300 s idle timeout, 900 s
// lifetime.
func HighThroughputPool() PoolConfig {
	return engine.HighThroughputPool()
}

// Option configures Open and New. Options validate their input and make
// Open fail with ErrInvalidConfig before any SQL runs.
type Option = engine.Option

// WithTablePrefix sets the prefix of every table name (default
// DefaultTablePrefix). It must match ^[A-Za-z_][A-Za-z0-9_]*$ (or be empty)
// and be at most MaxTablePrefixLen bytes.
func WithTablePrefix(prefix string) Option {
	return engine.WithTablePrefix(prefix)
}

// WithSchema places every table in the given PostgreSQL schema (created by
// Migrate if missing). It must match ^[A-Za-z_][A-Za-z0-9_]*$ and be at
// most MaxSchemaLen bytes. SQLite has no schemas: Open rejects the option
// there.
func WithSchema(schema string) Option {
	return engine.WithSchema(schema)
}

// WithPool sets the connection pool (see PoolConfig, DefaultPool and
// HighThroughputPool). A negative value, or MinIdleConns above
// MaxOpenConns (after defaults), is ErrInvalidConfig.
func WithPool(p PoolConfig) Option {
	return engine.WithPool(p)
}

// WithLogger sets the GORM logger (default: silent).
func WithLogger(l logger.Interface) Option {
	return engine.WithLogger(l)
}

// WithClock sets the clock the store reads "now" from (default time.Now).
// Tests use it to move time instead of sleeping.
func WithClock(now func() time.Time) Option {
	return engine.WithClock(now)
}

// WithSQLiteSynchronous sets SQLite's synchronous pragma: "NORMAL" (the
// default, safe with WAL: a power loss may lose the last commits but never
// corrupts) or "FULL" (every commit is durable). Ignored on PostgreSQL.
func WithSQLiteSynchronous(mode string) Option {
	return engine.WithSQLiteSynchronous(mode)
}

// WithPollInterval sets how often a long-polling fetch re-checks the
// database when no wake-up arrives (default 20 ms; 1 s on MariaDB, which
// has no cross-Store wake-up: see below). Enqueues through the
// same Store wake waiting fetchers at once, and so do commits by other
// Stores and processes: LISTEN/NOTIFY on PostgreSQL, a PRAGMA data_version
// watcher on SQLite (one cheap check per 2 ms per Store while a fetch
// waits). While that cross-Store wake-up is up (and the Store runs on the
// real clock, not WithClock), a waiting fetch re-checks only at the next
// delay end or lock expiry of its queue (one query after each wake-up
// finds it) or after max(interval, 1 s): about one claim query per idle
// second per waiting fetch. Otherwise (wake-up off, not yet up or lost,
// behind PgBouncer without WithDirectDSN, a pool of fewer than 3
// connections) an idle waiting fetcher runs one claim query per interval,
// and the interval bounds how late a delayed item is seen. A change-feed
// Watch (ChangeFeed) follows the same rules, re-checking every
// max(interval, 250 ms) while the wake-up is up and every interval
// otherwise. A dialect with no cross-Store wake-up at all (MariaDB: no
// LISTEN/NOTIFY) defaults to 1 s, the idle-cost limit of about one query
// per second per waiting call: enqueues through the same Store still wake
// waiting calls at once, and another Store's or process's commit is seen
// within the interval; a shorter interval sees it sooner at one query per
// interval per waiting call.
func WithPollInterval(d time.Duration) Option {
	return engine.WithPollInterval(d)
}

// WithReadOnly opens the database for reading only (Open; New ignores
// it): a SQLite file is opened with mode=ro (a missing file is an error,
// never created) and PostgreSQL sessions default to read-only transactions
// (default_transaction_read_only). Every write then fails. `agentstore
// verify` opens its database this way.
func WithReadOnly() Option {
	return engine.WithReadOnly()
}

// WithPgBouncer makes a PostgreSQL Store work through PgBouncer (or
// another pooler) in transaction or session pooling:
//
//   - Open sends every statement with the extended protocol and an unnamed
//     statement in one round trip (pgx's QueryExecModeExec) and keeps no
//     statement or description cache, so no prepared statement outlives
//     its transaction (PgBouncer 1.18 cannot carry named ones in
//     transaction pooling). A Store made by New keeps the pgx settings of
//     the handle it is given: configure that handle the same way.
//   - No other session state is relied on across transactions (settings
//     are SET LOCAL / set_config(..., true), locks transaction-scoped).
//   - LISTEN, which needs a session, runs on a connection of its own to
//     WithDirectDSN's server when that option is given (not a pooled
//     connection, so it never takes a slot of a small pool). Without it
//     waiting fetches are woken only by enqueues through the same Store and
//     otherwise re-check the database every WithPollInterval (default 20
//     ms); the Store logs this fallback at Warn level (see WithSlog) when
//     its first fetch waits.
//   - Migrate's steps that cannot run in a transaction (CREATE INDEX
//     CONCURRENTLY, serialised by a session-level advisory lock) run on a
//     connection to WithDirectDSN's server; without that option Migrate
//     refuses such a step with ErrInvalidConfig. Run Migrate on a direct
//     connection (or pass WithDirectDSN).
//
// Open refuses WithReadOnly together with WithPgBouncer (ErrInvalidConfig):
// PgBouncer refuses the startup parameter WithReadOnly sets. SQLite ignores
// the option.
func WithPgBouncer() Option {
	return engine.WithPgBouncer()
}

// WithDirectDSN names a direct (not pooled) connection to the same
// PostgreSQL database as the Store's DSN, postgres://... or key=value,
// for what needs a session behind a pooler: the LISTEN wake-up subscriber
// runs on a connection of its own to it whenever the option is given (one
// connection for the Store's lifetime, outside the pool, so even a pool of
// fewer than 3 connections gets the wake-up), and with WithPgBouncer
// Migrate's non-transactional steps run on a connection to it opened for
// the step. Open checks only that it parses (ErrInvalidConfig otherwise,
// the DSN redacted); it connects when first needed, and a LISTEN
// connection that fails is retried every 500 ms and logged (WithSlog)
// while the fallback re-check covers the gap. SQLite ignores the option.
func WithDirectDSN(dsn string) Option {
	return engine.WithDirectDSN(dsn)
}

// WithSlog sets the logger of the Store's structured events (default:
// none): Warn when a waiting fetch falls back to polling because the
// cross-Store wake-up is unavailable (behind PgBouncer without
// WithDirectDSN, or a pool of fewer than 3 connections), Warn when the
// LISTEN connection is lost or cannot be opened, Info when it is up again,
// Info "retry" when a provider call retries a transient failure itself
// (attributes op, attempt, wait, class, error). Events carry the attribute
// "component"="agentstore", an "event" name and no DSN password.
func WithSlog(l *slog.Logger) Option {
	return engine.WithSlog(l)
}

// WithStatementTimeout bounds every statement the Store runs (those sent
// through Store.DB and Store.SQLDB included) by d (0, the default, is off;
// d is rounded up to a whole millisecond; a negative d, one below 1 ms or
// above 24 h is ErrInvalidConfig). A statement that runs
// longer is cancelled, its transaction rolled back, and the call fails
// with a *repo.Error (Op names the call; the message names the session,
// or the instance where the provider call has one, and holds no driver
// text) matching ErrStatementTimeout and ErrTimeout, not ErrRetryable (see
// ErrStatementTimeout for why). The caller's own context deadline stays
// what it was: context.DeadlineExceeded, not ErrTimeout.
//
// PostgreSQL (Store made by Open): every transaction the Store opens
// starts with SET LOCAL statement_timeout = d, sent in the same message
// as its BEGIN (no extra round trip), so the setting lives exactly as long
// as the transaction and works through PgBouncer in transaction pooling
// (nothing is left on the server connection). A statement the Store would
// otherwise run on its own (autocommit: the one-statement fast paths,
// single reads) is run as BEGIN + SET LOCAL, the statement, COMMIT: two
// extra round trips per such statement, paid only while a timeout is
// configured (a set_config inside the statement itself would not bound
// it: the server arms statement_timeout when the statement starts). Off,
// nothing is sent. Migrate's steps that cannot run in a transaction
// (CREATE INDEX CONCURRENTLY) are not bounded; its other steps are, so run
// Migrate on a Store without the option if an index build may take
// longer. The LISTEN connection's wait for notifications is not a
// statement and is not bounded. A Store made by New does not own its
// connections: New refuses the option on PostgreSQL (ErrInvalidConfig);
// set statement_timeout on the handle's connections instead.
//
// SQLite has no server-side statement timeout. There every statement the
// Store runs gets a context bounded by d: the driver interrupts a statement
// still running at that deadline (sqlite3_interrupt) and the call fails
// with ErrStatementTimeout. A wait for the database write lock (BEGIN
// IMMEDIATE, or a write outside a transaction, while another connection or
// process writes) is bounded by d too, by shortening the connection's busy
// timeout for that wait (PRAGMA busy_timeout, restored after; only when d
// is shorter than the busy timeout). Waiting for the Store's own write
// connection (another call of the same Store is writing) happens in Go and
// is bounded by the caller's context only. Cost while set: a timer per
// statement, two PRAGMAs per such lock wait; nothing when off. Open only:
// New refuses the option on SQLite too (ErrInvalidConfig).
func WithStatementTimeout(d time.Duration) Option {
	return engine.WithStatementTimeout(d)
}

// WithLockTimeout bounds every wait for a lock by d (0, the default, is
// off; d is rounded up to a whole millisecond; a negative d, one below
// 1 ms or above 24 h is ErrInvalidConfig). A statement that waits longer
// for a lock another transaction holds fails; its transaction is rolled
// back and the call fails with a *repo.Error (Op names the call; the
// message names the session, or the instance where the provider call has
// one, and holds no driver text) matching ErrLockTimeout, ErrTimeout and
// ErrRetryable: contention is transient, so the call may be retried (the
// provider's own internal retries of retryable failures apply too, so one
// provider call may wait up to about four times d).
//
// PostgreSQL (Store made by Open): applied exactly like
// WithStatementTimeout, as SET LOCAL lock_timeout = d at the start of
// every transaction the Store opens (in the BEGIN's message; autocommit
// statements run in a transaction of their own, two extra round trips
// each, only while a timeout is set), so it works through PgBouncer in
// transaction pooling. Row locks (SELECT ... FOR UPDATE, UPDATE), table
// locks and advisory locks are all covered. New refuses the option on
// PostgreSQL (ErrInvalidConfig); set lock_timeout on the handle's
// connections instead.
//
// SQLite: the busy timeout of every connection Open opens is d instead of
// 10 s: a write that waits longer for the database write lock another
// connection or process holds fails with ErrLockTimeout (so does one that
// waited the default 10 s without the option). Waiting for the Store's own
// write connection (another call of the same Store is writing) happens in
// Go and is bounded by the caller's context, not by d. New refuses the
// option on SQLite (ErrInvalidConfig): the busy timeout is a setting of
// the caller's connections (_busy_timeout).
//
// On both dialects a wait for a lock is also ended by the caller's own
// context deadline, which then is the error (context.DeadlineExceeded, not
// ErrTimeout); on SQLite the Store shortens the busy wait to it.
func WithLockTimeout(d time.Duration) Option {
	return engine.WithLockTimeout(d)
}

// RedactDSN returns dsn with every secret replaced by "xxxxx", for logs and
// error messages. It handles URLs (postgres://user:password@host/db?...,
// any scheme) — the userinfo password and every secret query parameter
// (password, sslpassword, and any key naming a password, passphrase,
// secret, token or credential) — and libpq key=value DSNs ("host=h
// password='s e c' dbname=d", quoted values included). Everything else
// (host, port, user, dbname, sslmode, paths...) is kept as written. A DSN
// that does not parse is redacted conservatively: text that may be part
// of a password (a password holding '@', '/', '?', '#' or spaces
// unencoded) is replaced too, so a malformed DSN may lose more than its
// secrets, never show one.
func RedactDSN(dsn string) string {
	return engine.RedactDSN(dsn)
}

// Close stops the store's background goroutines and closes the
// connection pool if the store opened it (Open); a store made by New
// leaves the caller's pool open. From then on every call through the
// Store fails with ErrClosed (see there). A second Close does nothing
// and returns nil.
func (s *Store) Close() error {
	return s.e.Close()
}

// DB returns the store's GORM handle bound to ctx, for queries the
// repositories do not cover. Its naming strategy adds the store's prefix.
func (s *Store) DB(ctx context.Context) *gorm.DB {
	return s.e.DB(ctx)
}

// SQLDB returns the underlying connection pool.
func (s *Store) SQLDB() *sql.DB {
	return s.e.SQLDB()
}

// Dialect returns the store's dialect.
func (s *Store) Dialect() Dialect {
	return s.e.Dialect()
}

// TablePrefix returns the table prefix in use.
func (s *Store) TablePrefix() string {
	return s.e.TablePrefix()
}

// Schema returns the PostgreSQL schema in use ("" = the connection's search_path).
func (s *Store) Schema() string {
	return s.e.Schema()
}

// Table returns the full name of the table with base name base (for
// example models.TableSessions), prefixed and schema-qualified, unquoted.
func (s *Store) Table(base string) string {
	return s.e.Table(base)
}

// ProviderName and ProviderVersion are what Provider.Name and Provider.Version return.
const (
	ProviderName    = engine.ProviderName
	ProviderVersion = engine.ProviderVersion
)

// Provider-domain sentinels, re-exported from package repo/duroxide.
var (
	// ErrInvalidLockToken: unknown, expired, used or removed lock token; also matches ErrLockLost.
	ErrInvalidLockToken = engine.ErrInvalidLockToken
	// ErrInstanceRunning: a non-forced delete hit a Running instance.
	ErrInstanceRunning = engine.ErrInstanceRunning
	// ErrSubOrchestration: DeleteInstance on a sub-orchestration.
	ErrSubOrchestration = engine.ErrSubOrchestration
	// ErrOrphan: a delete would orphan a child instance.
	ErrOrphan = engine.ErrOrphan
	// ErrDuplicateEvent: an ack carried an existing history event id.
	ErrDuplicateEvent = engine.ErrDuplicateEvent
)

// Provider returns the durable-orchestration provider of the store. Fetches
// long-poll and are woken at once by enqueues through the same Store. With
// WithTracerProvider or WithMeterProvider every call is also traced and
// measured (same results); Provider, ProviderAdmin and Admin then return
// one wrapper value per Store.
func (s *Store) Provider() duroxide.Provider {
	return s.e.Provider()
}

// ProviderAdmin returns the provider's management interface.
func (s *Store) ProviderAdmin() duroxide.ProviderAdmin {
	return s.e.ProviderAdmin()
}

// ProviderAdminExt returns the Store's provider admin with agentstore's
// extensions (bounded estimates, paged children and history): the value
// ProviderAdmin returns, typed as duroxide.ProviderAdminExt.
func (s *Store) ProviderAdminExt() duroxide.ProviderAdminExt {
	return s.e.ProviderAdminExt()
}

// Sessions returns the agent-session repository of the store (every
// tenant). See repo.Sessions for the contract.
func (s *Store) Sessions() repo.Sessions {
	return s.e.Sessions()
}

// SessionQueue returns the per-session durable queue of the store (every
// tenant). See repo.SessionQueue for the contract.
func (s *Store) SessionQueue() repo.SessionQueue {
	return s.e.SessionQueue()
}

// ChangeFeed returns the session change feed of the store (every tenant):
// a lossless, resumable, commit-ordered record of session and session-queue
// changes made through any Store on the database. See repo.ChangeFeed and
// docs/changes.md.
func (s *Store) ChangeFeed() repo.ChangeFeed {
	return s.e.ChangeFeed()
}

// Limits of WithMaxContentBytes.
const (
	// DefaultMaxContentBytes is the largest message or queue-item content
	// a Store accepts when WithMaxContentBytes is not given: 8 MiB.
	DefaultMaxContentBytes = engine.DefaultMaxContentBytes
	// MaxContentBytesLimit is the largest value WithMaxContentBytes
	// accepts: 1 GiB, PostgreSQL's largest field.
	MaxContentBytesLimit = engine.MaxContentBytesLimit
)

// WithMaxContentBytes sets the largest content the Store accepts, in
// bytes (default DefaultMaxContentBytes): the Content of each message
// (AppendMessages, AppendMessagesWith, Save) and of each session-queue
// item (Enqueue, EnqueueWith). Larger content is refused with
// ErrInvalidInput before any SQL runs, the message naming the message (or
// item), its size and the limit; nothing of the call is written. Content
// already stored is read whatever its size. n must be between 1 and
// MaxContentBytesLimit (else ErrInvalidConfig).
func WithMaxContentBytes(n int) Option { return engine.WithMaxContentBytes(n) }

// dialects is the closed list of dialects agentstore is built with, in
// DSN-matching order. sqlite.New uses mattn/go-sqlite3 in a cgo build and
// modernc.org/sqlite in a CGO_ENABLED=0 build.
func dialects() []dialect.Dialect {
	return []dialect.Dialect{postgres.New(), sqlite.New(), mariadb.New()}
}

// Store is an agentstore handle: a connection pool, a dialect, a table
// prefix and (on PostgreSQL) a schema. It is safe for concurrent use.
type Store struct {
	e *engine.Store
}

// ParseDSN splits an agentstore DSN into its dialect and the driver DSN.
// postgres:// and postgresql:// URLs and libpq key=value DSNs ("host=db
// user=app dbname=agents") select PostgreSQL; sqlite:PATH and
// sqlite::memory: select SQLite. Errors never contain the DSN's password.
func ParseDSN(dsn string) (Dialect, string, error) { return engine.ParseDSN(dialects(), dsn) }

// Open opens a store for dsn: postgres://... or postgresql://... for
// PostgreSQL, sqlite:PATH or sqlite::memory: for SQLite. It does not create
// or check the schema: call Migrate (development) or Verify (production).
//
// SQLite is opened for concurrent agents: WAL journal, a 10 s busy timeout,
// foreign keys ON (cascades need it), write transactions that take the write
// lock at BEGIN (BEGIN IMMEDIATE), synchronous=NORMAL unless
// WithSQLiteSynchronous says otherwise. An in-memory database uses a single
// connection so every call sees the same database. A cgo build uses
// mattn/go-sqlite3, a CGO_ENABLED=0 build the pure-Go modernc.org/sqlite
// (whose search index is FTS5, not FTS4: a database file's message search
// works with the build that migrated it; docs/sqlite-drivers.md).
//
// A DSN or option Open refuses is ErrInvalidConfig (the DSN shown with
// RedactDSN). A database Open cannot use is an *OpenError saying why in
// the Store's words (connection refused, database does not exist, a
// SQLite directory that does not exist...) that matches ErrInvalidConfig
// or ErrRetryable; see OpenError.
func Open(ctx context.Context, dsn string, opts ...Option) (*Store, error) {
	e, err := engine.Open(ctx, dialects(), dsn, opts...)
	if err != nil {
		return nil, err
	}
	return &Store{e: e}, nil
}

// New wraps a *gorm.DB the caller owns (PostgreSQL or SQLite). The store
// shares its connection pool but installs its own naming (prefix, schema),
// logger and clock; Close does not close the caller's pool. On SQLite the
// caller is responsible for the pragmas Open sets (foreign_keys=ON, WAL,
// busy_timeout); Verify reports foreign_keys=OFF.
func New(db *gorm.DB, opts ...Option) (*Store, error) {
	e, err := engine.New(dialects(), db, opts...)
	if err != nil {
		return nil, err
	}
	return &Store{e: e}, nil
}

// TenantView is a tenant-scoped view of a Store: its repositories only see
// sessions whose tenant id is the view's tenant. Loading, listing,
// deleting, forking, enqueuing to or dequeuing from another tenant's session
// (or a session without tenant) behaves exactly as if it did not exist
// (ErrNotFound, false, or an empty page), and sessions saved through the
// view get the view's tenant (saving a session that names another tenant
// is ErrInvalidInput).
type TenantView struct {
	v *engine.TenantView
}

// ForTenant returns the view of the store scoped to tenant. A tenant that
// is empty, longer than repo.MaxIDLen bytes, not valid UTF-8 or holding a
// NUL byte makes every call of the view fail with ErrInvalidInput.
func (s *Store) ForTenant(tenant string) *TenantView { return &TenantView{v: s.e.ForTenant(tenant)} }

// Tenant returns the view's tenant id.
func (v *TenantView) Tenant() string { return v.v.Tenant() }

// Sessions returns the tenant's session repository.
func (v *TenantView) Sessions() repo.Sessions { return v.v.Sessions() }

// SessionQueue returns the tenant's session queue.
func (v *TenantView) SessionQueue() repo.SessionQueue { return v.v.SessionQueue() }

// ChangeFeed returns the change feed of the tenant's sessions: only changes
// of sessions whose tenant id is the view's tenant.
func (v *TenantView) ChangeFeed() repo.ChangeFeed { return v.v.ChangeFeed() }
