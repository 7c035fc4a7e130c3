package engine

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/repo"
)

// The session API's half of agentstore's one error model: every error a
// Sessions or SessionQueue method returns is a *repo.Error naming the
// operation (as every provider error is), with the sentinels in its chain.

// opErr wraps err as a *repo.Error for op, unless it already is one.
func opErr(op string, err error) error {
	if err == nil {
		return nil
	}
	var re *repo.Error
	if errors.As(err, &re) {
		return err
	}
	t := dbErr(err)
	return &repo.Error{Op: op, Message: t.Error(), Retryable: errors.Is(t, ErrRetryable), Err: t}
}

// dbFault is a database error as the session API reports it (see
// dialect.Fault): the sentinel's text, the driver's error in the chain.
type dbFault = dialect.Fault

// ours reports whether err already carries one of the sentinels (an error
// the store made, or a dbFault), so dbErr leaves it alone.
func ours(err error) bool {
	for _, s := range []error{ErrNotFound, ErrConflict, ErrInvalidInput, ErrCorruptRow, ErrLockLost, ErrRetryable, ErrTimeout, ErrClosed, ErrInvalidConfig,
		ErrKeyNotFound, ErrDecrypt} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// dbErr maps an error of a database call onto the session API's sentinels
// with the driver's text hidden (see dbFault): a unique violation is
// ErrDuplicate, a foreign-key violation ErrNotFound (the row it points to is
// gone), the transient failures ErrRetryable, text the database refuses
// ErrInvalidInput. Errors the store made itself, and context errors, are
// returned unchanged; an error of no known class too (a bug: report it).
func dbErr(err error) error {
	if err == nil {
		return nil
	}
	// A driver error the dialect classified where it arose: a conflict
	// there is a unique violation, the session API's ErrDuplicate.
	var f *dbFault
	if errors.As(err, &f) && f.Kind == ErrConflict {
		return &dbFault{Kind: ErrDuplicate, Cause: f.Cause}
	}
	if ours(err) {
		return err
	}
	if errors.Is(err, gorm.ErrForeignKeyViolated) {
		return &dbFault{Kind: ErrNotFound, Cause: err}
	}
	if errors.Is(err, gorm.ErrDuplicatedKey) {
		return &dbFault{Kind: ErrDuplicate, Cause: err}
	}
	t := translateError(err)
	switch {
	case errors.Is(t, ErrLockTimeout): // before ErrRetryable, which it also matches
		return &dbFault{Kind: ErrLockTimeout, Cause: err}
	case errors.Is(t, ErrStatementTimeout):
		return &dbFault{Kind: ErrStatementTimeout, Cause: err}
	case errors.Is(t, ErrRetryable):
		return &dbFault{Kind: ErrRetryable, Cause: err}
	case errors.Is(t, ErrConflict):
		return &dbFault{Kind: ErrDuplicate, Cause: err}
	case errors.Is(t, ErrNotFound):
		return &dbFault{Kind: ErrNotFound, Cause: err}
	case errors.Is(t, ErrInvalidInput):
		return &dbFault{Kind: ErrInvalidInput, Cause: err}
	case errors.Is(t, ErrSchemaBehind):
		return &dbFault{Kind: ErrSchemaBehind, Cause: err}
	}
	return t
}

// fnError carries the error of a WithSessionLock callback through the
// transaction, so it is returned unchanged.
type fnError struct{ err error }

func (e *fnError) Error() string { return e.err.Error() }
func (e *fnError) Unwrap() error { return e.err }

// sessionsAPI is the repo.Sessions a Store hands out.
type sessionsAPI struct{ ss *sessionStore }

var (
	_ repo.Sessions     = sessionsAPI{}
	_ repo.SessionQueue = sessionQueueAPI{}
)

// Save implements repo.Sessions.
func (a sessionsAPI) Save(ctx context.Context, s *repo.Session) error {
	defer a.ss.wrote()
	return opErr("save_session", a.ss.Save(ctx, s))
}

// Load implements repo.Sessions.
func (a sessionsAPI) Load(ctx context.Context, id uuid.UUID, opts ...repo.LoadOptions) (*repo.Session, error) {
	s, err := a.ss.Load(ctx, id, opts...)
	return s, opErr("load_session", err)
}

// Delete implements repo.Sessions.
func (a sessionsAPI) Delete(ctx context.Context, id uuid.UUID) (bool, error) {
	defer a.ss.wrote()
	ok, err := a.ss.Delete(ctx, id)
	return ok, opErr("delete_session", err)
}

// List implements repo.Sessions.
func (a sessionsAPI) List(ctx context.Context, p repo.ListParams) (repo.ListPage, error) {
	page, err := a.ss.List(ctx, p)
	return page, opErr("list_sessions", err)
}

// ListChildren implements repo.Sessions.
func (a sessionsAPI) ListChildren(ctx context.Context, parentID uuid.UUID) ([]uuid.UUID, error) {
	ids, err := a.ss.ListChildren(ctx, parentID)
	return ids, opErr("list_children", err)
}

// AppendMessages implements repo.Sessions.
func (a sessionsAPI) AppendMessages(ctx context.Context, sessionID uuid.UUID, msgs ...repo.Message) ([]repo.Message, error) {
	defer a.ss.wrote()
	out, err := a.ss.AppendMessages(ctx, sessionID, msgs...)
	return out, opErr("append_messages", err)
}

// AppendMessagesWith implements repo.Sessions.
func (a sessionsAPI) AppendMessagesWith(ctx context.Context, sessionID uuid.UUID, o repo.AppendOptions, msgs ...repo.Message) ([]repo.Message, error) {
	defer a.ss.wrote()
	out, err := a.ss.AppendMessagesWith(ctx, sessionID, o, msgs...)
	return out, opErr("append_messages", err)
}

// WithSessionLock implements repo.Sessions.
func (a sessionsAPI) WithSessionLock(ctx context.Context, id uuid.UUID, fn func(ctx context.Context, tx repo.Sessions) error) error {
	defer a.ss.wrote()
	err := a.ss.WithSessionLock(ctx, id, fn)
	var fe *fnError
	if errors.As(err, &fe) {
		return fe.err
	}
	return opErr("with_session_lock", err)
}

// Fork implements repo.Sessions.
func (a sessionsAPI) Fork(ctx context.Context, sessionID uuid.UUID, atMessageID string) (*repo.Session, error) {
	defer a.ss.wrote()
	s, err := a.ss.Fork(ctx, sessionID, atMessageID)
	return s, opErr("fork_session", err)
}

// AddSummary implements repo.Sessions.
func (a sessionsAPI) AddSummary(ctx context.Context, snap repo.SummarySnapshot) (repo.SummarySnapshot, error) {
	defer a.ss.wrote()
	out, err := a.ss.AddSummary(ctx, snap)
	return out, opErr("add_summary", err)
}

// GetSummaries implements repo.Sessions.
func (a sessionsAPI) GetSummaries(ctx context.Context, sessionID uuid.UUID) ([]repo.SummarySnapshot, error) {
	out, err := a.ss.GetSummaries(ctx, sessionID)
	return out, opErr("get_summaries", err)
}

// SetTodos implements repo.Sessions.
func (a sessionsAPI) SetTodos(ctx context.Context, sessionID uuid.UUID, todos []repo.TodoItem) ([]repo.TodoItem, error) {
	defer a.ss.wrote()
	out, err := a.ss.SetTodos(ctx, sessionID, todos)
	return out, opErr("set_todos", err)
}

// Plans implements repo.Sessions.
func (a sessionsAPI) Plans(ctx context.Context, sessionID uuid.UUID) ([]repo.Plan, error) {
	out, err := a.ss.Plans(ctx, sessionID)
	return out, opErr("plans", err)
}

// ListChildrenPage implements repo.Sessions.
func (a sessionsAPI) ListChildrenPage(ctx context.Context, parentID uuid.UUID, p repo.PageParams) ([]uuid.UUID, string, error) {
	ids, next, err := a.ss.ListChildrenPage(ctx, parentID, p)
	return ids, next, opErr("list_children_page", err)
}

// GetSummariesPage implements repo.Sessions.
func (a sessionsAPI) GetSummariesPage(ctx context.Context, sessionID uuid.UUID, p repo.PageParams) ([]repo.SummarySnapshot, string, error) {
	out, next, err := a.ss.GetSummariesPage(ctx, sessionID, p)
	return out, next, opErr("get_summaries_page", err)
}

// PlansPage implements repo.Sessions.
func (a sessionsAPI) PlansPage(ctx context.Context, sessionID uuid.UUID, p repo.PageParams) ([]repo.Plan, string, error) {
	out, next, err := a.ss.PlansPage(ctx, sessionID, p)
	return out, next, opErr("plans_page", err)
}

// CleanupExpired implements repo.Sessions.
func (a sessionsAPI) CleanupExpired(ctx context.Context, batchSize int) (int, error) {
	defer a.ss.wrote()
	n, err := a.ss.CleanupExpired(ctx, batchSize)
	return n, opErr("cleanup_expired", err)
}

// sessionQueueAPI is the repo.SessionQueue a Store hands out.
type sessionQueueAPI struct{ sq *sessionQueue }

// Enqueue implements repo.SessionQueue.
func (a sessionQueueAPI) Enqueue(ctx context.Context, sessionID uuid.UUID, content string, priority int32) (*repo.QueueItem, error) {
	defer a.sq.wrote()
	it, err := a.sq.Enqueue(ctx, sessionID, content, priority)
	return it, opErr("enqueue", err)
}

// EnqueueWith implements repo.SessionQueue.
func (a sessionQueueAPI) EnqueueWith(ctx context.Context, sessionID uuid.UUID, p repo.EnqueueParams) (*repo.QueueItem, error) {
	defer a.sq.wrote()
	it, err := a.sq.EnqueueWith(ctx, sessionID, p)
	return it, opErr("enqueue", err)
}

// Item implements repo.SessionQueue.
func (a sessionQueueAPI) Item(ctx context.Context, itemID uuid.UUID) (*repo.QueueItem, error) {
	it, err := a.sq.Item(ctx, itemID)
	return it, opErr("queue_item", err)
}

// Items implements repo.SessionQueue.
func (a sessionQueueAPI) Items(ctx context.Context, sessionID uuid.UUID, statuses ...repo.QueueStatus) ([]repo.QueueItem, error) {
	out, err := a.sq.Items(ctx, sessionID, statuses...)
	return out, opErr("queue_items", err)
}

// Dequeue implements repo.SessionQueue.
func (a sessionQueueAPI) Dequeue(ctx context.Context, sessionID uuid.UUID, p repo.DequeueParams) (*repo.QueueItem, error) {
	defer a.sq.wrote()
	it, err := a.sq.Dequeue(ctx, sessionID, p)
	return it, opErr("dequeue", err)
}

// Complete implements repo.SessionQueue.
func (a sessionQueueAPI) Complete(ctx context.Context, l repo.Lease) error {
	defer a.sq.wrote()
	return opErr("complete", a.sq.Complete(ctx, l))
}

// Fail implements repo.SessionQueue.
func (a sessionQueueAPI) Fail(ctx context.Context, l repo.Lease, reason string) error {
	defer a.sq.wrote()
	return opErr("fail", a.sq.Fail(ctx, l, reason))
}

// Release implements repo.SessionQueue.
func (a sessionQueueAPI) Release(ctx context.Context, l repo.Lease) error {
	defer a.sq.wrote()
	return opErr("release", a.sq.Release(ctx, l))
}

// CancelQueued implements repo.SessionQueue.
func (a sessionQueueAPI) CancelQueued(ctx context.Context, itemID uuid.UUID) (bool, error) {
	defer a.sq.wrote()
	ok, err := a.sq.CancelQueued(ctx, itemID)
	return ok, opErr("cancel_queued", err)
}

// PendingQueue implements repo.SessionQueue.
func (a sessionQueueAPI) PendingQueue(ctx context.Context, sessionID uuid.UUID) ([]repo.QueueItem, error) {
	out, err := a.sq.PendingQueue(ctx, sessionID)
	return out, opErr("pending_queue", err)
}

// PendingQueuePage implements repo.SessionQueue.
func (a sessionQueueAPI) PendingQueuePage(ctx context.Context, sessionID uuid.UUID, p repo.PageParams) ([]repo.QueueItem, string, error) {
	out, next, err := a.sq.PendingQueuePage(ctx, sessionID, p)
	return out, next, opErr("pending_queue_page", err)
}

// PurgeFinished implements repo.SessionQueue.
func (a sessionQueueAPI) PurgeFinished(ctx context.Context, olderThan time.Duration, batch int) (int, error) {
	n, err := a.sq.PurgeFinished(ctx, olderThan, batch)
	return n, opErr("purge_finished", err)
}
