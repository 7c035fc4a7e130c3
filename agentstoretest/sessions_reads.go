package agentstoretest

import (
	"context"
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

// sessionsReadsTests are the Sessions area's tests of this file.
func sessionsReadsTests() []test {
	return tests(
		test{"SessionsListFilters", testSessionsListFilters},
		test{"SessionsListCreatedOrderWalkVisitsEachOnce", testSessionsListCreatedOrderWalkVisitsEachOnce},
		test{"SessionsDeleteTakesForksUnlessDetached", testSessionsDeleteTakesForksUnlessDetached},
	)
}

// sessionQueueReadsTests are the SessionQueue area's tests of this file.
func sessionQueueReadsTests() []test {
	return tests(
		test{"QueueItemsReadable", testQueueItemsReadable},
		test{"QueueEnqueueIdempotencyKey", testQueueEnqueueIdempotencyKey},
	)
}

// listAll walks List to the end and returns the ids in page order.
func listAll(t *testing.T, r repo.Sessions, p repo.ListParams) []uuid.UUID {
	t.Helper()
	var out []uuid.UUID
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatal("List walk does not end")
		}
		page, err := r.List(context.Background(), p)
		if err != nil {
			t.Fatalf("list %+v: %v", p, err)
		}
		for _, s := range page.Sessions {
			out = append(out, s.ID)
		}
		if page.Next == nil {
			return out
		}
		p.After = page.Next
	}
}

func sameIDs(a, b []uuid.UUID) bool {
	x := append([]uuid.UUID(nil), a...)
	y := append([]uuid.UUID(nil), b...)
	sort.Slice(x, func(i, j int) bool { return x[i].String() < x[j].String() })
	sort.Slice(y, func(i, j int) bool { return y[i].String() < y[j].String() })
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if x[i] != y[i] {
			return false
		}
	}
	return true
}

// testSessionsListFilters: List keeps the sessions of a state set, a kind,
// a parent, an updated_at range and a tenant — including "no tenant" (a
// pointer to ""), which no other filter expresses — and returns each
// session's row fields; bad filters are ErrInvalidInput.
func testSessionsListFilters(t *testing.T, h *harness) {
	st, clock := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	t0 := clock.Now()
	mk := func(tenant string, state repo.SessionState, parent *uuid.UUID) *repo.Session {
		s := repo.NewSession()
		if parent != nil {
			s = repo.NewSubagentSession(*parent, "helper", "d")
		}
		s.TenantID, s.State = tenant, state
		mustSave(t, r, s)
		clock.Advance(time.Minute)
		return s
	}
	a := mk("", repo.StateActive, nil)
	b := mk("acme", repo.StateCompleted, nil)
	c := mk("", repo.StateCreated, &a.ID)
	d := mk("acme", repo.StateActive, &b.ID)
	e := mk("other", repo.StateFailed, nil)
	empty := ""
	acme := "acme"
	cases := []struct {
		name string
		p    repo.ListParams
		want []uuid.UUID
	}{
		{"all", repo.ListParams{}, []uuid.UUID{a.ID, b.ID, c.ID, d.ID, e.ID}},
		{"no tenant", repo.ListParams{TenantID: &empty}, []uuid.UUID{a.ID, c.ID}},
		{"tenant", repo.ListParams{TenantID: &acme}, []uuid.UUID{b.ID, d.ID}},
		{"states", repo.ListParams{States: []repo.SessionState{repo.StateActive, "FAILED"}}, []uuid.UUID{a.ID, d.ID, e.ID}},
		{"kind", repo.ListParams{Kind: repo.KindSubagent}, []uuid.UUID{c.ID, d.ID}},
		{"parent", repo.ListParams{ParentID: &b.ID}, []uuid.UUID{d.ID}},
		{"updated range", repo.ListParams{UpdatedFrom: ptrTime(t0.Add(time.Minute)), UpdatedBefore: ptrTime(t0.Add(3 * time.Minute))},
			[]uuid.UUID{b.ID, c.ID}},
		{"combined", repo.ListParams{TenantID: &acme, States: []repo.SessionState{repo.StateActive}, Kind: repo.KindSubagent,
			Order: repo.OrderCreated, Limit: 1}, []uuid.UUID{d.ID}},
	}
	for _, tc := range cases {
		for _, order := range []repo.ListOrder{"", repo.OrderCreated} {
			p := tc.p
			if p.Order == "" {
				p.Order = order
			}
			p.Limit = 2
			if got := listAll(t, r, p); !sameIDs(got, tc.want) {
				t.Errorf("%s (order %q): %v, want %v", tc.name, p.Order, got, tc.want)
			}
		}
	}
	// The view of a tenant ignores TenantID, and a view's "" is no escape.
	if got := listAll(t, st.ForTenant("acme").Sessions(), repo.ListParams{TenantID: &empty}); !sameIDs(got, []uuid.UUID{b.ID, d.ID}) {
		t.Errorf("tenant view with TenantID \"\": %v", got)
	}
	page, err := r.List(ctx, repo.ListParams{ParentID: &a.ID})
	if err != nil || len(page.Sessions) != 1 {
		t.Fatalf("list children of a: %+v, %v", page, err)
	}
	ref := page.Sessions[0]
	if ref.ID != c.ID || ref.ParentID == nil || *ref.ParentID != a.ID || ref.Kind != repo.KindSubagent || ref.State != repo.StateCreated ||
		!ref.CreatedAt.Equal(c.CreatedAt) || !ref.UpdatedAt.Equal(c.UpdatedAt) || ref.TenantID != "" {
		t.Fatalf("session ref %+v, want the fields of %s", ref, c.ID)
	}
	for name, p := range map[string]repo.ListParams{
		"state": {States: []repo.SessionState{"sleeping"}}, "kind": {Kind: "robot"}, "order": {Order: "random"},
		"cursor of another order": {Order: repo.OrderCreated, After: &repo.Cursor{UpdatedAt: t0, ID: a.ID}},
	} {
		if _, err := r.List(ctx, p); !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Errorf("list with a bad %s: %v, want ErrInvalidInput", name, err)
		}
	}
}

func ptrTime(t time.Time) *time.Time { return &t }

// testSessionsListCreatedOrderWalkVisitsEachOnce: a walk in OrderCreated
// that updates every session it visits (a "summarise each one" job) ends,
// and visits each session exactly once; the same job in the default
// updated order shows why the created order exists (it revisits).
func testSessionsListCreatedOrderWalkVisitsEachOnce(t *testing.T, h *harness) {
	st, clock := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	const n = 20
	for i := 0; i < n; i++ {
		mustSave(t, r, repo.NewSession())
		if i%3 == 0 {
			clock.Advance(time.Millisecond) // some share a created_at
		}
	}
	walk := func(order repo.ListOrder) (map[uuid.UUID]int, int) {
		seen := map[uuid.UUID]int{}
		p := repo.ListParams{Order: order, Limit: 3}
		pages := 0
		for ; pages < 60; pages++ {
			page, err := r.List(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			for _, ref := range page.Sessions {
				seen[ref.ID]++
				clock.Advance(time.Millisecond)
				if _, err := r.AddSummary(ctx, repo.SummarySnapshot{SessionID: ref.ID, Summary: "summarised"}); err != nil {
					t.Fatal(err)
				}
			}
			if page.Next == nil {
				break
			}
			p.After = page.Next
		}
		return seen, pages
	}
	seen, pages := walk(repo.OrderCreated)
	if len(seen) != n {
		t.Fatalf("created-order walk visited %d of %d sessions", len(seen), n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Fatalf("created-order walk visited %s %d times", id, c)
		}
	}
	if pages > n/3+1 {
		t.Fatalf("created-order walk took %d pages for %d sessions", pages, n)
	}
	again, _ := walk(repo.OrderUpdated)
	total := 0
	for _, c := range again {
		total += c
	}
	if total <= n {
		t.Logf("updated-order walk visited %d times (it may revisit; the created order never does)", total)
	}
}

// testSessionsDeleteTakesForksUnlessDetached: a fork is a child of its
// origin and is deleted with it (as documented on Delete); a fork whose
// ParentID was cleared and saved survives its origin, with its messages.
func testSessionsDeleteTakesForksUnlessDetached(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	origin := repo.NewSession()
	origin.AddMessage(textMsg("m1", repo.RoleUser, "1"))
	mustSave(t, r, origin)
	attached, err := r.Fork(ctx, origin.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	detached, err := r.Fork(ctx, origin.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	detached.ParentID = nil
	mustSave(t, r, detached)
	if ok, err := r.Delete(ctx, origin.ID); !ok || err != nil {
		t.Fatalf("delete origin: %v %v", ok, err)
	}
	if _, err := r.Load(ctx, attached.ID); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("attached fork after its origin's delete: %v, want ErrNotFound", err)
	}
	got := mustLoad(t, r, detached.ID)
	if len(got.Messages) != 1 || got.Messages[0].ID != "m1" || got.ForkedFromSessionID == nil || *got.ForkedFromSessionID != origin.ID {
		t.Fatalf("detached fork: %+v", got)
	}
}

// testQueueItemsReadable: Item and Items read items back in every status,
// with attempts, lease, last error and times; Items filters by status and
// is ErrNotFound for a missing session; another tenant's item is not found.
func testQueueItemsReadable(t *testing.T, h *harness) {
	st, clock := newSessionsStore(t, h)
	r, q := st.Sessions(), st.SessionQueue()
	ctx := context.Background()
	s := repo.NewSession()
	s.TenantID = "acme"
	mustSave(t, r, s)
	a, err := q.Enqueue(ctx, s.ID, "a", 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := q.Enqueue(ctx, s.ID, "b", 0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := q.Enqueue(ctx, s.ID, "c", 0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := q.Dequeue(ctx, s.ID, repo.DequeueParams{Owner: "w1", Lease: time.Minute})
	if err != nil || got.ID != a.ID {
		t.Fatalf("dequeue: %+v %v", got, err)
	}
	clock.Advance(time.Second)
	if err := q.Fail(ctx, got.Lease(), "tool crashed"); err != nil {
		t.Fatal(err)
	}
	got, err = q.Dequeue(ctx, s.ID, repo.DequeueParams{Owner: "w2"})
	if err != nil || got.ID != b.ID {
		t.Fatalf("dequeue: %+v %v", got, err)
	}
	if err := q.Complete(ctx, got.Lease()); err != nil {
		t.Fatal(err)
	}
	failed, err := q.Item(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if failed.Status != repo.QueueFailed || failed.Attempts != 1 || failed.LastError == nil || *failed.LastError != "tool crashed" ||
		failed.ProcessedAt == nil || !failed.ProcessedAt.Equal(clock.Now()) || !failed.CreatedAt.Equal(a.CreatedAt) ||
		failed.Content != "a" || failed.Priority != 1 || failed.LeaseOwner == nil || *failed.LeaseOwner != "w1" {
		t.Fatalf("failed item: %+v", failed)
	}
	done, err := q.Item(ctx, b.ID)
	if err != nil || done.Status != repo.QueueCompleted || done.ProcessedAt == nil || done.LastError != nil {
		t.Fatalf("completed item: %+v %v", done, err)
	}
	all, err := q.Items(ctx, s.ID)
	if err != nil || len(all) != 3 || all[0].ID != a.ID || all[1].ID != b.ID || all[2].ID != c.ID || all[2].Status != repo.QueuePending {
		t.Fatalf("items: %+v %v", all, err)
	}
	fin, err := q.Items(ctx, s.ID, repo.QueueCompleted, repo.QueueFailed)
	if err != nil || len(fin) != 2 {
		t.Fatalf("finished items: %+v %v", fin, err)
	}
	if _, err := q.Items(ctx, s.ID, "parked"); !errors.Is(err, agentstore.ErrInvalidInput) {
		t.Fatalf("unknown status filter: %v", err)
	}
	if _, err := q.Item(ctx, uuid.New()); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("missing item: %v", err)
	}
	if _, err := q.Items(ctx, uuid.New()); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("items of a missing session: %v", err)
	}
	other := st.ForTenant("other").SessionQueue()
	if _, err := other.Item(ctx, a.ID); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("another tenant's item: %v", err)
	}
	if _, err := other.Items(ctx, s.ID); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("another tenant's items: %v", err)
	}
	if it, err := st.ForTenant("acme").SessionQueue().Item(ctx, a.ID); err != nil || it.ID != a.ID {
		t.Fatalf("own tenant's item: %v %v", it, err)
	}
}

// testQueueEnqueueIdempotencyKey: a key is unique per session; enqueuing
// it again returns the stored item in its current state (no second row),
// with other content or priority it is ErrDuplicate naming the key; the
// same key in another session is another item; no key never collides.
func testQueueEnqueueIdempotencyKey(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r, q := st.Sessions(), st.SessionQueue()
	ctx := context.Background()
	s, s2 := repo.NewSession(), repo.NewSession()
	mustSave(t, r, s)
	mustSave(t, r, s2)
	p := repo.EnqueueParams{Content: "summarise", Priority: 2, IdempotencyKey: "req-1"}
	first, err := q.EnqueueWith(ctx, s.ID, p)
	if err != nil || first.IdempotencyKey == nil || *first.IdempotencyKey != "req-1" {
		t.Fatalf("enqueue with key: %+v %v", first, err)
	}
	got, err := q.Dequeue(ctx, s.ID, repo.DequeueParams{})
	if err != nil || got.ID != first.ID {
		t.Fatalf("dequeue: %+v %v", got, err)
	}
	again, err := q.EnqueueWith(ctx, s.ID, p)
	if err != nil || again.ID != first.ID || again.Status != repo.QueueProcessing || again.Attempts != 1 {
		t.Fatalf("retried enqueue: %+v %v; want the stored item, processing", again, err)
	}
	if n := h.count(t, st, models.TableQueue, nil); n != 1 {
		t.Fatalf("%d items after a retried enqueue", n)
	}
	for _, bad := range []repo.EnqueueParams{{Content: "other", Priority: 2, IdempotencyKey: "req-1"}, {Content: "summarise", Priority: 3, IdempotencyKey: "req-1"}} {
		_, err := q.EnqueueWith(ctx, s.ID, bad)
		if !errors.Is(err, agentstore.ErrDuplicate) {
			t.Fatalf("taken key with %+v: %v, want ErrDuplicate", bad, err)
		}
		checkCleanErr(t, "taken key", err, s.ID.String(), `"req-1"`)
	}
	other, err := q.EnqueueWith(ctx, s2.ID, p)
	if err != nil || other.ID == first.ID {
		t.Fatalf("same key in another session: %+v %v", other, err)
	}
	for i := 0; i < 2; i++ {
		if _, err := q.EnqueueWith(ctx, s.ID, repo.EnqueueParams{Content: "summarise", Priority: 2}); err != nil {
			t.Fatal(err)
		}
	}
	if n := h.count(t, st, models.TableQueue, nil); n != 4 {
		t.Fatalf("%d items, want 4", n)
	}
	if _, err := q.EnqueueWith(ctx, uuid.New(), p); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("enqueue with key to a missing session: %v", err)
	}
	if _, err := st.ForTenant("x").SessionQueue().EnqueueWith(ctx, s.ID, p); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("enqueue with a taken key from another tenant: %v, want ErrNotFound", err)
	}
	long := make([]byte, repo.MaxIdempotencyKeyLen+1)
	for i := range long {
		long[i] = 'k'
	}
	if _, err := q.EnqueueWith(ctx, s.ID, repo.EnqueueParams{Content: "x", IdempotencyKey: string(long)}); !errors.Is(err, agentstore.ErrInvalidInput) {
		t.Fatalf("over-long key: %v", err)
	}
}
