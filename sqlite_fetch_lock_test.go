package agentstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// TestSQLiteFetchReadsBeforeWriteLock: on SQLite an orchestration fetch
// and a worker fetch read whether anything is claimable before they take
// the database's one write lock. While another connection holds that
// lock, a fetch of an empty queue returns nothing at once (both used to
// wait for the lock and fail with ErrLockTimeout), and a fetch with a
// claimable message or item claims it as soon as the lock is released.
func TestSQLiteFetchReadsBeforeWriteLock(t *testing.T) {
	h := newHarness(t, agentstore.SQLite)
	st := h.New(t, agentstore.WithLockTimeout(2*time.Second))
	ctx := context.Background()
	holder := openGormSQLite(t, "file:"+strings.TrimPrefix(h.DSN, "sqlite:")+"?_busy_timeout=10000&_journal_mode=WAL&_foreign_keys=on")
	sqlDB, err := holder.DB()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := sqlDB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
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
	wl, werr := p.FetchWorkItem(ctx, 30*time.Second, 0, nil, duroxide.TagFilter{})
	release()
	if err != nil || it != nil {
		t.Fatalf("orchestration fetch of an empty queue beside a held write lock = %v, %v; want nothing and no error", it, err)
	}
	if werr != nil || wl != nil {
		t.Fatalf("worker fetch of an empty queue beside a held write lock = %v, %v; want nothing and no error", wl, werr)
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
	time.Sleep(100 * time.Millisecond) // the fetch has read its candidate and waits for the lock
	release()
	if it, err := <-got, <-errs; err != nil || it == nil || it.Instance != "i1" {
		t.Fatalf("fetch once the write lock was released = %+v, %v; want i1's item", it, err)
	}

	if err := p.EnqueueForWorker(ctx, &duroxide.ActivityExecute{Instance: "i1", ExecutionID: 1, ID: 2, Name: "a", Input: "in"}); err != nil {
		t.Fatal(err)
	}
	hold()
	leases := make(chan *duroxide.WorkItemLease, 1)
	go func() {
		l, err := p.FetchWorkItem(ctx, 30*time.Second, 0, nil, duroxide.TagFilter{})
		leases <- l
		errs <- err
	}()
	time.Sleep(100 * time.Millisecond) // the fetch has read the queue and waits for the lock
	release()
	if l, err := <-leases, <-errs; err != nil || l == nil {
		t.Fatalf("worker fetch once the write lock was released = %+v, %v; want the activity", l, err)
	}
}
