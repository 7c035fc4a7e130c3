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
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/agentstore/agentstore/models"
)

// Dialect names a supported database.
type Dialect string

// The supported dialects.
const (
	Postgres Dialect = "postgres"
	SQLite   Dialect = "sqlite"
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
	identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// kvPasswordRE finds a password in key=value DSNs (libpq syntax; an
	// unquoted value is redacted to the end of the DSN, to be safe;
	// spaces around '=', single-quoted values) and in URL query strings.
	kvPasswordRE    = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|.*)`)
	queryPasswordRE = regexp.MustCompile(`(?i)(password=)([^&#]*)`)
	schemeRE        = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]{0,31}$`)
)

// PoolConfig sets the connection pool. The zero value of a field keeps the
// DefaultPool value.
type PoolConfig struct {
	MaxOpenConns   int           // maximum open connections
	MinIdleConns   int           // validated (<= MaxOpenConns); database/sql keeps up to MaxOpenConns idle connections until IdleTimeout
	ConnectTimeout time.Duration // time allowed to establish a connection (PostgreSQL)
	IdleTimeout    time.Duration // close connections idle this long
	MaxLifetime    time.Duration // recycle connections after this long
}

// DefaultPool is the seed's default preset: 10/1 connections, 30 s connect,
// 600 s idle, 1800 s lifetime.
func DefaultPool() PoolConfig {
	return PoolConfig{MaxOpenConns: 10, MinIdleConns: 1, ConnectTimeout: 30 * time.Second,
		IdleTimeout: 600 * time.Second, MaxLifetime: 1800 * time.Second}
}

// HighThroughputPool is the seed's high-throughput preset: 50/5
// connections, 10 s connect, 300 s idle, 900 s lifetime.
func HighThroughputPool() PoolConfig {
	return PoolConfig{MaxOpenConns: 50, MinIdleConns: 5, ConnectTimeout: 10 * time.Second,
		IdleTimeout: 300 * time.Second, MaxLifetime: 900 * time.Second}
}

type config struct {
	prefix       string
	schema       string
	pool         PoolConfig
	logger       logger.Interface
	clock        func() time.Time
	sqliteSync   string
	pollInterval time.Duration
	capsOff      Capability // WithoutCapabilities
	readOnly     bool       // WithReadOnly
	customClock  bool       // WithClock
	pgbouncer    bool       // WithPgBouncer
	directDSN    string     // WithDirectDSN
	slog         *slog.Logger
}

// Option configures Open and New. Options validate their input and make
// Open fail with ErrInvalidConfig before any SQL runs.
type Option interface {
	apply(*config) error
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

// WithTablePrefix sets the prefix of every table name (default
// DefaultTablePrefix). It must match ^[A-Za-z_][A-Za-z0-9_]*$ (or be empty)
// and be at most MaxTablePrefixLen bytes.
func WithTablePrefix(prefix string) Option {
	return optionFunc(func(c *config) error {
		if prefix != "" && (!identRE.MatchString(prefix) || len(prefix) > MaxTablePrefixLen) {
			return configf("table prefix %q must match ^[A-Za-z_][A-Za-z0-9_]*$ and be at most %d bytes", clip(prefix), MaxTablePrefixLen)
		}
		c.prefix = prefix
		return nil
	})
}

// WithSchema places every table in the given PostgreSQL schema (created by
// Migrate if missing). It must match ^[A-Za-z_][A-Za-z0-9_]*$ and be at
// most MaxSchemaLen bytes. SQLite has no schemas: Open rejects the option
// there.
func WithSchema(schema string) Option {
	return optionFunc(func(c *config) error {
		if !identRE.MatchString(schema) || len(schema) > MaxSchemaLen {
			return configf("schema %q must match ^[A-Za-z_][A-Za-z0-9_]*$ and be at most %d bytes", clip(schema), MaxSchemaLen)
		}
		c.schema = schema
		return nil
	})
}

// WithPool sets the connection pool; see DefaultPool and HighThroughputPool.
func WithPool(p PoolConfig) Option {
	return optionFunc(func(c *config) error {
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
		c.pool = p
		return nil
	})
}

// WithLogger sets the GORM logger (default: silent).
func WithLogger(l logger.Interface) Option {
	return optionFunc(func(c *config) error {
		if l == nil {
			return configf("logger must not be nil")
		}
		c.logger = l
		return nil
	})
}

// WithClock sets the clock the store reads "now" from (default time.Now).
// Tests use it to move time instead of sleeping.
func WithClock(now func() time.Time) Option {
	return optionFunc(func(c *config) error {
		if now == nil {
			return configf("clock must not be nil")
		}
		c.clock = now
		c.customClock = true
		return nil
	})
}

// WithSQLiteSynchronous sets SQLite's synchronous pragma: "NORMAL" (the
// default, safe with WAL: a power loss may lose the last commits but never
// corrupts) or "FULL" (every commit is durable). Ignored on PostgreSQL.
func WithSQLiteSynchronous(mode string) Option {
	return optionFunc(func(c *config) error {
		m := strings.ToUpper(mode)
		if m != "NORMAL" && m != "FULL" && m != "OFF" && m != "EXTRA" {
			return configf("sqlite synchronous mode %q must be OFF, NORMAL, FULL or EXTRA", clip(mode))
		}
		c.sqliteSync = m
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
	return optionFunc(func(c *config) error {
		if d < time.Millisecond || d > time.Minute {
			return configf("poll interval %v must be between 1ms and 1m", d)
		}
		c.pollInterval = d
		return nil
	})
}

// WithReadOnly opens the database for reading only (Open; New ignores
// it): a SQLite file is opened with mode=ro (a missing file is an error,
// never created) and PostgreSQL sessions default to read-only transactions
// (default_transaction_read_only). Every write then fails. `agentstore
// verify` opens its database this way.
func WithReadOnly() Option {
	return optionFunc(func(c *config) error {
		c.readOnly = true
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
	return optionFunc(func(c *config) error {
		c.pgbouncer = true
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
	return optionFunc(func(c *config) error {
		if dsn == "" {
			return configf("direct DSN must not be empty")
		}
		c.directDSN = dsn
		return nil
	})
}

// WithSlog sets the logger of the Store's structured events (default:
// none): Warn when a waiting fetch falls back to polling because the
// cross-Store wake-up is unavailable (behind PgBouncer without
// WithDirectDSN, or a pool of fewer than 3 connections), Warn when the
// LISTEN connection is lost or cannot be opened, Info when it is up again.
// Events carry the attribute "component"="agentstore" and no DSN password.
func WithSlog(l *slog.Logger) Option {
	return optionFunc(func(c *config) error {
		if l == nil {
			return configf("slog logger must not be nil")
		}
		c.slog = l
		return nil
	})
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

func buildConfig(opts []Option) (*config, error) {
	c := &config{prefix: DefaultTablePrefix, pool: DefaultPool(), logger: logger.Discard, clock: time.Now, sqliteSync: "NORMAL",
		pollInterval: defaultPollInterval, slog: slog.New(slog.DiscardHandler)}
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
	d     dialect
	caps  Capability
	cfg   *config
	namer *models.Namer
	owns  bool
	// bg lives until Close; background goroutines (PostgreSQL wake-up
	// listener and publisher) stop when it is cancelled.
	bg       context.Context
	bgCancel context.CancelFunc
	// provider state (see provider.go), created on first use
	provOnce sync.Once
	prov     *gormProvider
	// sessWriteMu serialises this handle's session-store writes on SQLite
	// when it has no dedicated write connection (a store made by New; a
	// mutex is far cheaper than SQLite's sleeping busy handler). See
	// sessionStore.writeLock.
	sessWriteMu sync.Mutex
	// gc coalesces concurrent Completes and worker acks (CapGroupCommit;
	// see groupcommit.go).
	gc groupCommitters
}

// ParseDSN splits an agentstore DSN into its dialect and the driver DSN.
// postgres:// and postgresql:// URLs and libpq key=value DSNs ("host=db
// user=app dbname=agents") select PostgreSQL; sqlite:PATH and
// sqlite::memory: select SQLite. Errors never contain the DSN's password.
func ParseDSN(dsn string) (Dialect, string, error) {
	d, target, err := resolveDSN(dsn)
	if err != nil {
		return "", "", err
	}
	return d.name(), target, nil
}

// resolveDSN finds the registered dialect of dsn.
func resolveDSN(dsn string) (dialect, string, error) {
	if dsn == "" {
		return nil, "", configf("empty DSN: use postgres://..., postgresql://..., host=... dbname=..., sqlite:PATH or sqlite::memory:")
	}
	for _, d := range registered {
		target, ok, err := d.matchDSN(dsn)
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
func RedactDSN(dsn string) string {
	// Redact "scheme://user:password@" by hand first: url.Parse fails on
	// passwords with spaces or stray characters, and must not leak them.
	// The last "@" is used so that a password holding "@", "/", "?" or
	// "#" is covered whole (over-redacting a query is harmless).
	if i := strings.Index(dsn, "://"); i >= 0 {
		rest := dsn[i+3:]
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if c := strings.Index(rest[:at], ":"); c >= 0 {
				dsn = dsn[:i+3] + rest[:c] + ":xxxxx" + rest[at:]
			}
		}
	}
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		re := kvPasswordRE
		if strings.Contains(dsn, "://") {
			re = queryPasswordRE
		}
		if re.MatchString(dsn) {
			return re.ReplaceAllString(dsn, "${1}xxxxx")
		}
		if err != nil {
			return "<unparsable DSN>"
		}
		return dsn
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	q := u.Query()
	if q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// scrub removes the DSN's password from an error message.
func scrub(err error, dsn string) error {
	if err == nil {
		return nil
	}
	pw := dsnPassword(dsn)
	if pw == "" || !strings.Contains(err.Error(), pw) {
		return err
	}
	return &scrubbedError{msg: strings.ReplaceAll(err.Error(), pw, "xxxxx"), err: err}
}

type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }

// Unwrap keeps errors.Is working on scrubbed errors.
func (e *scrubbedError) Unwrap() error { return e.err }

func dsnPassword(dsn string) string {
	if i := strings.Index(dsn, "://"); i >= 0 {
		rest := dsn[i+3:]
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if c := strings.Index(rest[:at], ":"); c >= 0 && c+1 < at {
				return rest[c+1 : at]
			}
		}
	}
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok {
			return pw
		}
		if pw := u.Query().Get("password"); pw != "" {
			return pw
		}
	}
	return ""
}

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
func Open(ctx context.Context, dsn string, opts ...Option) (*Store, error) {
	d, target, err := resolveDSN(dsn)
	if err != nil {
		return nil, err
	}
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := d.checkConfig(cfg); err != nil {
		return nil, err
	}
	conn, err := d.open(ctx, target, cfg)
	if err != nil {
		return nil, scrub(err, dsn)
	}
	closeAll := func() {
		_ = conn.sqlDB.Close()
		if conn.writeDB != nil && conn.writeDB != conn.sqlDB {
			_ = conn.writeDB.Close()
		}
	}
	st, err := newStore(d, conn, cfg)
	if err != nil {
		closeAll()
		return nil, scrub(err, dsn)
	}
	st.owns = true
	for _, db := range []*sql.DB{conn.sqlDB, st.writeDB} {
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

func applyPool(db *sql.DB, p PoolConfig) {
	db.SetMaxOpenConns(p.MaxOpenConns)
	// Keep every connection the load needed until it has been idle for
	// IdleTimeout: capping idle connections below MaxOpenConns made a
	// concurrent load close and reopen connections around its calls
	// (measured: an orchestration run at 68 instead of 155 wf/s).
	db.SetMaxIdleConns(p.MaxOpenConns)
	db.SetConnMaxIdleTime(p.IdleTimeout)
	db.SetConnMaxLifetime(p.MaxLifetime)
}

// New wraps a *gorm.DB the caller owns (PostgreSQL or SQLite). The store
// shares its connection pool but installs its own naming (prefix, schema),
// logger and clock; Close does not close the caller's pool. On SQLite the
// caller is responsible for the pragmas Open sets (foreign_keys=ON, WAL,
// busy_timeout); Verify reports foreign_keys=OFF.
func New(db *gorm.DB, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, configf("nil *gorm.DB")
	}
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	var d dialect
	for _, r := range registered {
		if r.ownsGorm(db.Dialector.Name()) {
			d = r
			break
		}
	}
	if d == nil {
		return nil, configf("unsupported gorm dialect %q (want %s)", clip(db.Dialector.Name()), dialectList())
	}
	if err := d.checkConfig(cfg); err != nil {
		return nil, err
	}
	conn, err := d.wrap(db, cfg)
	if err != nil {
		return nil, err
	}
	return newStore(d, conn, cfg)
}

func newStore(d dialect, conn *dialectConn, cfg *config) (*Store, error) {
	namer := models.NewNamer(cfg.prefix, cfg.schema)
	clock := cfg.clock
	gdb, err := gorm.Open(conn.gorm, &gorm.Config{
		NamingStrategy:         namer,
		Logger:                 cfg.logger,
		NowFunc:                func() time.Time { return clock().UTC().Truncate(time.Microsecond) },
		TranslateError:         true,
		SkipDefaultTransaction: true,
		DisableAutomaticPing:   true,
	})
	if err != nil {
		return nil, fmt.Errorf("initialise gorm: %w", err)
	}
	bg, cancel := context.WithCancel(context.Background())
	st := &Store{db: gdb, sqlDB: conn.sqlDB, d: d, caps: d.capabilities() &^ cfg.capsOff, cfg: cfg, namer: namer, bg: bg, bgCancel: cancel}
	if conn.writeDB != nil && conn.writeDB != conn.sqlDB {
		st.writeDB = conn.writeDB
	}
	return st, nil
}

// Close stops the store's background goroutines and closes the
// connection pool if the store opened it (Open); a store made by New
// leaves the caller's pool open.
func (s *Store) Close() error {
	s.bgCancel()
	if s.prov != nil && s.prov.waker != nil {
		s.prov.waker.wait()
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
func (s *Store) Dialect() Dialect { return s.d.name() }

// TablePrefix returns the table prefix in use.
func (s *Store) TablePrefix() string { return s.cfg.prefix }

// Schema returns the PostgreSQL schema in use ("" = the connection's search_path).
func (s *Store) Schema() string { return s.cfg.schema }

// Table returns the full name of the table with base name base (for
// example models.TableSessions), prefixed and schema-qualified, unquoted.
func (s *Store) Table(base string) string { return s.namer.Table(base) }

// quoted returns the quoted full name of table base, for raw SQL.
func (s *Store) quoted(base string) string {
	if s.cfg.schema != "" {
		return `"` + s.cfg.schema + `"."` + s.cfg.prefix + base + `"`
	}
	return `"` + s.cfg.prefix + base + `"`
}

// now returns the store clock's time in UTC, truncated to microseconds.
func (s *Store) now() time.Time { return s.cfg.clock().UTC().Truncate(time.Microsecond) }

// nowMS returns the store clock's time in epoch milliseconds.
func (s *Store) nowMS() int64 { return s.cfg.clock().UnixMilli() }
