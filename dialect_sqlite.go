//go:build cgo

package agentstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/agentstore/agentstore/models"
	"github.com/mattn/go-sqlite3"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
)

// The SQLite dialect: mattn/go-sqlite3 (cgo) through GORM's sqlite driver.
// Built only with cgo; dialect_sqlite_nocgo.go stands in without it. Its
// statement rewriting and read/write pool routing are in
// dialect_sqlite_pool.go, its wake-up mechanism (PRAGMA data_version) in
// dialect_sqlite_watch.go, its catalog reader in dialect_sqlite_catalog.go.

// sqliteDialect is the SQLite dialect of a cgo build.
func sqliteDialect() dialect { return liteDialect{} }

// liteDialect implements dialect for SQLite.
type liteDialect struct{}

func (liteDialect) title() string { return "SQLite" }

// columnTypes: SQLite stores every logical type as text.
func (liteDialect) columnTypes() models.ColumnTypes { return nil }

func (liteDialect) semconvSystem() string { return "sqlite" }

func (liteDialect) name() Dialect { return SQLite }

// SQLite admits one writer at a time; the write transaction (BEGIN
// IMMEDIATE) is the lock. No row locks, no SKIP LOCKED, no asynchronous
// commit, no advisory locks, no in-place ALTER COLUMN; read transactions
// would take the write lock, so there are no snapshot reads either.
func (liteDialect) capabilities() Capability {
	return CapSingleWriter | CapPartialIndexes | CapWakeup | CapGroupCommit
}

func (liteDialect) matchDSN(dsn string) (string, bool, error) { return matchSQLiteDSN(dsn) }

func (liteDialect) ownsGorm(name string) bool { return name == "sqlite" || name == "sqlite3" }

func (liteDialect) checkConfig(cfg *config) error { return checkSQLiteConfig(cfg) }

// sqliteStmtCache is the number of compiled statements each SQLite
// connection keeps (see dialect_sqlite_pool.go).
const sqliteStmtCache = 128

// sqliteDSN builds the mattn/go-sqlite3 DSN for path with the pragmas agentstore needs.
func sqliteDSN(path string, cfg *config) string {
	busy := strconv.FormatInt(timeoutMS(liteBusy(cfg)), 10) // WithLockTimeout, default 10 s
	params := "_journal_mode=WAL&_busy_timeout=" + busy + "&_foreign_keys=on&_txlock=immediate&_synchronous=" + cfg.sqliteSync +
		"&_stmt_cache_size=" + strconv.Itoa(sqliteStmtCache)
	if path == ":memory:" {
		return "file::memory:?" + strings.Replace(params, "_journal_mode=WAL", "_journal_mode=MEMORY", 1)
	}
	if cfg.readOnly {
		// No journal-mode switch (a write) and no BEGIN IMMEDIATE.
		params = "mode=ro&_busy_timeout=" + busy + "&_foreign_keys=on&_stmt_cache_size=" + strconv.Itoa(sqliteStmtCache)
	}
	r := strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23")
	return "file:" + r.Replace(path) + "?" + params
}

// open opens a read pool and, for a file, a one-connection write pool
// (see liteConnPool); an in-memory database is one connection for both.
func (liteDialect) open(_ context.Context, target string, cfg *config) (*dialectConn, error) {
	memory := target == ":memory:"
	// Every connection bounds its statements and lock waits (see
	// dialect_sqlite_timeout.go).
	conn := &liteTimeoutConnector{dsn: sqliteDSN(target, cfg), busy: liteBusy(cfg), stmt: cfg.stmtTimeout}
	readDB := sql.OpenDB(conn)
	writeDB := readDB
	if !memory {
		writeDB = sql.OpenDB(conn)
		applyPool(readDB, cfg.pool)
	}
	for _, d := range []*sql.DB{readDB, writeDB} {
		if memory || d == writeDB {
			d.SetMaxOpenConns(1)
			d.SetMaxIdleConns(1)
			d.SetConnMaxLifetime(0)
			d.SetConnMaxIdleTime(0)
		}
	}
	g := newCloseGuard(&liteConnPool{read: readDB, write: writeDB})
	return &dialectConn{gorm: sqlite.New(sqlite.Config{Conn: g}), sqlDB: readDB, writeDB: writeDB, guard: g}, nil
}

func (liteDialect) wrap(db *gorm.DB, cfg *config) (*dialectConn, error) {
	if cfg.stmtTimeout > 0 || cfg.lockTimeout > 0 {
		return nil, configf("WithStatementTimeout and WithLockTimeout need a SQLite Store made by Open (New does not own its connections): set _busy_timeout on the handle's DSN instead")
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, configf("gorm handle has no *sql.DB: %v", err)
	}
	g := newCloseGuard(&liteConnPool{read: sqlDB, write: sqlDB})
	return &dialectConn{gorm: sqlite.New(sqlite.Config{Conn: g}), sqlDB: sqlDB, guard: g}, nil
}

func (liteDialect) offline() (gorm.Dialector, func() error, error) {
	db, err := sql.Open("sqlite3", "file::memory:")
	if err != nil {
		return nil, nil, err
	}
	return sqlite.New(sqlite.Config{Conn: db}), db.Close, nil
}

// castParam: SQLite infers nothing and needs nothing.
func (liteDialect) castParam(string) string { return "?" }

// migrateLock: Migrate's BEGIN IMMEDIATE transaction already holds the
// database's write lock. It reads sqlite_master once so the connection
// reloads a schema another connection or process changed: SQLite checks a
// DDL statement against the connection's cached schema when preparing it,
// before the transaction re-reads the schema cookie.
func (liteDialect) migrateLock(tx *gorm.DB, _ *Store) error {
	var n int64
	return tx.Raw("SELECT COUNT(*) FROM sqlite_master").Scan(&n).Error
}

func (liteDialect) newWaker(s *Store, onWake func(kind string)) waker {
	return newLiteWatcher(s, func() { onWake(notifyOrch); onWake(notifyWork) })
}

func (liteDialect) catalog() catalogReader { return liteCatalog{} }

// translateDriverError maps SQLite result codes.
func (liteDialect) translateDriverError(err error) (error, bool) {
	var sqErr sqlite3.Error
	if !errors.As(err, &sqErr) {
		return nil, false
	}
	switch sqErr.Code {
	case sqlite3.ErrBusy:
		// the wait for another connection's write lock outlasted the busy
		// timeout (WithLockTimeout, default 10 s)
		return fmt.Errorf("%w: %w", ErrLockTimeout, err), true
	case sqlite3.ErrLocked:
		return fmt.Errorf("%w: %w", ErrRetryable, err), true
	case sqlite3.ErrConstraint:
		switch sqErr.ExtendedCode {
		case sqlite3.ErrConstraintUnique, sqlite3.ErrConstraintPrimaryKey:
			return fmt.Errorf("%w: %w", ErrConflict, err), true
		case sqlite3.ErrConstraintForeignKey:
			// a referenced row is gone (deleted concurrently)
			return fmt.Errorf("%w: %w", ErrNotFound, err), true
		}
	case sqlite3.ErrError:
		if m := sqErr.Error(); strings.Contains(m, "no such table") || strings.Contains(m, "no such column") || strings.Contains(m, "has no column named") {
			return fmt.Errorf("%w: %w", ErrSchemaBehind, err), true
		}
	}
	return err, true
}

// describeOpenFailure explains why Open could not use the SQLite file (see
// OpenError), naming its path: a file-system problem (see
// sqlitePathProblem) or SQLite's result code. File problems are
// ErrInvalidConfig; a lock held elsewhere, an I/O error or a full disk are
// ErrRetryable.
func (liteDialect) describeOpenFailure(_, target string, cfg *config, err error) (string, string, error) {
	subject := "open SQLite database " + target
	if target == ":memory:" {
		subject = "open an in-memory SQLite database"
	}
	var sqErr sqlite3.Error
	if errors.As(err, &sqErr) {
		switch sqErr.Code {
		case sqlite3.ErrNotADB:
			return subject, "the file is not a SQLite database", ErrInvalidConfig
		case sqlite3.ErrCorrupt:
			return subject, "the database file is corrupt", ErrInvalidConfig
		case sqlite3.ErrReadonly:
			if r := sqlitePathProblem(target, cfg.readOnly); r != "" {
				return subject, r, ErrInvalidConfig
			}
			return subject, "the file or its directory is read-only: make both writable, or open it with WithReadOnly", ErrInvalidConfig
		case sqlite3.ErrBusy, sqlite3.ErrLocked:
			return subject, "the database is locked by another connection or process", ErrRetryable
		case sqlite3.ErrIoErr:
			return subject, "I/O error", ErrRetryable
		case sqlite3.ErrFull:
			return subject, "the disk is full", ErrRetryable
		}
	}
	if r := sqlitePathProblem(target, cfg.readOnly); r != "" {
		return subject, r, ErrInvalidConfig
	}
	return subject, "SQLite cannot open the file", ErrInvalidConfig
}

// normalizeDDL rewrites GORM's SQLite DDL into standard quoting:
// identifiers in double quotes (GORM writes backticks) and string defaults
// in single quotes (GORM writes DEFAULT "main", which SQLite reads as a
// string only through its double-quoted-string quirk).
func (liteDialect) normalizeDDL(stmt string) string { return normalizeSQLiteDDL(stmt) }

// applyNoTx: every SQLite migration runs in a transaction.
func (liteDialect) applyNoTx(context.Context, *Store, int64, []string) error {
	return errors.New("SQLite migrations run in transactions; a migration marked executeInTransaction=false has no SQLite form")
}
