package agentstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// testSQLiteOrchFetchReadsBeforeWriteLock
// (TestTimingSensitive/SQLiteOrchFetchReadsBeforeWriteLock): on SQLite an
// idle orchestration fetch (the Store's first, or one of a queue found
// empty with no wake-up since) reads whether anything is claimable before
// it takes the database's one write lock. While another connection holds
// that lock, a fetch of an empty queue returns nothing at once (it used to
// wait for the lock and fail with ErrLockTimeout), and a fetch with a
// claimable message claims it as soon as the lock is released.
func testSQLiteOrchFetchReadsBeforeWriteLock(t *testing.T) {
	h := newHarness(t, agentstore.SQLite)
	st := h.New(t, agentstore.WithLockTimeout(2*time.Second))
	ctx := context.Background()
	conn := sqliteConn(t, strings.TrimPrefix(h.DSN, "sqlite:"))
	hold := func() {
		t.Helper()
		if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			t.Fatal(err)
		}
	}
	release := func() {
		t.Helper()
		if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
			t.Fatal(err)
		}
	}
	p := st.Provider()

	hold()
	it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
	release()
	if err != nil || it != nil {
		t.Fatalf("fetch of an empty queue beside a held write lock = %v, %v; want nothing and no error", it, err)
	}

	v := "1.0.0"
	if err := p.EnqueueForOrchestrator(ctx, &duroxide.StartOrchestration{Instance: "i1", Orchestration: "o", Input: "x", Version: &v, ExecutionID: 1}, 0); err != nil {
		t.Fatal(err)
	}
	hold()
	got := make(chan *duroxide.OrchestrationItem, 1)
	errs := make(chan error, 1)
	go func() {
		it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
		got <- it
		errs <- err
	}()
	time.Sleep(100 * time.Millisecond) // the fetch (woken by the enqueue: it claims without reading first) waits for the lock
	release()
	if it, err := <-got, <-errs; err != nil || it == nil || it.Instance != "i1" {
		t.Fatalf("fetch once the write lock was released = %+v, %v; want i1's item", it, err)
	}
}

// testSQLiteWorkerIdleRecheckReadsBeforeWriteLock
// (TestTimingSensitive/SQLiteWorkerIdleRecheckReadsBeforeWriteLock): on
// SQLite the re-checks of an idle FetchWorkItem long poll (its claim found
// nothing and no wake-up came since) read whether an item is claimable
// before they take the database's one write lock. While another connection
// holds that lock, such a poll ends empty at its timeout instead of failing
// with ErrLockTimeout at its first re-check; an item that becomes visible
// by the clock alone (an abandon with a delay) is still claimed by a
// re-check.
func testSQLiteWorkerIdleRecheckReadsBeforeWriteLock(t *testing.T) {
	h := newHarness(t, agentstore.SQLite)
	st := h.New(t, agentstore.WithLockTimeout(300*time.Millisecond), agentstore.WithPollInterval(200*time.Millisecond))
	ctx := context.Background()
	conn := sqliteConn(t, strings.TrimPrefix(h.DSN, "sqlite:"))
	p := st.Provider()

	// the call's first claim runs before the lock is taken; its re-checks
	// (about every 200 ms) run while it is held
	type fetched struct {
		l   *duroxide.WorkItemLease
		err error
	}
	done := make(chan fetched, 1)
	go func() {
		l, err := p.FetchWorkItem(ctx, 30*time.Second, 2*time.Second, nil, duroxide.TagFilter{})
		done <- fetched{l, err}
	}()
	time.Sleep(150 * time.Millisecond)
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if r.err != nil || r.l != nil {
		t.Fatalf("idle poll beside a held write lock = %v, %v; want nothing and no error", r.l, r.err)
	}

	// an item abandoned with a delay: no wake-up when it becomes visible,
	// an idle re-check finds it and claims it
	if err := p.EnqueueForWorker(ctx, &duroxide.ActivityExecute{Instance: "i1", ExecutionID: 1, ID: 1, Name: "a", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	l, err := p.FetchWorkItem(ctx, 30*time.Second, 0, nil, duroxide.TagFilter{})
	if err != nil || l == nil {
		t.Fatalf("fetch = %v, %v; want the item", l, err)
	}
	if err := p.AbandonWorkItem(ctx, l.LockToken, 700*time.Millisecond, false); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	l, err = p.FetchWorkItem(ctx, 30*time.Second, 5*time.Second, nil, duroxide.TagFilter{})
	if err != nil || l == nil {
		t.Fatalf("fetch of the delayed item = %v, %v after %v; want the item", l, err, time.Since(start))
	}
	if d := time.Since(start); d < 500*time.Millisecond || d > 4*time.Second {
		t.Errorf("the delayed item came after %v; want about 700 ms", d)
	}
}
