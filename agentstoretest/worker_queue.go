package agentstoretest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// workerQueueTests are the WorkerQueue area's tests of this file.
func workerQueueTests() []test {
	return tests(
		test{"ProviderWorkerQueueFIFOPeekLockAck", testProviderWorkerQueueFIFOPeekLockAck},
		test{"ProviderWorkerRenewAndAbandon", testProviderWorkerRenewAndAbandon},
		test{"ProviderWorkerTags", testProviderWorkerTags},
		test{"ProviderWorkerCorruptItemIsReportedNotDropped", testProviderWorkerCorruptItemIsReportedNotDropped},
		test{"ProviderWorkerTokenForgery", testProviderWorkerTokenForgery},
		test{"ProviderWakeSmallPoolNoListener", testProviderWakeSmallPoolNoListener},
	)
}

func (e *pEnv) wfetch(t *testing.T, p duroxide.Provider, lock time.Duration, s *duroxide.SessionFetchConfig, f duroxide.TagFilter) *duroxide.WorkItemLease {
	t.Helper()
	if p == nil {
		p = e.p
	}
	l, err := p.FetchWorkItem(e.ctx, lock, 0, s, f)
	if err != nil {
		t.Fatalf("fetch work item: %v", err)
	}
	return l
}

func actID(t *testing.T, l *duroxide.WorkItemLease) uint64 {
	t.Helper()
	if l == nil {
		t.Fatalf("no work item, want one")
	}
	return l.Item.(*duroxide.ActivityExecute).ID
}

// testProviderWorkerQueueFIFOPeekLockAck: the worker queue hands out items
// FIFO under peek-lock (one lease per item, across Stores); an ack deletes
// the item and enqueues its completion for the orchestrator atomically (nil
// completion: delete only; a non-completion item: ErrInvalidInput); an
// expired lease's item is handed out again before later items, with attempt
// 2, and the expired or used token fails with ErrInvalidLockToken.
func testProviderWorkerQueueFIFOPeekLockAck(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	for id := uint64(1); id <= 3; id++ {
		if err := e.p.EnqueueForWorker(e.ctx, activity("i1", 1, id)); err != nil {
			t.Fatal(err)
		}
	}
	l1 := e.wfetch(t, nil, testLock, nil, duroxide.TagFilter{})
	l2 := e.wfetch(t, e.other(t), testLock, nil, duroxide.TagFilter{})
	if actID(t, l1) != 1 || actID(t, l2) != 2 || l1.AttemptCount != 1 || l1.LockToken == l2.LockToken {
		t.Fatalf("FIFO broken: %d %d", actID(t, l1), actID(t, l2))
	}
	// ack deletes and enqueues the completion atomically
	if err := e.p.AckWorkItem(e.ctx, l1.LockToken, &duroxide.ActivityCompleted{Instance: "i1", ExecutionID: 1, ID: 1, Result: "r1"}); err != nil {
		t.Fatal(err)
	}
	it := e.fetch(t)
	if c, ok := it.Messages[0].(*duroxide.ActivityCompleted); !ok || c.Result != "r1" || it.Instance != "i1" {
		t.Fatalf("completion = %#v", it.Messages[0])
	}
	wantErr(t, e.p.AckWorkItem(e.ctx, l1.LockToken, nil), agentstore.ErrInvalidLockToken) // already acked
	// l2's lock expires: it is handed out again before item 3, with attempt 2
	e.clock.Advance(testLock)
	l2b := e.wfetch(t, nil, testLock, nil, duroxide.TagFilter{})
	if actID(t, l2b) != 2 || l2b.AttemptCount != 2 {
		t.Fatalf("after expiry got %d attempt %d", actID(t, l2b), l2b.AttemptCount)
	}
	wantErr(t, e.p.AckWorkItem(e.ctx, l2.LockToken, nil), agentstore.ErrInvalidLockToken)
	wantErr(t, e.p.RenewWorkItemLock(e.ctx, l2.LockToken, time.Second), agentstore.ErrInvalidLockToken)
	// ack with nil completion (cancelled activity) just deletes
	if err := e.p.AckWorkItem(e.ctx, l2b.LockToken, nil); err != nil {
		t.Fatal(err)
	}
	// wrong completion type
	l3 := e.wfetch(t, nil, testLock, nil, duroxide.TagFilter{})
	wantErr(t, e.p.AckWorkItem(e.ctx, l3.LockToken, &duroxide.ExternalRaised{Instance: "i1"}), agentstore.ErrInvalidInput)
	if err := e.p.AckWorkItem(e.ctx, l3.LockToken, &duroxide.ActivityFailed{Instance: "i1", ExecutionID: 1, ID: 3,
		Details: duroxide.ErrorDetails{Application: &duroxide.ApplicationError{Kind: duroxide.AppErrorKind{Name: "ActivityFailed"}, Message: "boom"}}}); err != nil {
		t.Fatal(err)
	}
	if l := e.wfetch(t, nil, testLock, nil, duroxide.TagFilter{}); l != nil {
		t.Fatalf("queue should be empty, got %v", l.Item)
	}
	// the expired-then-acked lock: expired ack fails even if nobody re-fetched
	if err := e.p.EnqueueForWorker(e.ctx, activity("i1", 1, 4)); err != nil {
		t.Fatal(err)
	}
	l4 := e.wfetch(t, nil, time.Second, nil, duroxide.TagFilter{})
	e.clock.Advance(time.Second)
	wantErr(t, e.p.AckWorkItem(e.ctx, l4.LockToken, nil), agentstore.ErrInvalidLockToken)
}

// testProviderWorkerRenewAndAbandon: a renewed lease keeps its item; abandon
// with a delay hides it that long and invalidates the token; the next fetch
// counts attempt 2; abandon with ignore_attempt undoes the count, never
// below zero.
func testProviderWorkerRenewAndAbandon(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	if err := e.p.EnqueueForWorker(e.ctx, activity("i1", 1, 1)); err != nil {
		t.Fatal(err)
	}
	l := e.wfetch(t, nil, time.Second, nil, duroxide.TagFilter{})
	if err := e.p.RenewWorkItemLock(e.ctx, l.LockToken, 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(1400 * time.Millisecond)
	if got := e.wfetch(t, nil, time.Second, nil, duroxide.TagFilter{}); got != nil {
		t.Fatalf("renewed item handed out again")
	}
	// abandon with delay hides the item
	if err := e.p.AbandonWorkItem(e.ctx, l.LockToken, 2*time.Second, false); err != nil {
		t.Fatal(err)
	}
	wantErr(t, e.p.AbandonWorkItem(e.ctx, l.LockToken, 0, false), agentstore.ErrInvalidLockToken)
	if got := e.wfetch(t, nil, time.Second, nil, duroxide.TagFilter{}); got != nil {
		t.Fatalf("delayed item visible")
	}
	e.clock.Advance(2 * time.Second)
	l = e.wfetch(t, nil, time.Second, nil, duroxide.TagFilter{})
	if l == nil || l.AttemptCount != 2 {
		t.Fatalf("after delay: %+v", l)
	}
	// ignore_attempt undoes the count, never below zero
	if err := e.p.AbandonWorkItem(e.ctx, l.LockToken, 0, true); err != nil {
		t.Fatal(err)
	}
	if l = e.wfetch(t, nil, time.Second, nil, duroxide.TagFilter{}); l.AttemptCount != 2 {
		t.Fatalf("attempt = %d, want 2", l.AttemptCount)
	}
	// plant: a leased item at attempt 0 (every fetch counts one attempt)
	e.update(t, models.TableWorkerQueue, nil, Row{"attempt_count": 0})
	if err := e.p.AbandonWorkItem(e.ctx, l.LockToken, 0, true); err != nil {
		t.Fatal(err)
	}
	if l = e.wfetch(t, nil, time.Second, nil, duroxide.TagFilter{}); l.AttemptCount != 1 {
		t.Fatalf("attempt = %d, want 1 (floor 0)", l.AttemptCount)
	}
}

// testProviderWorkerTags: the tag filter selects the items a worker fetches:
// TagNone nothing, the default only untagged items, TagTags the listed tags,
// TagDefaultAnd untagged plus the listed tags, TagAny everything; TagTags
// without tags is ErrInvalidInput.
func testProviderWorkerTags(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	gpu := activity("i1", 1, 1)
	gpu.Tag = sp("gpu")
	cpu := activity("i1", 1, 2)
	cpu.Tag = sp("cpu")
	plain := activity("i1", 1, 3)
	for _, a := range []*duroxide.ActivityExecute{gpu, cpu, plain} {
		if err := e.p.EnqueueForWorker(e.ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	if l := e.wfetch(t, nil, testLock, nil, duroxide.TagFilter{Mode: duroxide.TagNone}); l != nil {
		t.Fatalf("TagNone fetched")
	}
	if id := actID(t, e.wfetch(t, nil, testLock, nil, duroxide.TagFilter{})); id != 3 {
		t.Fatalf("default-only got %d", id)
	}
	if id := actID(t, e.wfetch(t, nil, testLock, nil, duroxide.TagFilter{Mode: duroxide.TagTags, Tags: []string{"cpu"}})); id != 2 {
		t.Fatalf("tags(cpu) got %d", id)
	}
	if l := e.wfetch(t, nil, testLock, nil, duroxide.TagFilter{Mode: duroxide.TagDefaultAnd, Tags: []string{"cpu"}}); l != nil {
		t.Fatalf("default_and(cpu) got %d", actID(t, l))
	}
	if id := actID(t, e.wfetch(t, nil, testLock, nil, duroxide.TagFilter{Mode: duroxide.TagAny})); id != 1 {
		t.Fatalf("any got %d", id)
	}
	_, err := e.p.FetchWorkItem(e.ctx, testLock, 0, nil, duroxide.TagFilter{Mode: duroxide.TagTags})
	wantErr(t, err, agentstore.ErrInvalidInput)
}

// testProviderWorkerCorruptItemIsReportedNotDropped: a worker item that does
// not decode (plain or in a session) makes the fetch fail with
// ErrCorruptRow; the item is kept, locked until its lock expires, then
// reported again.
func testProviderWorkerCorruptItemIsReportedNotDropped(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	plain := activity("i1", 1, 1)
	sess := activity("i1", 1, 2)
	sess.SessionID = sp("s1")
	for _, a := range []*duroxide.ActivityExecute{plain, sess} {
		if err := e.p.EnqueueForWorker(e.ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	// plant: work items that do not decode
	e.update(t, models.TableWorkerQueue, nil, Row{"work_item": `{"ActivityExecute":`})
	_, err := e.p.FetchWorkItem(e.ctx, time.Second, 0, nil, duroxide.TagFilter{})
	wantErr(t, err, agentstore.ErrCorruptRow)
	_, err = e.p.FetchWorkItem(e.ctx, time.Second, 0, &duroxide.SessionFetchConfig{OwnerID: "A"}, duroxide.TagFilter{})
	wantErr(t, err, agentstore.ErrCorruptRow)
	// both are locked until expiry, then reported again
	if l, err := e.p.FetchWorkItem(e.ctx, time.Second, 0, &duroxide.SessionFetchConfig{OwnerID: "A"}, duroxide.TagFilter{}); l != nil || err != nil {
		t.Fatalf("locked corrupt item handed out: %v %v", l, err)
	}
	e.clock.Advance(time.Second)
	if d, err := e.a.GetQueueDepths(e.ctx); err != nil || d.WorkerQueue != 2 {
		t.Fatalf("corrupt items dropped: depth %+v (%v) after their locks expired, want 2", d, err)
	}
	_, err = e.p.FetchWorkItem(e.ctx, time.Second, 0, nil, duroxide.TagFilter{})
	wantErr(t, err, agentstore.ErrCorruptRow)
}

// testProviderWorkerTokenForgery: worker lease tokens carry the row id
// (the queue has no lock_token index). A token whose id part, stored part
// or format is wrong must match nothing — ErrInvalidLockToken from ack,
// renew and abandon — and must leave the real lease intact.
func testProviderWorkerTokenForgery(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	for id := uint64(1); id <= 2; id++ {
		if err := e.p.EnqueueForWorker(e.ctx, activity("i1", 1, id)); err != nil {
			t.Fatal(err)
		}
	}
	l1 := e.wfetch(t, nil, testLock, nil, duroxide.TagFilter{})
	l2 := e.wfetch(t, nil, testLock, nil, duroxide.TagFilter{})
	if l1 == nil || l2 == nil {
		t.Fatal("want two leases")
	}
	dot1, dot2 := strings.LastIndexByte(l1.LockToken, '.'), strings.LastIndexByte(l2.LockToken, '.')
	if dot1 < 0 || dot2 < 0 {
		t.Fatalf("tokens %q %q carry no row id", l1.LockToken, l2.LockToken)
	}
	forged := []string{
		"", ".", "lock_x", "lock_x.", "lock_x.abc", "lock_x.-1", "lock_x.0", "lock_x.99999999999999999999",
		l1.LockToken[:dot1],                       // stored part only
		l1.LockToken[:dot1] + l2.LockToken[dot2:], // l1's secret, l2's row
		l2.LockToken[:dot2] + l1.LockToken[dot1:], // l2's secret, l1's row
		l1.LockToken + "0", l1.LockToken + ".1",   // id altered
		"lock_00000000-0000-0000-0000-000000000000" + l1.LockToken[dot1:],
	}
	for _, tok := range forged {
		wantErr(t, e.p.AckWorkItem(e.ctx, tok, nil), agentstore.ErrInvalidLockToken)
		wantErr(t, e.p.RenewWorkItemLock(e.ctx, tok, time.Second), agentstore.ErrInvalidLockToken)
		wantErr(t, e.p.AbandonWorkItem(e.ctx, tok, 0, false), agentstore.ErrInvalidLockToken)
		wantErr(t, e.p.AckWorkItem(e.ctx, tok, &duroxide.ActivityCompleted{Instance: "i1", ExecutionID: 1, ID: 1, Result: "r"}),
			agentstore.ErrInvalidLockToken)
	}
	// the real leases are untouched: both renew and ack once
	for _, l := range []*duroxide.WorkItemLease{l1, l2} {
		if err := e.p.RenewWorkItemLock(e.ctx, l.LockToken, testLock); err != nil {
			t.Fatalf("renew after forgeries: %v", err)
		}
		if err := e.p.AckWorkItem(e.ctx, l.LockToken, nil); err != nil {
			t.Fatalf("ack after forgeries: %v", err)
		}
		wantErr(t, e.p.AckWorkItem(e.ctx, l.LockToken, nil), agentstore.ErrInvalidLockToken)
	}
	if l := e.wfetch(t, nil, testLock, nil, duroxide.TagFilter{}); l != nil {
		t.Fatalf("queue should be empty, fetched %v", l.Item)
	}
}

// testProviderWakeSmallPoolNoListener: a PostgreSQL store with a pool of 1
// connection does not pin it for the listener; fetches still work and a
// waiting fetch is served by the fallback re-check.
func testProviderWakeSmallPoolNoListener(t *testing.T, h *harness) {
	ctx := context.Background()
	st := h.New(t, withMaxConns(1), withPollInterval(30*time.Millisecond))
	other := h.Open(t)
	done := make(chan error, 1)
	go func() {
		l, err := st.Provider().FetchWorkItem(ctx, time.Minute, 10*time.Second, nil, duroxide.TagFilter{})
		if err == nil && l == nil {
			err = errors.New("no item before the poll timeout")
		}
		done <- err
	}()
	time.Sleep(100 * time.Millisecond) // real waiting: the fetcher must be idle
	if err := other.Provider().EnqueueForWorker(ctx, activity("small-pool", 1, 1)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("fetch on a 1-connection pool did not return")
	}
	// The connection stays usable for other calls.
	for i := 0; i < 5; i++ {
		if _, err := st.ProviderAdmin().GetQueueDepths(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
