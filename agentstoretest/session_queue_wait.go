package agentstoretest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
)

// sessionQueueWaitTests are the SessionQueue area's tests of a waiting
// Dequeue (DequeueParams.Wait).
func sessionQueueWaitTests() []test {
	return tests(
		test{"SessionsQueueWaitAcrossStores", testSessionsQueueWaitAcrossStores},
		test{"SessionsQueueWaitTimeoutAndCancel", testSessionsQueueWaitTimeoutAndCancel},
		test{"SessionsQueueWaitRelease", testSessionsQueueWaitRelease},
	)
}

// testSessionsQueueWaitAcrossStores: a Dequeue waiting on one Store
// returns the item another Store on the same database enqueues, well
// before its 3 s fallback re-check (the cross-Store wake-up; without
// CapWakeup within the fallback and a second), and the item
// is leased to it; an enqueue into another session does not end the wait
// with that session's item.
func testSessionsQueueWaitAcrossStores(t *testing.T, h *harness) {
	ctx := context.Background()
	fallback := 3 * time.Second
	waiter := h.New(t, withPollInterval(fallback))
	other := h.Open(t)
	s, busy := repo.NewSession(), repo.NewSession()
	mustSave(t, other.Sessions(), s)
	mustSave(t, other.Sessions(), busy)
	// Warm up: the first wait starts the wake-up channel.
	if it, err := waiter.SessionQueue().Dequeue(ctx, s.ID, repo.DequeueParams{Wait: 200 * time.Millisecond}); err != nil || it != nil {
		t.Fatalf("warm-up dequeue: %v %v", it, err)
	}
	type res struct {
		it  *repo.QueueItem
		err error
		d   time.Duration
	}
	for round := range 3 {
		done := make(chan res, 1)
		var enqueued time.Time
		go func() {
			it, err := waiter.SessionQueue().Dequeue(ctx, s.ID, repo.DequeueParams{Owner: "waiter", Lease: time.Minute, Wait: 20 * time.Second})
			done <- res{it, err, time.Since(enqueued)}
		}()
		time.Sleep(300 * time.Millisecond) // the call must really wait
		if _, err := other.SessionQueue().Enqueue(ctx, busy.ID, "elsewhere", 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		select {
		case r := <-done:
			t.Fatalf("round %d: the wait ended with %+v, %v on another session's enqueue", round, r.it, r.err)
		default:
		}
		enqueued = time.Now()
		want, err := other.SessionQueue().Enqueue(ctx, s.ID, "wake", 0)
		if err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil || r.it == nil || r.it.ID != want.ID || r.it.Status != repo.QueueProcessing ||
			r.it.LeaseOwner == nil || *r.it.LeaseOwner != "waiter" || r.it.Attempts != 1 {
			t.Fatalf("round %d: waiting dequeue = %+v, %v; want item %s leased to waiter", round, r.it, r.err, want.ID)
		}
		t.Logf("round %d: woken %v after another Store's enqueue (fallback %v)", round, r.d, fallback)
		if limit := wakeLimit(waiter, fallback); r.d > limit {
			t.Fatalf("round %d: waiting dequeue returned %v after another Store's enqueue; want < %v (fallback %v)", round, r.d, limit, fallback)
		}
		if err := waiter.SessionQueue().Complete(ctx, r.it.Lease()); err != nil {
			t.Fatal(err)
		}
	}
	// An item already there is returned at once, without waiting.
	if _, err := other.SessionQueue().Enqueue(ctx, s.ID, "ready", 0); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	it, err := waiter.SessionQueue().Dequeue(ctx, s.ID, repo.DequeueParams{Wait: 10 * time.Second})
	if err != nil || it == nil || it.Content != "ready" || time.Since(start) > time.Second {
		t.Fatalf("dequeue with an item ready = %+v, %v after %v", it, err, time.Since(start))
	}
}

// testSessionsQueueWaitTimeoutAndCancel: a waiting Dequeue on an empty
// session returns nil and no error after its Wait (not before); one whose
// ctx is cancelled while it waits returns the context's error and claims
// nothing (the item enqueued after stays pending); a negative Wait or one
// above MaxDequeueWait is ErrInvalidInput; a missing session is
// ErrNotFound at once; a lease that expires while a call waits ends the
// wait with that item.
func testSessionsQueueWaitTimeoutAndCancel(t *testing.T, h *harness) {
	ctx := context.Background()
	st := h.New(t)
	q := st.SessionQueue()
	s := repo.NewSession()
	mustSave(t, st.Sessions(), s)

	start := time.Now()
	it, err := q.Dequeue(ctx, s.ID, repo.DequeueParams{Wait: 300 * time.Millisecond})
	if d := time.Since(start); err != nil || it != nil || d < 300*time.Millisecond || d > 5*time.Second {
		t.Fatalf("waiting dequeue on an empty session = %+v, %v after %v; want nil, nil after 300ms", it, err, d)
	}

	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		it, err := q.Dequeue(cctx, s.ID, repo.DequeueParams{Wait: time.Minute})
		if it != nil {
			err = errors.New("claimed an item")
		}
		done <- err
	}()
	time.Sleep(200 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled waiting dequeue = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancelled waiting dequeue did not return")
	}
	item, err := q.Enqueue(ctx, s.ID, "after-cancel", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := q.Item(ctx, item.ID); err != nil || got.Status != repo.QueuePending {
		t.Fatalf("item after a cancelled wait = %+v, %v; want pending", got, err)
	}

	for _, w := range []time.Duration{-time.Second, repo.MaxDequeueWait + time.Second} {
		if _, err := q.Dequeue(ctx, s.ID, repo.DequeueParams{Wait: w}); !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Fatalf("Dequeue with Wait %v = %v, want ErrInvalidInput", w, err)
		}
	}
	start = time.Now()
	if _, err := q.Dequeue(ctx, repo.NewSession().ID, repo.DequeueParams{Wait: time.Minute}); !errors.Is(err, agentstore.ErrNotFound) || time.Since(start) > 5*time.Second {
		t.Fatalf("waiting dequeue of a missing session = %v after %v, want ErrNotFound at once", err, time.Since(start))
	}

	// A lease that expires during the wait hands the item over.
	held, err := q.Dequeue(ctx, s.ID, repo.DequeueParams{Lease: 400 * time.Millisecond})
	if err != nil || held == nil || held.ID != item.ID {
		t.Fatalf("dequeue = %+v, %v", held, err)
	}
	start = time.Now()
	again, err := q.Dequeue(ctx, s.ID, repo.DequeueParams{Wait: 10 * time.Second})
	if err != nil || again == nil || again.ID != item.ID || again.Attempts != 2 || time.Since(start) > 5*time.Second {
		t.Fatalf("waiting dequeue over an expiring lease = %+v, %v after %v; want the item again", again, err, time.Since(start))
	}
}

// testSessionsQueueWaitRelease: a Release through another Store wakes a
// Dequeue waiting on the released item's session, which then gets it.
func testSessionsQueueWaitRelease(t *testing.T, h *harness) {
	ctx := context.Background()
	fallback := 3 * time.Second
	waiter := h.New(t, withPollInterval(fallback))
	other := h.Open(t)
	s := repo.NewSession()
	mustSave(t, other.Sessions(), s)
	if _, err := other.SessionQueue().Enqueue(ctx, s.ID, "job", 0); err != nil {
		t.Fatal(err)
	}
	held, err := other.SessionQueue().Dequeue(ctx, s.ID, repo.DequeueParams{Lease: time.Hour})
	if err != nil || held == nil {
		t.Fatalf("dequeue = %+v, %v", held, err)
	}
	done := make(chan *repo.QueueItem, 1)
	errc := make(chan error, 1)
	go func() {
		it, err := waiter.SessionQueue().Dequeue(ctx, s.ID, repo.DequeueParams{Wait: 20 * time.Second})
		errc <- err
		done <- it
	}()
	time.Sleep(300 * time.Millisecond)
	released := time.Now()
	if err := other.SessionQueue().Release(ctx, held.Lease()); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	it := <-done
	if it == nil || it.ID != held.ID || it.Attempts != 2 {
		t.Fatalf("waiting dequeue after a release = %+v; want item %s (attempt 2)", it, held.ID)
	}
	if d, limit := time.Since(released), wakeLimit(waiter, fallback); d > limit {
		t.Fatalf("waiting dequeue returned %v after another Store's release; want < %v", d, limit)
	}
}
