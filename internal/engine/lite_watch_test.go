//go:build cgo

package engine

import (
	"context"
	"path/filepath"
	"testing"
	"time"

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
}
