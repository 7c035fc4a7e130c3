// Package repo defines agentstore's session API: the Sessions and
// SessionQueue repository interfaces, the domain types they exchange
// (sessions, messages, compaction records, summaries, todos, plans, queue
// items) and the error sentinels of both domains. The durable-orchestration
// provider's contract and wire types are in the sub-package repo/duroxide.
// The root package agentstore implements both with GORM, for SQLite and
// PostgreSQL, and re-exports the sentinels.
package repo

import (
	"errors"
	"fmt"

	"github.com/google/uuid"
)

var (
	// ErrNotFound is returned when a lookup by key matches no row (or a row
	// outside the caller's tenant).
	ErrNotFound = errors.New("agentstore: not found")
	// ErrConflict is returned when a write breaks a uniqueness rule or an
	// optimistic-concurrency check. Nothing was written. Every conflict of
	// the session API also matches one of its two causes, ErrStaleVersion
	// or ErrDuplicate.
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
	// attempt that timed out, a lock wait past the lock timeout:
	// ErrLockTimeout). errors.Is(err, ErrRetryable) tells a caller
	// it may try again. A call ended by the caller's own context deadline
	// or cancellation is not retryable: its error matches
	// context.DeadlineExceeded or context.Canceled instead.
	ErrRetryable = errors.New("agentstore: retryable database error")
)

// The timeouts a Store applies when it is configured with
// agentstore.WithLockTimeout or agentstore.WithStatementTimeout. The
// statement that timed out was cancelled and its transaction rolled back:
// nothing of the call was written. The caller's own context deadline is not
// one of them: a call ended by it matches context.DeadlineExceeded (and is
// not ErrRetryable), never ErrTimeout.
var (
	// ErrTimeout matches both timeouts below.
	ErrTimeout = errors.New("agentstore: timeout")
	// ErrLockTimeout: waiting for a lock took longer than the lock timeout
	// (PostgreSQL lock_timeout, SQLSTATE 55P03: a row or table lock another
	// transaction holds; SQLite: the database write lock another connection
	// or process holds, past the busy timeout). It is contention, so it is
	// retryable: it matches ErrTimeout and ErrRetryable.
	ErrLockTimeout error = &causeError{"agentstore: timeout: lock wait", ErrTimeout, ErrRetryable}
	// ErrStatementTimeout: a statement ran longer than the statement
	// timeout (PostgreSQL statement_timeout, SQLSTATE 57014 "canceling
	// statement due to statement timeout"; SQLite: the Store's deadline of
	// the statement or transaction, which interrupts it). It matches
	// ErrTimeout but not ErrRetryable: the same statement is likely to
	// time out again, and retrying it multiplies the load that made it
	// slow. A caller that knows the cause was contention may retry after a
	// back-off; WithLockTimeout below the statement timeout turns lock
	// waits into the retryable ErrLockTimeout instead.
	ErrStatementTimeout error = &causeError{"agentstore: timeout: statement", ErrTimeout, nil}
)

// The causes of an ErrConflict of the session API; each matches
// ErrConflict too (errors.Is(ErrStaleVersion, ErrConflict) is true).
var (
	// ErrStaleVersion: an optimistic-concurrency check failed (Save, or an
	// AppendMessagesWith or Rewind with ExpectedVersion): the stored version is not
	// the caller's. The error is a *StaleVersionError carrying the stored
	// version. Someone else wrote: Load again, reapply, retry.
	ErrStaleVersion error = &causeError{"agentstore: conflict: stale version", ErrConflict, nil}
	// ErrDuplicate: a key the caller chose is already stored with other
	// content (a session id, a message id within its session, a todo or
	// plan id of another session, a queue idempotency key). The message
	// names the key. A retry of the same write is not a duplicate where
	// the method is documented as idempotent (AppendMessages with message
	// ids, EnqueueWith with an idempotency key).
	ErrDuplicate error = &causeError{"agentstore: conflict: duplicate", ErrConflict, nil}
)

// causeError is a sentinel that also matches one or two broader sentinels.
type causeError struct {
	msg     string
	parent  error
	parent2 error // may be nil
}

func (e *causeError) Error() string { return e.msg }
func (e *causeError) Unwrap() []error {
	if e.parent2 == nil {
		return []error{e.parent}
	}
	return []error{e.parent, e.parent2}
}

// StaleVersionError is the error of a failed version check: the session,
// the version the caller expected and the version stored when the check
// failed. It matches ErrStaleVersion and ErrConflict.
type StaleVersionError struct {
	SessionID uuid.UUID
	Expected  int64 // the caller's version (Session.Version or AppendOptions.ExpectedVersion)
	Stored    int64 // the stored version when the write was refused
}

// Error says which versions differ and what to do.
func (e *StaleVersionError) Error() string {
	return fmt.Sprintf("agentstore: conflict: stale version %d of session %s (stored version %d): the session "+
		"was written since it was loaded or saved (Save, AppendMessages, AppendMessagesWith, SetTodos, AddSummary and "+
		"a Rewind that moves the leaf each add 1 to its version; Fork leaves its origin's version unchanged); Load it again and reapply the change, "+
		"or make the change under WithSessionLock", e.Expected, e.SessionID, e.Stored)
}

// Unwrap returns ErrStaleVersion (and through it ErrConflict).
func (e *StaleVersionError) Unwrap() error { return ErrStaleVersion }

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

// Unwrap returns ErrCorruptRow and the decoding error. A decoding error
// that carries ErrInvalidInput (an unknown enum value is parsed by the same
// functions that check input) is hidden behind its text: a corrupt stored
// row is never ErrInvalidInput, which means "refused before any SQL".
func (e *CorruptRowError) Unwrap() []error {
	if e.Err != nil && errors.Is(e.Err, ErrInvalidInput) {
		return []error{ErrCorruptRow, opaqueError{e.Err.Error()}}
	}
	return []error{ErrCorruptRow, e.Err}
}

// opaqueError carries an error's text without its chain.
type opaqueError struct{ msg string }

func (e opaqueError) Error() string { return e.msg }

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
	Retryable bool   // transient (deadlock, serialization failure, busy, connection, pool timeout, lock timeout)
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
