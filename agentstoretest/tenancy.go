package agentstoretest

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/internal/testkit"
	"github.com/agentstore/agentstore/repo"
)

// tenancyTests are the Tenancy area's tests of this file.
func tenancyTests() []test {
	return tests(
		test{"SessionsTenantIsolation", testSessionsTenantIsolation},
		test{"HostileTenantIsolation", testHostileTenantIsolation},
	)
}

// testSessionsTenantIsolation: a tenant view (ForTenant) stamps its tenant
// on saves and sees only its own sessions: another tenant's or an untenanted
// session is ErrNotFound for every session and queue operation, cannot be
// saved over or hung a child under, and is not listed; the owner's session
// and queue item are intact; an empty tenant is ErrInvalidInput.
func testSessionsTenantIsolation(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	ctx := context.Background()
	a, b := st.ForTenant("alpha"), st.ForTenant("beta")
	sa := repo.NewSession()
	sa.AddMessage(textMsg("m", repo.RoleUser, "secret"))
	mustSave(t, a.Sessions(), sa)
	if sa.TenantID != "alpha" {
		t.Fatalf("saved through the view with tenant %q", sa.TenantID)
	}
	item, err := a.SessionQueue().Enqueue(ctx, sa.ID, "job", 0)
	if err != nil {
		t.Fatal(err)
	}
	sb := repo.NewSession()
	mustSave(t, b.Sessions(), sb)
	global := repo.NewSession()
	mustSave(t, st.Sessions(), global)

	br, bq := b.Sessions(), b.SessionQueue()
	if _, err := br.Load(ctx, sa.ID); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("cross-tenant Load = %v", err)
	}
	if _, err := br.Load(ctx, global.ID); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("tenant view loaded a session without tenant: %v", err)
	}
	if ok, err := br.Delete(ctx, sa.ID); ok || err != nil {
		t.Fatalf("cross-tenant Delete = %v, %v", ok, err)
	}
	if _, err := br.AppendMessages(ctx, sa.ID, textMsg("x", repo.RoleUser, "x")); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("cross-tenant append = %v", err)
	}
	if _, err := br.Fork(ctx, sa.ID, ""); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("cross-tenant fork = %v", err)
	}
	if _, err := br.GetSummaries(ctx, sa.ID); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("cross-tenant summaries = %v", err)
	}
	if _, err := bq.Enqueue(ctx, sa.ID, "x", 0); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("cross-tenant enqueue = %v", err)
	}
	if _, err := bq.Dequeue(ctx, sa.ID, repo.DequeueParams{}); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("cross-tenant dequeue = %v", err)
	}
	if _, err := bq.PendingQueue(ctx, sa.ID); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("cross-tenant pending = %v", err)
	}
	if ok, _ := bq.CancelQueued(ctx, item.ID); ok {
		t.Fatal("cross-tenant cancel succeeded")
	}
	// A stolen copy cannot be saved into another tenant.
	stolen := mustLoad(t, st.Sessions(), sa.ID)
	stolen.State = repo.StateFailed
	if err := br.Save(ctx, stolen); !errors.Is(err, agentstore.ErrInvalidInput) {
		t.Fatalf("save of another tenant's session = %v", err)
	}
	stolen.TenantID = ""
	if err := br.Save(ctx, stolen); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("save of another tenant's session without tenant = %v", err)
	}
	// No hanging a session under another tenant's session, or under none.
	orphan := repo.NewSubagentSession(sa.ID, "spy", "x")
	if err := br.Save(ctx, orphan); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("child of another tenant's session = %v, want ErrNotFound", err)
	}
	if err := st.Sessions().Save(ctx, repo.NewSubagentSession(uuid.New(), "a", "b")); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("child of a missing session = %v, want ErrNotFound", err)
	}
	// Even asking for another tenant in ListParams shows only the view's own.
	alpha := "alpha"
	page, err := br.List(ctx, repo.ListParams{TenantID: &alpha})
	if err != nil || len(page.Sessions) != 1 || page.Sessions[0].ID != sb.ID {
		t.Fatalf("tenant view list = %+v, %v", page, err)
	}
	if n, err := br.CleanupExpired(ctx, 0); err != nil || n != 0 {
		t.Fatalf("cleanup = %d, %v", n, err)
	}
	// The owner still sees everything intact.
	got := mustLoad(t, a.Sessions(), sa.ID)
	if got.State != repo.StateCreated || len(got.Messages) != 1 {
		t.Fatalf("owner's session changed: %+v", got)
	}
	if pend, _ := a.SessionQueue().PendingQueue(ctx, sa.ID); len(pend) != 1 {
		t.Fatal("owner's queue item gone")
	}
	own, err := a.SessionQueue().Dequeue(ctx, sa.ID, repo.DequeueParams{})
	if err != nil || own == nil || own.ID != item.ID {
		t.Fatalf("owner dequeue = %+v, %v", own, err)
	}
	if err := bq.Complete(ctx, own.Lease()); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("cross-tenant Complete = %v, want ErrNotFound", err)
	}
	if err := a.SessionQueue().Complete(ctx, own.Lease()); err != nil {
		t.Fatalf("owner Complete: %v", err)
	}
	if _, err := st.ForTenant("").Sessions().Load(ctx, sa.ID); !errors.Is(err, agentstore.ErrInvalidInput) {
		t.Fatalf("empty tenant view = %v, want ErrInvalidInput", err)
	}
}

// testHostileTenantIsolation: through the view of tenant "evil", every
// session and queue operation aimed at a session of tenant "acme" (and at a
// session without tenant) behaves exactly like the same operation aimed at
// an id that does not exist, and listing never returns another tenant's id.
// Afterwards acme's data is unchanged.
func testHostileTenantIsolation(t *testing.T, h *harness) {
	ctx := context.Background()
	clock := newTestClock()
	st := h.New(t, withClock(clock.Now))
	acme, evil := st.ForTenant("acme"), st.ForTenant("evil")

	// acme: a session with messages, a summary, todos, a plan, a child, a
	// leased and a pending queue item, and an expired session.
	a := repo.NewSession()
	a.AddMessage(repo.Message{ID: "m1", Role: repo.RoleUser, Content: []byte(`"secret"`)})
	a.Todos = []repo.TodoItem{{Content: "t", ActiveForm: "t", Status: repo.TodoPending}}
	a.EnterPlanMode("plan", "p", clock.Now())
	if err := acme.Sessions().Save(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := acme.Sessions().AddSummary(ctx, repo.SummarySnapshot{SessionID: a.ID, Summary: "s"}); err != nil {
		t.Fatal(err)
	}
	child := repo.NewSubagentSession(a.ID, "helper", "d")
	if err := acme.Sessions().Save(ctx, child); err != nil {
		t.Fatal(err)
	}
	expired := repo.NewSession()
	past := clock.Now().Add(-time.Hour)
	expired.ExpiresAt = &past
	if err := acme.Sessions().Save(ctx, expired); err != nil {
		t.Fatal(err)
	}
	if _, err := acme.SessionQueue().Enqueue(ctx, a.ID, "job1", 0); err != nil {
		t.Fatal(err)
	}
	pending, err := acme.SessionQueue().Enqueue(ctx, a.ID, "job2", 0)
	if err != nil {
		t.Fatal(err)
	}
	leased, err := acme.SessionQueue().Dequeue(ctx, a.ID, repo.DequeueParams{Owner: "acme-worker"})
	if err != nil || leased == nil {
		t.Fatalf("dequeue: %v %v", leased, err)
	}
	acmeLease := repo.Lease{ItemID: leased.ID, Token: *leased.LeaseToken}
	// a session without tenant
	n := repo.NewSession()
	if err := st.Sessions().Save(ctx, n); err != nil {
		t.Fatal(err)
	}
	// evil has a session of its own
	own := repo.NewSession()
	if err := evil.Sessions().Save(ctx, own); err != nil {
		t.Fatal(err)
	}
	// white-box: no API enumerates every row of every table (completed
	// queue items, compacts, summaries), and evil must change none.
	before := h.tableCounts(t, st)
	aBefore, err := acme.Sessions().Load(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}

	es, eq := evil.Sessions(), evil.SessionQueue()
	ops := []struct {
		name string
		run  func(id uuid.UUID, item uuid.UUID, lease repo.Lease) (bool, error)
	}{
		{"Load", func(id, _ uuid.UUID, _ repo.Lease) (bool, error) { s, err := es.Load(ctx, id); return s != nil, err }},
		{"Save (update)", func(id, _ uuid.UUID, _ repo.Lease) (bool, error) {
			c := repo.NewSession()
			c.ID, c.Version, c.TenantID = id, aBefore.Version, "evil"
			c.AddMessage(repo.Message{ID: "injected", Role: repo.RoleUser, Content: []byte(`"x"`)})
			return false, es.Save(ctx, c)
		}},
		{"Delete", func(id, _ uuid.UUID, _ repo.Lease) (bool, error) { ok, err := es.Delete(ctx, id); return ok, err }},
		{"ListChildren", func(id, _ uuid.UUID, _ repo.Lease) (bool, error) {
			c, err := es.ListChildren(ctx, id)
			return len(c) > 0, err
		}},
		{"AppendMessages", func(id, _ uuid.UUID, _ repo.Lease) (bool, error) {
			m, err := es.AppendMessages(ctx, id, repo.Message{ID: "injected", Role: repo.RoleUser, Content: []byte(`"x"`)})
			return len(m) > 0, err
		}},
		{"Fork", func(id, _ uuid.UUID, _ repo.Lease) (bool, error) {
			f, err := es.Fork(ctx, id, "")
			return f != nil, err
		}},
		{"AddSummary", func(id, _ uuid.UUID, _ repo.Lease) (bool, error) {
			_, err := es.AddSummary(ctx, repo.SummarySnapshot{SessionID: id, Summary: "x"})
			return false, err
		}},
		{"GetSummaries", func(id, _ uuid.UUID, _ repo.Lease) (bool, error) {
			s, err := es.GetSummaries(ctx, id)
			return len(s) > 0, err
		}},
		{"SetTodos", func(id, _ uuid.UUID, _ repo.Lease) (bool, error) {
			td, err := es.SetTodos(ctx, id, nil)
			return len(td) > 0, err
		}},
		{"Plans", func(id, _ uuid.UUID, _ repo.Lease) (bool, error) { p, err := es.Plans(ctx, id); return len(p) > 0, err }},
		{"Enqueue", func(id, _ uuid.UUID, _ repo.Lease) (bool, error) {
			it, err := eq.Enqueue(ctx, id, "x", 9)
			return it != nil, err
		}},
		{"Dequeue", func(id, _ uuid.UUID, _ repo.Lease) (bool, error) {
			it, err := eq.Dequeue(ctx, id, repo.DequeueParams{})
			return it != nil, err
		}},
		{"PendingQueue", func(id, _ uuid.UUID, _ repo.Lease) (bool, error) {
			p, err := eq.PendingQueue(ctx, id)
			return len(p) > 0, err
		}},
		{"CancelQueued", func(_, item uuid.UUID, _ repo.Lease) (bool, error) {
			ok, err := eq.CancelQueued(ctx, item)
			return ok, err
		}},
		{"Complete", func(_, _ uuid.UUID, l repo.Lease) (bool, error) { return false, eq.Complete(ctx, l) }},
		{"Fail", func(_, _ uuid.UUID, l repo.Lease) (bool, error) { return false, eq.Fail(ctx, l, "x") }},
		{"Release", func(_, _ uuid.UUID, l repo.Lease) (bool, error) { return false, eq.Release(ctx, l) }},
	}
	missing := uuid.New()
	missingLease := repo.Lease{ItemID: uuid.New(), Token: uuid.New()}
	checked := 0
	for _, op := range ops {
		want := testkit.Outcome(op.run(missing, uuid.New(), missingLease))
		for _, target := range []struct {
			name  string
			id    uuid.UUID
			item  uuid.UUID
			lease repo.Lease
		}{
			{"acme session", a.ID, pending.ID, acmeLease},
			{"untenanted session", n.ID, pending.ID, acmeLease},
		} {
			if got := testkit.Outcome(op.run(target.id, target.item, target.lease)); got != want {
				t.Errorf("evil %s on the %s: %s, want %s (as for a missing id)", op.name, target.name, got, want)
			}
			checked++
		}
	}
	// CleanupExpired through evil's view must not touch acme's expired session.
	if k, err := es.CleanupExpired(ctx, 0); err != nil || k != 0 {
		t.Errorf("evil CleanupExpired deleted %d sessions (%v), want 0", k, err)
	}
	// Listing: only evil's own session, whatever tenant the params name.
	for _, p := range []repo.ListParams{{}, {TenantID: sp("acme")}, {Limit: 1000}} {
		page, err := es.List(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Sessions {
			if r.ID != own.ID || r.TenantID != "evil" {
				t.Errorf("evil List(%+v) leaked session %s of tenant %q", p, r.ID, r.TenantID)
			}
		}
		if len(page.Sessions) != 1 {
			t.Errorf("evil List(%+v) returned %d sessions, want its own 1", p, len(page.Sessions))
		}
	}
	if after := h.tableCounts(t, st); !maps.Equal(before, after) { // white-box: as before
		t.Errorf("evil's calls changed rows: %v -> %v", before, after)
	}
	aAfter, err := acme.Sessions().Load(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if aAfter.Version != aBefore.Version || len(aAfter.Messages) != 1 || len(aAfter.Todos) != 1 || aAfter.CurrentPlan == nil {
		t.Errorf("acme's session changed: version %d->%d, %d messages, %d todos", aBefore.Version, aAfter.Version, len(aAfter.Messages), len(aAfter.Todos))
	}
	// Complete succeeds only on a processing item whose lease token is
	// acme's: the lease survived evil's calls.
	if err := acme.SessionQueue().Complete(ctx, acmeLease); err != nil {
		t.Errorf("acme's leased item lost its lease: its own Complete = %v", err)
	}
	t.Logf("tenant isolation: %d operations x 2 foreign targets = %d cross-tenant calls, each indistinguishable from a missing id; List leaks 0; foreign rows changed 0", len(ops), checked)
}
