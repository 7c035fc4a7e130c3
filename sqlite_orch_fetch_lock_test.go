package agentstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// TestSQLiteOrchFetchReadsBeforeWriteLock: on SQLite an idle orchestration
// fetch (the Store's first, or one of a queue found empty with no wake-up
// since) reads whether anything is claimable before it takes the
// database's one write lock. While another connection holds that lock, a
// fetch of an empty queue returns nothing at once (it used to wait for
// the lock and fail with ErrLockTimeout), and a fetch with a claimable
// message claims it as soon as the lock is released.
func TestSQLiteOrchFetchReadsBeforeWriteLock(t *testing.T) {
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
