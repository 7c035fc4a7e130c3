package agentstore

import (
	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/internal/engine"
)

// The error sentinels of the repository contracts, re-exported from package
// repo so callers can write errors.Is(err, agentstore.ErrNotFound).
var (
	// ErrNotFound: a lookup by key matched no row (or a row of another tenant).
	ErrNotFound = engine.ErrNotFound
	// ErrConflict: a uniqueness or optimistic-concurrency rule was broken; nothing was written.
	ErrConflict = engine.ErrConflict
	// ErrStaleVersion: an optimistic-concurrency check failed (also ErrConflict); see StaleVersionError.
	ErrStaleVersion = engine.ErrStaleVersion
	// ErrDuplicate: a caller-chosen key is already stored with other content (also ErrConflict).
	ErrDuplicate = engine.ErrDuplicate
	// ErrInvalidInput: input refused before any SQL ran.
	ErrInvalidInput = engine.ErrInvalidInput
	// ErrCorruptRow: a stored row cannot be decoded (see CorruptRowError).
	ErrCorruptRow = engine.ErrCorruptRow
	// ErrLockLost: a lease or peek-lock expired, was released, or moved.
	ErrLockLost = engine.ErrLockLost
	// ErrRetryable: a transient database failure; the call may be retried.
	ErrRetryable = engine.ErrRetryable
	// ErrTimeout: a timeout set with WithLockTimeout or WithStatementTimeout
	// expired (one of the two below); never the caller's own deadline.
	ErrTimeout = engine.ErrTimeout
	// ErrLockTimeout: a lock wait exceeded the lock timeout (also ErrTimeout
	// and ErrRetryable); see WithLockTimeout.
	ErrLockTimeout = engine.ErrLockTimeout
	// ErrStatementTimeout: a statement exceeded the statement timeout (also
	// ErrTimeout, not ErrRetryable); see WithStatementTimeout.
	ErrStatementTimeout = engine.ErrStatementTimeout
	// ErrInvalidConfig is returned by Open, New, DDL and the options for a
	// bad DSN, table prefix, schema name or pool setting. No SQL has run.
	ErrInvalidConfig = engine.ErrInvalidConfig
	// ErrSchemaBehind: the database lacks a table or column this build
	// uses: its schema is older than SchemaVersion (run Migrate, or apply
	// the exported migrations) or was changed by hand (run Verify).
	// Permanent until the schema is fixed.
	ErrSchemaBehind = engine.ErrSchemaBehind
	// ErrClosed: the Store was closed (Store.Close). Every call made
	// through it afterwards — sessions, session queue, provider, admin,
	// key-value, Migrate, Verify, RecordedSchemaVersion, and statements
	// through Store.DB's GORM handle (except Row(), whose *sql.Row carries
	// database/sql's own error) — fails with an error matching it, before
	// any SQL; so does a call that was running when Close closed the
	// connection pool under it. Not retryable: open a new Store.
	ErrClosed = engine.ErrClosed
	// ErrCursorExpired: a change-feed cursor is before the purge horizon
	// (changes after it were purged); see CursorExpiredError.
	ErrCursorExpired = engine.ErrCursorExpired
	// ErrDialectUnavailable: a dialect this binary was built without.
	ErrDialectUnavailable = engine.ErrDialectUnavailable
	// ErrInvalidStream: Import read a line that is not part of a
	// well-formed export stream (not JSON, an unknown record type or
	// column, a record outside its session or instance, counts or a
	// checksum that differ from the trailer's); see ImportError.
	ErrInvalidStream = engine.ErrInvalidStream
	// ErrTruncatedStream: Import reached the end of the stream before its
	// trailer record; see ImportError.
	ErrTruncatedStream = engine.ErrTruncatedStream
	// ErrUnsupportedStreamVersion: the stream's header names a format
	// version newer than StreamVersion; see ImportError.
	ErrUnsupportedStreamVersion = engine.ErrUnsupportedStreamVersion
)

// CursorExpiredError is the *repo.CursorExpiredError of a change-feed cursor
// before the purge horizon (the cursor and the horizon to resume after).
type CursorExpiredError = engine.CursorExpiredError

// StaleVersionError is the *repo.StaleVersionError of a failed version check (stored version included).
type StaleVersionError = engine.StaleVersionError

// CorruptRowError reports a stored row that cannot be decoded; it matches ErrCorruptRow.
type CorruptRowError = engine.CorruptRowError

// IsRetryable reports whether err is a transient database failure.
func IsRetryable(err error) bool {
	return engine.IsRetryable(err)
}

// OpenError is the error of an Open that could not use its database: What
// it tried ("connect to postgres://app:xxxxx@db:5432/agents", "open SQLite
// database ./data/agents.db"), the Reason in the Store's words ("connection
// refused", "database \"agents\" does not exist", "directory ./data does
// not exist"). It matches ErrInvalidConfig when the configuration is wrong
// (unknown database, role or path, authentication, TLS certificate:
// retrying cannot help) or ErrRetryable when the failure is transient
// (server down or unreachable, starting up, out of connection slots,
// connect timeout); after the caller's own context ended it matches that
// context error instead (not retryable). The driver's error is reachable
// with errors.As (no secret of the DSN in its message); its text is not in
// Error.
type OpenError = dialect.OpenError
