package agentstore_test

import (
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

func (e *pEnv) wfetch(t *testing.T, p repo.Provider, lock time.Duration, s *repo.SessionFetchConfig, f repo.TagFilter) *repo.WorkItemLease {
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

func actID(t *testing.T, l *repo.WorkItemLease) uint64 {
	t.Helper()
	if l == nil {
		t.Fatalf("no work item, want one")
	}
	return l.Item.(*repo.ActivityExecute).ID
}

func TestProviderWorkerQueueFIFOPeekLockAck(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newPEnv(t, h)
		for id := uint64(1); id <= 3; id++ {
			if err := e.p.EnqueueForWorker(e.ctx, activity("i1", 1, id)); err != nil {
				t.Fatal(err)
			}
		}
		l1 := e.wfetch(t, nil, testLock, nil, repo.TagFilter{})
		l2 := e.wfetch(t, e.other(t), testLock, nil, repo.TagFilter{})
		if actID(t, l1) != 1 || actID(t, l2) != 2 || l1.AttemptCount != 1 || l1.LockToken == l2.LockToken {
			t.Fatalf("FIFO broken: %d %d", actID(t, l1), actID(t, l2))
		}
		// ack deletes and enqueues the completion atomically
		if err := e.p.AckWorkItem(e.ctx, l1.LockToken, &repo.ActivityCompleted{Instance: "i1", ExecutionID: 1, ID: 1, Result: "r1"}); err != nil {
			t.Fatal(err)
		}
		it := e.fetch(t)
		if c, ok := it.Messages[0].(*repo.ActivityCompleted); !ok || c.Result != "r1" || it.Instance != "i1" {
			t.Fatalf("completion = %#v", it.Messages[0])
		}
		wantErr(t, e.p.AckWorkItem(e.ctx, l1.LockToken, nil), agentstore.ErrInvalidLockToken) // already acked
		// l2's lock expires: it is handed out again before item 3, with attempt 2
		e.clock.Advance(testLock)
		l2b := e.wfetch(t, nil, testLock, nil, repo.TagFilter{})
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
		l3 := e.wfetch(t, nil, testLock, nil, repo.TagFilter{})
		wantErr(t, e.p.AckWorkItem(e.ctx, l3.LockToken, &repo.ExternalRaised{Instance: "i1"}), agentstore.ErrInvalidInput)
		if err := e.p.AckWorkItem(e.ctx, l3.LockToken, &repo.ActivityFailed{Instance: "i1", ExecutionID: 1, ID: 3,
			Details: repo.ErrorDetails{Application: &repo.ApplicationError{Kind: repo.AppErrorKind{Name: "ActivityFailed"}, Message: "boom"}}}); err != nil {
			t.Fatal(err)
		}
		if l := e.wfetch(t, nil, testLock, nil, repo.TagFilter{}); l != nil {
			t.Fatalf("queue should be empty, got %v", l.Item)
		}
		// the expired-then-acked lock: expired ack fails even if nobody re-fetched
		if err := e.p.EnqueueForWorker(e.ctx, activity("i1", 1, 4)); err != nil {
			t.Fatal(err)
		}
		l4 := e.wfetch(t, nil, time.Second, nil, repo.TagFilter{})
		e.clock.Advance(time.Second)
		wantErr(t, e.p.AckWorkItem(e.ctx, l4.LockToken, nil), agentstore.ErrInvalidLockToken)
	})
}

func TestProviderWorkerRenewAndAbandon(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newPEnv(t, h)
		if err := e.p.EnqueueForWorker(e.ctx, activity("i1", 1, 1)); err != nil {
			t.Fatal(err)
		}
		l := e.wfetch(t, nil, time.Second, nil, repo.TagFilter{})
		if err := e.p.RenewWorkItemLock(e.ctx, l.LockToken, 1500*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(1400 * time.Millisecond)
		if got := e.wfetch(t, nil, time.Second, nil, repo.TagFilter{}); got != nil {
			t.Fatalf("renewed item handed out again")
		}
		// abandon with delay hides the item
		if err := e.p.AbandonWorkItem(e.ctx, l.LockToken, 2*time.Second, false); err != nil {
			t.Fatal(err)
		}
		wantErr(t, e.p.AbandonWorkItem(e.ctx, l.LockToken, 0, false), agentstore.ErrInvalidLockToken)
		if got := e.wfetch(t, nil, time.Second, nil, repo.TagFilter{}); got != nil {
			t.Fatalf("delayed item visible")
		}
		e.clock.Advance(2 * time.Second)
		l = e.wfetch(t, nil, time.Second, nil, repo.TagFilter{})
		if l == nil || l.AttemptCount != 2 {
			t.Fatalf("after delay: %+v", l)
		}
		// ignore_attempt undoes the count, never below zero
		if err := e.p.AbandonWorkItem(e.ctx, l.LockToken, 0, true); err != nil {
			t.Fatal(err)
		}
		if l = e.wfetch(t, nil, time.Second, nil, repo.TagFilter{}); l.AttemptCount != 2 {
			t.Fatalf("attempt = %d, want 2", l.AttemptCount)
		}
		e.exec(t, "UPDATE "+e.st.Table(models.TableWorkerQueue)+" SET attempt_count = 0")
		if err := e.p.AbandonWorkItem(e.ctx, l.LockToken, 0, true); err != nil {
			t.Fatal(err)
		}
		if l = e.wfetch(t, nil, time.Second, nil, repo.TagFilter{}); l.AttemptCount != 1 {
			t.Fatalf("attempt = %d, want 1 (floor 0)", l.AttemptCount)
		}
	})
}

func TestProviderWorkerTags(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newPEnv(t, h)
		gpu := activity("i1", 1, 1)
		gpu.Tag = sp("gpu")
		cpu := activity("i1", 1, 2)
		cpu.Tag = sp("cpu")
		plain := activity("i1", 1, 3)
		for _, a := range []*repo.ActivityExecute{gpu, cpu, plain} {
			if err := e.p.EnqueueForWorker(e.ctx, a); err != nil {
				t.Fatal(err)
			}
		}
		if l := e.wfetch(t, nil, testLock, nil, repo.TagFilter{Mode: repo.TagNone}); l != nil {
			t.Fatalf("TagNone fetched")
		}
		if id := actID(t, e.wfetch(t, nil, testLock, nil, repo.TagFilter{})); id != 3 {
			t.Fatalf("default-only got %d", id)
		}
		if id := actID(t, e.wfetch(t, nil, testLock, nil, repo.TagFilter{Mode: repo.TagTags, Tags: []string{"cpu"}})); id != 2 {
			t.Fatalf("tags(cpu) got %d", id)
		}
		if l := e.wfetch(t, nil, testLock, nil, repo.TagFilter{Mode: repo.TagDefaultAnd, Tags: []string{"cpu"}}); l != nil {
			t.Fatalf("default_and(cpu) got %d", actID(t, l))
		}
		if id := actID(t, e.wfetch(t, nil, testLock, nil, repo.TagFilter{Mode: repo.TagAny})); id != 1 {
			t.Fatalf("any got %d", id)
		}
		_, err := e.p.FetchWorkItem(e.ctx, testLock, 0, nil, repo.TagFilter{Mode: repo.TagTags})
		wantErr(t, err, agentstore.ErrInvalidInput)
	})
}

func TestProviderSessionAffinity(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newPEnv(t, h)
		pa, pb := e.p, e.other(t)
		cfgA := &repo.SessionFetchConfig{OwnerID: "A", LockTimeout: 10 * time.Second}
		cfgB := &repo.SessionFetchConfig{OwnerID: "B", LockTimeout: 10 * time.Second}
		s1 := func(id uint64) *repo.ActivityExecute {
			a := activity("i1", 1, id)
			a.SessionID = sp("s1")
			return a
		}
		for _, a := range []*repo.ActivityExecute{s1(1), s1(2), activity("i1", 1, 3), s1(4)} {
			if err := e.p.EnqueueForWorker(e.ctx, a); err != nil {
				t.Fatal(err)
			}
		}
		// without a session config session items are invisible
		l3 := e.wfetch(t, pb, time.Second, nil, repo.TagFilter{})
		if id := actID(t, l3); id != 3 {
			t.Fatalf("no-session fetch got %d, want 3", id)
		}
		if err := pb.AckWorkItem(e.ctx, l3.LockToken, nil); err != nil {
			t.Fatal(err)
		}
		// A claims s1
		la := e.wfetch(t, pa, time.Second, cfgA, repo.TagFilter{})
		if actID(t, la) != 1 {
			t.Fatalf("A got %d", actID(t, la))
		}
		// B cannot take s1's items: nothing else is eligible
		if l := e.wfetch(t, pb, time.Second, cfgB, repo.TagFilter{}); l != nil {
			t.Fatalf("B got session item %d", actID(t, l))
		}
		// same owner may hold several items of its session
		if id := actID(t, e.wfetch(t, pa, time.Second, cfgA, repo.TagFilter{})); id != 2 {
			t.Fatalf("A second item %d", id)
		}
		// item lock expires, session lease still valid: items stay with A
		e.clock.Advance(2 * time.Second)
		if l := e.wfetch(t, pb, time.Second, cfgB, repo.TagFilter{}); l != nil {
			t.Fatalf("B stole pinned item %d", actID(t, l))
		}
		if id := actID(t, e.wfetch(t, pa, time.Second, cfgA, repo.TagFilter{})); id != 1 {
			t.Fatalf("A re-fetch got %d, want 1", id)
		}
		// lease expires: B takes over
		e.clock.Advance(10 * time.Second)
		if id := actID(t, e.wfetch(t, pb, time.Second, cfgB, repo.TagFilter{})); id != 1 {
			t.Fatalf("B after lease expiry got %d", id)
		}
		if l := e.wfetch(t, pa, time.Second, cfgA, repo.TagFilter{}); l != nil {
			t.Fatalf("A fetched %d after losing the lease", actID(t, l))
		}
	})
}

func TestProviderSessionConflictMovesOnToNextItem(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newPEnv(t, h)
		cfgA := &repo.SessionFetchConfig{OwnerID: "A", LockTimeout: 10 * time.Second}
		cfgB := &repo.SessionFetchConfig{OwnerID: "B", LockTimeout: 10 * time.Second}
		a1 := activity("i1", 1, 1)
		a1.SessionID = sp("s1")
		a2 := activity("i1", 1, 2)
		a2.SessionID = sp("s1")
		b := activity("i1", 1, 3)
		b.SessionID = sp("s2")
		for _, a := range []*repo.ActivityExecute{a1, a2, b} {
			if err := e.p.EnqueueForWorker(e.ctx, a); err != nil {
				t.Fatal(err)
			}
		}
		if id := actID(t, e.wfetch(t, nil, time.Second, cfgA, repo.TagFilter{})); id != 1 {
			t.Fatalf("A got %d", id)
		}
		// B skips s1's pending item 2 and gets s2's item instead of nothing
		if id := actID(t, e.wfetch(t, e.other(t), time.Second, cfgB, repo.TagFilter{})); id != 3 {
			t.Fatalf("B got %d, want 3", id)
		}
	})
}

func TestProviderSessionRenewAndCleanup(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newPEnv(t, h)
		cfgA := &repo.SessionFetchConfig{OwnerID: "A", LockTimeout: 10 * time.Second}
		mk := func(id uint64, s string) {
			a := activity("i1", 1, id)
			a.SessionID = sp(s)
			if err := e.p.EnqueueForWorker(e.ctx, a); err != nil {
				t.Fatal(err)
			}
		}
		mk(1, "busy")
		mk(2, "idle")
		lBusy := e.wfetch(t, nil, testLock, cfgA, repo.TagFilter{})
		lIdle := e.wfetch(t, nil, testLock, cfgA, repo.TagFilter{})
		if err := e.p.AckWorkItem(e.ctx, lIdle.LockToken, nil); err != nil {
			t.Fatal(err)
		}
		if n, err := e.p.RenewSessionLock(e.ctx, nil, time.Second, time.Second); err != nil || n != 0 {
			t.Fatalf("renew no owners = %d, %v", n, err)
		}
		if n, err := e.p.RenewSessionLock(e.ctx, []string{"A"}, 10*time.Second, 5*time.Second); err != nil || n != 2 {
			t.Fatalf("renew = %d, %v; want 2", n, err)
		}
		// 6 s later: "busy" had activity (renew of its item), "idle" had none
		e.clock.Advance(6 * time.Second)
		if err := e.p.RenewWorkItemLock(e.ctx, lBusy.LockToken, testLock); err != nil {
			t.Fatal(err)
		}
		if n, err := e.p.RenewSessionLock(e.ctx, []string{"A", "nobody"}, 10*time.Second, 5*time.Second); err != nil || n != 1 {
			t.Fatalf("renew skipping idle = %d, %v; want 1", n, err)
		}
		// "idle" lapses (expired, no items) -> cleaned; "busy" alive
		e.clock.Advance(5 * time.Second)
		if n, err := e.p.CleanupOrphanedSessions(e.ctx, time.Minute); err != nil || n != 1 {
			t.Fatalf("cleanup = %d, %v; want 1", n, err)
		}
		if n := e.count(t, models.TableActivitySessions); n != 1 {
			t.Fatalf("sessions left = %d", n)
		}
		// expired session with a pending item is kept
		e.clock.Advance(time.Minute)
		if n, err := e.p.CleanupOrphanedSessions(e.ctx, time.Minute); err != nil || n != 0 {
			t.Fatalf("cleanup with pending item = %d, %v", n, err)
		}
		// expired sessions are not resurrected by renew
		if n, _ := e.p.RenewSessionLock(e.ctx, []string{"A"}, 10*time.Second, time.Hour); n != 0 {
			t.Fatalf("renew resurrected %d sessions", n)
		}
	})
}

func TestProviderWorkerCorruptItemIsReportedNotDropped(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newPEnv(t, h)
		plain := activity("i1", 1, 1)
		sess := activity("i1", 1, 2)
		sess.SessionID = sp("s1")
		for _, a := range []*repo.ActivityExecute{plain, sess} {
			if err := e.p.EnqueueForWorker(e.ctx, a); err != nil {
				t.Fatal(err)
			}
		}
		e.exec(t, "UPDATE "+e.st.Table(models.TableWorkerQueue)+` SET work_item = '{"ActivityExecute":'`)
		_, err := e.p.FetchWorkItem(e.ctx, time.Second, 0, nil, repo.TagFilter{})
		wantErr(t, err, agentstore.ErrCorruptRow)
		_, err = e.p.FetchWorkItem(e.ctx, time.Second, 0, &repo.SessionFetchConfig{OwnerID: "A"}, repo.TagFilter{})
		wantErr(t, err, agentstore.ErrCorruptRow)
		if n := e.count(t, models.TableWorkerQueue); n != 2 {
			t.Fatalf("corrupt items dropped: %d left", n)
		}
		// both are locked until expiry, then reported again
		if l, err := e.p.FetchWorkItem(e.ctx, time.Second, 0, &repo.SessionFetchConfig{OwnerID: "A"}, repo.TagFilter{}); l != nil || err != nil {
			t.Fatalf("locked corrupt item handed out: %v %v", l, err)
		}
		e.clock.Advance(time.Second)
		_, err = e.p.FetchWorkItem(e.ctx, time.Second, 0, nil, repo.TagFilter{})
		wantErr(t, err, agentstore.ErrCorruptRow)
	})
}
