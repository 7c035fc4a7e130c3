// Package engine is agentstore's one implementation of each repository
// behaviour (sessions, the session queue, the duroxide provider and its
// admin, group commit, migrate and verify) over the dialect contract of
// internal/dialect. It never names a database: what differs comes from the
// Store's dialect. The root package wraps it; see ARCHITECTURE.md.
package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"
	"gorm.io/gorm/schema"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/models"
)

// Dialect names a supported database (the contract's dialect.Name).
type Dialect = dialect.Name

// The supported dialects.
const (
	Postgres = dialect.Postgres
	SQLite   = dialect.SQLite
)

// DefaultTablePrefix is the table prefix used when WithTablePrefix is not given.
const DefaultTablePrefix = "agentstore_"

// Limits on identifiers accepted by WithTablePrefix and WithSchema. The
// prefix is short so that prefixed table and index names stay within
// PostgreSQL's 63-byte identifier limit.
const (
	MaxTablePrefixLen = 24
	MaxSchemaLen      = 63
)

var (
	identRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]{0,31}$`)
)

// PoolConfig sets the connection pool (the contract's dialect.PoolConfig).
type PoolConfig = dialect.PoolConfig

// DefaultPool is the default preset: 10/1 connections, 30 s connect,
// 600 s idle, 1800 s lifetime.
func DefaultPool() PoolConfig {
	return PoolConfig{MaxOpenConns: 10, MinIdleConns: 1, ConnectTimeout: 30 * time.Second,
		IdleTimeout: 600 * time.Second, MaxLifetime: 1800 * time.Second}
}

// HighThroughputPool is the high-throughput preset: 50/5
// connections, 10 s connect, 300 s idle, 900 s lifetime.
func HighThroughputPool() PoolConfig {
	return PoolConfig{MaxOpenConns: 50, MinIdleConns: 5, ConnectTimeout: 10 * time.Second,
		IdleTimeout: 300 * time.Second, MaxLifetime: 900 * time.Second}
}

// Config is a Store's configuration: the dialect contract's part and the
// engine's own (telemetry).
type Config struct {
	dialect.Config
	telemetry telemetryConfig // WithTracerProvider, WithMeterProvider
}

// Option configures Open and New. Options validate their input and make
// Open fail with ErrInvalidConfig before any SQL runs.
type Option interface {
	apply(*Config) error
}

type optionFunc func(*Config) error

func (f optionFunc) apply(c *Config) error { return f(c) }

// WithTablePrefix sets the prefix of every table name (default
// DefaultTablePrefix). It must match ^[A-Za-z_][A-Za-z0-9_]*$ (or be empty)
// and be at most MaxTablePrefixLen bytes.
func WithTablePrefix(prefix string) Option {
	return optionFunc(func(c *Config) error {
		if prefix != "" && (!identRE.MatchString(prefix) || len(prefix) > MaxTablePrefixLen) {
			return configf("table prefix %q must match ^[A-Za-z_][A-Za-z0-9_]*$ and be at most %d bytes", clip(prefix), MaxTablePrefixLen)
		}
		c.Prefix = prefix
		return nil
	})
}

// WithSchema places every table in the given PostgreSQL schema (created by
// Migrate if missing). It must match ^[A-Za-z_][A-Za-z0-9_]*$ and be at
// most MaxSchemaLen bytes. SQLite has no schemas: Open rejects the option
// there.
func WithSchema(schema string) Option {
	return optionFunc(func(c *Config) error {
		if !identRE.MatchString(schema) || len(schema) > MaxSchemaLen {
			return configf("schema %q must match ^[A-Za-z_][A-Za-z0-9_]*$ and be at most %d bytes", clip(schema), MaxSchemaLen)
		}
		c.Schema = schema
		return nil
	})
}

// WithPool sets the connection pool; see DefaultPool and HighThroughputPool.
func WithPool(p PoolConfig) Option {
	return optionFunc(func(c *Config) error {
		if p.MaxOpenConns < 0 || p.MinIdleConns < 0 || p.ConnectTimeout < 0 || p.IdleTimeout < 0 || p.MaxLifetime < 0 {
			return configf("pool settings must not be negative")
		}
		if p.MaxOpenConns > 0 && p.MinIdleConns > p.MaxOpenConns {
			return configf("pool: MinIdleConns %d exceeds MaxOpenConns %d", p.MinIdleConns, p.MaxOpenConns)
		}
		d := DefaultPool()
		if p.MaxOpenConns == 0 {
			p.MaxOpenConns = d.MaxOpenConns
		}
		if p.ConnectTimeout == 0 {
			p.ConnectTimeout = d.ConnectTimeout
		}
		if p.IdleTimeout == 0 {
			p.IdleTimeout = d.IdleTimeout
		}
		if p.MaxLifetime == 0 {
			p.MaxLifetime = d.MaxLifetime
		}
		c.Pool = p
		return nil
	})
}

// WithLogger sets the GORM logger (default: silent).
func WithLogger(l logger.Interface) Option {
	return optionFunc(func(c *Config) error {
		if l == nil {
			return configf("logger must not be nil")
		}
		c.Logger = l
		return nil
	})
}

// WithClock sets the clock the store reads "now" from (default time.Now).
// Tests use it to move time instead of sleeping.
func WithClock(now func() time.Time) Option {
	return optionFunc(func(c *Config) error {
		if now == nil {
			return configf("clock must not be nil")
		}
		c.Clock = now
		c.CustomClock = true
		return nil
	})
}

// WithSQLiteSynchronous sets SQLite's synchronous pragma: "NORMAL" (the
// default, safe with WAL: a power loss may lose the last commits but never
// corrupts) or "FULL" (every commit is durable). Ignored on PostgreSQL.
func WithSQLiteSynchronous(mode string) Option {
	return optionFunc(func(c *Config) error {
		m := strings.ToUpper(mode)
		if m != "NORMAL" && m != "FULL" && m != "OFF" && m != "EXTRA" {
			return configf("sqlite synchronous mode %q must be OFF, NORMAL, FULL or EXTRA", clip(mode))
		}
		c.SQLiteSync = m
		return nil
	})
}

// WithPollInterval sets how often a long-polling fetch re-checks the
// database when no wake-up arrives (default 20 ms). Enqueues through the
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
// and the interval bounds how late a delayed item is seen.
func WithPollInterval(d time.Duration) Option {
	return optionFunc(func(c *Config) error {
		if d < time.Millisecond || d > time.Minute {
			return configf("poll interval %v must be between 1ms and 1m", d)
		}
		c.PollInterval = d
		return nil
	})
}

// WithReadOnly opens the database for reading only (Open; New ignores
// it): a SQLite file is opened with mode=ro (a missing file is an error,
// never created) and PostgreSQL sessions default to read-only transactions
// (default_transaction_read_only). Every write then fails. `agentstore
// verify` opens its database this way.
func WithReadOnly() Option {
	return optionFunc(func(c *Config) error {
		c.ReadOnly = true
		return nil
	})
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
	return optionFunc(func(c *Config) error {
		c.PgBouncer = true
		return nil
	})
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
	return optionFunc(func(c *Config) error {
		if dsn == "" {
			return configf("direct DSN must not be empty")
		}
		c.DirectDSN = dsn
		return nil
	})
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
	return optionFunc(func(c *Config) error {
		if l == nil {
			return configf("slog logger must not be nil")
		}
		c.Slog = l
		return nil
	})
}

// maxTimeout is the longest statement or lock timeout the options accept
// (PostgreSQL's limit is 2^31-1 ms, about 24.8 days).
const maxTimeout = 24 * time.Hour

// checkTimeout validates a timeout option's duration: 0 (off) or between
// 1 ms and maxTimeout.
func checkTimeout(name string, d time.Duration) error {
	if d < 0 || (d > 0 && d < time.Millisecond) || d > maxTimeout {
		return configf("%s %v must be 0 (off) or between 1ms and %v", name, d, maxTimeout)
	}
	return nil
}

// timeoutMS returns d in whole milliseconds, rounded up.
func timeoutMS(d time.Duration) int64 { return dialect.TimeoutMS(d) }

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
	return optionFunc(func(c *Config) error {
		if err := checkTimeout("statement timeout", d); err != nil {
			return err
		}
		c.StmtTimeout = d
		return nil
	})
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
	return optionFunc(func(c *Config) error {
		if err := checkTimeout("lock timeout", d); err != nil {
			return err
		}
		c.LockTimeout = d
		return nil
	})
}

func clip(s string) string { return dialect.Clip(s) }

// BuildConfig applies opts to the defaults.
func BuildConfig(opts []Option) (*Config, error) {
	c := &Config{Config: dialect.Config{Prefix: DefaultTablePrefix, Pool: DefaultPool(), Logger: logger.Discard, Clock: time.Now, SQLiteSync: "NORMAL",
		PollInterval: defaultPollInterval, Slog: slog.New(slog.DiscardHandler)}}
	for _, o := range opts {
		if o == nil {
			return nil, configf("nil option")
		}
		if err := o.apply(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Store is an agentstore handle: a connection pool, a dialect, a table
// prefix and (on PostgreSQL) a schema. It is safe for concurrent use.
type Store struct {
	db      *gorm.DB
	sqlDB   *sql.DB
	writeDB *sql.DB // SQLite files opened by Open: the one-connection write pool (see liteConnPool)
	// d is the dialect resolved by Open or New; caps its capabilities in
	// force (less WithoutCapabilities). See dialect.go.
	d     dialect.Dialect
	caps  Capability
	cfg   *Config
	namer *models.Namer
	owns  bool
	// bg lives until Close; background goroutines (PostgreSQL wake-up
	// listener and publisher) stop when it is cancelled.
	bg       context.Context
	bgCancel context.CancelFunc
	// provider state (see provider.go), created on first use
	provOnce sync.Once
	prov     *gormProvider
	// sessWrite (a one-slot semaphore) serialises this handle's
	// session-store writes on SQLite when it has no dedicated write
	// connection (a store made by New; far cheaper than SQLite's sleeping
	// busy handler). See sessionStore.writeLock.
	sessWrite chan struct{}
	tel       *telemetry // WithTracerProvider, WithMeterProvider (telemetry.go); nil: off
	// gc coalesces concurrent Completes and worker acks (CapGroupCommit;
	// see groupcommit.go).
	gc groupCommitters
	// updFields are Save's UPDATE columns, parsed from the model once per
	// Store (see parseSessionUpdateFields).
	updFieldsOnce sync.Once
	updFields     []*schema.Field
	updFieldsErr  error
}

// ParseDSN splits an agentstore DSN into its dialect and the driver DSN.
// postgres:// and postgresql:// URLs and libpq key=value DSNs ("host=db
// user=app dbname=agents") select PostgreSQL; sqlite:PATH and
// sqlite::memory: select SQLite. Errors never contain the DSN's password.
func ParseDSN(ds []dialect.Dialect, dsn string) (Dialect, string, error) {
	d, target, err := resolveDSN(ds, dsn)
	if err != nil {
		return "", "", err
	}
	return d.Name(), target, nil
}

// resolveDSN finds the registered dialect of dsn.
func resolveDSN(ds []dialect.Dialect, dsn string) (dialect.Dialect, string, error) {
	if dsn == "" {
		return nil, "", configf("empty DSN: use postgres://..., postgresql://..., host=... dbname=..., sqlite:PATH or sqlite::memory:")
	}
	for _, d := range ds {
		target, ok, err := d.MatchDSN(dsn)
		if err != nil {
			return nil, "", err
		}
		if ok {
			return d, target, nil
		}
	}
	// Name the scheme only when it looks like one: the rest of an
	// unknown DSN may hold a password (host=... password=...).
	if i := strings.Index(dsn, ":"); i > 0 && schemeRE.MatchString(dsn[:i]) {
		return nil, "", configf("unknown DSN scheme %q: use postgres://..., postgresql://..., host=... dbname=..., sqlite:PATH or sqlite::memory:", clip(dsn[:i]))
	}
	return nil, "", configf("unrecognised DSN (not shown): use postgres://..., postgresql://..., host=... dbname=..., sqlite:PATH or sqlite::memory:")
}

// RedactDSN returns dsn with any password replaced by "xxxxx", for logs.
func RedactDSN(dsn string) string { return dialect.RedactDSN(dsn) }

// scrub removes the DSN's password from an error message.
func scrub(err error, dsn string) error { return dialect.Scrub(err, dsn) }

// Open opens a store for dsn: postgres://... or postgresql://... for
// PostgreSQL, sqlite:PATH or sqlite::memory: for SQLite. It does not create
// or check the schema: call Migrate (development) or Verify (production).
//
// SQLite is opened for concurrent agents: WAL journal, a 10 s busy timeout,
// foreign keys ON (cascades need it), write transactions that take the write
// lock at BEGIN (BEGIN IMMEDIATE), synchronous=NORMAL unless
// WithSQLiteSynchronous says otherwise. An in-memory database uses a single
// connection so every call sees the same database. SQLite needs cgo: in a
// CGO_ENABLED=0 build a sqlite: DSN returns ErrDialectUnavailable.
func Open(ctx context.Context, ds []dialect.Dialect, dsn string, opts ...Option) (*Store, error) {
	d, target, err := resolveDSN(ds, dsn)
	if err != nil {
		return nil, err
	}
	cfg, err := BuildConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := d.CheckConfig(&cfg.Config); err != nil {
		return nil, err
	}
	conn, err := d.Open(ctx, target, &cfg.Config)
	if err != nil {
		return nil, scrub(err, dsn)
	}
	closeAll := func() {
		_ = conn.SQLDB.Close()
		if conn.WriteDB != nil && conn.WriteDB != conn.SQLDB {
			_ = conn.WriteDB.Close()
		}
	}
	st, err := newStore(d, conn, cfg)
	if err != nil {
		closeAll()
		return nil, scrub(err, dsn)
	}
	st.owns = true
	for _, db := range []*sql.DB{conn.SQLDB, st.writeDB} {
		if db == nil {
			continue
		}
		if err := db.PingContext(ctx); err != nil {
			closeAll()
			return nil, fmt.Errorf("connect to %s: %w", RedactDSN(dsn), scrub(translateError(err), dsn))
		}
	}
	return st, nil
}

// New wraps a *gorm.DB the caller owns (PostgreSQL or SQLite). The store
// shares its connection pool but installs its own naming (prefix, schema),
// logger and clock; Close does not close the caller's pool. On SQLite the
// caller is responsible for the pragmas Open sets (foreign_keys=ON, WAL,
// busy_timeout); Verify reports foreign_keys=OFF.
func New(ds []dialect.Dialect, db *gorm.DB, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, configf("nil *gorm.DB")
	}
	cfg, err := BuildConfig(opts)
	if err != nil {
		return nil, err
	}
	var d dialect.Dialect
	for _, r := range ds {
		if r.OwnsGorm(db.Dialector.Name()) {
			d = r
			break
		}
	}
	if d == nil {
		return nil, configf("unsupported gorm dialect %q (want %s)", clip(db.Dialector.Name()), dialectList(ds))
	}
	if err := d.CheckConfig(&cfg.Config); err != nil {
		return nil, err
	}
	conn, err := d.Wrap(db, &cfg.Config)
	if err != nil {
		return nil, err
	}
	return newStore(d, conn, cfg)
}

func newStore(d dialect.Dialect, conn *dialect.Conn, cfg *Config) (*Store, error) {
	namer := models.NewNamer(cfg.Prefix, cfg.Schema)
	clock := cfg.Clock
	st := &Store{}
	gdb, err := gorm.Open(translatingDialector{Dialector: conn.Gorm, s: st}, &gorm.Config{
		NamingStrategy:         namer,
		Logger:                 cfg.Logger,
		NowFunc:                func() time.Time { return clock().UTC().Truncate(time.Microsecond) },
		TranslateError:         true,
		SkipDefaultTransaction: true,
		DisableAutomaticPing:   true,
	})
	if err != nil {
		return nil, fmt.Errorf("initialise gorm: %w", err)
	}
	if err := gdb.Use(d.ColumnTypes()); err != nil {
		return nil, fmt.Errorf("initialise gorm: %w", err)
	}
	if err := installTranslation(gdb); err != nil {
		return nil, fmt.Errorf("initialise gorm: %w", err)
	}
	bg, cancel := context.WithCancel(context.Background())
	*st = Store{db: gdb, sqlDB: conn.SQLDB, d: d, caps: d.Capabilities() &^ cfg.CapsOff, cfg: cfg, namer: namer, bg: bg, bgCancel: cancel,
		sessWrite: make(chan struct{}, 1)}
	if conn.WriteDB != nil && conn.WriteDB != conn.SQLDB {
		st.writeDB = conn.WriteDB
	}
	if st.tel, err = newTelemetry(st); err != nil {
		cancel()
		return nil, err
	}
	return st, nil
}

// Close stops the store's background goroutines and closes the
// connection pool if the store opened it (Open); a store made by New
// leaves the caller's pool open.
func (s *Store) Close() error {
	s.bgCancel()
	s.tel.close()
	if s.prov != nil && s.prov.waker != nil {
		s.prov.waker.Wait()
	}
	if !s.owns {
		return nil
	}
	err := s.sqlDB.Close()
	if s.writeDB != nil {
		err = errors.Join(err, s.writeDB.Close())
	}
	return err
}

// DB returns the store's GORM handle bound to ctx, for queries the
// repositories do not cover. Its naming strategy adds the store's prefix.
func (s *Store) DB(ctx context.Context) *gorm.DB { return s.db.WithContext(ctx) }

// SQLDB returns the underlying connection pool.
func (s *Store) SQLDB() *sql.DB { return s.sqlDB }

// Dialect returns the store's dialect.
func (s *Store) Dialect() Dialect { return s.d.Name() }

// TablePrefix returns the table prefix in use.
func (s *Store) TablePrefix() string { return s.cfg.Prefix }

// Schema returns the PostgreSQL schema in use ("" = the connection's search_path).
func (s *Store) Schema() string { return s.cfg.Schema }

// Table returns the full name of the table with base name base (for
// example models.TableSessions), prefixed and schema-qualified, unquoted.
func (s *Store) Table(base string) string { return s.namer.Table(base) }

// quoted returns the quoted full name of table base, for raw SQL.
func (s *Store) quoted(base string) string {
	if s.cfg.Schema != "" {
		return `"` + s.cfg.Schema + `"."` + s.cfg.Prefix + base + `"`
	}
	return `"` + s.cfg.Prefix + base + `"`
}

// now returns the store clock's time in UTC, truncated to microseconds.
func (s *Store) now() time.Time { return s.cfg.Clock().UTC().Truncate(time.Microsecond) }

// nowMS returns the store clock's time in epoch milliseconds.
func (s *Store) nowMS() int64 { return s.cfg.Clock().UnixMilli() }
