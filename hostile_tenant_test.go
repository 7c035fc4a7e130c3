package agentstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

// outcome summarises an operation's result for comparison: whether it
// found anything and which sentinel its error matches.
func outcome(found bool, err error) string {
	switch {
	case err == nil:
		return fmt.Sprintf("ok(found=%v)", found)
	case errors.Is(err, agentstore.ErrNotFound):
		return "ErrNotFound"
	case errors.Is(err, agentstore.ErrLockLost):
		return "ErrLockLost"
	case errors.Is(err, agentstore.ErrInvalidInput):
		return "ErrInvalidInput"
	case errors.Is(err, agentstore.ErrConflict):
		return "ErrConflict"
	}
	return "error: " + err.Error()
}

// TestHostileTenantIsolation: through the view of tenant "evil", every
// session and queue operation aimed at a session of tenant "acme" (and at a
// session without tenant) behaves exactly like the same operation aimed at
// an id that does not exist, and listing never returns another tenant's id.
// Afterwards acme's data is unchanged.
func TestHostileTenantIsolation(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clock := newTestClock()
		st := h.New(t, agentstore.WithClock(clock.Now))
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
		before := tableCounts(t, st)
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
			want := outcome(op.run(missing, uuid.New(), missingLease))
			for _, target := range []struct {
				name  string
				id    uuid.UUID
				item  uuid.UUID
				lease repo.Lease
			}{
				{"acme session", a.ID, pending.ID, acmeLease},
				{"untenanted session", n.ID, pending.ID, acmeLease},
			} {
				if got := outcome(op.run(target.id, target.item, target.lease)); got != want {
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
		for _, p := range []repo.ListParams{{}, {TenantID: ptrTo("acme")}, {Limit: 1000}} {
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
		if after := tableCounts(t, st); !mapsEqual(before, after) {
			t.Errorf("evil's calls changed rows: %v -> %v", before, after)
		}
		aAfter, err := acme.Sessions().Load(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		if aAfter.Version != aBefore.Version || len(aAfter.Messages) != 1 || len(aAfter.Todos) != 1 || aAfter.CurrentPlan == nil {
			t.Errorf("acme's session changed: version %d->%d, %d messages, %d todos", aBefore.Version, aAfter.Version, len(aAfter.Messages), len(aAfter.Todos))
		}
		if c := tableCount(t, st, models.TableQueue, "status = ? AND lease_token = ?", "processing", acmeLease.Token); c != 1 {
			t.Errorf("acme's leased item lost its lease")
		}
		if err := acme.SessionQueue().Complete(ctx, acmeLease); err != nil {
			t.Errorf("acme's own lease no longer completes: %v", err)
		}
		relLogf(t, "tenant isolation: %d operations x 2 foreign targets = %d cross-tenant calls, each indistinguishable from a missing id; List leaks 0; foreign rows changed 0", len(ops), checked)
	})
}

func ptrTo[T any](v T) *T { return &v }
