package agentstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/internal/testkit"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// TestMigrateDistributionKeysKeepRows: a database at V11 holding rows of
// every table whose key V13 changes (compacts, summaries, todos, plans,
// queue, a fork below its parent, orchestrator items, worker items with
// and without an instance) is upgraded on both dialects: Verify is clean,
// every row reads back through the API, the todo and plan upserts work on
// the new keys, deleting the parent deletes its fork (the cascade the
// dropped foreign key did), a worker item stored without an instance is
// still fetched, and on SQLite the worker queue's AUTOINCREMENT sequence
// survives the rebuild (a new item's id is above every id ever used).
func TestMigrateDistributionKeysKeepRows(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		old := h.Open(t, agentstore.WithTablePrefix("dk_"))
		if err := old.MigrateTo(ctx, 12); err != nil {
			t.Fatal(err)
		}
		r := old.Sessions()
		parent := repo.NewSession()
		parent.AddMessage(repo.Message{ID: "m1", Role: repo.RoleUser, Content: []byte(`[{"type":"text","text":"hello"}]`)})
		if err := r.Save(ctx, parent); err != nil {
			t.Fatal(err)
		}
		fork, err := r.Fork(ctx, parent.ID, "m1")
		if err != nil {
			t.Fatal(err)
		}
		grand, err := r.Fork(ctx, fork.ID, "m1")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := old.SessionQueue().Enqueue(ctx, parent.ID, "next", 1); err != nil {
			t.Fatal(err)
		}
		now := time.Now().UTC()
		exec := func(q string, args ...any) {
			t.Helper()
			if _, err := old.SQLDB().ExecContext(ctx, placeholders(h, q), args...); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		todo, plan, compact, summary := uuid.New(), uuid.New(), uuid.New(), uuid.New()
		exec(`INSERT INTO `+quotedTable(h, old, models.TableTodos)+` (id, session_id, position, content, active_form, status, created_at) VALUES ($1, $2, 0, 'a', 'doing a', 'pending', $3)`, todo, parent.ID, now)
		exec(`INSERT INTO `+quotedTable(h, old, models.TablePlans)+` (id, session_id, content, status, created_at) VALUES ($1, $2, 'the plan', 'draft', $3)`, plan, parent.ID, now)
		exec(`INSERT INTO `+quotedTable(h, old, models.TableCompacts)+` (id, session_id, summary, created_at) VALUES ($1, $2, 'compacted', $3)`, compact, parent.ID, now)
		exec(`INSERT INTO `+quotedTable(h, old, models.TableSummaries)+` (id, session_id, summary, created_at) VALUES ($1, $2, 'summary', $3)`, summary, parent.ID, now)
		p := old.Provider()
		if err := p.EnqueueForWorker(ctx, &duroxide.ActivityExecute{Instance: "dk-1", ExecutionID: 1, ID: 1, Name: "act", Input: "x"}); err != nil {
			t.Fatal(err)
		}
		// A worker row without an instance, as releases before V13 stored
		// items that are not activities; then the highest id is deleted,
		// so only the AUTOINCREMENT sequence remembers it.
		wq := quotedTable(h, old, models.TableWorkerQueue)
		exec(`INSERT INTO ` + wq + ` (work_item, visible_at, created_at, attempt_count) SELECT work_item, visible_at, created_at, 0 FROM ` + wq)
		exec(`INSERT INTO ` + wq + ` (work_item, visible_at, created_at, attempt_count, instance_id) SELECT work_item, visible_at, created_at, 0, 'gone' FROM ` + wq + ` WHERE instance_id IS NULL`)
		var maxID int64
		if err := old.SQLDB().QueryRowContext(ctx, `SELECT MAX(id) FROM `+wq).Scan(&maxID); err != nil {
			t.Fatal(err)
		}
		exec(`DELETE FROM `+wq+` WHERE id = $1`, maxID)
		if err := p.EnqueueForOrchestrator(ctx, &duroxide.StartOrchestration{Instance: "dk-2", Orchestration: "Orch", Input: "{}", Version: testkit.Sp("1.0.0"), ExecutionID: 1}, 0); err != nil {
			t.Fatal(err)
		}

		st := h.Open(t, agentstore.WithTablePrefix("dk_"))
		if err := st.Migrate(ctx); err != nil {
			t.Fatalf("upgrade from V11: %v", err)
		}
		testkit.VerifyClean(t, st)
		r = st.Sessions()
		got, err := r.Load(ctx, parent.ID)
		if err != nil || len(got.Messages) != 1 || len(got.Todos) != 1 || got.Todos[0].ID != todo || len(got.CompactHistory) != 1 || got.CompactHistory[0].ID != compact {
			t.Fatalf("parent after upgrade: %+v, %v", got, err)
		}
		if sums, err := r.GetSummaries(ctx, parent.ID); err != nil || len(sums) != 1 || sums[0].ID != summary {
			t.Fatalf("summaries after upgrade: %+v, %v", sums, err)
		}
		if plans, err := r.Plans(ctx, parent.ID); err != nil || len(plans) != 1 || plans[0].ID != plan {
			t.Fatalf("plans after upgrade: %+v, %v", plans, err)
		}
		if q, err := st.SessionQueue().PendingQueue(ctx, parent.ID); err != nil || len(q) != 1 {
			t.Fatalf("queue after upgrade: %+v, %v", q, err)
		}
		// The upserts on the new keys: update the stored todo, add one.
		if out, err := r.SetTodos(ctx, parent.ID, []repo.TodoItem{{ID: todo, Content: "a2", ActiveForm: "x"}, {Content: "b", ActiveForm: "y"}}); err != nil || len(out) != 2 {
			t.Fatalf("SetTodos after upgrade: %+v, %v", out, err)
		}
		if got, err := r.Load(ctx, parent.ID); err != nil || len(got.Todos) != 2 || got.Todos[0].Content != "a2" {
			t.Fatalf("todos after SetTodos: %+v, %v", got, err)
		}
		// A fresh worker item's id is above every id the queue ever used.
		if err := st.Provider().EnqueueForWorker(ctx, &duroxide.ActivityExecute{Instance: "dk-3", ExecutionID: 1, ID: 1, Name: "act", Input: "y"}); err != nil {
			t.Fatal(err)
		}
		var newID int64
		if err := st.SQLDB().QueryRowContext(ctx, `SELECT MAX(id) FROM `+quotedTable(h, st, models.TableWorkerQueue)).Scan(&newID); err != nil || newID <= maxID {
			t.Fatalf("new worker item id %d (%v), the deleted one was %d: an id was reused", newID, err, maxID)
		}
		var nullInst int64
		if err := st.SQLDB().QueryRowContext(ctx, `SELECT COUNT(*) FROM `+quotedTable(h, st, models.TableWorkerQueue)+` WHERE instance_id = ''`).Scan(&nullInst); err != nil || nullInst != 1 {
			t.Fatalf("worker rows without an instance after upgrade: %d (%v), want 1 with ''", nullInst, err)
		}
		for range 3 {
			l, err := st.Provider().FetchWorkItem(ctx, time.Minute, 0, nil, duroxide.TagFilter{})
			if err != nil || l == nil {
				t.Fatalf("worker item after upgrade: %v, %v", l, err)
			}
		}
		if it, err := st.Provider().FetchOrchestrationItem(ctx, time.Minute, 0, nil); err != nil || it == nil || it.Instance != "dk-2" {
			t.Fatalf("orchestrator item after upgrade: %+v, %v", it, err)
		}
		// Deleting the parent deletes the forks below it.
		if ok, err := r.Delete(ctx, parent.ID); err != nil || !ok {
			t.Fatalf("Delete = %v, %v", ok, err)
		}
		for _, id := range []uuid.UUID{fork.ID, grand.ID} {
			if _, err := r.Load(ctx, id); !errors.Is(err, agentstore.ErrNotFound) {
				t.Fatalf("fork %s after its parent's Delete: %v, want ErrNotFound", id, err)
			}
		}
	})
}

// TestOrchLeaseTokensRouteByInstance: an orchestration lease token names
// its instance (so ack, abandon and renew pin the instance id, the
// distribution column), yet a token without it — as builds before this
// one handed out, still held across an upgrade — renews, abandons and
// acks as before, and a token whose instance part names another instance
// matches nothing (ErrInvalidLockToken), on both dialects.
func TestOrchLeaseTokensRouteByInstance(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		st := h.New(t)
		p := st.Provider()
		start := func(inst string) *duroxide.OrchestrationItem {
			t.Helper()
			if err := p.EnqueueForOrchestrator(ctx, &duroxide.StartOrchestration{Instance: inst, Orchestration: "Orch", Input: "{}", Version: testkit.Sp("1.0.0"), ExecutionID: 1}, 0); err != nil {
				t.Fatal(err)
			}
			it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
			if err != nil || it == nil || it.Instance != inst {
				t.Fatalf("fetch %s: %+v, %v", inst, it, err)
			}
			return it
		}
		a, b := start("route-a"), start("route-b/ü.x")
		dotA, dotB := strings.LastIndexByte(a.LockToken, '.'), strings.LastIndexByte(b.LockToken, '.')
		if dotA <= 0 || dotB <= 0 {
			t.Fatalf("tokens %q, %q carry no instance", a.LockToken, b.LockToken)
		}
		// a's stored token with b's instance: nothing matches, a stays locked
		crossed := a.LockToken[:dotA] + b.LockToken[dotB:]
		wantErr := func(err error) {
			t.Helper()
			if !errors.Is(err, agentstore.ErrInvalidLockToken) {
				t.Fatalf("crossed token: %v, want ErrInvalidLockToken", err)
			}
		}
		wantErr(p.RenewOrchestrationItemLock(ctx, crossed, time.Minute))
		wantErr(p.AbandonOrchestrationItem(ctx, crossed, 0, false))
		wantErr(p.AckOrchestrationItem(ctx, crossed, duroxide.OrchestrationAck{ExecutionID: 1}))
		// the old form (the stored token alone) still works
		old := a.LockToken[:dotA]
		if err := p.RenewOrchestrationItemLock(ctx, old, time.Minute); err != nil {
			t.Fatalf("renew with the token without its instance: %v", err)
		}
		if err := p.AbandonOrchestrationItem(ctx, old, 0, false); err != nil {
			t.Fatalf("abandon with the token without its instance: %v", err)
		}
		again, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		if err != nil || again == nil || again.Instance != "route-a" {
			t.Fatalf("refetch: %+v, %v", again, err)
		}
		ack := func(it *duroxide.OrchestrationItem, tok string) {
			t.Helper()
			ev := func(id uint64, k duroxide.EventKind) duroxide.Event {
				return duroxide.Event{EventID: id, InstanceID: it.Instance, ExecutionID: 1, TimestampMS: 1, DuroxideVersion: "0.1.29", Kind: k}
			}
			if err := p.AckOrchestrationItem(ctx, tok, duroxide.OrchestrationAck{ExecutionID: 1,
				HistoryDelta: []duroxide.Event{ev(1, &duroxide.OrchestrationStartedEvent{Name: "Orch", Version: "1.0.0", Input: "{}"})},
				Metadata:     duroxide.ExecutionMetadata{OrchestrationName: testkit.Sp("Orch"), OrchestrationVersion: testkit.Sp("1.0.0")}}); err != nil {
				t.Fatalf("ack %s: %v", it.Instance, err)
			}
		}
		ack(again, again.LockToken[:strings.LastIndexByte(again.LockToken, '.')]) // old form
		ack(b, b.LockToken)
		for _, inst := range []string{"route-a", "route-b/ü.x"} {
			if hist, err := p.Read(ctx, inst); err != nil || len(hist) != 1 {
				t.Fatalf("history of %s: %d events, %v", inst, len(hist), err)
			}
		}
	})
}

// TestWorkLeaseTokensRouteByInstance: a worker lease token names its
// row's instance too (stored~instance.rowid); the form without the
// instance (builds before this one) renews and acks as before, and a token
// naming another instance matches nothing, on both dialects.
func TestWorkLeaseTokensRouteByInstance(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		st := h.New(t)
		p := st.Provider()
		for _, inst := range []string{"w-a", "w-b"} {
			if err := p.EnqueueForWorker(ctx, &duroxide.ActivityExecute{Instance: inst, ExecutionID: 1, ID: 1, Name: "act", Input: inst}); err != nil {
				t.Fatal(err)
			}
		}
		fetch := func() *duroxide.WorkItemLease {
			t.Helper()
			l, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, duroxide.TagFilter{})
			if err != nil || l == nil {
				t.Fatalf("fetch: %v, %v", l, err)
			}
			return l
		}
		a, b := fetch(), fetch()
		split := func(tok string) (stored, inst, id string) {
			t.Helper()
			dot, tilde := strings.LastIndexByte(tok, '.'), strings.LastIndexByte(tok, '~')
			if dot <= 0 || tilde <= 0 || tilde > dot {
				t.Fatalf("token %q does not carry its instance", tok)
			}
			return tok[:tilde], tok[tilde:dot], tok[dot:]
		}
		as, ai, aid := split(a.LockToken)
		_, bi, _ := split(b.LockToken)
		if ai == bi {
			t.Fatalf("two instances, one instance part %q", ai)
		}
		crossed := as + bi + aid
		if err := p.RenewWorkItemLock(ctx, crossed, time.Minute); !errors.Is(err, agentstore.ErrInvalidLockToken) {
			t.Fatalf("renew with another instance: %v, want ErrInvalidLockToken", err)
		}
		if err := p.AckWorkItem(ctx, crossed, nil); !errors.Is(err, agentstore.ErrInvalidLockToken) {
			t.Fatalf("ack with another instance: %v, want ErrInvalidLockToken", err)
		}
		old := as + aid
		if err := p.RenewWorkItemLock(ctx, old, time.Minute); err != nil {
			t.Fatalf("renew with the token without its instance: %v", err)
		}
		if err := p.AckWorkItem(ctx, old, &duroxide.ActivityCompleted{Instance: "w-a", ExecutionID: 1, ID: 1, Result: "r"}); err != nil {
			t.Fatalf("ack with the token without its instance: %v", err)
		}
		if err := p.AbandonWorkItem(ctx, b.LockToken, 0, false); err != nil {
			t.Fatalf("abandon: %v", err)
		}
		if l := fetch(); l.Item.(*duroxide.ActivityExecute).Instance != "w-b" {
			t.Fatalf("refetched %+v", l.Item)
		}
	})
}
