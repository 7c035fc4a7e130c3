package engine

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"

	"gorm.io/gorm"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/repo"
)

// The error sentinels of the repository contracts, re-exported from package
// repo so callers can write errors.Is(err, agentstore.ErrNotFound).
var (
	// ErrNotFound: a lookup by key matched no row (or a row of another tenant).
	ErrNotFound = repo.ErrNotFound
	// ErrConflict: a uniqueness or optimistic-concurrency rule was broken; nothing was written.
	ErrConflict = repo.ErrConflict
	// ErrStaleVersion: an optimistic-concurrency check failed (also ErrConflict); see StaleVersionError.
	ErrStaleVersion = repo.ErrStaleVersion
	// ErrCursorExpired: a change-feed cursor is before the purge horizon; see CursorExpiredError.
	ErrCursorExpired = repo.ErrCursorExpired
	// ErrDuplicate: a caller-chosen key is already stored with other content (also ErrConflict).
	ErrDuplicate = repo.ErrDuplicate
	// ErrInvalidInput: input refused before any SQL ran.
	ErrInvalidInput = repo.ErrInvalidInput
	// ErrCorruptRow: a stored row cannot be decoded (see CorruptRowError).
	ErrCorruptRow = repo.ErrCorruptRow
	// ErrLockLost: a lease or peek-lock expired, was released, or moved.
	ErrLockLost = repo.ErrLockLost
	// ErrRetryable: a transient database failure; the call may be retried.
	ErrRetryable = repo.ErrRetryable
	// ErrTimeout: a timeout set with WithLockTimeout or WithStatementTimeout
	// expired (one of the two below); never the caller's own deadline.
	ErrTimeout = repo.ErrTimeout
	// ErrLockTimeout: a lock wait exceeded the lock timeout (also ErrTimeout
	// and ErrRetryable); see WithLockTimeout.
	ErrLockTimeout = repo.ErrLockTimeout
	// ErrStatementTimeout: a statement exceeded the statement timeout (also
	// ErrTimeout, not ErrRetryable); see WithStatementTimeout.
	ErrStatementTimeout = repo.ErrStatementTimeout
	// ErrInvalidConfig is returned by Open, New, DDL and the options for a
	// bad DSN, table prefix, schema name or pool setting. No SQL has run.
	ErrInvalidConfig = dialect.ErrInvalidConfig
	// ErrSchemaBehind: the database lacks a table or column this build
	// uses: its schema is older than SchemaVersion (run Migrate, or apply
	// the exported migrations) or was changed by hand (run Verify).
	// Permanent until the schema is fixed.
	ErrSchemaBehind = dialect.ErrSchemaBehind
	// ErrClosed: the Store was closed (Store.Close). Every call made
	// through it afterwards — sessions, session queue, provider, admin,
	// key-value, Migrate, Verify, RecordedSchemaVersion, and statements
	// through Store.DB's GORM handle (except Row(), whose *sql.Row carries
	// database/sql's own error) — fails with an error matching it, before
	// any SQL; so does a call that was running when Close closed the
	// connection pool under it. Not retryable: open a new Store.
	ErrClosed = errors.New("agentstore: store is closed")
	// ErrDialectUnavailable: a dialect this binary was built without.
	ErrDialectUnavailable = dialect.ErrDialectUnavailable
)

// CursorExpiredError is the *repo.CursorExpiredError of a change-feed cursor before the purge horizon.
type CursorExpiredError = repo.CursorExpiredError

// StaleVersionError is the *repo.StaleVersionError of a failed version check (stored version included).
type StaleVersionError = repo.StaleVersionError

// CorruptRowError reports a stored row that cannot be decoded; it matches ErrCorruptRow.
type CorruptRowError = repo.CorruptRowError

// invalidf returns an ErrInvalidInput error with a formatted reason.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidInput, fmt.Sprintf(format, args...))
}

// configf returns an ErrInvalidConfig error with a formatted reason.
func configf(format string, args ...any) error { return dialect.Configf(format, args...) }

// IsRetryable reports whether err is a transient database failure.
func IsRetryable(err error) bool { return errors.Is(err, ErrRetryable) }

// translateError maps GORM and driver errors onto the sentinels; the
// original error stays in the chain. Every repository method returns
// through it.
func translateError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrRetryable) || errors.Is(err, ErrConflict) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrTimeout) ||
		errors.Is(err, ErrClosed) || errors.Is(err, ErrInvalidConfig) {
		return err
	}
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	if errors.Is(err, gorm.ErrDuplicatedKey) {
		return fmt.Errorf("%w: %w", ErrConflict, err)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		// The caller's own deadline or cancellation (a connection attempt
		// the driver ended was made ErrRetryable where it arose).
		return err
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: %w", ErrRetryable, err)
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return fmt.Errorf("%w: %w", ErrRetryable, err)
	}
	return err
}
