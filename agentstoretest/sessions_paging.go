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

// sessionsPagingTests are the Sessions area's tests of this file.
func sessionsPagingTests() []test {
	return tests(
		test{"SessionsPaging", testSessionsPaging},
	)
}

// walkPages calls page from the first cursor until the next cursor is "",
// checking each page holds at most limit rows and only the last may be
// short, and returns the concatenation.
func walkPages[T any](t *testing.T, limit int, page func(repo.PageParams) ([]T, string, error)) []T {
	t.Helper()
	var all []T
	after := ""
	for i := 0; ; i++ {
		if i > 1000 {
			t.Fatal("paging does not end")
		}
		rows, next, err := page(repo.PageParams{Limit: limit, After: after})
		if err != nil {
			t.Fatalf("page %d: %v", i, err)
		}
		if len(rows) > limit {
			t.Fatalf("page %d has %d rows, limit %d", i, len(rows), limit)
		}
		all = append(all, rows...)
		if next == "" {
			return all
		}
		if len(rows) < limit {
			t.Fatalf("page %d has %d rows and a next cursor", i, len(rows))
		}
		after = next
	}
}

// testSessionsPaging: ListChildrenPage, GetSummariesPage, PlansPage and
// PendingQueuePage walked at several page sizes (rows with equal
// timestamps and priorities included) return exactly the rows of
// ListChildren, GetSummaries, Plans and PendingQueue, in the same order,
// each once; a tenant view pages only its tenant's children; a bad limit,
// a malformed cursor or a cursor of another call is ErrInvalidInput; an
// unknown session is ErrNotFound (an empty page for children).
func testSessionsPaging(t *testing.T, h *harness) {
	st, clock := newSessionsStore(t, h)
	r, q := st.Sessions(), st.SessionQueue()
	ctx := context.Background()
	parent := repo.NewSession()
	parent.TenantID = "acme"
	mustSave(t, r, parent)
	for i := 0; i < 23; i++ {
		c := repo.NewSession()
		c.ParentID = &parent.ID
		c.TenantID = "acme"
		if i == 7 {
			c.TenantID = "other"
		}
		mustSave(t, r, c)
		if i%3 == 0 { // runs of equal created_at: the id breaks the ties
			clock.Advance(time.Millisecond)
		}
	}
	for i := 0; i < 11; i++ {
		if _, err := r.AddSummary(ctx, repo.SummarySnapshot{SessionID: parent.ID, Summary: fmt.Sprintf("s%d", i)}); err != nil {
			t.Fatal(err)
		}
		if i%4 == 0 {
			clock.Advance(time.Millisecond)
		}
	}
	for i := 0; i < 7; i++ { // each new plan cancels the previous one
		s := mustLoad(t, r, parent.ID)
		s.EnterPlanMode(fmt.Sprintf("plan %d", i), "1. x", clock.Now())
		mustSave(t, r, s)
		if i%2 == 0 {
			clock.Advance(time.Millisecond)
		}
	}
	for i, p := range []int32{0, 5, 0, 5, 1, 1, 9, 0, 5, 2, 0, 0, 5, -3, 1, 9, 0} {
		if _, err := q.Enqueue(ctx, parent.ID, fmt.Sprintf("item-%d", i), p); err != nil {
			t.Fatal(err)
		}
	}
	// Two items processing (the two priority-9 ones): not pending, not paged.
	for i := 0; i < 2; i++ {
		if it, err := q.Dequeue(ctx, parent.ID, repo.DequeueParams{}); err != nil || it == nil {
			t.Fatal(err)
		}
	}

	children, err := r.ListChildren(ctx, parent.ID)
	if err != nil || len(children) != 23 {
		t.Fatalf("ListChildren = %d, %v", len(children), err)
	}
	summaries, err := r.GetSummaries(ctx, parent.ID)
	if err != nil || len(summaries) != 11 {
		t.Fatalf("GetSummaries = %d, %v", len(summaries), err)
	}
	plans, err := r.Plans(ctx, parent.ID)
	if err != nil || len(plans) != 7 {
		t.Fatalf("Plans = %d, %v", len(plans), err)
	}
	pending, err := q.PendingQueue(ctx, parent.ID)
	if err != nil || len(pending) != 15 {
		t.Fatalf("PendingQueue = %d, %v", len(pending), err)
	}
	ids := func(n int, id func(int) uuid.UUID) []uuid.UUID {
		out := make([]uuid.UUID, n)
		for i := range out {
			out[i] = id(i)
		}
		return out
	}
	for _, limit := range []int{1, 2, 5, 7, 15, 23, 100} {
		got := walkPages(t, limit, func(p repo.PageParams) ([]uuid.UUID, string, error) {
			return r.ListChildrenPage(ctx, parent.ID, p)
		})
		if !slices.Equal(got, children) {
			t.Fatalf("limit %d: ListChildrenPage walk = %v, want %v", limit, got, children)
		}
		gs := walkPages(t, limit, func(p repo.PageParams) ([]repo.SummarySnapshot, string, error) {
			return r.GetSummariesPage(ctx, parent.ID, p)
		})
		if !slices.Equal(ids(len(gs), func(i int) uuid.UUID { return gs[i].ID }),
			ids(len(summaries), func(i int) uuid.UUID { return summaries[i].ID })) {
			t.Fatalf("limit %d: GetSummariesPage walk differs from GetSummaries", limit)
		}
		gp := walkPages(t, limit, func(p repo.PageParams) ([]repo.Plan, string, error) {
			return r.PlansPage(ctx, parent.ID, p)
		})
		if !slices.Equal(ids(len(gp), func(i int) uuid.UUID { return gp[i].ID }),
			ids(len(plans), func(i int) uuid.UUID { return plans[i].ID })) {
			t.Fatalf("limit %d: PlansPage walk differs from Plans", limit)
		}
		gq := walkPages(t, limit, func(p repo.PageParams) ([]repo.QueueItem, string, error) {
			return q.PendingQueuePage(ctx, parent.ID, p)
		})
		if !slices.Equal(ids(len(gq), func(i int) uuid.UUID { return gq[i].ID }),
			ids(len(pending), func(i int) uuid.UUID { return pending[i].ID })) {
			t.Fatalf("limit %d: PendingQueuePage walk differs from PendingQueue", limit)
		}
	}
	// The default limit takes everything here in one page.
	if got, next, err := r.ListChildrenPage(ctx, parent.ID, repo.PageParams{}); err != nil || next != "" || len(got) != 23 {
		t.Fatalf("default page: %d rows, next %q, %v", len(got), next, err)
	}
	// A tenant view pages its tenant's children only.
	tv := st.ForTenant("acme").Sessions()
	got := walkPages(t, 4, func(p repo.PageParams) ([]uuid.UUID, string, error) {
		return tv.ListChildrenPage(ctx, parent.ID, p)
	})
	if len(got) != 22 || slices.Contains(got, children[7]) {
		t.Fatalf("tenant view paged %d children (want 22, without the other tenant's)", len(got))
	}

	// Refused input.
	_, sumNext, err := r.GetSummariesPage(ctx, parent.ID, repo.PageParams{Limit: 2})
	if err != nil || sumNext == "" {
		t.Fatalf("summaries page: %q %v", sumNext, err)
	}
	for _, p := range []repo.PageParams{{Limit: -1}, {Limit: repo.MaxPageLimit + 1}, {After: "not a cursor!"}, {After: "e30"}, {After: sumNext}} {
		if _, _, err := r.ListChildrenPage(ctx, parent.ID, p); !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Fatalf("ListChildrenPage(%+v) = %v, want ErrInvalidInput", p, err)
		}
		if _, _, err := q.PendingQueuePage(ctx, parent.ID, p); !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Fatalf("PendingQueuePage(%+v) = %v, want ErrInvalidInput", p, err)
		}
	}
	if _, _, err := r.PlansPage(ctx, parent.ID, repo.PageParams{After: sumNext}); !errors.Is(err, agentstore.ErrInvalidInput) {
		t.Fatalf("PlansPage with a summaries cursor = %v, want ErrInvalidInput", err)
	}
	// Unknown sessions.
	unknown := uuid.New()
	if got, next, err := r.ListChildrenPage(ctx, unknown, repo.PageParams{}); err != nil || len(got) != 0 || next != "" {
		t.Fatalf("children of an unknown parent: %v %q %v", got, next, err)
	}
	if _, _, err := r.GetSummariesPage(ctx, unknown, repo.PageParams{}); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("GetSummariesPage(unknown) = %v", err)
	}
	if _, _, err := r.PlansPage(ctx, unknown, repo.PageParams{}); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("PlansPage(unknown) = %v", err)
	}
	if _, _, err := q.PendingQueuePage(ctx, unknown, repo.PageParams{}); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("PendingQueuePage(unknown) = %v", err)
	}
}
