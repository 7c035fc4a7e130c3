package agentstoretest

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// orchestrationDefectTests are the Orchestration area's tests of this file.
func orchestrationDefectTests() []test {
	return tests(
		test{"ProviderAckOfStartWithoutMetadataWritesExecution", testProviderAckOfStartWithoutMetadataWritesExecution},
		test{"ProviderSubMillisecondLocksLastOneMillisecond", testProviderSubMillisecondLocksLastOneMillisecond},
		test{"ProviderDuplicateEventErrorNamesTheRow", testProviderDuplicateEventErrorNamesTheRow},
	)
}

// workerQueueDefectTests are the WorkerQueue area's tests of this file.
func workerQueueDefectTests() []test {
	return tests(
		test{"ProviderWorkerSubMillisecondLocks", testProviderWorkerSubMillisecondLocks},
	)
}

// adminDefectTests are the Admin area's tests of this file.
func adminDefectTests() []test {
	return tests(
		test{"ProviderAdminBulkDeleteWithLimitProgresses", testProviderAdminBulkDeleteWithLimitProgresses},
		test{"ProviderAdminBulkPruneWithLimitProgresses", testProviderAdminBulkPruneWithLimitProgresses},
	)
}

// activitySessionsDefectTests are the ActivitySessions area's tests of this file.
func activitySessionsDefectTests() []test {
	return tests(
		test{"ProviderSessionCleanupHonoursIdleTimeout", testProviderSessionCleanupHonoursIdleTimeout},
		test{"ProviderDeleteInstanceRemovesItsSessions", testProviderDeleteInstanceRemovesItsSessions},
	)
}

// errorsDefectTests are the Errors area's tests of this file.
func errorsDefectTests() []test {
	return tests(
		test{"ProviderLongPollRetriesStopAtTheDeadline", testProviderLongPollRetriesStopAtTheDeadline},
	)
}

// testProviderAckOfStartWithoutMetadataWritesExecution: an ack of a batch
// holding a StartOrchestration (or ContinueAsNew) whose metadata names no
// orchestration writes the execution row with the ack's status and output,
// with or without history in the ack (as duroxide does); no instance row is
// created. A true orphan (no Start, no history) still writes nothing.
func testProviderAckOfStartWithoutMetadataWritesExecution(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	// Start in the batch, history and status in the ack, no name/version
	e.enqueue(t, startItem("s1", nil))
	it := e.fetch(t)
	e.ack(t, it, duroxide.OrchestrationAck{ExecutionID: 1, HistoryDelta: []duroxide.Event{startedEv("s1", 1, 1, nil),
		ev("s1", 1, 2, &duroxide.OrchestrationCompletedEvent{Output: "out"})},
		Metadata: duroxide.ExecutionMetadata{Status: sp(duroxide.StatusCompleted), Output: sp("out")}})
	if ids, err := e.a.ListExecutions(e.ctx, "s1"); err != nil || !slices.Equal(ids, []uint64{1}) {
		t.Fatalf("executions of s1 = %v %v, want [1]", ids, err)
	}
	info, err := e.a.GetExecutionInfo(e.ctx, "s1", 1)
	if err != nil || info.Status != duroxide.StatusCompleted || info.Output == nil || *info.Output != "out" || info.EventCount != 2 || info.CompletedAt == nil {
		t.Fatalf("execution of s1 = %+v %v", info, err)
	}
	// Start in the batch, nothing but a status in the ack
	e.enqueue(t, startItem("s2", nil))
	it = e.fetch(t)
	e.ack(t, it, duroxide.OrchestrationAck{ExecutionID: 1, Metadata: duroxide.ExecutionMetadata{Status: sp(duroxide.StatusFailed), Output: sp("boom")}})
	if info, err := e.a.GetExecutionInfo(e.ctx, "s2", 1); err != nil || info.Status != duroxide.StatusFailed || *info.Output != "boom" {
		t.Fatalf("execution of s2 = %+v %v", info, err)
	}
	// ContinueAsNew in the batch (execution 2 of an instance acked without metadata)
	e.enqueue(t, &duroxide.ContinueAsNew{Instance: "s3", Orchestration: "Orch", Input: "n"})
	it = e.fetch(t)
	e.ack(t, it, duroxide.OrchestrationAck{ExecutionID: 2, Metadata: duroxide.ExecutionMetadata{Status: sp(duroxide.StatusRunning)}})
	if ids, err := e.a.ListExecutions(e.ctx, "s3"); err != nil || !slices.Equal(ids, []uint64{2}) {
		t.Fatalf("executions of s3 = %v %v, want [2]", ids, err)
	}
	// a true orphan writes nothing
	e.enqueue(t, &duroxide.CancelInstance{Instance: "ghost", Reason: "r"})
	it = e.fetch(t)
	e.ack(t, it, duroxide.OrchestrationAck{Metadata: duroxide.ExecutionMetadata{Status: sp(duroxide.StatusFailed)}})
	if ids, err := e.a.ListExecutions(e.ctx, "ghost"); err != nil || len(ids) != 0 {
		t.Fatalf("orphan executions = %v %v, want none", ids, err)
	}
	m, err := e.a.GetSystemMetrics(e.ctx)
	if err != nil || m.TotalInstances != 0 || m.TotalExecutions != 3 {
		t.Fatalf("metrics = %+v %v, want 0 instances and 3 executions", m, err)
	}
}

// testProviderSubMillisecondLocksLastOneMillisecond: lock and renew
// durations below 1 ms are rounded up to 1 ms, never down to an already
// expired 0 ms: at the same instant the lock excludes other fetchers and
// the ack succeeds; 1 ms later it has expired.
func testProviderSubMillisecondLocksLastOneMillisecond(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	e.enqueue(t, startItem("i1", nil))
	it, err := e.p.FetchOrchestrationItem(e.ctx, 500*time.Microsecond, 0, nil)
	if err != nil || it == nil {
		t.Fatalf("fetch = %v %v", it, err)
	}
	if again, err := e.other(t).FetchOrchestrationItem(e.ctx, testLock, 0, nil); err != nil || again != nil {
		t.Fatalf("a 500 µs lock was already expired: second fetch got %v (%v)", again, err)
	}
	if err := e.p.RenewOrchestrationItemLock(e.ctx, it.LockToken, 500*time.Microsecond); err != nil {
		t.Fatalf("renew by 500 µs: %v", err)
	}
	e.ack(t, it, duroxide.OrchestrationAck{ExecutionID: 1, HistoryDelta: []duroxide.Event{startedEv("i1", 1, 1, nil)}, Metadata: runningMeta(nil)})
	// expiry after 1 ms
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "i1", Name: "x"})
	it, err = e.p.FetchOrchestrationItem(e.ctx, 100*time.Microsecond, 0, nil)
	if err != nil || it == nil {
		t.Fatalf("fetch = %v %v", it, err)
	}
	e.clock.Advance(time.Millisecond)
	wantErr(t, e.p.AckOrchestrationItem(e.ctx, it.LockToken, duroxide.OrchestrationAck{ExecutionID: 1}), agentstore.ErrInvalidLockToken)
}

// testProviderWorkerSubMillisecondLocks: the worker queue rounds sub-ms
// locks and renewals up to 1 ms as well.
func testProviderWorkerSubMillisecondLocks(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	if err := e.p.EnqueueForWorker(e.ctx, activity("i1", 1, 1)); err != nil {
		t.Fatal(err)
	}
	l := e.wfetch(t, e.p, 500*time.Microsecond, nil, duroxide.TagFilter{})
	if l == nil {
		t.Fatal("no item")
	}
	if other := e.wfetch(t, e.other(t), testLock, nil, duroxide.TagFilter{}); other != nil {
		t.Fatal("a 500 µs worker lock was already expired")
	}
	if err := e.p.RenewWorkItemLock(e.ctx, l.LockToken, 200*time.Microsecond); err != nil {
		t.Fatalf("renew by 200 µs: %v", err)
	}
	if err := e.p.AckWorkItem(e.ctx, l.LockToken, nil); err != nil {
		t.Fatalf("ack within the 1 ms lock: %v", err)
	}
}

// testProviderDuplicateEventErrorNamesTheRow: the duplicate-event error
// names instance, execution and the event id already stored, on every
// dialect and path.
func testProviderDuplicateEventErrorNamesTheRow(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	e.startInstance(t, "dup-inst", nil)
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "dup-inst", Name: "go"})
	it := e.fetch(t)
	err := e.p.AckOrchestrationItem(e.ctx, it.LockToken, duroxide.OrchestrationAck{ExecutionID: 1,
		HistoryDelta: []duroxide.Event{ev("dup-inst", 1, 2, &duroxide.ExternalEventEvent{Name: "go"}), ev("dup-inst", 1, 1, &duroxide.ExternalEventEvent{Name: "dup"})}})
	wantErr(t, err, agentstore.ErrDuplicateEvent)
	if msg := err.Error(); !strings.Contains(msg, "dup-inst/1") || !strings.Contains(msg, "event id [1]") {
		t.Fatalf("duplicate error %q does not name instance, execution and event", msg)
	}
}

// testProviderAdminBulkDeleteWithLimitProgresses: terminal roots whose
// tree holds a Running descendant take no places in the limit: with two
// such roots created first and two plain completed roots after, Limit 2
// deletes the two plain roots in the first call, and "delete until it
// returns 0" leaves only the blocked trees.
func testProviderAdminBulkDeleteWithLimitProgresses(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	for _, r := range []string{"blocked1", "blocked2"} {
		e.startInstance(t, r, nil)
		e.startInstance(t, r+"-kid", sp(r))
		e.startInstance(t, r+"-grandkid", sp(r+"-kid"))
		e.finishInstance(t, r+"-kid", duroxide.StatusCompleted, 2)
		e.finishInstance(t, r, duroxide.StatusCompleted, 2) // the grandchild still runs
		e.clock.Advance(time.Second)
	}
	for _, r := range []string{"plain1", "plain2", "plain3"} {
		e.startInstance(t, r, nil)
		e.finishInstance(t, r, duroxide.StatusCompleted, 2)
		e.clock.Advance(time.Second)
	}
	var calls []int64
	for range 5 {
		r, err := e.a.DeleteInstanceBulk(e.ctx, duroxide.InstanceFilter{Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, r.InstancesDeleted)
		if r.InstancesDeleted == 0 {
			break
		}
	}
	if !slices.Equal(calls, []int64{2, 1, 0}) {
		t.Fatalf("instances deleted per call = %v, want [2 1 0]", calls)
	}
	ids, _ := e.a.ListInstances(e.ctx)
	slices.Sort(ids)
	if want := []string{"blocked1", "blocked1-grandkid", "blocked1-kid", "blocked2", "blocked2-grandkid", "blocked2-kid"}; !slices.Equal(ids, want) {
		t.Fatalf("left = %v, want %v", ids, want)
	}
	// once the grandchild completes, the tree is deletable
	e.finishInstance(t, "blocked1-grandkid", duroxide.StatusCompleted, 2)
	if r, err := e.a.DeleteInstanceBulk(e.ctx, duroxide.InstanceFilter{Limit: 1}); err != nil || r.InstancesDeleted != 3 {
		t.Fatalf("after the grandchild completed = %+v %v, want its tree of 3", r, err)
	}
}

// continueAsNew moves inst from execution exec to exec+1.
func (e *pEnv) continueAsNew(t *testing.T, inst string, exec uint64) {
	t.Helper()
	e.enqueue(t, &duroxide.ExternalRaised{Instance: inst, Name: "x"})
	it := e.fetch(t)
	e.ack(t, it, duroxide.OrchestrationAck{ExecutionID: exec, HistoryDelta: []duroxide.Event{ev(inst, exec, 2, &duroxide.OrchestrationContinuedAsNewEvent{Input: "n"})},
		Metadata: duroxide.ExecutionMetadata{Status: sp(duroxide.StatusContinuedAsNew), Output: sp("n")}})
	e.enqueue(t, &duroxide.ContinueAsNew{Instance: inst, Orchestration: "Orch", Input: "n"})
	it = e.fetch(t)
	e.ack(t, it, duroxide.OrchestrationAck{ExecutionID: exec + 1, HistoryDelta: []duroxide.Event{startedEv(inst, exec+1, 1, nil)}, Metadata: runningMeta(nil)})
}

// testProviderAdminBulkPruneWithLimitProgresses: only instances with
// something to prune take places in the limit, so repeated calls with
// Limit 1 reach every instance with old executions, behind three created
// first that have none; InstancesProcessed counts the pruned ones.
func testProviderAdminBulkPruneWithLimitProgresses(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	for i := range 3 {
		e.startInstance(t, fmt.Sprintf("single%d", i), nil)
		e.clock.Advance(time.Second)
	}
	for i := range 3 {
		inst := fmt.Sprintf("multi%d", i)
		e.startInstance(t, inst, nil)
		e.continueAsNew(t, inst, 1)
		e.continueAsNew(t, inst, 2)
		e.clock.Advance(time.Second)
	}
	var processed []int64
	var deleted int64
	for range 6 {
		r, err := e.a.PruneExecutionsBulk(e.ctx, duroxide.InstanceFilter{Limit: 1}, duroxide.PruneOptions{KeepLast: 2})
		if err != nil {
			t.Fatal(err)
		}
		processed = append(processed, r.InstancesProcessed)
		deleted += r.ExecutionsDeleted
		if r.InstancesProcessed == 0 {
			break
		}
	}
	if !slices.Equal(processed, []int64{1, 1, 1, 0}) || deleted != 3 {
		t.Fatalf("processed per call = %v, %d executions deleted; want [1 1 1 0], 3", processed, deleted)
	}
	for i := range 3 {
		if ids, _ := e.a.ListExecutions(e.ctx, fmt.Sprintf("multi%d", i)); !slices.Equal(ids, []uint64{2, 3}) {
			t.Fatalf("multi%d executions = %v, want [2 3]", i, ids)
		}
	}
}

// sessionItem is activity id of inst in session sid.
func sessionItem(inst, sid string, id uint64) *duroxide.ActivityExecute {
	a := activity(inst, 1, id)
	a.SessionID = sp(sid)
	return a
}

// testProviderSessionCleanupHonoursIdleTimeout: CleanupOrphanedSessions
// deletes sessions without queued items whose lease expired, or (idle
// timeout > 0) that saw no activity for the idle timeout; a session with a
// queued item is never deleted; a negative idle timeout is ErrInvalidInput.
func testProviderSessionCleanupHonoursIdleTimeout(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	cfg := &duroxide.SessionFetchConfig{OwnerID: "w1", LockTimeout: time.Minute}
	for _, a := range []*duroxide.ActivityExecute{sessionItem("i1", "idle", 1), sessionItem("i1", "busy", 2), sessionItem("i1", "busy", 3)} {
		if err := e.p.EnqueueForWorker(e.ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 { // claims both sessions; acks idle's only item and one of busy's
		l := e.wfetch(t, e.p, testLock, cfg, duroxide.TagFilter{})
		if err := e.p.AckWorkItem(e.ctx, l.LockToken, nil); err != nil {
			t.Fatal(err)
		}
	}
	_, err := e.p.CleanupOrphanedSessions(e.ctx, -time.Second)
	wantErr(t, err, agentstore.ErrInvalidInput)
	e.clock.Advance(10 * time.Second)
	// leases live: 0 = expired only, 1 min = not idle long enough
	for _, idle := range []time.Duration{0, time.Minute} {
		if n, err := e.p.CleanupOrphanedSessions(e.ctx, idle); err != nil || n != 0 {
			t.Fatalf("cleanup(%v) = %d %v, want 0", idle, n, err)
		}
	}
	// idle for 10 s >= 5 s: idle goes, busy (a queued item) stays
	if n, err := e.p.CleanupOrphanedSessions(e.ctx, 5*time.Second); err != nil || n != 1 {
		t.Fatalf("cleanup(5s) = %d %v, want 1", n, err)
	}
	if n, err := e.p.RenewSessionLock(e.ctx, []string{"w1"}, time.Minute, time.Hour); err != nil || n != 1 {
		t.Fatalf("renewed = %d %v, want only busy", n, err)
	}
}

// testProviderDeleteInstanceRemovesItsSessions: deleting an instance
// deletes the activity sessions its queued items used, unless a queued
// item of another instance still needs the session.
func testProviderDeleteInstanceRemovesItsSessions(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	e.startInstance(t, "gone", nil)
	e.startInstance(t, "kept", nil)
	cfg := &duroxide.SessionFetchConfig{OwnerID: "w1", LockTimeout: time.Minute}
	for _, a := range []*duroxide.ActivityExecute{sessionItem("gone", "own", 1), sessionItem("gone", "shared", 2), sessionItem("kept", "shared", 3)} {
		if err := e.p.EnqueueForWorker(e.ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 { // claims both sessions
		if l := e.wfetch(t, e.p, testLock, cfg, duroxide.TagFilter{}); l == nil {
			t.Fatal("no session item")
		}
	}
	if n, err := e.p.RenewSessionLock(e.ctx, []string{"w1"}, time.Minute, time.Hour); err != nil || n != 2 {
		t.Fatalf("renewed before delete = %d %v, want 2", n, err)
	}
	if _, err := e.a.DeleteInstance(e.ctx, "gone", true); err != nil {
		t.Fatal(err)
	}
	if n, err := e.p.RenewSessionLock(e.ctx, []string{"w1"}, time.Minute, time.Hour); err != nil || n != 1 {
		t.Fatalf("renewed after delete = %d %v, want only the shared session", n, err)
	}
}

// testProviderLongPollRetriesStopAtTheDeadline: when every query fails
// retryably, a long poll returns the retryable error without sleeping past
// its poll timeout (no retry whose back-off would end after it), while a
// short poll (timeout 0) keeps duroxide's three retries; both queues.
func testProviderLongPollRetriesStopAtTheDeadline(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	var fail atomic.Bool
	var attempts atomic.Int64
	// fault: every row query of this Store fails with a lost connection
	if err := h.ops(t).InjectFault(e.st, func() error {
		if fail.Load() {
			attempts.Add(1)
			return driver.ErrBadConn
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	fail.Store(true)
	defer fail.Store(false)
	fetches := map[string]func(poll time.Duration) error{
		"orchestration": func(poll time.Duration) error {
			_, err := e.p.FetchOrchestrationItem(e.ctx, testLock, poll, nil)
			return err
		},
		"worker": func(poll time.Duration) error {
			_, err := e.p.FetchWorkItem(e.ctx, testLock, poll, nil, duroxide.TagFilter{})
			return err
		},
	}
	for name, fetch := range fetches {
		attempts.Store(0)
		start := time.Now()
		err := fetch(120 * time.Millisecond)
		took := time.Since(start)
		if !errors.Is(err, agentstore.ErrRetryable) {
			t.Fatalf("%s long poll error = %v, want retryable", name, err)
		}
		// without the bound: 50+100+150 ms of back-off (>= 300 ms)
		if took >= 250*time.Millisecond || attempts.Load() >= 4 {
			t.Fatalf("%s long poll of 120 ms took %v with %d attempts", name, took, attempts.Load())
		}
		attempts.Store(0)
		if err := fetch(0); !errors.Is(err, agentstore.ErrRetryable) || attempts.Load() != 4 {
			t.Fatalf("%s short poll = %v after %d attempts, want retryable after 4", name, err, attempts.Load())
		}
	}
}
