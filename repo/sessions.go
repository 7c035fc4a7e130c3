package repo

import (
	"context"

	"github.com/google/uuid"
)

// Sessions stores agent sessions: the session row and its messages,
// compaction records, todos, plans and summaries. Every method takes the
// context first and is safe for concurrent use.
//
// Error contract, for every method: ErrInvalidInput (before any SQL) for
// input the store refuses — an id longer than MaxIDLen, text or JSON that is
// not valid UTF-8 or holds a NUL byte or a \u0000 escape (PostgreSQL cannot
// store them; the rule is the same on every dialect), message content that
// is not valid JSON, an unknown enum value; ErrNotFound when the session
// does not exist or belongs to another tenant of a tenant-scoped view;
// ErrRetryable for transient database failures; a *CorruptRowError
// (errors.Is ErrCorruptRow) naming the table and row when a stored row
// cannot be decoded — such rows are never skipped and never deleted.
type Sessions interface {
	// Save writes the whole aggregate in one transaction. A session with
	// Version 0 is inserted (ErrConflict if its id exists). Otherwise the
	// session row is updated only if the stored version equals s.Version
	// (else ErrConflict, and nothing is written). Only messages with Seq 0
	// are written (appended, with sequence numbers assigned in the same
	// transaction); stored messages are never rewritten or deleted. Todos,
	// new compaction records and the current plan are written only when
	// they changed since Load or the last Save. On success s.Version,
	// s.LastSeq, s.MessageCount, s.UpdatedAt and the new messages' Seq are
	// updated in place. A ParentID that names no session (of the view's
	// tenant) is ErrNotFound.
	Save(ctx context.Context, s *Session) error
	// Load returns the session with its messages (narrowed by opts, at
	// most one LoadOptions value), compaction history, todos and current
	// (active) plan, in a fixed number of queries. ErrNotFound if missing.
	Load(ctx context.Context, id uuid.UUID, opts ...LoadOptions) (*Session, error)
	// Delete removes the session, its child rows and its child sessions
	// (recursively). It reports whether a session was deleted.
	Delete(ctx context.Context, id uuid.UUID) (bool, error)
	// List returns one page of sessions ordered by (updated_at, id).
	List(ctx context.Context, p ListParams) (ListPage, error)
	// ListChildren returns the ids of the sessions whose parent is
	// parentID, oldest first. An unknown parent gives an empty slice.
	ListChildren(ctx context.Context, parentID uuid.UUID) ([]uuid.UUID, error)
	// AppendMessages appends msgs to the session in one transaction
	// without a version check (appends commute): each gets the next
	// sequence number; a message without ParentID is linked to the
	// previous one (the first to the session's current leaf) unless it is
	// a compact summary; the last becomes the current leaf; usage is added
	// to the session's totals; the version is bumped. It writes len(msgs)
	// message rows and the session row, whatever the session's size, and
	// returns the stored messages (with Seq, ID, CreatedAt set).
	AppendMessages(ctx context.Context, sessionID uuid.UUID, msgs ...Message) ([]Message, error)
	// Fork creates a new main session whose parent is sessionID, holding a
	// copy (made in the database, ids kept, marked sidechain, renumbered
	// from 1) of the branch from atMessageID up to the root; atMessageID ""
	// forks the current branch. The fork copies the tenant, config,
	// permissions, summary, static context hash and expiry, records
	// ForkedFromSessionID/ForkedFromSeq, and starts with zero token totals
	// and cost. The original is not modified. ErrNotFound if the session or
	// message does not exist.
	Fork(ctx context.Context, sessionID uuid.UUID, atMessageID string) (*Session, error)
	// AddSummary stores the snapshot and sets the session's summary to it,
	// in one transaction (the session's version is bumped).
	AddSummary(ctx context.Context, snap SummarySnapshot) (SummarySnapshot, error)
	// GetSummaries returns the session's summaries, oldest first.
	GetSummaries(ctx context.Context, sessionID uuid.UUID) ([]SummarySnapshot, error)
	// SetTodos replaces the session's todos by id (update, insert, remove;
	// a stored todo that cannot be decoded is never removed) and bumps the
	// version. It returns the stored list.
	SetTodos(ctx context.Context, sessionID uuid.UUID, todos []TodoItem) ([]TodoItem, error)
	// Plans returns every plan the session ever had, oldest first.
	Plans(ctx context.Context, sessionID uuid.UUID) ([]Plan, error)
	// CleanupExpired deletes sessions whose ExpiresAt is before the store's
	// clock (their child rows and child sessions cascade), in batches of at
	// most batchSize (0 = 500) sessions per transaction, and returns how many
	// expired sessions it deleted (a cascaded child counts only if it was
	// expired itself). Sessions without ExpiresAt are never deleted.
	CleanupExpired(ctx context.Context, batchSize int) (int, error)
}

// SessionQueue is the per-session durable work queue. Items are dequeued
// by priority (highest first), FIFO within a priority, under a lease: an
// item whose lease expires is dequeued again with its attempt count raised,
// so nothing stays processing forever.
//
// Error contract: ErrNotFound when the session (or item) does not exist or
// belongs to another tenant of a tenant-scoped view; ErrLockLost from
// Complete, Fail and Release when the lease expired, was already ended, or
// was superseded by a newer Dequeue; ErrInvalidInput before any SQL for
// refused input (see Sessions).
type SessionQueue interface {
	// Enqueue adds a pending item.
	Enqueue(ctx context.Context, sessionID uuid.UUID, content string, priority int32) (*QueueItem, error)
	// Dequeue leases the next item of the session: status processing,
	// a new lease token, leased until now + p.Lease, attempts + 1. It
	// returns nil and no error when nothing is available.
	Dequeue(ctx context.Context, sessionID uuid.UUID, p DequeueParams) (*QueueItem, error)
	// Complete ends the lease with status completed.
	Complete(ctx context.Context, l Lease) error
	// Fail ends the lease with status failed and records reason.
	Fail(ctx context.Context, l Lease, reason string) error
	// Release returns the leased item to pending (its attempt count kept).
	Release(ctx context.Context, l Lease) error
	// CancelQueued cancels a pending item; it reports false for an item
	// that is not pending (or does not exist).
	CancelQueued(ctx context.Context, itemID uuid.UUID) (bool, error)
	// PendingQueue returns the session's pending items in dequeue order.
	PendingQueue(ctx context.Context, sessionID uuid.UUID) ([]QueueItem, error)
}
