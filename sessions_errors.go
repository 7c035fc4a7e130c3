package agentstore

import (
	"context"
	"errors"

	"github.com/google/uuid"

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
	t := translateError(err)
	return &repo.Error{Op: op, Message: t.Error(), Retryable: errors.Is(t, ErrRetryable), Err: t}
}

// sessionsAPI is the repo.Sessions a Store hands out.
type sessionsAPI struct{ ss *sessionStore }

var (
	_ repo.Sessions     = sessionsAPI{}
	_ repo.SessionQueue = sessionQueueAPI{}
)

// Save implements repo.Sessions.
func (a sessionsAPI) Save(ctx context.Context, s *repo.Session) error {
	return opErr("save_session", a.ss.Save(ctx, s))
}

// Load implements repo.Sessions.
func (a sessionsAPI) Load(ctx context.Context, id uuid.UUID, opts ...repo.LoadOptions) (*repo.Session, error) {
	s, err := a.ss.Load(ctx, id, opts...)
	return s, opErr("load_session", err)
}

// Delete implements repo.Sessions.
func (a sessionsAPI) Delete(ctx context.Context, id uuid.UUID) (bool, error) {
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
	out, err := a.ss.AppendMessages(ctx, sessionID, msgs...)
	return out, opErr("append_messages", err)
}

// Fork implements repo.Sessions.
func (a sessionsAPI) Fork(ctx context.Context, sessionID uuid.UUID, atMessageID string) (*repo.Session, error) {
	s, err := a.ss.Fork(ctx, sessionID, atMessageID)
	return s, opErr("fork_session", err)
}

// AddSummary implements repo.Sessions.
func (a sessionsAPI) AddSummary(ctx context.Context, snap repo.SummarySnapshot) (repo.SummarySnapshot, error) {
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
	out, err := a.ss.SetTodos(ctx, sessionID, todos)
	return out, opErr("set_todos", err)
}

// Plans implements repo.Sessions.
func (a sessionsAPI) Plans(ctx context.Context, sessionID uuid.UUID) ([]repo.Plan, error) {
	out, err := a.ss.Plans(ctx, sessionID)
	return out, opErr("plans", err)
}

// CleanupExpired implements repo.Sessions.
func (a sessionsAPI) CleanupExpired(ctx context.Context, batchSize int) (int, error) {
	n, err := a.ss.CleanupExpired(ctx, batchSize)
	return n, opErr("cleanup_expired", err)
}

// sessionQueueAPI is the repo.SessionQueue a Store hands out.
type sessionQueueAPI struct{ sq *sessionQueue }

// Enqueue implements repo.SessionQueue.
func (a sessionQueueAPI) Enqueue(ctx context.Context, sessionID uuid.UUID, content string, priority int32) (*repo.QueueItem, error) {
	it, err := a.sq.Enqueue(ctx, sessionID, content, priority)
	return it, opErr("enqueue", err)
}

// Dequeue implements repo.SessionQueue.
func (a sessionQueueAPI) Dequeue(ctx context.Context, sessionID uuid.UUID, p repo.DequeueParams) (*repo.QueueItem, error) {
	it, err := a.sq.Dequeue(ctx, sessionID, p)
	return it, opErr("dequeue", err)
}

// Complete implements repo.SessionQueue.
func (a sessionQueueAPI) Complete(ctx context.Context, l repo.Lease) error {
	return opErr("complete", a.sq.Complete(ctx, l))
}

// Fail implements repo.SessionQueue.
func (a sessionQueueAPI) Fail(ctx context.Context, l repo.Lease, reason string) error {
	return opErr("fail", a.sq.Fail(ctx, l, reason))
}

// Release implements repo.SessionQueue.
func (a sessionQueueAPI) Release(ctx context.Context, l repo.Lease) error {
	return opErr("release", a.sq.Release(ctx, l))
}

// CancelQueued implements repo.SessionQueue.
func (a sessionQueueAPI) CancelQueued(ctx context.Context, itemID uuid.UUID) (bool, error) {
	ok, err := a.sq.CancelQueued(ctx, itemID)
	return ok, opErr("cancel_queued", err)
}

// PendingQueue implements repo.SessionQueue.
func (a sessionQueueAPI) PendingQueue(ctx context.Context, sessionID uuid.UUID) ([]repo.QueueItem, error) {
	out, err := a.sq.PendingQueue(ctx, sessionID)
	return out, opErr("pending_queue", err)
}
