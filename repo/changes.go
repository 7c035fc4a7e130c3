package repo

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
)

// ChangeCursor is a position in the session change feed: the position just
// after one change. It is an opaque string: store it as it is and pass it
// back as ChangesParams.After; "" is the start of the feed. A cursor that
// was not returned by the feed (malformed) is ErrInvalidInput. Cursors stay
// valid across Stores, processes and restarts of the same database (and
// table prefix).
type ChangeCursor string

// ChangeKind is what a change did.
type ChangeKind string

// The kinds of change the feed records.
const (
	// ChangeSessionCreated: a session was created (Save of a new session,
	// Fork).
	ChangeSessionCreated ChangeKind = "session.created"
	// ChangeSessionUpdated: a session changed and its version advanced:
	// Save, AppendMessages (FromSeq < ToSeq: the messages with seq in
	// (FromSeq, ToSeq] were appended by it), Rewind, and a write through
	// SQL outside agentstore. One committed statement that changes the
	// session row is one change. A change of the todos, the plan or the
	// summary snapshots is reported with its own kind below instead (a
	// Save that also appended messages is reported as session.updated
	// followed by those kinds, each with the same Version).
	ChangeSessionUpdated ChangeKind = "session.updated"
	// ChangeTodos: the session's todo list was replaced (SetTodos, or a
	// Save whose todos changed); Version is the session's version after
	// it. Read the todos with Load.
	ChangeTodos ChangeKind = "todos.changed"
	// ChangePlan: the session's current plan changed (a Save whose plan
	// changed); Version is the session's version after it. Read it with
	// Load or Plans.
	ChangePlan ChangeKind = "plan.changed"
	// ChangeSummary: a summary snapshot was added (AddSummary); Version is
	// the session's version after it. Read it with GetSummaries.
	ChangeSummary ChangeKind = "summary.changed"
	// ChangeSessionDeleted: a session was deleted (Delete, a parent's
	// delete, CleanupExpired). Its later changes (none) and its rows are
	// gone; the feed keeps the change until retention purges it.
	ChangeSessionDeleted ChangeKind = "session.deleted"
	// ChangeQueueItem: a session-queue item was enqueued or its status
	// changed (dequeued, completed, failed, released, cancelled, reclaimed
	// after an expired lease); State is the new status, ItemID the item.
	ChangeQueueItem ChangeKind = "queue.item"
)

// ErrCursorExpired is returned by ChangeFeed.Changes and Watch for a
// cursor from before the feed's purge horizon: PurgeChanges has deleted
// changes after it, which a consumer resuming from it has not seen (had it
// seen them, its cursor would be at or after them). The error is a
// *CursorExpiredError carrying the cursor and the horizon. It is not
// retryable: the changes are gone. A consumer rebuilds its state from the
// sessions themselves (List, Load) and resumes After the horizon, or, when
// it accepts the loss, resumes After the horizon directly. The empty cursor
// (the start of the feed) never expires: it reads from the oldest change
// kept.
var ErrCursorExpired = errors.New("agentstore: change cursor expired")

// CursorExpiredError is the error of a cursor older than the feed's purge
// horizon. It matches ErrCursorExpired.
type CursorExpiredError struct {
	// Cursor is the cursor the call was given.
	Cursor ChangeCursor
	// Horizon is the position of the last change purged: every change
	// after it is still kept, so resuming After it reads them all.
	Horizon ChangeCursor
}

// Error names the cursor and the horizon.
func (e *CursorExpiredError) Error() string {
	return "agentstore: change cursor expired: cursor " + string(e.Cursor) + " is before the purge horizon " +
		string(e.Horizon) + " (changes after the cursor were purged; rebuild from the sessions and resume after the horizon)"
}

// Unwrap returns ErrCursorExpired.
func (e *CursorExpiredError) Unwrap() error { return ErrCursorExpired }

// Change is one committed change of a session, as the feed reports it.
type Change struct {
	// Cursor is the position just after this change: pass it as
	// ChangesParams.After to resume after it.
	Cursor ChangeCursor
	// Kind is what the change did.
	Kind ChangeKind
	// TenantID is the session's tenant (nil without one).
	TenantID *string
	// SessionID is the session the change belongs to.
	SessionID uuid.UUID
	// Version is the session's version after the change (for
	// session.created, session.updated, todos.changed, plan.changed and
	// summary.changed; the version it had for
	// session.deleted; 0 for queue.item).
	Version int64
	// FromSeq and ToSeq: the session's last message seq before and after
	// the change. Messages with seq in (FromSeq, ToSeq] were appended by
	// it (none when equal). 0 for queue.item.
	FromSeq, ToSeq int64
	// State is the session's state after the change (its state before a
	// delete), or the queue item's new status for queue.item.
	State string
	// ItemID is the queue item (queue.item only; uuid.Nil otherwise).
	ItemID uuid.UUID
	// Time is when the change was written, by the database's clock (not a
	// Store's WithClock), to the millisecond.
	Time time.Time
}

// ChangesParams selects a page (or, for Watch, a stream) of the feed.
type ChangesParams struct {
	// SessionID, when not uuid.Nil, keeps only that session's changes.
	SessionID uuid.UUID
	// TenantID, when not nil, keeps only the changes of that tenant's
	// sessions (a tenant-scoped view always keeps only its own).
	TenantID *string
	// After is the cursor of the last change the consumer has handled
	// ("" for the start of the feed): the page begins with the first change
	// after it.
	After ChangeCursor
	// Limit is the page size (Watch: the most changes read at a time): 0
	// means DefaultPageLimit; a negative limit or one above MaxPageLimit is
	// ErrInvalidInput.
	Limit int
}

// ChangesPage is one page of the feed.
type ChangesPage struct {
	// Changes are the page's changes in feed order.
	Changes []Change
	// Next is the cursor to pass as After for the next page: the cursor of
	// the last change of this page, or the request's After when the page
	// is empty (no committed change after it yet).
	Next ChangeCursor
}

// Defaults of ChangeFeed.PurgeChanges.
const (
	// DefaultChangeRetention is how long PurgeChanges keeps changes when
	// called with olderThan 0.
	DefaultChangeRetention = 7 * 24 * time.Hour
)

// ChangeFeed is the session change feed: a lossless, resumable,
// commit-ordered record of what changed in sessions and their queues. Every
// write of the session API (through any Store or process on the database)
// records its changes in the transaction that makes them, so a change is in
// the feed exactly when it committed.
//
// Order and delivery: the feed is one total order. Per session it is the
// order in which the session's changes committed (writers of one session
// take its row lock, the queue's writers the item's row lock). A consumer
// that reads from the start (or from any cursor the feed returned) and
// resumes from the Cursor of the last change it handled never misses a
// committed change and never sees one twice, however writers interleave
// their commits. On PostgreSQL a change becomes visible to the feed once no
// transaction that started before it commits is still running (docs/changes.md:
// a long-open transaction delays the feed, never reorders it).
//
// Retention: changes are kept until PurgeChanges deletes them; a consumer
// whose cursor is older than the purge horizon gets ErrCursorExpired
// instead of silently missing the purged changes.
type ChangeFeed interface {
	// Changes returns the first committed changes after p.After in feed
	// order, at most p.Limit of them, filtered by p.SessionID and
	// p.TenantID. A p.After before the purge horizon (PurgeChanges deleted
	// changes after it) is a *CursorExpiredError (ErrCursorExpired); the
	// horizon that applies is the last purge of the whole feed and, for a
	// tenant-scoped view or a TenantID filter, of that tenant, and for an
	// unfiltered read or a SessionID filter the last purge of any tenant
	// (so a tenant's purge can expire an all-tenants cursor that had
	// nothing of that tenant to miss). It refuses a malformed cursor, a limit out of range or a
	// TenantID that is not a valid id (empty, too long, not UTF-8, NUL) with
	// ErrInvalidInput. An empty page means nothing after p.After has
	// committed yet (or everything after it was filtered out); Next is then
	// p.After.
	Changes(ctx context.Context, p ChangesParams) (ChangesPage, error)
	// Watch delivers the committed changes after p.After to fn, in feed
	// order, one at a time, and then each new change as it commits, until
	// ctx ends or fn returns an error. Pages are read like Changes (p's
	// filters apply); it waits between them for a wake-up (the same
	// machinery as the provider's long polls: LISTEN/NOTIFY on PostgreSQL,
	// the data_version watcher on SQLite, in-process wake-ups from this
	// Store) or a re-check: every max(WithPollInterval, 250 ms) while the
	// wake-up is up, every WithPollInterval otherwise. It returns the
	// error fn returned, ctx's error (context.Canceled or
	// DeadlineExceeded) when ctx ends, or the error of a read that failed
	// (the session API's sentinels, as Changes; ErrCursorExpired when
	// p.After, or a cursor it reached while a purge ran past it, is before
	// the purge horizon). fn sees change.Cursor:
	// store it to resume with a later Watch or Changes. Input errors are
	// Changes's.
	Watch(ctx context.Context, p ChangesParams, fn func(Change) error) error
	// PurgeChanges deletes the feed's oldest changes, in feed order, while
	// they were written more than olderThan ago (a change's Time, the
	// database's clock, against this host's clock), in transactions of at most batch rows each, stopping at the
	// first change that is younger; it returns how many it deleted. The
	// position of the last change it deleted becomes the purge horizon (of
	// the feed, or of the view's tenant): a later Changes or Watch from a
	// cursor before it is ErrCursorExpired.
	// olderThan 0 means DefaultChangeRetention (7 days), batch 0
	// DefaultPurgeBatch; a negative olderThan or a batch that is negative
	// or above MaxPurgeBatch is ErrInvalidInput. Each batch commits on its
	// own: when a batch fails (or ctx ends) the count of the earlier ones is
	// returned with the error. A tenant-scoped view purges only its
	// tenant's changes.
	PurgeChanges(ctx context.Context, olderThan time.Duration, batch int) (int, error)
}
