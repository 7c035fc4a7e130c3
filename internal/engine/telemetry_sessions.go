package engine

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore/repo"
)

// The traced session API: what a Store with telemetry (WithTracerProvider,
// WithMeterProvider) hands out around sessionsAPI and sessionQueueAPI.

// sessions returns a, traced when the Store has telemetry.
func (t *telemetry) sessions(a sessionsAPI) repo.Sessions {
	if t == nil {
		return a
	}
	return tracedSessions{a, t}
}

// sessionQueue returns a, traced when the Store has telemetry.
func (t *telemetry) sessionQueue(a sessionQueueAPI) repo.SessionQueue {
	if t == nil {
		return a
	}
	return tracedSessionQueue{a, t}
}

// tracedSessions is repo.Sessions with a span and metrics per call. The
// interface is embedded so that a method added to it later still works
// (untraced until it gets its wrapper here and its row in opDefs:
// TestTelemetryCoversEveryMethod fails meanwhile).
type tracedSessions struct {
	repo.Sessions
	t *telemetry
}

// tracedSessionQueue is repo.SessionQueue with a span and metrics per
// call (embedded for the same reason as in tracedSessions).
type tracedSessionQueue struct {
	repo.SessionQueue
	t *telemetry
}

var (
	_ repo.Sessions     = tracedSessions{}
	_ repo.SessionQueue = tracedSessionQueue{}
)

// Save implements repo.Sessions.
func (w tracedSessions) Save(ctx context.Context, s *repo.Session) error {
	ctx, c := w.t.start(ctx, opSessSave)
	err := w.Sessions.Save(ctx, s)
	if s != nil {
		c.session(s.ID)
	}
	c.end(err)
	return err
}

// Load implements repo.Sessions.
func (w tracedSessions) Load(ctx context.Context, id uuid.UUID, opts ...repo.LoadOptions) (*repo.Session, error) {
	ctx, c := w.t.start(ctx, opSessLoad)
	c.session(id)
	s, err := w.Sessions.Load(ctx, id, opts...)
	c.end(err)
	return s, err
}

// Delete implements repo.Sessions.
func (w tracedSessions) Delete(ctx context.Context, id uuid.UUID) (bool, error) {
	ctx, c := w.t.start(ctx, opSessDelete)
	c.session(id)
	ok, err := w.Sessions.Delete(ctx, id)
	c.end(err)
	return ok, err
}

// List implements repo.Sessions.
func (w tracedSessions) List(ctx context.Context, p repo.ListParams) (repo.ListPage, error) {
	ctx, c := w.t.start(ctx, opSessList)
	page, err := w.Sessions.List(ctx, p)
	c.end(err)
	return page, err
}

// ListChildren implements repo.Sessions.
func (w tracedSessions) ListChildren(ctx context.Context, parentID uuid.UUID) ([]uuid.UUID, error) {
	ctx, c := w.t.start(ctx, opSessListChildren)
	c.session(parentID)
	ids, err := w.Sessions.ListChildren(ctx, parentID)
	c.end(err)
	return ids, err
}

// ListChildrenPage implements repo.Sessions.
func (w tracedSessions) ListChildrenPage(ctx context.Context, parentID uuid.UUID, p repo.PageParams) ([]uuid.UUID, string, error) {
	ctx, c := w.t.start(ctx, opSessListChildrenPage)
	c.session(parentID)
	ids, next, err := w.Sessions.ListChildrenPage(ctx, parentID, p)
	c.end(err)
	return ids, next, err
}

// AppendMessages implements repo.Sessions.
func (w tracedSessions) AppendMessages(ctx context.Context, sessionID uuid.UUID, msgs ...repo.Message) ([]repo.Message, error) {
	ctx, c := w.t.start(ctx, opSessAppendMessages)
	c.session(sessionID)
	out, err := w.Sessions.AppendMessages(ctx, sessionID, msgs...)
	c.end(err)
	return out, err
}

// AppendMessagesWith implements repo.Sessions.
func (w tracedSessions) AppendMessagesWith(ctx context.Context, sessionID uuid.UUID, o repo.AppendOptions, msgs ...repo.Message) ([]repo.Message, error) {
	ctx, c := w.t.start(ctx, opSessAppendMessagesWith)
	c.session(sessionID)
	out, err := w.Sessions.AppendMessagesWith(ctx, sessionID, o, msgs...)
	c.end(err)
	return out, err
}

// WithSessionLock implements repo.Sessions. The calls fn makes on tx are
// traced too, as children of this call's span.
func (w tracedSessions) WithSessionLock(ctx context.Context, id uuid.UUID, fn func(ctx context.Context, tx repo.Sessions) error) error {
	ctx, c := w.t.start(ctx, opSessWithSessionLock)
	c.session(id)
	var inner func(ctx context.Context, tx repo.Sessions) error
	if fn != nil {
		inner = func(ctx context.Context, tx repo.Sessions) error { return fn(ctx, tracedSessions{tx, w.t}) }
	}
	err := w.Sessions.WithSessionLock(ctx, id, inner)
	c.end(err)
	return err
}

// Fork implements repo.Sessions.
func (w tracedSessions) Fork(ctx context.Context, sessionID uuid.UUID, atMessageID string) (*repo.Session, error) {
	ctx, c := w.t.start(ctx, opSessFork)
	c.session(sessionID)
	s, err := w.Sessions.Fork(ctx, sessionID, atMessageID)
	c.end(err)
	return s, err
}

// AddSummary implements repo.Sessions.
func (w tracedSessions) AddSummary(ctx context.Context, snap repo.SummarySnapshot) (repo.SummarySnapshot, error) {
	ctx, c := w.t.start(ctx, opSessAddSummary)
	c.session(snap.SessionID)
	out, err := w.Sessions.AddSummary(ctx, snap)
	c.end(err)
	return out, err
}

// GetSummaries implements repo.Sessions.
func (w tracedSessions) GetSummaries(ctx context.Context, sessionID uuid.UUID) ([]repo.SummarySnapshot, error) {
	ctx, c := w.t.start(ctx, opSessGetSummaries)
	c.session(sessionID)
	out, err := w.Sessions.GetSummaries(ctx, sessionID)
	c.end(err)
	return out, err
}

// GetSummariesPage implements repo.Sessions.
func (w tracedSessions) GetSummariesPage(ctx context.Context, sessionID uuid.UUID, p repo.PageParams) ([]repo.SummarySnapshot, string, error) {
	ctx, c := w.t.start(ctx, opSessGetSummariesPage)
	c.session(sessionID)
	out, next, err := w.Sessions.GetSummariesPage(ctx, sessionID, p)
	c.end(err)
	return out, next, err
}

// SetTodos implements repo.Sessions.
func (w tracedSessions) SetTodos(ctx context.Context, sessionID uuid.UUID, todos []repo.TodoItem) ([]repo.TodoItem, error) {
	ctx, c := w.t.start(ctx, opSessSetTodos)
	c.session(sessionID)
	out, err := w.Sessions.SetTodos(ctx, sessionID, todos)
	c.end(err)
	return out, err
}

// Plans implements repo.Sessions.
func (w tracedSessions) Plans(ctx context.Context, sessionID uuid.UUID) ([]repo.Plan, error) {
	ctx, c := w.t.start(ctx, opSessPlans)
	c.session(sessionID)
	out, err := w.Sessions.Plans(ctx, sessionID)
	c.end(err)
	return out, err
}

// PlansPage implements repo.Sessions.
func (w tracedSessions) PlansPage(ctx context.Context, sessionID uuid.UUID, p repo.PageParams) ([]repo.Plan, string, error) {
	ctx, c := w.t.start(ctx, opSessPlansPage)
	c.session(sessionID)
	out, next, err := w.Sessions.PlansPage(ctx, sessionID, p)
	c.end(err)
	return out, next, err
}

// CleanupExpired implements repo.Sessions.
func (w tracedSessions) CleanupExpired(ctx context.Context, batchSize int) (int, error) {
	ctx, c := w.t.start(ctx, opSessCleanupExpired)
	n, err := w.Sessions.CleanupExpired(ctx, batchSize)
	c.end(err)
	return n, err
}

// Enqueue implements repo.SessionQueue.
func (w tracedSessionQueue) Enqueue(ctx context.Context, sessionID uuid.UUID, content string, priority int32) (*repo.QueueItem, error) {
	ctx, c := w.t.start(ctx, opQueueEnqueue)
	c.session(sessionID)
	it, err := w.SessionQueue.Enqueue(ctx, sessionID, content, priority)
	c.end(err)
	return it, err
}

// EnqueueWith implements repo.SessionQueue.
func (w tracedSessionQueue) EnqueueWith(ctx context.Context, sessionID uuid.UUID, p repo.EnqueueParams) (*repo.QueueItem, error) {
	ctx, c := w.t.start(ctx, opQueueEnqueueWith)
	c.session(sessionID)
	it, err := w.SessionQueue.EnqueueWith(ctx, sessionID, p)
	c.end(err)
	return it, err
}

// Item implements repo.SessionQueue.
func (w tracedSessionQueue) Item(ctx context.Context, itemID uuid.UUID) (*repo.QueueItem, error) {
	ctx, c := w.t.start(ctx, opQueueItem)
	it, err := w.SessionQueue.Item(ctx, itemID)
	if it != nil {
		c.session(it.SessionID)
	}
	c.end(err)
	return it, err
}

// Items implements repo.SessionQueue.
func (w tracedSessionQueue) Items(ctx context.Context, sessionID uuid.UUID, statuses ...repo.QueueStatus) ([]repo.QueueItem, error) {
	ctx, c := w.t.start(ctx, opQueueItems)
	c.session(sessionID)
	out, err := w.SessionQueue.Items(ctx, sessionID, statuses...)
	c.end(err)
	return out, err
}

// Dequeue implements repo.SessionQueue.
func (w tracedSessionQueue) Dequeue(ctx context.Context, sessionID uuid.UUID, p repo.DequeueParams) (*repo.QueueItem, error) {
	ctx, c := w.t.start(ctx, opQueueDequeue)
	c.session(sessionID)
	it, err := w.SessionQueue.Dequeue(ctx, sessionID, p)
	if it != nil {
		c.redelivered(int64(it.Attempts), QueueSession)
	}
	c.endEmpty(err, it == nil)
	return it, err
}

// Complete implements repo.SessionQueue.
func (w tracedSessionQueue) Complete(ctx context.Context, l repo.Lease) error {
	ctx, c := w.t.start(ctx, opQueueComplete)
	err := w.SessionQueue.Complete(ctx, l)
	c.end(err)
	return err
}

// Fail implements repo.SessionQueue.
func (w tracedSessionQueue) Fail(ctx context.Context, l repo.Lease, reason string) error {
	ctx, c := w.t.start(ctx, opQueueFail)
	err := w.SessionQueue.Fail(ctx, l, reason)
	c.end(err)
	return err
}

// Release implements repo.SessionQueue.
func (w tracedSessionQueue) Release(ctx context.Context, l repo.Lease) error {
	ctx, c := w.t.start(ctx, opQueueRelease)
	err := w.SessionQueue.Release(ctx, l)
	c.end(err)
	return err
}

// CancelQueued implements repo.SessionQueue.
func (w tracedSessionQueue) CancelQueued(ctx context.Context, itemID uuid.UUID) (bool, error) {
	ctx, c := w.t.start(ctx, opQueueCancelQueued)
	ok, err := w.SessionQueue.CancelQueued(ctx, itemID)
	c.end(err)
	return ok, err
}

// PendingQueue implements repo.SessionQueue.
func (w tracedSessionQueue) PendingQueue(ctx context.Context, sessionID uuid.UUID) ([]repo.QueueItem, error) {
	ctx, c := w.t.start(ctx, opQueuePendingQueue)
	c.session(sessionID)
	out, err := w.SessionQueue.PendingQueue(ctx, sessionID)
	c.end(err)
	return out, err
}

// PendingQueuePage implements repo.SessionQueue.
func (w tracedSessionQueue) PendingQueuePage(ctx context.Context, sessionID uuid.UUID, p repo.PageParams) ([]repo.QueueItem, string, error) {
	ctx, c := w.t.start(ctx, opQueuePendingQueuePage)
	c.session(sessionID)
	out, next, err := w.SessionQueue.PendingQueuePage(ctx, sessionID, p)
	c.end(err)
	return out, next, err
}

// PurgeFinished implements repo.SessionQueue.
func (w tracedSessionQueue) PurgeFinished(ctx context.Context, olderThan time.Duration, batch int) (int, error) {
	ctx, c := w.t.start(ctx, opQueuePurgeFinished)
	n, err := w.SessionQueue.PurgeFinished(ctx, olderThan, batch)
	c.end(err)
	return n, err
}

// Rewind implements repo.Sessions.
func (w tracedSessions) Rewind(ctx context.Context, sessionID uuid.UUID, toMessageID string, o repo.RewindOptions) (int64, error) {
	ctx, c := w.t.start(ctx, opSessRewind)
	c.session(sessionID)
	v, err := w.Sessions.Rewind(ctx, sessionID, toMessageID, o)
	c.end(err)
	return v, err
}

// Branches implements repo.Sessions.
func (w tracedSessions) Branches(ctx context.Context, sessionID uuid.UUID) ([]repo.Branch, error) {
	ctx, c := w.t.start(ctx, opSessBranches)
	c.session(sessionID)
	bs, err := w.Sessions.Branches(ctx, sessionID)
	c.end(err)
	return bs, err
}

// LoadBranch implements repo.Sessions.
func (w tracedSessions) LoadBranch(ctx context.Context, sessionID uuid.UUID, messageID string, opts ...repo.LoadOptions) ([]repo.Message, error) {
	ctx, c := w.t.start(ctx, opSessLoadBranch)
	c.session(sessionID)
	msgs, err := w.Sessions.LoadBranch(ctx, sessionID, messageID, opts...)
	c.end(err)
	return msgs, err
}

// changeFeed returns a, traced when the Store has telemetry.
func (t *telemetry) changeFeed(a changeFeed) repo.ChangeFeed {
	if t == nil {
		return a
	}
	return tracedChangeFeed{a, t}
}

// tracedChangeFeed is repo.ChangeFeed with a span and metrics per call
// (Watch: one span for the whole watch).
type tracedChangeFeed struct {
	repo.ChangeFeed
	t *telemetry
}

var _ repo.ChangeFeed = tracedChangeFeed{}

// Changes implements repo.ChangeFeed.
func (w tracedChangeFeed) Changes(ctx context.Context, p repo.ChangesParams) (repo.ChangesPage, error) {
	ctx, c := w.t.start(ctx, opFeedChanges)
	if p.SessionID != uuid.Nil {
		c.session(p.SessionID)
	}
	page, err := w.ChangeFeed.Changes(ctx, p)
	c.end(err)
	return page, err
}

// Watch implements repo.ChangeFeed.
func (w tracedChangeFeed) Watch(ctx context.Context, p repo.ChangesParams, fn func(repo.Change) error) error {
	ctx, c := w.t.start(ctx, opFeedWatch)
	if p.SessionID != uuid.Nil {
		c.session(p.SessionID)
	}
	err := w.ChangeFeed.Watch(ctx, p, fn)
	c.end(err)
	return err
}

// PurgeChanges implements repo.ChangeFeed.
func (w tracedChangeFeed) PurgeChanges(ctx context.Context, olderThan time.Duration, batch int) (int, error) {
	ctx, c := w.t.start(ctx, opFeedPurgeChanges)
	n, err := w.ChangeFeed.PurgeChanges(ctx, olderThan, batch)
	c.end(err)
	return n, err
}
