package dialect

import (
	"errors"
	"fmt"
)

// The sentinels the dialects return besides those of package repo. The
// root package re-exports them (agentstore.ErrInvalidConfig, ...).
var (
	// ErrInvalidConfig: a bad DSN, table prefix, schema name or pool
	// setting. No SQL has run.
	ErrInvalidConfig = errors.New("agentstore: invalid configuration")
	// ErrSchemaBehind: the database lacks a table or column this build
	// uses: its schema is older than SchemaVersion (run Migrate, or apply
	// the exported migrations) or was changed by hand (run Verify).
	// Permanent until the schema is fixed.
	ErrSchemaBehind = errors.New("agentstore: database schema is behind this build (run migrate)")
	// ErrDialectUnavailable: a dialect this binary was built without
	// (SQLite in a CGO_ENABLED=0 build). It also matches ErrInvalidConfig.
	ErrDialectUnavailable = errors.New("agentstore: dialect not available in this build")
)

// Configf returns an ErrInvalidConfig error with a formatted reason.
func Configf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
}

// UnavailableError is an ErrDialectUnavailable naming the dialect and the fix.
func UnavailableError(d Name, how string) error {
	return fmt.Errorf("%w: %w: %s: %s", ErrInvalidConfig, ErrDialectUnavailable, d, how)
}

// Clip shortens s for an error message (at most 64 bytes).
func Clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// StmtError ties a failing migration statement to its error.
type StmtError struct {
	// Stmt is the statement that failed.
	Stmt string
	// Err is its error.
	Err error
}

// Error returns the statement (at most 80 bytes) and the error.
func (e *StmtError) Error() string { return fmt.Sprintf("%.80s: %v", e.Stmt, e.Err) }

// Unwrap returns the statement's error.
func (e *StmtError) Unwrap() error { return e.Err }

// Fault is a database error as the repositories report it: its text is the
// sentinel's (the callers add the session and row), the driver's error
// stays in the chain for errors.As.
type Fault struct {
	// Kind is the sentinel (repo.ErrNotFound, repo.ErrDuplicate,
	// repo.ErrRetryable, repo.ErrInvalidInput, repo.ErrLockTimeout or
	// repo.ErrStatementTimeout).
	Kind error
	// Cause is the driver's (or GORM's) error.
	Cause error
}

// Error returns the sentinel's text.
func (e *Fault) Error() string { return e.Kind.Error() }

// Unwrap returns the sentinel and the cause.
func (e *Fault) Unwrap() []error { return []error{e.Kind, e.Cause} }
