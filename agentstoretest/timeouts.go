package agentstoretest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// timeoutsTests are the Timeouts area's tests of this file.
func timeoutsTests() []test {
	return tests(
		test{"OptionsValidate", testTimeoutOptionsValidate},
		test{"LockTimeoutSessionWrite", testLockTimeoutSessionWrite},
		test{"StatementTimeoutSessionWrite", testStatementTimeoutSessionWrite},
		test{"CallerDeadlineIsNotTimeout", testCallerDeadlineIsNotTimeout},
		test{"LockTimeoutProviderAck", testLockTimeoutProviderAck},
		test{"TimeoutsOnEveryCall", testTimeoutsOnEveryCall},
	)
}

// timeoutCallDeadline bounds the calls of the timeout tests: far longer
// than the timeouts under test, so a call that is not bounded by them ends
// with context.DeadlineExceeded instead of the timeout error (and the test
// fails on the error's class, not on a measured time).
const timeoutCallDeadline = 20 * time.Second

// testTimeoutOptionsValidate: a negative timeout, or one below a
// millisecond or above 24 hours, is ErrInvalidConfig; 1 ms is accepted, and
// so is 0 (off) for agentstore's options.
func testTimeoutOptionsValidate(t *testing.T, h *harness) {
	ctx := context.Background()
	for _, o := range []option{withStatementTimeout(-time.Second), withLockTimeout(-1),
		withStatementTimeout(time.Microsecond), withLockTimeout(25 * time.Hour)} {
		if _, err := h.tryOpen(t, o); !errors.Is(err, agentstore.ErrInvalidConfig) {
			t.Fatalf("Open with a bad timeout = %v, want ErrInvalidConfig", err)
		}
	}
	h.New(t) // migrated
	// 1 ms is a valid configuration: Open may still fail on a loaded
	// machine, but only because one of its statements ran past that
	// timeout (the timeout's own error), never as a bad configuration
	_, err := h.tryOpen(t, withStatementTimeout(time.Millisecond), withLockTimeout(time.Millisecond))
	if errors.Is(err, ErrNotSupported) {
		t.Skipf("agentstoretest: %v", err)
	}
	if err != nil && !errors.Is(err, agentstore.ErrStatementTimeout) && !errors.Is(err, agentstore.ErrLockTimeout) {
		t.Fatalf("Open with 1 ms timeouts = %v, want success (or, loaded, the timeout's error)", err)
	}
	st, _ := h.store(t, agentstore.WithStatementTimeout(0), agentstore.WithLockTimeout(0))
	if _, err := st.Sessions().List(ctx, repo.ListParams{}); err != nil {
		t.Fatalf("list with timeouts off: %v", err)
	}
}

// holdSessionLock makes holder take id's session lock (WithSessionLock:
// the row lock on PostgreSQL, the database write lock on SQLite) and keep
// it until release is called; release returns the holder's error.
func holdSessionLock(t *testing.T, holder Store, id uuid.UUID) (release func() error) {
	t.Helper()
	return holdTx(t, func(ctx context.Context, held func()) error {
		return holder.Sessions().WithSessionLock(ctx, id, func(context.Context, repo.Sessions) error {
			held()
			return nil
		})
	})
}

// holdTx runs run in a goroutine; run calls held() while it holds its
// lock, and then blocks until release is called.
func holdTx(t *testing.T, run func(ctx context.Context, held func()) error) (release func() error) {
	t.Helper()
	locked, rel, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- run(context.Background(), func() {
			close(locked)
			<-rel
		})
	}()
	select {
	case <-locked:
	case err := <-done:
		t.Fatalf("lock holder: %v", err)
	}
	var released bool
	release = func() error {
		if released {
			return nil
		}
		released = true
		close(rel)
		return <-done
	}
	t.Cleanup(func() { _ = release() })
	return release
}

// checkTimeoutError asserts err is a *repo.Error of op matching want (and
// ErrTimeout), retryable exactly when want is ErrLockTimeout, not the
// caller's deadline, naming row, without driver text.
func checkTimeoutError(t *testing.T, err error, op string, want error, row string) {
	t.Helper()
	var re *repo.Error
	if !errors.As(err, &re) {
		t.Fatalf("error = %v (%T), want a *repo.Error matching %v", err, err, want)
	}
	if !errors.Is(err, want) || !errors.Is(err, agentstore.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error = %v, want errors.Is %v and ErrTimeout, not context.DeadlineExceeded", err, want)
	}
	retryable := errors.Is(want, agentstore.ErrRetryable)
	if re.Retryable != retryable || errors.Is(err, agentstore.ErrRetryable) != retryable {
		t.Fatalf("error %v: Retryable = %v, errors.Is ErrRetryable = %v, want %v", err, re.Retryable, errors.Is(err, agentstore.ErrRetryable), retryable)
	}
	if re.Op != op {
		t.Fatalf("error %v: Op = %q, want %q", err, re.Op, op)
	}
	if row != "" && !strings.Contains(re.Message, row) {
		t.Fatalf("error message %q does not name %s", re.Message, row)
	}
	for _, driverText := range []string{"SQLSTATE", "database is locked", "canceling statement", "interrupted", "context deadline"} {
		if strings.Contains(err.Error(), driverText) {
			t.Fatalf("error %q carries driver text %q", err, driverText)
		}
	}
}

// newLockedSession saves a session through st and has holder (another
// Store) hold its lock.
func newLockedSession(t *testing.T, st, holder Store) (uuid.UUID, func() error) {
	t.Helper()
	s := &repo.Session{ID: uuid.New(), Summary: sp("locked")}
	mustSave(t, st.Sessions(), s)
	return s.ID, holdSessionLock(t, holder, s.ID)
}

// testLockTimeoutSessionWrite: with WithLockTimeout, a write that waits
// for a session lock another Store holds fails with a retryable
// ErrLockTimeout naming the operation and the session; nothing is written,
// and the same call succeeds once the lock is released.
func testLockTimeoutSessionWrite(t *testing.T, h *harness) {
	st := h.New(t)
	ts := h.Open(t, withLockTimeout(100*time.Millisecond))
	id, release := newLockedSession(t, st, st)
	ctx, cancel := context.WithTimeout(context.Background(), timeoutCallDeadline)
	defer cancel()
	_, err := ts.Sessions().AppendMessages(ctx, id, textMsg("m1", repo.RoleUser, "hi"))
	checkTimeoutError(t, err, "append_messages", agentstore.ErrLockTimeout, id.String())
	if err := release(); err != nil {
		t.Fatalf("lock holder: %v", err)
	}
	if got := mustLoad(t, st.Sessions(), id); got.MessageCount != 0 {
		t.Fatalf("the timed-out append wrote %d messages", got.MessageCount)
	}
	if _, err := ts.Sessions().AppendMessages(ctx, id, textMsg("m1", repo.RoleUser, "hi")); err != nil {
		t.Fatalf("append after the lock was released: %v", err)
	}
}

// testStatementTimeoutSessionWrite: with WithStatementTimeout (and no lock
// timeout), a write that cannot finish in time because another Store holds
// the session's lock fails with ErrStatementTimeout, not retryable, naming
// the operation and the session; the same call succeeds once the lock is
// released.
func testStatementTimeoutSessionWrite(t *testing.T, h *harness) {
	st := h.New(t)
	ts := h.Open(t, withStatementTimeout(150*time.Millisecond))
	id, release := newLockedSession(t, st, st)
	ctx, cancel := context.WithTimeout(context.Background(), timeoutCallDeadline)
	defer cancel()
	sess := mustLoad(t, st.Sessions(), id)
	sess.Summary = sp("renamed")
	err := ts.Sessions().Save(ctx, sess)
	checkTimeoutError(t, err, "save_session", agentstore.ErrStatementTimeout, id.String())
	if err := release(); err != nil {
		t.Fatalf("lock holder: %v", err)
	}
	if got := mustLoad(t, st.Sessions(), id); got.Summary == nil || *got.Summary != "locked" {
		t.Fatalf("the timed-out save wrote summary %v", got.Summary)
	}
	// The lock is gone, but a 150 ms statement timeout can still be met
	// by a statement the machine is slow to run (a loaded CI box: seen
	// once in a conformance run beside other tests); a lock still held
	// would time out every attempt.
	err = ts.Sessions().Save(ctx, sess)
	for attempt := 1; attempt < 5 && errors.Is(err, agentstore.ErrStatementTimeout); attempt++ {
		err = ts.Sessions().Save(ctx, sess)
	}
	if err != nil {
		t.Fatalf("save after the lock was released: %v", err)
	}
}

// testCallerDeadlineIsNotTimeout: without the options, a write waiting for
// a held session lock past the caller's own deadline fails with
// context.DeadlineExceeded: not ErrTimeout, not retryable.
func testCallerDeadlineIsNotTimeout(t *testing.T, h *harness) {
	st := h.New(t)
	ts := h.Open(t)
	id, _ := newLockedSession(t, st, st)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	_, err := ts.Sessions().AppendMessages(ctx, id, textMsg("m1", repo.RoleUser, "hi"))
	var re *repo.Error
	if !errors.As(err, &re) || re.Op != "append_messages" || !errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, agentstore.ErrTimeout) || errors.Is(err, agentstore.ErrRetryable) || re.Retryable {
		t.Fatalf("append past the caller's deadline = %v, want a *repo.Error matching context.DeadlineExceeded only", err)
	}
}

// testLockTimeoutProviderAck: with WithLockTimeout, an orchestration ack
// that waits for the instance row another transaction holds (an UPDATE
// through another Store: a row lock on PostgreSQL, the write lock on
// SQLite) fails with a retryable ErrLockTimeout naming the operation and
// the lock token; the lock token stays valid and the ack succeeds after the release.
func testLockTimeoutProviderAck(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	e.startInstance(t, "i1", nil)
	ts := h.Open(t, withClock(e.clock.Now), withLockTimeout(100*time.Millisecond)).Provider()
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "i1", Name: "go", Data: "x"})
	it := e.fetch(t)
	ops := h.ops(t)
	release := holdTx(t, func(ctx context.Context, held func()) error {
		return ops.LockRows(ctx, e.st, models.TableInstances, Row{"instance_id": "i1"}, held)
	})
	ctx, cancel := context.WithTimeout(context.Background(), timeoutCallDeadline)
	defer cancel()
	ack := duroxide.OrchestrationAck{ExecutionID: it.ExecutionID,
		HistoryDelta: []duroxide.Event{ev("i1", it.ExecutionID, 2, &duroxide.OrchestrationCompletedEvent{Output: "done"})},
		Metadata:     duroxide.ExecutionMetadata{Status: sp(duroxide.StatusCompleted), Output: sp("done")}}
	err := ts.AckOrchestrationItem(ctx, it.LockToken, ack)
	var pe *duroxide.ProviderError
	if !errors.As(err, &pe) {
		t.Fatalf("ack = %v, want a *duroxide.ProviderError", err)
	}
	checkTimeoutError(t, err, "ack_orchestration_item", agentstore.ErrLockTimeout, it.LockToken)
	if err := release(); err != nil {
		t.Fatalf("lock holder: %v", err)
	}
	if err := ts.AckOrchestrationItem(ctx, it.LockToken, ack); err != nil {
		t.Fatalf("ack after the lock was released: %v", err)
	}
	info, err := e.a.GetInstanceInfo(ctx, "i1")
	if err != nil || info.Status != duroxide.StatusCompleted {
		t.Fatalf("instance after the ack: %+v %v", info, err)
	}
}

// testTimeoutsOnEveryCall: generous timeouts change nothing for calls that
// finish in time — a session turn, a queue lease and an orchestration turn
// with a worker item, through transactions and single statements alike.
func testTimeoutsOnEveryCall(t *testing.T, h *harness) {
	clock := newTestClock()
	st := h.New(t, withClock(clock.Now), withStatementTimeout(10*time.Second), withLockTimeout(5*time.Second))
	ctx := context.Background()
	s := &repo.Session{ID: uuid.New()}
	mustSave(t, st.Sessions(), s)
	if _, err := st.Sessions().AppendMessages(ctx, s.ID, textMsg("m1", repo.RoleUser, "hi"), textMsg("m2", repo.RoleAssistant, "yo")); err != nil {
		t.Fatal(err)
	}
	if got := mustLoad(t, st.Sessions(), s.ID); got.MessageCount != 2 || len(got.Messages) != 2 {
		t.Fatalf("load: %d messages", len(got.Messages))
	}
	q := st.SessionQueue()
	if _, err := q.Enqueue(ctx, s.ID, "job", 1); err != nil {
		t.Fatal(err)
	}
	it, err := q.Dequeue(ctx, s.ID, repo.DequeueParams{Lease: time.Minute})
	if err != nil || it == nil {
		t.Fatalf("dequeue: %+v %v", it, err)
	}
	if err := q.Complete(ctx, it.Lease()); err != nil {
		t.Fatal(err)
	}
	p := st.Provider()
	if err := p.EnqueueForOrchestrator(ctx, startItem("i1", nil), 0); err != nil {
		t.Fatal(err)
	}
	oi, err := p.FetchOrchestrationItem(ctx, testLock, 0, nil)
	if err != nil || oi == nil {
		t.Fatalf("fetch: %v %v", oi, err)
	}
	if err := p.AckOrchestrationItem(ctx, oi.LockToken, duroxide.OrchestrationAck{ExecutionID: 1,
		HistoryDelta: []duroxide.Event{startedEv("i1", 1, 1, nil)}, WorkerItems: []duroxide.WorkItem{activity("i1", 1, 2)},
		Metadata: runningMeta(nil)}); err != nil {
		t.Fatal(err)
	}
	wi, err := p.FetchWorkItem(ctx, testLock, 0, nil, duroxide.TagFilter{})
	if err != nil || wi == nil {
		t.Fatalf("fetch work item: %v %v", wi, err)
	}
	hist, err := p.Read(ctx, "i1")
	if err != nil || len(hist) != 1 {
		t.Fatalf("read: %d events, %v", len(hist), err)
	}
}
