package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/repo"

	"github.com/agentstore/agentstore/models"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
)

// The SQLite dialect through GORM's sqlite driver (given an opened
// *sql.DB): mattn/go-sqlite3 in a cgo build (driver_mattn.go),
// modernc.org/sqlite with CGO_ENABLED=0 (driver_modernc.go). Its statement
// rewriting and read/write pool routing are in pool.go, its wake-up
// mechanism (PRAGMA data_version) in watch.go, its catalog reader in
// catalog.go.

// New returns the SQLite dialect (its driver chosen by the build).
func New() dialect.Dialect { return liteDialect{} }

// liteDialect implements dialect for SQLite.
type liteDialect struct{}

func (liteDialect) Title() string { return "SQLite" }

// InProcess: SQLite runs inside the client's process (dialect.InProcess).
func (liteDialect) InProcess() bool { return true }

// columnTypes: SQLite stores every logical type as text.
func (liteDialect) ColumnTypes() models.ColumnTypes { return nil }

func (liteDialect) SemconvSystem() string { return "sqlite" }

func (liteDialect) Name() dialect.Name { return dialect.SQLite }

// SQLite admits one writer at a time; the write transaction (BEGIN
// IMMEDIATE) is the lock. No row locks, no SKIP LOCKED, no asynchronous
// commit, no advisory locks, no in-place ALTER COLUMN; read transactions
// would take the write lock, so there are no snapshot reads either.
func (liteDialect) Capabilities() dialect.Capability {
	return dialect.CapSingleWriter | dialect.CapPartialIndexes | dialect.CapWakeup | dialect.CapGroupCommit | dialect.CapUpdateReturning |
		dialect.CapMaterializedCTE | dialect.CapChangeFeed
}

func (liteDialect) MatchDSN(dsn string) (string, bool, error) { return matchSQLiteDSN(dsn) }

func (liteDialect) OwnsGorm(name string) bool { return name == "sqlite" || name == "sqlite3" }

func (liteDialect) CheckConfig(cfg *dialect.Config) error { return checkSQLiteConfig(cfg) }

// sqliteStmtCache is the number of compiled statements each SQLite
// connection keeps (see dialect_sqlite_pool.go).
const sqliteStmtCache = 128

// sqliteDSN builds the driver's DSN for path with the pragmas agentstore needs.
func sqliteDSN(path string, cfg *dialect.Config) string {
	return liteDriverDSN(path, dialect.TimeoutMS(liteBusy(cfg)), cfg.SQLiteSync, cfg.ReadOnly)
}

// escapeLitePath escapes the characters of a file path that a "file:" URI
// would read as its query or fragment.
func escapeLitePath(path string) string {
	return strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23").Replace(path)
}

// open opens a read pool and, for a file, a one-connection write pool
// (see liteConnPool); an in-memory database is one connection for both.
func (liteDialect) Open(_ context.Context, target string, cfg *dialect.Config) (*dialect.Conn, error) {
	memory := target == ":memory:"
	// Every connection bounds its statements and lock waits (see
	// dialect_sqlite_timeout.go).
	conn := &liteTimeoutConnector{dsn: sqliteDSN(target, cfg), busy: liteBusy(cfg), stmt: cfg.StmtTimeout}
	readDB := sql.OpenDB(conn)
	writeDB := readDB
	if !memory {
		writeDB = sql.OpenDB(conn)
		dialect.ApplyPool(readDB, cfg.Pool)
	}
	for _, d := range []*sql.DB{readDB, writeDB} {
		if memory || d == writeDB {
			d.SetMaxOpenConns(1)
			d.SetMaxIdleConns(1)
			d.SetConnMaxLifetime(0)
			d.SetConnMaxIdleTime(0)
		}
	}
	return &dialect.Conn{Gorm: sqlite.New(sqlite.Config{Conn: cfg.Pooled(&liteConnPool{read: readDB, write: writeDB})}), SQLDB: readDB, WriteDB: writeDB}, nil
}

func (liteDialect) Wrap(db *gorm.DB, cfg *dialect.Config) (*dialect.Conn, error) {
	if cfg.StmtTimeout > 0 || cfg.LockTimeout > 0 {
		return nil, dialect.Configf("WithStatementTimeout and WithLockTimeout need a SQLite Store made by Open (New does not own its connections): set _busy_timeout on the handle's DSN instead")
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, dialect.Configf("gorm handle has no *sql.DB: %v", err)
	}
	return &dialect.Conn{Gorm: sqlite.New(sqlite.Config{Conn: cfg.Pooled(&liteConnPool{read: sqlDB, write: sqlDB})}), SQLDB: sqlDB}, nil
}

func (liteDialect) Offline() (gorm.Dialector, func() error, error) {
	db := sql.OpenDB(&liteConnector{dsn: liteMemoryDSN})
	return sqlite.New(sqlite.Config{Conn: db}), db.Close, nil
}

// castParam: SQLite infers nothing and needs nothing.
func (liteDialect) CastParam(string) string { return "?" }

// migrateLock: Migrate's BEGIN IMMEDIATE transaction already holds the
// database's write lock. It reads sqlite_master once so the connection
// reloads a schema another connection or process changed: SQLite checks a
// DDL statement against the connection's cached schema when preparing it,
// before the transaction re-reads the schema cookie.
func (liteDialect) MigrateLock(tx *gorm.DB, _ *dialect.Env) error {
	var n int64
	return tx.Raw("SELECT COUNT(*) FROM sqlite_master").Scan(&n).Error
}

func (liteDialect) NewWaker(env *dialect.Env, onWake func(kind string)) dialect.Waker {
	return newLiteWatcher(env, func() {
		onWake(dialect.NotifyOrch)
		onWake(dialect.NotifyWork)
		onWake(dialect.NotifyFeed)
		onWake(dialect.NotifySessionQueue)
	})
}

func (liteDialect) Catalog() dialect.Catalog { return liteCatalog{} }

// SQLite result codes (https://sqlite.org/rescode.html), the same for
// both drivers.
const (
	codeError           = 1
	codeBusy            = 5
	codeLocked          = 6
	codeReadonly        = 8
	codeIOErr           = 10
	codeCorrupt         = 11
	codeFull            = 13
	codeConstraint      = 19
	codeNotADB          = 26
	extConstraintFK     = 787
	extConstraintPK     = 1555
	extConstraintUnique = 2067
)

// translateDriverError maps SQLite result codes.
func (liteDialect) TranslateDriverError(err error) (error, bool) {
	code, ext, m, ok := liteErrCode(err)
	if !ok {
		return nil, false
	}
	switch code {
	case codeBusy:
		// the wait for another connection's write lock outlasted the busy
		// timeout (WithLockTimeout, default 10 s)
		return &dialect.Fault{Kind: repo.ErrLockTimeout, Cause: err}, true
	case codeLocked:
		return &dialect.Fault{Kind: repo.ErrRetryable, Cause: err}, true
	case codeConstraint:
		switch ext {
		case extConstraintUnique, extConstraintPK:
			return &dialect.Fault{Kind: repo.ErrConflict, Cause: err}, true
		case extConstraintFK:
			// a referenced row is gone (deleted concurrently)
			return &dialect.Fault{Kind: repo.ErrNotFound, Cause: err}, true
		}
	case codeError:
		if strings.Contains(m, "no such table") || strings.Contains(m, "no such column") || strings.Contains(m, "has no column named") ||
			strings.Contains(m, "no such function: highlight") || strings.Contains(m, "unable to use function highlight") {
			// highlight(): a search of an FTS4 index (a cgo build's
			// before V16), which has no such function (FTS5's)
			return &dialect.Fault{Kind: dialect.ErrSchemaBehind, Cause: err}, true
		}
		if strings.Contains(m, "no such module: fts") {
			// an FTS4 search index (a cgo build's before V16) reached by
			// the CGO_ENABLED=0 build
			return &dialect.Fault{Kind: errFTSMismatch, Cause: err}, true
		}
	}
	return err, true
}

// errFTSMismatch is the fault of a write that reached a search index of a
// full-text module the build lacks.
var errFTSMismatch = fmt.Errorf("%w: %s", dialect.ErrInvalidConfig, liteFTSMismatch)

// liteFTSMismatch explains a database whose search index uses a
// full-text module the build lacks: FTS4, which a cgo build made before
// schema version 16 (search.go) and modernc.org/sqlite does not have.
const liteFTSMismatch = "the database's message search index uses a full-text module this build's SQLite driver (" + liteDriverName +
	") lacks: an FTS4 index (made by a cgo build before schema version 16) needs a cgo build to migrate it to version 16 (FTS5, which both builds have); see docs/sqlite-drivers.md"

// DescribeOpenFailure explains why Open could not use the SQLite file (see
// OpenError), naming its path: a file-system problem (see
// sqlitePathProblem) or SQLite's result code. File problems are
// dialect.ErrInvalidConfig; a lock held elsewhere, an I/O error or a full disk are
// repo.ErrRetryable.
func (liteDialect) DescribeOpenFailure(_, target string, cfg *dialect.Config, err error) (string, string, error) {
	subject := "open SQLite database " + target
	if target == ":memory:" {
		subject = "open an in-memory SQLite database"
	}
	if code, _, _, ok := liteErrCode(err); ok {
		switch code {
		case codeNotADB:
			return subject, "the file is not a SQLite database", dialect.ErrInvalidConfig
		case codeCorrupt:
			return subject, "the database file is corrupt", dialect.ErrInvalidConfig
		case codeReadonly:
			if r := sqlitePathProblem(target, cfg.ReadOnly); r != "" {
				return subject, r, dialect.ErrInvalidConfig
			}
			return subject, "the file or its directory is read-only: make both writable, or open it with WithReadOnly", dialect.ErrInvalidConfig
		case codeBusy, codeLocked:
			return subject, "the database is locked by another connection or process", repo.ErrRetryable
		case codeIOErr:
			return subject, "I/O error", repo.ErrRetryable
		case codeFull:
			return subject, "the disk is full", repo.ErrRetryable
		}
	}
	if r := sqlitePathProblem(target, cfg.ReadOnly); r != "" {
		return subject, r, dialect.ErrInvalidConfig
	}
	return subject, "SQLite cannot open the file", dialect.ErrInvalidConfig
}

// normalizeDDL rewrites GORM's SQLite DDL into standard quoting:
// identifiers in double quotes (GORM writes backticks) and string defaults
// in single quotes (GORM writes DEFAULT "main", which SQLite reads as a
// string only through its double-quoted-string quirk).
func (liteDialect) NormalizeDDL(stmt string) string { return normalizeSQLiteDDL(stmt) }

// ChangeFeedIDOrder implements dialect.ChangeFeedIDOrder: one writer at a
// time, so the feed's id is its commit order (V19).
func (liteDialect) ChangeFeedIDOrder() {}

// applyNoTx: every SQLite migration runs in a transaction.
func (liteDialect) ApplyNoTx(context.Context, *dialect.Env, int64, []string) error {
	return errors.New("SQLite migrations run in transactions; a migration marked executeInTransaction=false has no SQLite form")
}

// The optional parts of the contract SQLite implements.
var (
	_ dialect.DriverErrorTranslator = liteDialect{}
	_ dialect.OpenFailureDescriber  = liteDialect{}
	_ dialect.ChangeFeedIDOrder     = liteDialect{}
	_ dialect.HealthReporter        = (*liteWatcher)(nil)
)
