package repo

import (
	"context"
	"time"

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
// is not valid JSON or not a JSON array or string, message or queue-item
// content larger than the Store's limit (agentstore.WithMaxContentBytes),
// an unknown enum value; ErrNotFound when the session
// does not exist or belongs to another tenant of a tenant-scoped view;
// ErrRetryable for transient database failures; ErrLockTimeout (also
// ErrTimeout and ErrRetryable) or ErrStatementTimeout (also ErrTimeout, not
// retryable) when a timeout the Store was configured with expired (the
// caller's own deadline is context.DeadlineExceeded instead); a *CorruptRowError
// (errors.Is ErrCorruptRow) naming the table and row when a stored row
// cannot be decoded — such rows are never skipped and never deleted (and
// never match ErrInvalidInput); ErrConflict only with one of its causes,
// ErrStaleVersion (a *StaleVersionError) or ErrDuplicate. Every error is a
// *Error whose message names the session (and the row or key concerned);
// no database driver text is in it (the driver's error stays reachable
// through Unwrap). A session deleted while a write to it runs makes that
// write ErrNotFound, never a foreign-key error.
//
// Retrying safely: an ErrRetryable error, or a lost reply, may leave the
// write done or not. AppendMessages with caller-set message ids and
// EnqueueWith with an idempotency key can simply be called again (the
// stored result comes back); messages without ids would be stored twice.
// Save of a session with Version 0 and a fixed ID is ErrDuplicate on retry
// if the first attempt landed; Load it. Save with a stale Version, or a
// strict AppendMessagesWith, is ErrStaleVersion: someone (possibly your own
// lost attempt) wrote — Load, compare, reapply.
type Sessions interface {
	// Save writes the whole aggregate in one transaction. A session with
	// Version 0 is inserted (ErrConflict if its id exists). Otherwise the
	// session row is updated only if the stored version equals s.Version
	// (else a *StaleVersionError carrying the stored version, and nothing
	// is written; Load and reapply). A struct whose session was written by
	// another method since (AppendMessages, SetTodos, AddSummary and a
	// Rewind that moves the leaf bump the version) is stale too: Load it again, or keep Version in step (a
	// strict AppendMessagesWith returns the new version). Saving a new
	// session whose id is stored is ErrDuplicate. Only messages with Seq 0
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
	// (recursively), including its forks: a fork's ParentID is its origin.
	// To keep a fork past its origin, detach it first (set its ParentID to
	// nil and Save it). It reports whether a session was deleted.
	Delete(ctx context.Context, id uuid.UUID) (bool, error)
	// List returns one page of the sessions p selects, in p.Order
	// ((updated_at, id) by default, or (created_at, id)), each page one
	// index range after the cursor. A cursor from another order, a limit
	// outside 0..MaxListLimit or an unknown state, kind or order is
	// ErrInvalidInput.
	//
	// Corrupt rows never stop a walk. A page holds at most p.Limit rows,
	// sessions and rows that cannot be decoded together; the undecodable
	// ones are listed in ListPage.Corrupt (never skipped silently, never
	// deleted) and List then returns the page — its decoded Sessions,
	// Corrupt, and a Next cursor past all of them — together with a *Error
	// matching ErrCorruptRow (errors.As finds the first *CorruptRowError).
	// To walk on, report page.Corrupt and continue from page.Next. A page
	// ends on a row whose order key (the order's timestamp and the id)
	// can be read; a run of rows whose keys cannot be read (a SQLite file
	// edited by hand) joins the page before it, or forms a longer page
	// when it is p.Limit rows or more.
	List(ctx context.Context, p ListParams) (ListPage, error)
	// ListChildren returns the ids of the sessions whose parent is
	// parentID, oldest first. An unknown parent gives an empty slice.
	ListChildren(ctx context.Context, parentID uuid.UUID) ([]uuid.UUID, error)
	// ListChildrenPage is ListChildren one page at a time (see
	// PageParams), in the same order (created_at, id) over the
	// (parent_id, created_at, id) index: it returns at most p.Limit ids and
	// the cursor of the next page, "" after the last one. An unknown parent
	// gives an empty page.
	ListChildrenPage(ctx context.Context, parentID uuid.UUID, p PageParams) ([]uuid.UUID, string, error)
	// AppendMessages appends msgs to the session in one transaction (which
	// concurrent appends of one Store may share: all of this call's writes
	// commit together or none do, and the call returns after the commit)
	// without a version check (appends commute): each gets the next
	// sequence number; a message without ParentID is linked to the
	// previous one (the first to the session's current leaf) unless it is
	// a compact summary; the last becomes the current leaf; usage is added
	// to the session's totals; the version is bumped and updated_at set
	// (never backwards). It writes len(msgs) message rows and the session
	// row, whatever the session's size, and returns the stored messages
	// (with Seq, ID, CreatedAt set). No messages writes nothing (ErrNotFound
	// still if the session does not exist). Two messages of one batch with
	// the same id are ErrInvalidInput.
	//
	// Idempotent with caller-set ids: when every message of the batch is
	// already stored under its id with the same role, content, compact
	// flag and (when the caller set one) parent id, nothing is written and
	// the stored messages are returned with their seqs. A message id the
	// session holds with other content, or a batch only partly stored, is
	// ErrDuplicate naming the id.
	AppendMessages(ctx context.Context, sessionID uuid.UUID, msgs ...Message) ([]Message, error)
	// AppendMessagesWith is AppendMessages with options: with
	// o.ExpectedVersion > 0 it is strict (see AppendOptions); a strict
	// retry whose first attempt landed returns the stored messages (the
	// idempotency rule above is checked before the version).
	//
	// With o.SiblingOf it edits: the first message of msgs is stored as a
	// sibling of the stored message o.SiblingOf (with its ParentID, nil
	// for a root) instead of under the current leaf; the others chain as
	// above and the last becomes the current leaf. The edited message and
	// its descendants stay stored on their branch. The batch must not be
	// empty, its first message must not set ParentID and must not have the
	// id o.SiblingOf (ErrInvalidInput, before any SQL); ErrNotFound when
	// the session holds no message o.SiblingOf (the error names it). It
	// costs one query more than an append: the edited message's parent,
	// read first (messages are never rewritten, so it cannot change). A
	// retry whose first attempt landed returns the stored messages; a
	// first message stored under another parent is ErrDuplicate naming
	// its id.
	AppendMessagesWith(ctx context.Context, sessionID uuid.UUID, o AppendOptions, msgs ...Message) ([]Message, error)
	// Rewind makes the stored message toMessageID the session's current
	// leaf, in one transaction: the next AppendMessages hangs its first
	// message under it, and Load with CurrentBranch (and Fork with "")
	// reads the path from it to the root. No message is deleted or
	// rewritten: the messages after toMessageID stay stored on their
	// branch (Branches lists it, LoadBranch reads it, a Rewind to its leaf
	// returns to it). Only the session row's current leaf, version (+1)
	// and updated_at (never backwards) are written; MessageCount, LastSeq,
	// the token totals, the state, config, permissions, summary, todos,
	// plans, compaction records and summaries are kept as they are. It
	// returns the session's version after the call.
	//
	// When toMessageID already is the current leaf nothing is written and
	// the stored version is returned, whatever o.ExpectedVersion: a retry
	// whose first attempt landed succeeds. Otherwise, with
	// o.ExpectedVersion > 0, the leaf moves only if the stored version
	// equals it, and the call is a *StaleVersionError (ErrStaleVersion)
	// carrying the stored version otherwise. ErrInvalidInput, before any
	// SQL, for an empty or malformed toMessageID (longer than MaxIDLen, not
	// valid UTF-8, holding a NUL byte) or a negative ExpectedVersion;
	// ErrNotFound when the session does not exist (in the view's tenant)
	// or holds no message toMessageID (the error names it).
	Rewind(ctx context.Context, sessionID uuid.UUID, toMessageID string, o RewindOptions) (int64, error)
	// Branches returns the branches of the session's message tree (see
	// Branch), in the order of their leaves' Seq: one per message that no
	// stored message of the session names as its parent, and one for the
	// current leaf when it has children (after a Rewind). Current marks
	// the current leaf's. Every tree of the session has its branches: the
	// history before a compaction (a compact summary appended without a
	// ParentID starts a new root) is a tree of its own, whose branches
	// share no message with a current branch after the compaction
	// (ForkPointID ""). It reads
	// the seq, id, parent id and created_at of every message of the
	// session in one query, after the session row (one snapshot where the
	// database has snapshot reads), and computes the paths in memory
	// (linear in the session's messages). A session without messages has
	// no branches (an empty slice). ErrNotFound when the session does not
	// exist (in the view's tenant); a *CorruptRowError when a message's
	// created_at cannot be read.
	Branches(ctx context.Context, sessionID uuid.UUID) ([]Branch, error)
	// LoadBranch returns the messages on the path from the stored message
	// messageID to the root through ParentID (a branch Branches names by
	// its LeafID, or any message's history), oldest first (by Seq): what
	// Load with CurrentBranch returns when messageID is the current leaf.
	// opts narrows them (at most one LoadOptions value): AfterSeq,
	// BeforeSeq, Limit and LastN as in Load; CurrentBranch is ignored. The
	// walk stops at a message without a parent, at a parent id that names
	// no stored message and at a message already on the path. One
	// recursive query after the session row, and when it returns nothing a
	// check that the message exists (one snapshot where the database has
	// snapshot reads). ErrInvalidInput, before any SQL, for an empty or
	// malformed messageID (as for Rewind) or invalid options (a negative
	// value, Limit with LastN, more than one LoadOptions);
	// ErrNotFound when the session does not exist (in the view's tenant)
	// or holds no message messageID (the error names it).
	LoadBranch(ctx context.Context, sessionID uuid.UUID, messageID string, opts ...LoadOptions) ([]Message, error)
	// Search returns one page of the messages whose indexed text matches
	// p.Query (see SearchParams for the query syntax and filters, and the
	// package documentation of search for what is indexed), most relevant
	// first (Score descending, then session id and seq), each with a
	// highlighted snippet. Pages are keyset-paged: a walk from After ""
	// until Next is "" returns every matching message that existed, with
	// the same content, for the whole walk exactly once (messages appended
	// or deleted meanwhile may or may not appear, never twice). A
	// tenant-scoped view searches its tenant's sessions only. Messages of
	// deleted sessions are never found; an idempotent retry of an append
	// stores (and so finds) its messages once. ErrInvalidInput, before any
	// SQL, for an invalid query, filter, limit or cursor; a database whose
	// schema predates the search index (before V8) is agentstore.ErrSchemaBehind.
	Search(ctx context.Context, p SearchParams) (SearchPage, error)
	// WithSessionLock runs fn while holding the session's write lock, in
	// one transaction: the session row locked (SELECT ... FOR UPDATE) on a
	// database with row locks, the database's write transaction on a
	// single-writer one (SQLite: other writers of the database wait). fn
	// gets a Sessions bound to the transaction: use it (not the Store's)
	// for every read and write of fn, and not after fn returns; its writes
	// commit together when fn returns nil and are rolled back when fn
	// returns an error or panics. Waiting for the lock is bounded by ctx.
	// ErrNotFound (fn not called) if the session does not exist; fn's error
	// is returned unchanged.
	WithSessionLock(ctx context.Context, id uuid.UUID, fn func(ctx context.Context, tx Sessions) error) error
	// Fork creates a new main session whose parent is sessionID, holding a
	// copy (made in the database, ids kept, marked sidechain, renumbered
	// from 1) of the branch from atMessageID up to the root; atMessageID ""
	// forks the current branch. The fork copies the tenant, config,
	// permissions, summary, static context hash and expiry, records
	// ForkedFromSessionID/ForkedFromSeq, and starts with zero token totals
	// and cost. The original is not modified. The fork is created and read
	// back in one transaction: when Fork fails no fork exists. ErrNotFound
	// if the session or message does not exist.
	Fork(ctx context.Context, sessionID uuid.UUID, atMessageID string) (*Session, error)
	// AddSummary stores the snapshot and sets the session's summary to it,
	// in one transaction (the session's version is bumped).
	AddSummary(ctx context.Context, snap SummarySnapshot) (SummarySnapshot, error)
	// GetSummaries returns the session's summaries, oldest first.
	GetSummaries(ctx context.Context, sessionID uuid.UUID) ([]SummarySnapshot, error)
	// GetSummariesPage is GetSummaries one page at a time (see
	// PageParams), oldest first ((created_at, id) over the (session_id,
	// created_at, id) index): at most p.Limit summaries and the cursor of
	// the next page, "" after the last one. ErrNotFound when the session
	// does not exist (checked when the page is empty).
	GetSummariesPage(ctx context.Context, sessionID uuid.UUID, p PageParams) ([]SummarySnapshot, string, error)
	// SetTodos replaces the session's todos by id (update, insert, remove;
	// a stored todo that cannot be decoded is never removed) and bumps the
	// version. It returns the stored list. Two todos with the same id are
	// ErrInvalidInput; a todo id stored under another session is
	// ErrDuplicate.
	SetTodos(ctx context.Context, sessionID uuid.UUID, todos []TodoItem) ([]TodoItem, error)
	// Plans returns every plan the session ever had, oldest first.
	Plans(ctx context.Context, sessionID uuid.UUID) ([]Plan, error)
	// PlansPage is Plans one page at a time (see PageParams), oldest
	// first ((created_at, id) over the (session_id, created_at, id)
	// index): at most p.Limit plans and the cursor of the next page, ""
	// after the last one. ErrNotFound when the session does not exist
	// (checked when the page is empty).
	PlansPage(ctx context.Context, sessionID uuid.UUID, p PageParams) ([]Plan, string, error)
	// CleanupExpired deletes sessions whose ExpiresAt is before the store's
	// clock (their child rows and child sessions cascade), in batches of at
	// most batchSize (0 = 500) picked sessions per transaction, and returns
	// how many expired sessions it deleted: the picked ones and every
	// cascaded descendant that was expired itself, each once. Sessions
	// without ExpiresAt are never deleted (unless an expired ancestor
	// cascades to them; they are not counted). A batch that loses a
	// deadlock to a concurrent sweeper is run again a few times; when the
	// call still fails, the count it returns with the error is that of
	// the batches committed before (those sessions are gone and are not
	// counted by a later call).
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
	// EnqueueWith adds a pending item, idempotently when p.IdempotencyKey
	// is set (see EnqueueParams).
	EnqueueWith(ctx context.Context, sessionID uuid.UUID, p EnqueueParams) (*QueueItem, error)
	// Item returns one item by id, in any status (with attempts, last
	// error, lease and times). ErrNotFound if missing.
	Item(ctx context.Context, itemID uuid.UUID) (*QueueItem, error)
	// Items returns every item of the session, in any status, in enqueue
	// order; statuses, when given, keep the items in one of them.
	Items(ctx context.Context, sessionID uuid.UUID, statuses ...QueueStatus) ([]QueueItem, error)
	// Dequeue leases the next item of the session: status processing,
	// a new lease token, leased until now + p.Lease, attempts + 1. It
	// returns nil and no error when nothing is available. Concurrent
	// Dequeues of one session may be claimed together in one statement
	// (group commit): each call still gets an item of its own (never one
	// another call got), with its own token, owner and lease, the calls
	// served in dequeue order. A call whose ctx ends before its claim is
	// taken into a statement returns the context's error and claims
	// nothing.
	//
	// With p.Wait > 0 a Dequeue that finds nothing claimable waits for an
	// item up to p.Wait and returns nil and no error when none came. It is
	// woken at once by an Enqueue or Release through the same Store, and
	// within milliseconds by one through another Store or process on the
	// same database (LISTEN/NOTIFY on PostgreSQL, the data_version watcher
	// on SQLite); without a wake-up it re-checks every WithPollInterval, and
	// while the wake-up channel is healthy (on the real clock) only at the
	// session's next lease expiry or after max(WithPollInterval, 1 s): about
	// one claim query per idle second per waiting call. A call whose ctx
	// ends while it waits returns the context's error and claims nothing.
	// The session's existence is checked once, at the start (ErrNotFound);
	// a session deleted while the call waits ends it with nil at p.Wait.
	Dequeue(ctx context.Context, sessionID uuid.UUID, p DequeueParams) (*QueueItem, error)
	// Complete ends the lease with status completed. It returns only
	// after its own completion is committed (durable as the store's
	// commits are); concurrent Completes may be committed together in one
	// transaction (group commit), but each is checked against its own
	// lease and gets its own result: a stale lease is ErrLockLost for
	// that call only. A call whose ctx ends before its completion is
	// taken into a commit returns the context's error and completes
	// nothing.
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
	// PendingQueuePage is PendingQueue one page at a time (see
	// PageParams), in dequeue order (priority descending, then enqueue
	// order), each page at most two ranges of the live-items index: at most
	// p.Limit items and the cursor of the next page, "" after the last one.
	// ErrNotFound when the session does not exist (checked when the page
	// is empty).
	PendingQueuePage(ctx context.Context, sessionID uuid.UUID, p PageParams) ([]QueueItem, string, error)
	// PurgeFinished deletes finished items (completed, failed or
	// cancelled) of every session (of the view's tenant) that finished
	// more than olderThan before the store's clock, oldest first, in
	// transactions of at most batch items each, until none is left, and
	// returns how many it deleted. olderThan 0 means DefaultQueueRetention
	// (7 days), batch 0 DefaultPurgeBatch (1000); a negative olderThan, or
	// a batch that is negative or above MaxPurgeBatch, is ErrInvalidInput.
	// Pending and processing items are never deleted. Each batch commits on
	// its own: when a batch fails (or ctx ends) the earlier batches stay
	// deleted and the count of them is returned with the error. Finished
	// items are otherwise kept until their session is deleted; call this
	// periodically (for example hourly) so queue history does not grow
	// forever.
	PurgeFinished(ctx context.Context, olderThan time.Duration, batch int) (int, error)
}
