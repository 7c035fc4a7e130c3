package agentstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
)

// TestProviderWakeAcrossStores: a fetcher waiting on one Store is woken by
// an enqueue through ANOTHER Store on the same database. The fallback
// re-check is set to 3 s, so a return well before that proves the wake-up
// crossed Stores: on PostgreSQL through LISTEN/NOTIFY. SQLite has no
// cross-process channel: there the fetch is served by the fallback re-check,
// which the test checks with a short interval instead.
func TestProviderWakeAcrossStores(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		// A fallback re-check far above the limit below: only the
		// cross-Store wake-up (LISTEN/NOTIFY on PostgreSQL, the
		// data_version watcher on SQLite) can make the fetch return in time.
		fallback := 3 * time.Second
		waiter := h.New(t, agentstore.WithPollInterval(fallback))
		other := h.Open(t)
		for _, kind := range []string{"orchestration", "work"} {
			// Warm up: the first long poll starts the listener; give it
			// time to LISTEN before measuring.
			if kind == "orchestration" {
				if it, err := waiter.Provider().FetchOrchestrationItem(ctx, time.Minute, 200*time.Millisecond, nil); err != nil || it != nil {
					t.Fatalf("warm-up fetch: %v %v", it, err)
				}
			}
			type res struct {
				ok  bool
				err error
				d   time.Duration
			}
			done := make(chan res, 1)
			var enqueued time.Time
			go func() {
				var ok bool
				var err error
				if kind == "orchestration" {
					var it *repo.OrchestrationItem
					it, err = waiter.Provider().FetchOrchestrationItem(ctx, time.Minute, 20*time.Second, nil)
					ok = it != nil
				} else {
					var l *repo.WorkItemLease
					l, err = waiter.Provider().FetchWorkItem(ctx, time.Minute, 20*time.Second, nil, repo.TagFilter{})
					ok = l != nil
				}
				done <- res{ok, err, time.Since(enqueued)}
			}()
			time.Sleep(300 * time.Millisecond) // real waiting is the point: the fetcher must be idle
			enqueued = time.Now()
			var err error
			if kind == "orchestration" {
				err = other.Provider().EnqueueForOrchestrator(ctx, startItem("wake-"+kind, nil), 0)
			} else {
				err = other.Provider().EnqueueForWorker(ctx, activity("wake-"+kind, 1, 7))
			}
			if err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil || !r.ok {
				t.Fatalf("%s fetch after enqueue on another Store: ok=%v err=%v", kind, r.ok, r.err)
			}
			limit := time.Second // far below the 3 s fallback
			t.Logf("%s %s: woken %v after another Store's enqueue (fallback %v)", h.Dialect, kind, r.d, fallback)
			if r.d > limit {
				t.Fatalf("%s: fetch returned %v after another Store's enqueue; want < %v (fallback %v)", kind, r.d, limit, fallback)
			}
		}
		// Close stops the listener and publisher; a closed store's fetch fails.
		if err := waiter.Close(); err != nil {
			t.Fatal(err)
		}
		_, err := waiter.Provider().FetchWorkItem(ctx, time.Minute, 0, nil, repo.TagFilter{})
		if h.Dialect == agentstore.Postgres && err == nil {
			t.Fatal("fetch on a closed store succeeded")
		}
	})
}

func TestOpen_RejectsBadPollInterval(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{0, -time.Second, time.Microsecond, time.Hour} {
		if _, err := agentstore.Open(context.Background(), "sqlite::memory:", agentstore.WithPollInterval(d)); !errors.Is(err, agentstore.ErrInvalidConfig) {
			t.Errorf("WithPollInterval(%v) = %v, want ErrInvalidConfig", d, err)
		}
	}
}

// TestProviderWakeSmallPoolNoListener: a PostgreSQL store with a pool of 1
// connection does not pin it for the listener; fetches still work and a
// waiting fetch is served by the fallback re-check.
func TestProviderWakeSmallPoolNoListener(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		st := h.New(t, agentstore.WithPool(agentstore.PoolConfig{MaxOpenConns: 1, MinIdleConns: 1}),
			agentstore.WithPollInterval(30*time.Millisecond))
		other := h.Open(t)
		done := make(chan error, 1)
		go func() {
			l, err := st.Provider().FetchWorkItem(ctx, time.Minute, 10*time.Second, nil, repo.TagFilter{})
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
	})
}
