// Package repo defines agentstore's session API: the Sessions and
// SessionQueue repository interfaces, the domain types they exchange
// (sessions, messages, compaction records, summaries, todos, plans, queue
// items) and the error sentinels of both domains. The durable-orchestration
// provider's contract and wire types are in the sub-package repo/duroxide.
// The root package agentstore implements both with GORM, for SQLite and
// PostgreSQL, and re-exports the sentinels.
package repo

import "errors"

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
	// ErrCorruptRow is returned when a stored row cannot be decoded. The
	// error is a *CorruptRowError naming the table and row; the row is never
	// skipped or deleted.
	ErrCorruptRow = errors.New("agentstore: corrupt stored row")
	// ErrLockLost is returned when a lease or peek-lock expired, was
	// released, or is held under another token.
	ErrLockLost = errors.New("agentstore: lock lost")
	// ErrRetryable marks transient database failures (deadlock,
	// serialization failure, busy SQLite, lost connection, a connection
	// attempt that timed out). errors.Is(err, ErrRetryable) tells a caller
	// it may try again. A call ended by the caller's own context deadline
	// or cancellation is not retryable: its error matches
	// context.DeadlineExceeded or context.Canceled instead.
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
	return "agentstore: corrupt row in " + e.Table + " (id " + e.RowID + ", column " + e.Column + "): " + e.Err.Error()
}

// Unwrap returns ErrCorruptRow and the decoding error.
func (e *CorruptRowError) Unwrap() []error { return []error{ErrCorruptRow, e.Err} }

// Error is the error type of every repository method of both domains (the
// session API here and the provider of package repo/duroxide, whose
// ProviderError is this type): the operation, a message, whether retrying
// may succeed, and the cause. Classify it with errors.Is against the
// sentinels (ErrNotFound, ErrConflict, ErrInvalidInput, ErrCorruptRow,
// ErrLockLost, ErrRetryable and the provider's): Unwrap returns Err, whose
// chain carries them, and ErrRetryable when Retryable. errors.As reaches
// the *CorruptRowError of an undecodable row through it.
type Error struct {
	Op        string // operation, e.g. "append_messages", "ack_orchestration_item"
	Message   string // human-readable reason (names the session, instance or row concerned)
	Retryable bool   // transient (deadlock, serialization failure, busy, connection, pool timeout)
	Err       error  // underlying error; may be nil
}

// Error returns "op: message".
func (e *Error) Error() string { return e.Op + ": " + e.Message }

// Unwrap returns Err and, for retryable errors, ErrRetryable.
func (e *Error) Unwrap() []error {
	out := make([]error, 0, 2)
	if e.Err != nil {
		out = append(out, e.Err)
	}
	if e.Retryable {
		out = append(out, ErrRetryable)
	}
	return out
}
