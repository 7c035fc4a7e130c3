package agentstoretest

import (
	"testing"
	"time"

	"github.com/agentstore/agentstore/repo/duroxide"
)

// activitySessionsTests are the ActivitySessions area's tests of this file.
func activitySessionsTests() []test {
	return tests(
		test{"ProviderSessionAffinity", testProviderSessionAffinity},
		test{"ProviderSessionConflictMovesOnToNextItem", testProviderSessionConflictMovesOnToNextItem},
		test{"ProviderSessionRenewAndCleanup", testProviderSessionRenewAndCleanup},
	)
}

// testProviderSessionAffinity: items of an activity session go only to
// fetchers with a session config (others see only plain items) and only to
// the session's owner while its lease is valid, several at a time, even
// after an item's lock expired; once the lease expires another owner takes
// the session over and the old owner gets nothing.
func testProviderSessionAffinity(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	pa, pb := e.p, e.other(t)
	cfgA := &duroxide.SessionFetchConfig{OwnerID: "A", LockTimeout: 10 * time.Second}
	cfgB := &duroxide.SessionFetchConfig{OwnerID: "B", LockTimeout: 10 * time.Second}
	s1 := func(id uint64) *duroxide.ActivityExecute {
		a := activity("i1", 1, id)
		a.SessionID = sp("s1")
		return a
	}
	for _, a := range []*duroxide.ActivityExecute{s1(1), s1(2), activity("i1", 1, 3), s1(4)} {
		if err := e.p.EnqueueForWorker(e.ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	// without a session config session items are invisible
	l3 := e.wfetch(t, pb, time.Second, nil, duroxide.TagFilter{})
	if id := actID(t, l3); id != 3 {
		t.Fatalf("no-session fetch got %d, want 3", id)
	}
	if err := pb.AckWorkItem(e.ctx, l3.LockToken, nil); err != nil {
		t.Fatal(err)
	}
	// A claims s1
	la := e.wfetch(t, pa, time.Second, cfgA, duroxide.TagFilter{})
	if actID(t, la) != 1 {
		t.Fatalf("A got %d", actID(t, la))
	}
	// B cannot take s1's items: nothing else is eligible
	if l := e.wfetch(t, pb, time.Second, cfgB, duroxide.TagFilter{}); l != nil {
		t.Fatalf("B got session item %d", actID(t, l))
	}
	// same owner may hold several items of its session
	if id := actID(t, e.wfetch(t, pa, time.Second, cfgA, duroxide.TagFilter{})); id != 2 {
		t.Fatalf("A second item %d", id)
	}
	// item lock expires, session lease still valid: items stay with A
	e.clock.Advance(2 * time.Second)
	if l := e.wfetch(t, pb, time.Second, cfgB, duroxide.TagFilter{}); l != nil {
		t.Fatalf("B stole pinned item %d", actID(t, l))
	}
	if id := actID(t, e.wfetch(t, pa, time.Second, cfgA, duroxide.TagFilter{})); id != 1 {
		t.Fatalf("A re-fetch got %d, want 1", id)
	}
	// lease expires: B takes over
	e.clock.Advance(10 * time.Second)
	if id := actID(t, e.wfetch(t, pb, time.Second, cfgB, duroxide.TagFilter{})); id != 1 {
		t.Fatalf("B after lease expiry got %d", id)
	}
	if l := e.wfetch(t, pa, time.Second, cfgA, duroxide.TagFilter{}); l != nil {
		t.Fatalf("A fetched %d after losing the lease", actID(t, l))
	}
}

// testProviderSessionConflictMovesOnToNextItem: a fetcher whose oldest
// eligible item belongs to another owner's session skips it and gets the
// next item of a free session instead of nothing.
func testProviderSessionConflictMovesOnToNextItem(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	cfgA := &duroxide.SessionFetchConfig{OwnerID: "A", LockTimeout: 10 * time.Second}
	cfgB := &duroxide.SessionFetchConfig{OwnerID: "B", LockTimeout: 10 * time.Second}
	a1 := activity("i1", 1, 1)
	a1.SessionID = sp("s1")
	a2 := activity("i1", 1, 2)
	a2.SessionID = sp("s1")
	b := activity("i1", 1, 3)
	b.SessionID = sp("s2")
	for _, a := range []*duroxide.ActivityExecute{a1, a2, b} {
		if err := e.p.EnqueueForWorker(e.ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	if id := actID(t, e.wfetch(t, nil, time.Second, cfgA, duroxide.TagFilter{})); id != 1 {
		t.Fatalf("A got %d", id)
	}
	// B skips s1's pending item 2 and gets s2's item instead of nothing
	if id := actID(t, e.wfetch(t, e.other(t), time.Second, cfgB, duroxide.TagFilter{})); id != 3 {
		t.Fatalf("B got %d, want 3", id)
	}
}

// testProviderSessionRenewAndCleanup: RenewSessionLock renews the given
// owners' live sessions, skipping sessions idle longer than the idle
// timeout and never resurrecting expired ones; CleanupOrphanedSessions
// deletes expired sessions without items and keeps those with a pending item.
func testProviderSessionRenewAndCleanup(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	cfgA := &duroxide.SessionFetchConfig{OwnerID: "A", LockTimeout: 10 * time.Second}
	mk := func(id uint64, s string) {
		a := activity("i1", 1, id)
		a.SessionID = sp(s)
		if err := e.p.EnqueueForWorker(e.ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	mk(1, "busy")
	mk(2, "idle")
	lBusy := e.wfetch(t, nil, testLock, cfgA, duroxide.TagFilter{})
	lIdle := e.wfetch(t, nil, testLock, cfgA, duroxide.TagFilter{})
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
	// "busy" is still A's: a new "busy" item is not handed to another owner
	// (with the cleanup's count of 1 this says "idle" was the one removed)
	mk(3, "busy")
	cfgB := &duroxide.SessionFetchConfig{OwnerID: "B", LockTimeout: 10 * time.Second}
	if l := e.wfetch(t, nil, testLock, cfgB, duroxide.TagFilter{}); l != nil {
		t.Fatalf("B got item %d of A's session \"busy\" after the cleanup", actID(t, l))
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
}
