package agentstoretest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
)

// sessionQueueRetentionTests are the SessionQueue area's tests of this file.
func sessionQueueRetentionTests() []test {
	return tests(
		test{"SessionsQueuePurgeFinished", testSessionsQueuePurgeFinished},
	)
}

// testSessionsQueuePurgeFinished: PurgeFinished deletes completed, failed
// and cancelled items that finished more than olderThan ago (0 = 7 days),
// in batches (the count is the total of all batches), across sessions;
// pending and processing items (even with an expired lease) are never
// deleted; a tenant view purges only its tenant's items; refused
// arguments are ErrInvalidInput and delete nothing.
func testSessionsQueuePurgeFinished(t *testing.T, h *harness) {
	st, clock := newSessionsStore(t, h)
	r, q := st.Sessions(), st.SessionQueue()
	ctx := context.Background()
	a, b := repo.NewSession(), repo.NewSession()
	b.TenantID = "acme"
	mustSave(t, r, a)
	mustSave(t, r, b)

	enq := func(s *repo.Session, content string) *repo.QueueItem {
		t.Helper()
		it, err := q.Enqueue(ctx, s.ID, content, 0)
		if err != nil {
			t.Fatal(err)
		}
		return it
	}
	// finish dequeues the session's next item and ends it with how.
	finish := func(s *repo.Session, how string) uuid.UUID {
		t.Helper()
		it, err := q.Dequeue(ctx, s.ID, repo.DequeueParams{Lease: time.Minute})
		if err != nil || it == nil {
			t.Fatalf("dequeue: %v %v", it, err)
		}
		switch how {
		case "complete":
			err = q.Complete(ctx, it.Lease())
		case "fail":
			err = q.Fail(ctx, it.Lease(), "boom")
		}
		if err != nil {
			t.Fatal(err)
		}
		return it.ID
	}

	// Day 0: in a, 3 completed, 1 failed, 1 cancelled; in b, 2 completed.
	var old []uuid.UUID
	for i := 0; i < 5; i++ {
		enq(a, fmt.Sprintf("a-old-%d", i))
	}
	for _, how := range []string{"complete", "complete", "complete", "fail"} {
		old = append(old, finish(a, how))
	}
	cancelled := enq(a, "a-cancelled")
	// The fifth a-old item is still pending; cancel the newer one.
	if ok, err := q.CancelQueued(ctx, cancelled.ID); err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	old = append(old, cancelled.ID)
	var oldB []uuid.UUID
	for i := 0; i < 2; i++ {
		enq(b, fmt.Sprintf("b-old-%d", i))
		oldB = append(oldB, finish(b, "complete"))
	}
	// A processing item whose lease will have long expired, and pending ones.
	enq(a, "a-processing")
	processing, err := q.Dequeue(ctx, a.ID, repo.DequeueParams{Lease: time.Minute})
	if err != nil || processing == nil {
		t.Fatal(err)
	}
	pendingB := enq(b, "b-pending")

	// Day 3: two more finished in a (priority 10: dequeued first).
	clock.Advance(3 * 24 * time.Hour)
	var recent []uuid.UUID
	for i := 0; i < 2; i++ {
		if _, err := q.Enqueue(ctx, a.ID, fmt.Sprintf("a-recent-%d", i), 10); err != nil {
			t.Fatal(err)
		}
		got, err := q.Dequeue(ctx, a.ID, repo.DequeueParams{Lease: time.Minute})
		if err != nil || got == nil || got.Priority != 10 {
			t.Fatalf("dequeue: %+v %v", got, err)
		}
		if err := q.Complete(ctx, got.Lease()); err != nil {
			t.Fatal(err)
		}
		recent = append(recent, got.ID)
	}

	// Refused arguments delete nothing.
	for _, c := range []struct {
		age   time.Duration
		batch int
	}{{-time.Second, 0}, {0, -1}, {0, repo.MaxPurgeBatch + 1}} {
		if n, err := q.PurgeFinished(ctx, c.age, c.batch); !errors.Is(err, agentstore.ErrInvalidInput) || n != 0 {
			t.Fatalf("PurgeFinished(%v, %d) = %d, %v; want ErrInvalidInput", c.age, c.batch, n, err)
		}
	}

	// Day 8: the default (7 days) takes the day-0 items only. A tenant
	// view first: only acme's (b's) two.
	clock.Advance(5 * 24 * time.Hour)
	n, err := st.ForTenant("acme").SessionQueue().PurgeFinished(ctx, 0, 0)
	if err != nil || n != len(oldB) {
		t.Fatalf("tenant PurgeFinished = %d, %v; want %d", n, err, len(oldB))
	}
	for _, id := range old {
		if _, err := q.Item(ctx, id); err != nil {
			t.Fatalf("item %s of another tenant purged by the tenant view: %v", id, err)
		}
	}
	// Batches of 2: five day-0 items of a in three batches.
	n, err = q.PurgeFinished(ctx, 0, 2)
	if err != nil || n != len(old) {
		t.Fatalf("PurgeFinished(0, 2) = %d, %v; want %d", n, err, len(old))
	}
	for _, id := range append(old, oldB...) {
		if _, err := q.Item(ctx, id); !errors.Is(err, agentstore.ErrNotFound) {
			t.Fatalf("purged item %s: %v, want ErrNotFound", id, err)
		}
	}
	for _, id := range append(recent, processing.ID, pendingB.ID) {
		if _, err := q.Item(ctx, id); err != nil {
			t.Fatalf("item %s (recent, processing or pending) purged: %v", id, err)
		}
	}
	// Nothing more is old enough; then an hour's retention takes the recent ones.
	if n, err := q.PurgeFinished(ctx, 0, 0); err != nil || n != 0 {
		t.Fatalf("second PurgeFinished = %d, %v; want 0", n, err)
	}
	n, err = q.PurgeFinished(ctx, time.Hour, 0)
	if err != nil || n != len(recent) {
		t.Fatalf("PurgeFinished(1h) = %d, %v; want %d", n, err, len(recent))
	}
	items, err := q.Items(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, it := range items {
		if it.Status == repo.QueueCompleted || it.Status == repo.QueueFailed || it.Status == repo.QueueCancelled {
			t.Fatalf("finished item left: %+v", it)
		}
		left = append(left, it.Content)
	}
	slices.Sort(left)
	if want := []string{"a-old-4", "a-processing"}; !slices.Equal(left, want) {
		t.Fatalf("items left in a = %v, want %v", left, want)
	}
	// The processing item's lease expired days ago: still not purged, still dequeued again.
	again, err := q.Dequeue(ctx, a.ID, repo.DequeueParams{})
	if err != nil || again == nil {
		t.Fatalf("dequeue after purge: %v %v", again, err)
	}
}
