package agentstore

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/mattn/go-sqlite3"
	"gorm.io/gorm"
)

var (
	// ErrNotFound is returned when a lookup by key matches no row (or a row
	// outside the caller's tenant).
	ErrNotFound = errors.New("agentstore: not found")
	// ErrConflict is returned when a write breaks a uniqueness rule or an
	// optimistic-concurrency check (a stale version). Nothing was written.
	ErrConflict = errors.New("agentstore: conflict")
	// ErrInvalidInput is returned, before any SQL runs, for input the store
	// refuses: an over-long or malformed id, invalid JSON, a NUL byte where
	// PostgreSQL cannot store it, an unknown enum value.
	ErrInvalidInput = errors.New("agentstore: invalid input")
	// ErrInvalidConfig is returned by Open, New and the options for a bad
	// DSN, table prefix, schema name or pool setting. No SQL has run.
	ErrInvalidConfig = errors.New("agentstore: invalid configuration")
	// ErrCorruptRow is returned when a stored row cannot be decoded. The
	// error is a *CorruptRowError naming the table and row; the row is never
	// skipped or deleted.
	ErrCorruptRow = errors.New("agentstore: corrupt stored row")
	// ErrLockLost is returned when a lease or peek-lock expired, was
	// released, or is held under another token.
	ErrLockLost = errors.New("agentstore: lock lost")
	// ErrRetryable marks transient database failures (deadlock,
	// serialization failure, busy SQLite, lost connection, pool timeout).
	// errors.Is(err, ErrRetryable) tells a caller it may try again.
	ErrRetryable = errors.New("agentstore: retryable database error")
)

// CorruptRowError reports a stored row that cannot be decoded.
type CorruptRowError struct {
	Table  string // unprefixed table name, e.g. "messages"
	RowID  string // the row's key, e.g. "<session>/42"
	Column string // the column that failed
	Err    error  // the decoding error
}

// Error implements error.
func (e *CorruptRowError) Error() string {
	return fmt.Sprintf("agentstore: corrupt row in %s (id %s, column %s): %v", e.Table, e.RowID, e.Column, e.Err)
}

// Unwrap returns ErrCorruptRow and the decoding error.
func (e *CorruptRowError) Unwrap() []error { return []error{ErrCorruptRow, e.Err} }

// invalidf returns an ErrInvalidInput error with a formatted reason.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidInput, fmt.Sprintf(format, args...))
}

// configf returns an ErrInvalidConfig error with a formatted reason.
func configf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
}

// IsRetryable reports whether err is a transient database failure.
func IsRetryable(err error) bool { return errors.Is(err, ErrRetryable) }

// translateError maps GORM and driver errors onto the sentinels; the
// original error stays in the chain. Every repository method returns
// through it.
func translateError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrRetryable) || errors.Is(err, ErrConflict) || errors.Is(err, ErrNotFound) {
		return err
	}
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	if errors.Is(err, gorm.ErrDuplicatedKey) {
		return fmt.Errorf("%w: %w", ErrConflict, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "23505":
			return fmt.Errorf("%w: %w", ErrConflict, err)
		case "40P01", "40001", "55P03", "57P01", "57P02", "57P03", "08000", "08003", "08006", "08001", "08004", "53300":
			return fmt.Errorf("%w: %w", ErrRetryable, err)
		case "22P05", "22021":
			return fmt.Errorf("%w: %w", ErrInvalidInput, err)
		}
		return err
	}
	var sqErr sqlite3.Error
	if errors.As(err, &sqErr) {
		switch sqErr.Code {
		case sqlite3.ErrBusy, sqlite3.ErrLocked:
			return fmt.Errorf("%w: %w", ErrRetryable, err)
		case sqlite3.ErrConstraint:
			if sqErr.ExtendedCode == sqlite3.ErrConstraintUnique || sqErr.ExtendedCode == sqlite3.ErrConstraintPrimaryKey {
				return fmt.Errorf("%w: %w", ErrConflict, err)
			}
		}
		return err
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", ErrRetryable, err)
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return fmt.Errorf("%w: %w", ErrRetryable, err)
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) || pgconn.SafeToRetry(err) || strings.Contains(err.Error(), "conn closed") {
		return fmt.Errorf("%w: %w", ErrRetryable, err)
	}
	return err
}
