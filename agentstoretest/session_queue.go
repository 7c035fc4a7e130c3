package agentstoretest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

// sessionQueueTests are the SessionQueue area's tests of this file.
func sessionQueueTests() []test {
	return tests(
		test{"SessionsQueueOrderAndLeases", testSessionsQueueOrderAndLeases},
		test{"SessionsQueueConcurrentWorkers", testSessionsQueueConcurrentWorkers},
		test{"SessionsQueueLeaseNamesItsSession", testSessionsQueueLeaseNamesItsSession},
	)
}

// testSessionsQueueLeaseNamesItsSession: a dequeued item's lease carries
// its session (Lease.SessionID, by which Complete, Fail and Release find
// the item on a distributed database); a lease naming another session is
// ErrNotFound and leaves the item leased; a lease without a session finds
// the item by id alone.
func testSessionsQueueLeaseNamesItsSession(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r, q := st.Sessions(), st.SessionQueue()
	ctx := context.Background()
	s, other := repo.NewSession(), repo.NewSession()
	mustSave(t, r, s)
	mustSave(t, r, other)
	if _, err := q.Enqueue(ctx, s.ID, "job", 0); err != nil {
		t.Fatal(err)
	}
	it, err := q.Dequeue(ctx, s.ID, repo.DequeueParams{Owner: "w", Lease: time.Minute})
	if err != nil || it == nil {
		t.Fatalf("dequeue = %+v, %v", it, err)
	}
	if got := it.Lease().SessionID; got != s.ID {
		t.Fatalf("lease session = %s, want %s", got, s.ID)
	}
	wrong := it.Lease()
	wrong.SessionID = other.ID
	if err := q.Complete(ctx, wrong); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("Complete with another session's lease = %v, want ErrNotFound", err)
	}
	if err := q.Fail(ctx, wrong, "x"); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("Fail with another session's lease = %v, want ErrNotFound", err)
	}
	if err := q.Release(ctx, wrong); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("Release with another session's lease = %v, want ErrNotFound", err)
	}
	if got, err := q.Item(ctx, it.ID); err != nil || got.Status != repo.QueueProcessing {
		t.Fatalf("item after refused ends = %+v, %v; want still processing", got, err)
	}
	bare := it.Lease()
	bare.SessionID = uuid.Nil
	if err := q.Complete(ctx, bare); err != nil {
		t.Fatalf("Complete with a lease without its session = %v", err)
	}
	if got, err := q.Item(ctx, it.ID); err != nil || got.Status != repo.QueueCompleted {
		t.Fatalf("item after Complete = %+v, %v; want completed", got, err)
	}
}

// testSessionsQueueOrderAndLeases: the session queue dequeues by priority,
// then FIFO; a dequeue leases the item (owner, token, deadline, attempts +
// 1); Complete, Fail and Release end a lease once (then ErrLockLost), as do
// lease expiry and a superseding dequeue; released and expired items come
// back; CancelQueued cancels pending items only; unknown sessions and items
// are ErrNotFound; another session's items are untouched.
func testSessionsQueueOrderAndLeases(t *testing.T, h *harness) {
	st, clock := newSessionsStore(t, h)
	r, q := st.Sessions(), st.SessionQueue()
	ctx := context.Background()
	s := repo.NewSession()
	mustSave(t, r, s)
	other := repo.NewSession()
	mustSave(t, r, other)

	// Same timestamp for all: order must come from priority then seq.
	for i, p := range []int32{0, 5, 0, 5, 1} {
		if _, err := q.Enqueue(ctx, s.ID, fmt.Sprintf("item-%d", i), p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.Enqueue(ctx, other.ID, "other", 100); err != nil {
		t.Fatal(err)
	}
	pending, err := q.PendingQueue(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, it := range pending {
		order = append(order, it.Content)
	}
	want := []string{"item-1", "item-3", "item-4", "item-0", "item-2"}
	if !slices.Equal(order, want) {
		t.Fatalf("pending order = %v, want %v", order, want)
	}

	a, err := q.Dequeue(ctx, s.ID, repo.DequeueParams{Owner: "w1", Lease: time.Minute})
	if err != nil || a == nil || a.Content != "item-1" || a.Status != repo.QueueProcessing || a.Attempts != 1 ||
		a.LeaseOwner == nil || *a.LeaseOwner != "w1" || !a.LeasedUntil.Equal(clock.Now().Add(time.Minute)) {
		t.Fatalf("first dequeue = %+v, %v", a, err)
	}
	b, _ := q.Dequeue(ctx, s.ID, repo.DequeueParams{Lease: time.Minute})
	c, _ := q.Dequeue(ctx, s.ID, repo.DequeueParams{Lease: time.Minute})
	if b.Content != "item-3" || c.Content != "item-4" {
		t.Fatalf("dequeue order %s %s", b.Content, c.Content)
	}
	if err := q.Complete(ctx, a.Lease()); err != nil {
		t.Fatal(err)
	}
	if err := q.Complete(ctx, a.Lease()); !errors.Is(err, agentstore.ErrLockLost) {
		t.Fatalf("second Complete = %v, want ErrLockLost", err)
	}
	if err := q.Fail(ctx, b.Lease(), "boom"); err != nil {
		t.Fatal(err)
	}
	// white-box: no API returns an item once it has failed (PendingQueue
	// lists pending items only), so its status and error are read directly.
	if status, lastErr := h.value(t, st, models.TableQueue, Row{"id": b.ID}, "status"),
		h.value(t, st, models.TableQueue, Row{"id": b.ID}, "last_error"); status != "failed" || lastErr != "boom" {
		t.Fatalf("failed item stored as status %q, last error %q", status, lastErr)
	}
	if err := q.Release(ctx, b.Lease()); !errors.Is(err, agentstore.ErrLockLost) {
		t.Fatalf("Release after Fail = %v, want ErrLockLost", err)
	}
	if err := q.Release(ctx, c.Lease()); err != nil {
		t.Fatal(err)
	}
	// Released item-4 is pending again, ahead of the priority-0 items.
	again, _ := q.Dequeue(ctx, s.ID, repo.DequeueParams{Lease: time.Minute})
	if again.ID != c.ID || again.Attempts != 2 || *again.LeaseToken == *c.LeaseToken {
		t.Fatalf("released item redequeued as %+v", again)
	}

	// Lease expiry: the item is dequeued again with attempts+1 and a new token.
	clock.Advance(time.Minute + time.Millisecond)
	re, err := q.Dequeue(ctx, s.ID, repo.DequeueParams{Owner: "w2", Lease: time.Minute})
	if err != nil || re == nil || re.ID != c.ID || re.Attempts != 3 || *re.LeaseOwner != "w2" {
		t.Fatalf("expired lease redequeue = %+v, %v", re, err)
	}
	if err := q.Complete(ctx, again.Lease()); !errors.Is(err, agentstore.ErrLockLost) {
		t.Fatalf("Complete with superseded lease = %v, want ErrLockLost", err)
	}
	clock.Advance(2 * time.Minute)
	if err := q.Complete(ctx, re.Lease()); !errors.Is(err, agentstore.ErrLockLost) {
		t.Fatalf("Complete after lease expiry = %v, want ErrLockLost", err)
	}
	if err := q.Complete(ctx, repo.Lease{ItemID: uuid.New()}); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("Complete unknown item = %v, want ErrNotFound", err)
	}

	// CancelQueued: pending only.
	ok, err := q.CancelQueued(ctx, re.ID)
	if err != nil || ok {
		t.Fatalf("cancel of a processing item = %v, %v; want false", ok, err)
	}
	rest, _ := q.PendingQueue(ctx, s.ID)
	if len(rest) != 2 {
		t.Fatalf("pending = %d items", len(rest))
	}
	ok, err = q.CancelQueued(ctx, rest[0].ID)
	if err != nil || !ok {
		t.Fatalf("cancel pending = %v, %v", ok, err)
	}
	if ok, _ := q.CancelQueued(ctx, rest[0].ID); ok {
		t.Fatal("cancelled twice")
	}
	if ok, _ := q.CancelQueued(ctx, a.ID); ok {
		t.Fatal("cancelled a completed item")
	}
	// item-4's lease (re) expired above, so it comes back once more,
	// ahead of item-2 because of its priority.
	back, _ := q.Dequeue(ctx, s.ID, repo.DequeueParams{})
	if back == nil || back.ID != c.ID || back.Attempts != 4 {
		t.Fatalf("expired item = %+v", back)
	}
	last, _ := q.Dequeue(ctx, s.ID, repo.DequeueParams{})
	if last == nil || last.Content != "item-2" {
		t.Fatalf("last = %+v", last)
	}
	none, err := q.Dequeue(ctx, s.ID, repo.DequeueParams{})
	if err != nil || none != nil {
		t.Fatalf("empty queue dequeue = %+v, %v", none, err)
	}
	if _, err := q.Dequeue(ctx, uuid.New(), repo.DequeueParams{}); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("dequeue unknown session = %v, want ErrNotFound", err)
	}
	if _, err := q.Enqueue(ctx, uuid.New(), "x", 0); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("enqueue unknown session = %v, want ErrNotFound", err)
	}
	// The other session's item was never touched.
	op, _ := q.PendingQueue(ctx, other.ID)
	if len(op) != 1 || op[0].Content != "other" {
		t.Fatalf("other session queue = %+v", op)
	}
}

// testSessionsQueueConcurrentWorkers: eight workers over four Stores
// draining one session's queue of 120 items dequeue every item exactly once.
func testSessionsQueueConcurrentWorkers(t *testing.T, h *harness) {
	const items, workers, handles = 120, 8, 4
	stores := make([]Store, handles)
	stores[0] = h.New(t)
	for i := 1; i < handles; i++ {
		stores[i] = h.Open(t)
	}
	ctx := context.Background()
	s := repo.NewSession()
	mustSave(t, stores[0].Sessions(), s)
	for i := range items {
		if _, err := stores[0].SessionQueue().Enqueue(ctx, s.ID, fmt.Sprint(i), int32(i%3)); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[uuid.UUID]int{}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := stores[w%handles].SessionQueue()
			for {
				it, err := q.Dequeue(ctx, s.ID, repo.DequeueParams{Owner: fmt.Sprint("w", w), Lease: time.Hour})
				if agentstore.IsRetryable(err) {
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				if it == nil {
					return
				}
				mu.Lock()
				seen[it.ID]++
				mu.Unlock()
				for {
					err = q.Complete(ctx, it.Lease())
					if !agentstore.IsRetryable(err) {
						break
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(seen) != items {
		t.Fatalf("%d distinct items dequeued, want %d", len(seen), items)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("item %s dequeued %d times", id, n)
		}
	}
}
