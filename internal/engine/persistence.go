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
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gorm.io/gorm"
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
	MariaDB  = dialect.MariaDB
)

var (
	identRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]{0,31}$`)
)

func clip(s string) string { return dialect.Clip(s) }

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

	prov *gormProvider
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
	// guard refuses every statement after Close with ErrClosed (see
	// closeGuard).
	guard *closeGuard
	// txIdent is the database identity of the Store's pool, read once by
	// the first InTx on a dialect with dialect.TxIdentity (see intx.go).
	txIdent atomic.Pointer[string]
	// keeper runs the pool keeper (MinIdleConns; see pool_keeper.go)
	// until bg ends; Close waits for it before closing the pools.
	keeper sync.WaitGroup
	// txWrites counts the write calls through TxViews (InTx) that
	// succeeded: their commits wake nothing in-process, so SQLite's
	// data_version watcher, which tells the Store's own commits apart
	// from other connections', wakes the Store's fetchers after them
	// (dialect.Env.OwnTxWrites).
	txWrites atomic.Uint64
	// leaseRoutes: the sessions of the session-queue leases this Store
	// handed out, on the Citus route (sessions_queue_routes.go).
	leaseRoutes leaseRoutes
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
// connection so every call sees the same database. A cgo build uses
// mattn/go-sqlite3, a CGO_ENABLED=0 build the pure-Go modernc.org/sqlite
// (whose search index is FTS5, not FTS4: a database file's message search
// works with the build that migrated it; docs/sqlite-drivers.md).
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
	guard := cfg.guardPool()
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
	st, err := newStore(d, conn, cfg, *guard)
	if err != nil {
		closeAll()
		var ie *gormInitError
		if errors.As(err, &ie) {
			// GORM's SQLite driver reads the version: the file's first use.
			return nil, dialect.OpenFailure(ctx, d, dsn, target, &cfg.Config, ie.err)
		}
		return nil, scrub(err, dsn)
	}
	st.owns = true
	for _, db := range []*sql.DB{conn.SQLDB, st.writeDB} {
		if db == nil {
			continue
		}
		if err := db.PingContext(ctx); err != nil {
			st.bgCancel()
			st.tel.close()
			closeAll()
			return nil, dialect.OpenFailure(ctx, d, dsn, target, &cfg.Config, err)
		}
	}
	if conn.WriteDB != conn.SQLDB { // not an in-memory SQLite database (one connection for everything)
		st.startPoolKeeper(conn.SQLDB, cfg.Pool)
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
	guard := cfg.guardPool()
	conn, err := d.Wrap(db, &cfg.Config)
	if err != nil {
		return nil, err
	}
	return newStore(d, conn, cfg, *guard)
}

// guardPool makes the dialect build its GORM dialector on a closeGuard
// around its pool (dialect.Config.WrapPool) and returns where the guard
// will be.
func (c *Config) guardPool() **closeGuard {
	slot := new(*closeGuard)
	c.WrapPool = func(p gorm.ConnPool) gorm.ConnPool {
		g := newCloseGuard(p)
		*slot = g
		return g
	}
	return slot
}

// gormInitError is the failure of gorm.Open, which may query the database
// (the SQLite driver reads sqlite_version()).
type gormInitError struct{ err error }

func (e *gormInitError) Error() string { return "initialise gorm: " + e.err.Error() }
func (e *gormInitError) Unwrap() error { return e.err }

func newStore(d dialect.Dialect, conn *dialect.Conn, cfg *Config, guard *closeGuard) (*Store, error) {
	if guard == nil { // a dialect that did not use WrapPool: Close still refuses later calls' own checks
		guard = newCloseGuard(nil)
	}
	if pf, ok := d.(dialect.PollFallback); ok && !cfg.pollSet {
		cfg.PollInterval = pf.DefaultPollInterval()
	}
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
		return nil, &gormInitError{err}
	}
	if err := gdb.Use(d.ColumnTypes()); err != nil {
		return nil, fmt.Errorf("initialise gorm: %w", err)
	}
	if err := installTranslation(gdb); err != nil {
		return nil, fmt.Errorf("initialise gorm: %w", err)
	}
	bg, cancel := context.WithCancel(context.Background())
	*st = Store{db: gdb, sqlDB: conn.SQLDB, d: d, caps: d.Capabilities() &^ cfg.CapsOff, cfg: cfg, namer: namer, bg: bg, bgCancel: cancel,
		sessWrite: make(chan struct{}, 1), guard: guard}
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
// leaves the caller's pool open. From then on every call through the
// Store fails with ErrClosed (see there). A second Close does nothing
// and returns nil.
func (s *Store) Close() error {
	if !s.guard.close() {
		return nil
	}
	s.bgCancel()
	s.tel.close()
	if s.prov != nil && s.prov.waker != nil {
		s.prov.waker.Wait()
	}
	s.keeper.Wait()
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
