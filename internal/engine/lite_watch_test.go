//go:build cgo

package engine

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// TestLiteWatcherIdleCost: the SQLite data_version watcher reads only while
// a fetch waits, and then (watching file events) only after a file write
// or once per liteSafetyInterval; it stops reading when no fetch waits, and
// stops with Close.
func TestLiteWatcherIdleCost(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "w.db")
	st, err := testOpen(ctx, "sqlite:"+path, WithPollInterval(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	p := st.provider()
	if l, err := p.FetchWorkItem(ctx, time.Minute, 200*time.Millisecond, nil, duroxide.TagFilter{}); err != nil || l != nil {
		t.Fatalf("fetch on an empty queue: %v %v", l, err)
	}
	w := p.waker.(liteWatcherStats)
	during := w.Checks()
	if !w.UsesFileEvents() {
		t.Fatal("the watcher does not use file events on this system")
	}
	// 200 ms of idle waiting: no write, so at most the safety check (and
	// the settle window of the migration's last writes)
	if during > 200/int64(2)/2 {
		t.Fatalf("data_version checks while waiting 200 ms with no write = %d", during)
	}
	// a wait of 2.5 s with no write: at most one check per liteSafetyInterval
	before := w.Checks()
	if l, err := p.FetchWorkItem(ctx, time.Minute, 2500*time.Millisecond, nil, duroxide.TagFilter{}); err != nil || l != nil {
		t.Fatalf("fetch on an empty queue: %v %v", l, err)
	}
	if n := w.Checks() - before; n > 4 {
		t.Fatalf("data_version checks while waiting 2.5 s with no write = %d, want <= 3", n)
	}
	during = w.Checks()
	time.Sleep(200 * time.Millisecond)
	if idle := p.waker.(liteWatcherStats).Checks() - during; idle > 1 { // at most the tick in flight when the wait ended
		t.Fatalf("%d data_version checks while no fetch waited", idle)
	}
	done := make(chan struct{})
	go func() { _ = st.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not stop the watcher")
	}
}

// TestLiteWatcherMemoryDatabase: an in-memory database has one connection,
// which the watcher must not pin; a waiting fetch still returns.
func TestLiteWatcherMemoryDatabase(t *testing.T) {
	ctx := context.Background()
	st, err := testOpen(ctx, "sqlite::memory:", WithPollInterval(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	p := st.provider()
	start := time.Now()
	if l, err := p.FetchWorkItem(ctx, time.Minute, 100*time.Millisecond, nil, duroxide.TagFilter{}); err != nil || l != nil {
		t.Fatalf("fetch: %v %v", l, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("fetch took %v", d)
	}
	if n := p.waker.(liteWatcherStats).Checks(); n != 0 {
		t.Fatalf("watcher ran %d checks on a one-connection pool", n)
	}
}

// liteWatcherStats is what the SQLite watcher reports to tests; its poll
// interval is 2 ms and its safety interval 1 s.
type liteWatcherStats interface {
	Checks() int64
	UsesFileEvents() bool
	Skipped() int64
}

// providerStatements counts the statements of l that name a provider
// queue table.
func providerStatements(l *sqlLog) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, q := range l.stmts {
		if strings.Contains(q, "orchestrator_queue") || strings.Contains(q, "worker_queue") {
			n++
		}
	}
	return n
}

// TestLiteWatcherIgnoresOwnWrites: the Store's own session writes do not
// wake its waiting provider fetches (they woke every one of them for a
// claim that found nothing: about 3 provider statements per append with
// four fetches waiting), while a commit through another Store on the same
// file still wakes a waiting fetch at once.
func TestLiteWatcherIgnoresOwnWrites(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "own.db")
	l := &sqlLog{}
	st := liteAt(t, path, WithLogger(l))
	p := st.provider()
	fctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for fctx.Err() == nil {
				_, _ = p.FetchOrchestrationItem(fctx, time.Minute, 30*time.Second, nil)
			}
		}()
		go func() {
			defer wg.Done()
			for fctx.Err() == nil {
				_, _ = p.FetchWorkItem(fctx, time.Minute, 30*time.Second, nil, duroxide.TagFilter{})
			}
		}()
	}
	defer func() { cancel(); wg.Wait() }()
	time.Sleep(300 * time.Millisecond) // the fetches wait, the watcher runs
	s := repo.NewSession()
	if err := st.Sessions().Save(ctx, s); err != nil {
		t.Fatal(err)
	}
	l.reset()
	skipped := p.waker.(liteWatcherStats).Skipped()
	t0 := time.Now()
	const n = 300
	for i := range n {
		if _, err := st.Sessions().AppendMessages(ctx, s.ID, repo.Message{Role: repo.RoleUser, Content: []byte(`[{"type":"text","text":"hi"}]`)}); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 {
			time.Sleep(5 * time.Millisecond) // let the watcher see some of them
		}
	}
	el := time.Since(t0)
	got := providerStatements(l)
	// the four fetches' idle re-checks (a claim and a next-due read about
	// once a second each) are all they may send meanwhile
	allowed := 4 * 3 * (int(el/time.Second) + 1)
	t.Logf("%d appends in %v: %d provider statements (at most %d allowed), %d own changes skipped",
		n, el.Round(time.Millisecond), got, allowed, p.waker.(liteWatcherStats).Skipped()-skipped)
	if got > allowed {
		t.Fatalf("%d provider statements during %d appends by the Store itself, want at most %d (the waiting fetches were woken by its own writes)", got, n, allowed)
	}
	if p.waker.(liteWatcherStats).Skipped() == skipped {
		t.Fatal("the watcher saw none of the Store's own commits (the test did not exercise it)")
	}
	// another Store's commit still wakes a waiting fetch at once
	other := liteAt(t, path)
	cancel()
	wg.Wait()
	got2 := make(chan time.Time, 1)
	go func() {
		if le, err := p.FetchWorkItem(ctx, time.Minute, 10*time.Second, nil, duroxide.TagFilter{}); err != nil || le == nil {
			t.Errorf("waiting fetch: %v %v", le, err)
		}
		got2 <- time.Now()
	}()
	time.Sleep(300 * time.Millisecond)
	at := time.Now()
	if err := other.provider().EnqueueForWorker(ctx, &duroxide.ActivityExecute{Instance: "i1", ExecutionID: 1, ID: 1, Name: "a", Input: "{}"}); err != nil {
		t.Fatal(err)
	}
	if d := (<-got2).Sub(at); d > 500*time.Millisecond {
		t.Fatalf("a fetch waiting on one Store returned %v after another Store's enqueue, want within 500 ms", d)
	}
}

// TestLiteWatcherWakesAfterOwnTxView: an enqueue through the Store's own
// view of an application transaction (InTx, on the Store's write
// connection) wakes nothing in-process; the watcher wakes the Store's
// waiting Dequeue after the commit, well before its poll interval.
func TestLiteWatcherWakesAfterOwnTxView(t *testing.T) {
	ctx := context.Background()
	st := liteAt(t, filepath.Join(t.TempDir(), "tx.db"), WithPollInterval(5*time.Second))
	s := repo.NewSession()
	if err := st.Sessions().Save(ctx, s); err != nil {
		t.Fatal(err)
	}
	q := st.SessionQueue()
	if it, err := q.Dequeue(ctx, s.ID, repo.DequeueParams{Wait: 200 * time.Millisecond}); err != nil || it != nil {
		t.Fatalf("warm-up dequeue: %v %v", it, err)
	}
	type res struct {
		it  *repo.QueueItem
		err error
		at  time.Time
	}
	done := make(chan res, 1)
	go func() {
		it, err := q.Dequeue(ctx, s.ID, repo.DequeueParams{Owner: "w", Wait: 20 * time.Second})
		done <- res{it, err, time.Now()}
	}()
	time.Sleep(300 * time.Millisecond)
	tx, err := st.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	view, err := st.InTx(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	want, err := view.SessionQueue().Enqueue(ctx, s.ID, "in tx", 0)
	if err != nil {
		t.Fatal(err)
	}
	committed := time.Now()
	if err := tx.Commit().Error; err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.it == nil || r.it.ID != want.ID {
		t.Fatalf("waiting dequeue = %+v, %v; want item %s", r.it, r.err, want.ID)
	}
	if d := r.at.Sub(committed); d > time.Second {
		t.Fatalf("the waiting dequeue returned %v after the commit, want within 1 s (poll interval 5 s)", d)
	}
}

// TestImportWakesWaitingFetch: Import wakes the Store's waiting calls when
// it ends (on SQLite the watcher no longer does for the Store's own
// commits): a worker fetch waiting on the importing Store returns the
// imported item well before its poll interval.
func TestImportWakesWaitingFetch(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src := liteAt(t, filepath.Join(dir, "src.db"))
	dst := liteAt(t, filepath.Join(dir, "dst.db"), WithPollInterval(5*time.Second))
	if err := src.provider().EnqueueForWorker(ctx, &duroxide.ActivityExecute{Instance: "moved", ExecutionID: 1, ID: 1, Name: "a", Input: "{}"}); err != nil {
		t.Fatal(err)
	}
	var stream bytes.Buffer
	if _, err := src.Export(ctx, &stream, ExportParams{}); err != nil {
		t.Fatal(err)
	}
	p := dst.provider()
	// warm up: the first wait starts the watcher
	if le, err := p.FetchWorkItem(ctx, time.Minute, 200*time.Millisecond, nil, duroxide.TagFilter{}); err != nil || le != nil {
		t.Fatalf("warm-up fetch: %v %v", le, err)
	}
	type res struct {
		le *duroxide.WorkItemLease
		at time.Time
	}
	done := make(chan res, 1)
	go func() {
		le, err := p.FetchWorkItem(ctx, time.Minute, 20*time.Second, nil, duroxide.TagFilter{})
		if err != nil {
			t.Errorf("waiting fetch: %v", err)
		}
		done <- res{le, time.Now()}
	}()
	// past the waiting fetch's first re-check (a second after the last
	// empty claim): its next one is the poll interval later
	time.Sleep(1500 * time.Millisecond)
	if _, err := dst.Import(ctx, &stream, ImportParams{}); err != nil {
		t.Fatal(err)
	}
	imported := time.Now()
	r := <-done
	if r.le == nil {
		t.Fatal("the waiting fetch returned nothing")
	}
	t.Logf("woken %v after the import", r.at.Sub(imported))
	if d := r.at.Sub(imported); d > time.Second {
		t.Fatalf("the waiting fetch returned the imported item %v after the import, want within 1 s (poll interval 5 s)", d)
	}
}
