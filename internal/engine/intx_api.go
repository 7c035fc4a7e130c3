package engine

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore/repo"
)

// txSessions is the repo.Sessions of a TxView: each call runs through
// TxView.call (a savepoint of the application's transaction). The
// interface is embedded, bound to the transaction without a savepoint, so
// that a method added to repo.Sessions later still runs in the
// transaction until it gets its wrapper here.
type txSessions struct {
	repo.Sessions
	v *TxView
}

// txQueue is the repo.SessionQueue of a TxView (see txSessions).
type txQueue struct {
	repo.SessionQueue
	v *TxView
}

var (
	_ repo.Sessions     = txSessions{}
	_ repo.SessionQueue = txQueue{}
)

func (t txSessions) api(ss *sessionStore) sessionsAPI  { return sessionsAPI{ss} }
func (t txQueue) api(ss *sessionStore) sessionQueueAPI { return sessionQueueAPI{&sessionQueue{*ss}} }

// Save implements repo.Sessions.
func (t txSessions) Save(ctx context.Context, s *repo.Session) error {
	return t.v.call(ctx, "save_session", wakeFeed, func(ss *sessionStore) error { return t.api(ss).Save(ctx, s) })
}

// Load implements repo.Sessions.
func (t txSessions) Load(ctx context.Context, id uuid.UUID, opts ...repo.LoadOptions) (out *repo.Session, err error) {
	err = t.v.call(ctx, "load_session", wakeNone, func(ss *sessionStore) (err error) {
		out, err = t.api(ss).Load(ctx, id, opts...)
		return err
	})
	return out, err
}

// Delete implements repo.Sessions.
func (t txSessions) Delete(ctx context.Context, id uuid.UUID) (ok bool, err error) {
	err = t.v.call(ctx, "delete_session", wakeFeed, func(ss *sessionStore) (err error) {
		ok, err = t.api(ss).Delete(ctx, id)
		return err
	})
	return ok, err
}

// List implements repo.Sessions.
func (t txSessions) List(ctx context.Context, p repo.ListParams) (out repo.ListPage, err error) {
	err = t.v.call(ctx, "list_sessions", wakeNone, func(ss *sessionStore) (err error) {
		out, err = t.api(ss).List(ctx, p)
		return err
	})
	return out, err
}

// ListChildren implements repo.Sessions.
func (t txSessions) ListChildren(ctx context.Context, parentID uuid.UUID) (out []uuid.UUID, err error) {
	err = t.v.call(ctx, "list_children", wakeNone, func(ss *sessionStore) (err error) {
		out, err = t.api(ss).ListChildren(ctx, parentID)
		return err
	})
	return out, err
}

// ListChildrenPage implements repo.Sessions.
func (t txSessions) ListChildrenPage(ctx context.Context, parentID uuid.UUID, p repo.PageParams) (out []uuid.UUID, next string, err error) {
	err = t.v.call(ctx, "list_children_page", wakeNone, func(ss *sessionStore) (err error) {
		out, next, err = t.api(ss).ListChildrenPage(ctx, parentID, p)
		return err
	})
	return out, next, err
}

// AppendMessages implements repo.Sessions.
func (t txSessions) AppendMessages(ctx context.Context, sessionID uuid.UUID, msgs ...repo.Message) (out []repo.Message, err error) {
	err = t.v.call(ctx, "append_messages", wakeFeed, func(ss *sessionStore) (err error) {
		out, err = t.api(ss).AppendMessages(ctx, sessionID, msgs...)
		return err
	})
	return out, err
}

// AppendMessagesWith implements repo.Sessions.
func (t txSessions) AppendMessagesWith(ctx context.Context, sessionID uuid.UUID, o repo.AppendOptions, msgs ...repo.Message) (out []repo.Message, err error) {
	err = t.v.call(ctx, "append_messages", wakeFeed, func(ss *sessionStore) (err error) {
		out, err = t.api(ss).AppendMessagesWith(ctx, sessionID, o, msgs...)
		return err
	})
	return out, err
}

// Rewind implements repo.Sessions.
func (t txSessions) Rewind(ctx context.Context, sessionID uuid.UUID, toMessageID string, o repo.RewindOptions) (v int64, err error) {
	err = t.v.call(ctx, "rewind_session", wakeFeed, func(ss *sessionStore) (err error) {
		v, err = t.api(ss).Rewind(ctx, sessionID, toMessageID, o)
		return err
	})
	return v, err
}

// Branches implements repo.Sessions.
func (t txSessions) Branches(ctx context.Context, sessionID uuid.UUID) (out []repo.Branch, err error) {
	err = t.v.call(ctx, "list_branches", wakeNone, func(ss *sessionStore) (err error) {
		out, err = t.api(ss).Branches(ctx, sessionID)
		return err
	})
	return out, err
}

// LoadBranch implements repo.Sessions.
func (t txSessions) LoadBranch(ctx context.Context, sessionID uuid.UUID, messageID string, opts ...repo.LoadOptions) (out []repo.Message, err error) {
	err = t.v.call(ctx, "load_branch", wakeNone, func(ss *sessionStore) (err error) {
		out, err = t.api(ss).LoadBranch(ctx, sessionID, messageID, opts...)
		return err
	})
	return out, err
}

// Search implements repo.Sessions.
func (t txSessions) Search(ctx context.Context, p repo.SearchParams) (out repo.SearchPage, err error) {
	err = t.v.call(ctx, "search_messages", wakeNone, func(ss *sessionStore) (err error) {
		out, err = t.api(ss).Search(ctx, p)
		return err
	})
	return out, err
}

// WithSessionLock implements repo.Sessions: the lock is held until the
// application's transaction ends; fn's writes are rolled back (to the
// call's savepoint) when fn fails, and commit with the transaction
// otherwise.
func (t txSessions) WithSessionLock(ctx context.Context, id uuid.UUID, fn func(ctx context.Context, tx repo.Sessions) error) error {
	return t.v.call(ctx, "with_session_lock", wakeFeed, func(ss *sessionStore) error { return t.api(ss).WithSessionLock(ctx, id, fn) })
}

// Fork implements repo.Sessions.
func (t txSessions) Fork(ctx context.Context, sessionID uuid.UUID, atMessageID string) (out *repo.Session, err error) {
	err = t.v.call(ctx, "fork_session", wakeFeed, func(ss *sessionStore) (err error) {
		out, err = t.api(ss).Fork(ctx, sessionID, atMessageID)
		return err
	})
	return out, err
}

// AddSummary implements repo.Sessions.
func (t txSessions) AddSummary(ctx context.Context, snap repo.SummarySnapshot) (out repo.SummarySnapshot, err error) {
	err = t.v.call(ctx, "add_summary", wakeFeed, func(ss *sessionStore) (err error) {
		out, err = t.api(ss).AddSummary(ctx, snap)
		return err
	})
	return out, err
}

// GetSummaries implements repo.Sessions.
func (t txSessions) GetSummaries(ctx context.Context, sessionID uuid.UUID) (out []repo.SummarySnapshot, err error) {
	err = t.v.call(ctx, "get_summaries", wakeNone, func(ss *sessionStore) (err error) {
		out, err = t.api(ss).GetSummaries(ctx, sessionID)
		return err
	})
	return out, err
}

// GetSummariesPage implements repo.Sessions.
func (t txSessions) GetSummariesPage(ctx context.Context, sessionID uuid.UUID, p repo.PageParams) (out []repo.SummarySnapshot, next string, err error) {
	err = t.v.call(ctx, "get_summaries_page", wakeNone, func(ss *sessionStore) (err error) {
		out, next, err = t.api(ss).GetSummariesPage(ctx, sessionID, p)
		return err
	})
	return out, next, err
}

// SetTodos implements repo.Sessions.
func (t txSessions) SetTodos(ctx context.Context, sessionID uuid.UUID, todos []repo.TodoItem) (out []repo.TodoItem, err error) {
	err = t.v.call(ctx, "set_todos", wakeFeed, func(ss *sessionStore) (err error) {
		out, err = t.api(ss).SetTodos(ctx, sessionID, todos)
		return err
	})
	return out, err
}

// Plans implements repo.Sessions.
func (t txSessions) Plans(ctx context.Context, sessionID uuid.UUID) (out []repo.Plan, err error) {
	err = t.v.call(ctx, "plans", wakeNone, func(ss *sessionStore) (err error) {
		out, err = t.api(ss).Plans(ctx, sessionID)
		return err
	})
	return out, err
}

// PlansPage implements repo.Sessions.
func (t txSessions) PlansPage(ctx context.Context, sessionID uuid.UUID, p repo.PageParams) (out []repo.Plan, next string, err error) {
	err = t.v.call(ctx, "plans_page", wakeNone, func(ss *sessionStore) (err error) {
		out, next, err = t.api(ss).PlansPage(ctx, sessionID, p)
		return err
	})
	return out, next, err
}

// CleanupExpired implements repo.Sessions: every batch is deleted in the
// application's transaction.
func (t txSessions) CleanupExpired(ctx context.Context, batchSize int) (n int, err error) {
	err = t.v.call(ctx, "cleanup_expired", wakeFeed, func(ss *sessionStore) (err error) {
		n, err = t.api(ss).CleanupExpired(ctx, batchSize)
		return err
	})
	return n, err
}

// Enqueue implements repo.SessionQueue.
func (t txQueue) Enqueue(ctx context.Context, sessionID uuid.UUID, content string, priority int32) (it *repo.QueueItem, err error) {
	err = t.v.call(ctx, "enqueue", wakeQueue, func(ss *sessionStore) (err error) {
		it, err = t.api(ss).Enqueue(ctx, sessionID, content, priority)
		return err
	})
	return it, err
}

// EnqueueWith implements repo.SessionQueue.
func (t txQueue) EnqueueWith(ctx context.Context, sessionID uuid.UUID, p repo.EnqueueParams) (it *repo.QueueItem, err error) {
	err = t.v.call(ctx, "enqueue", wakeQueue, func(ss *sessionStore) (err error) {
		it, err = t.api(ss).EnqueueWith(ctx, sessionID, p)
		return err
	})
	return it, err
}

// Item implements repo.SessionQueue.
func (t txQueue) Item(ctx context.Context, itemID uuid.UUID) (it *repo.QueueItem, err error) {
	err = t.v.call(ctx, "queue_item", wakeNone, func(ss *sessionStore) (err error) {
		it, err = t.api(ss).Item(ctx, itemID)
		return err
	})
	return it, err
}

// Items implements repo.SessionQueue.
func (t txQueue) Items(ctx context.Context, sessionID uuid.UUID, statuses ...repo.QueueStatus) (out []repo.QueueItem, err error) {
	err = t.v.call(ctx, "queue_items", wakeNone, func(ss *sessionStore) (err error) {
		out, err = t.api(ss).Items(ctx, sessionID, statuses...)
		return err
	})
	return out, err
}

// Dequeue implements repo.SessionQueue: p.Wait > 0 is ErrInvalidInput
// (the transaction would not see items committed while it waits).
func (t txQueue) Dequeue(ctx context.Context, sessionID uuid.UUID, p repo.DequeueParams) (it *repo.QueueItem, err error) {
	err = t.v.call(ctx, "dequeue", wakeFeed, func(ss *sessionStore) (err error) {
		it, err = t.api(ss).Dequeue(ctx, sessionID, p)
		return err
	})
	return it, err
}

// Complete implements repo.SessionQueue.
func (t txQueue) Complete(ctx context.Context, l repo.Lease) error {
	return t.v.call(ctx, "complete", wakeFeed, func(ss *sessionStore) error { return t.api(ss).Complete(ctx, l) })
}

// Fail implements repo.SessionQueue.
func (t txQueue) Fail(ctx context.Context, l repo.Lease, reason string) error {
	return t.v.call(ctx, "fail", wakeFeed, func(ss *sessionStore) error { return t.api(ss).Fail(ctx, l, reason) })
}

// Release implements repo.SessionQueue.
func (t txQueue) Release(ctx context.Context, l repo.Lease) error {
	return t.v.call(ctx, "release", wakeQueue, func(ss *sessionStore) error { return t.api(ss).Release(ctx, l) })
}

// CancelQueued implements repo.SessionQueue.
func (t txQueue) CancelQueued(ctx context.Context, itemID uuid.UUID) (ok bool, err error) {
	err = t.v.call(ctx, "cancel_queued", wakeFeed, func(ss *sessionStore) (err error) {
		ok, err = t.api(ss).CancelQueued(ctx, itemID)
		return err
	})
	return ok, err
}

// PendingQueue implements repo.SessionQueue.
func (t txQueue) PendingQueue(ctx context.Context, sessionID uuid.UUID) (out []repo.QueueItem, err error) {
	err = t.v.call(ctx, "pending_queue", wakeNone, func(ss *sessionStore) (err error) {
		out, err = t.api(ss).PendingQueue(ctx, sessionID)
		return err
	})
	return out, err
}

// PendingQueuePage implements repo.SessionQueue.
func (t txQueue) PendingQueuePage(ctx context.Context, sessionID uuid.UUID, p repo.PageParams) (out []repo.QueueItem, next string, err error) {
	err = t.v.call(ctx, "pending_queue_page", wakeNone, func(ss *sessionStore) (err error) {
		out, next, err = t.api(ss).PendingQueuePage(ctx, sessionID, p)
		return err
	})
	return out, next, err
}

// PurgeFinished implements repo.SessionQueue: every batch is deleted in
// the application's transaction.
func (t txQueue) PurgeFinished(ctx context.Context, olderThan time.Duration, batch int) (n int, err error) {
	err = t.v.call(ctx, "purge_finished", wakeFeed, func(ss *sessionStore) (err error) {
		n, err = t.api(ss).PurgeFinished(ctx, olderThan, batch)
		return err
	})
	return n, err
}
