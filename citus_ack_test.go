package agentstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/internal/testkit"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// TestOrchAckStatementsSingleKeyCitus: on the route of a row-distributed
// deployment (PostgreSQL with its fast paths switched off,
// docs/distributed.md), an orchestration ack that starts two
// sub-orchestrations, sends a message to its own instance, schedules an
// activity and cancels one sends only single-key statements (one shard on
// Citus): the messages for other instances are written one statement per
// instance, not one multi-row insert over several. Each message reaches
// its instance. The other variants (one node) write them in one statement
// and are checked for the outcome only.
func TestOrchAckStatementsSingleKeyCitus(t *testing.T) {
	t.Parallel()
	for _, v := range statementVariants() {
		t.Run(v.name, func(t *testing.T) {
			audit, e := auditedPEnv(t, v)
			p := "p"
			e.StartInstance(t, p, nil)
			e.Enqueue(t, &duroxide.ExternalRaised{Instance: p, Name: "go", Data: "x"})
			it := e.Fetch(t)
			audit.reset()
			e.Ack(t, it, duroxide.OrchestrationAck{
				HistoryDelta: []duroxide.Event{testkit.Ev(p, 1, 2, &duroxide.ActivityScheduledEvent{Name: "act", Input: "in"})},
				WorkerItems:  []duroxide.WorkItem{testkit.Activity(p, 1, 2)},
				OrchestratorItems: []duroxide.WorkItem{
					&duroxide.StartOrchestration{Instance: "c1", Orchestration: "Orch", Input: "{}", ParentInstance: &p, ParentID: ptrU(3), ExecutionID: 1},
					&duroxide.TimerFired{Instance: p, ExecutionID: 1, ID: 4, FireAtMS: 1},
					&duroxide.StartOrchestration{Instance: "c2", Orchestration: "Orch", Input: "{}", ParentInstance: &p, ParentID: ptrU(5), ExecutionID: 1},
					&duroxide.ExternalRaised{Instance: "c1", Name: "hello", Data: "y"},
				},
				CancelledActivities: []duroxide.ScheduledActivityIdentifier{{Instance: p, ExecutionID: 1, ActivityID: 9}},
				Metadata:            testkit.RunningMeta(nil),
			})
			if v.name == "postgres-general" {
				seen := 0
				for en, n := range audit.sent(".AckOrchestrationItem") {
					seen += n
					if en.class != "single" && en.class != "none" {
						t.Errorf("AckOrchestrationItem sent a %s statement (%d times): %s", en.class, n, en.template)
					}
				}
				if seen == 0 {
					t.Fatal("the audit saw no statement of AckOrchestrationItem")
				}
			}
			// every message reached its instance, in its order
			got := map[string][]string{}
			for range 3 {
				it := e.Fetch(t)
				for _, m := range it.Messages {
					got[it.Instance] = append(got[it.Instance], m.WorkItemType())
				}
				if err := e.P.AbandonOrchestrationItem(e.Ctx, it.LockToken, time.Hour, true); err != nil {
					t.Fatal(err)
				}
			}
			want := map[string]string{"c1": "StartOrchestration ExternalRaised", "c2": "StartOrchestration", p: "TimerFired"}
			for inst, w := range want {
				if g := strings.Join(got[inst], " "); g != w {
					t.Errorf("instance %s got %q, want %q (all: %v)", inst, g, w, got)
				}
			}
			if n := e.count(t, "worker_queue"); n != 1 {
				t.Errorf("worker queue holds %d items, want the one activity", n)
			}
		})
	}
}

// auditedPEnv opens a migrated Store of variant v on a test clock, with
// an audit recording its statements, and returns both.
func auditedPEnv(t *testing.T, v statementVariant) (*citusAudit, *pEnv) {
	t.Helper()
	audit := &citusAudit{dquoted: v.d == agentstore.SQLite}
	clock := newTestClock()
	h := newHarness(t, v.d)
	st := h.New(t, append(v.opts, agentstore.WithLogger(audit), agentstore.WithClock(clock.Now))...)
	return audit, newPEnvOn(h, st, clock)
}

// TestSessionQueueIDOnlyLeaseRoutedCitus: on the Citus route, Complete,
// Fail and Release of a lease built from the item id and token alone
// (Lease.SessionID uuid.Nil) through the Store whose Dequeue handed it
// out send only single-key statements (the Store remembers the lease's
// session); through another Store, which does not, they still end the
// lease (by id alone), and a stale id-only lease (its lease ended, so
// forgotten) is still ErrLockLost.
// The other variants check the outcomes only.
func TestSessionQueueIDOnlyLeaseRoutedCitus(t *testing.T) {
	t.Parallel()
	for _, v := range statementVariants() {
		t.Run(v.name, func(t *testing.T) {
			audit := &citusAudit{dquoted: v.d == agentstore.SQLite}
			h := newHarness(t, v.d)
			st := h.New(t, append(v.opts, agentstore.WithLogger(audit))...)
			other := h.Open(t, v.opts...)
			ctx := context.Background()
			s := repo.NewSession()
			if err := st.Sessions().Save(ctx, s); err != nil {
				t.Fatal(err)
			}
			q := st.SessionQueue()
			for i := range 4 {
				if _, err := q.Enqueue(ctx, s.ID, fmt.Sprintf("item %d", i), 0); err != nil {
					t.Fatal(err)
				}
			}
			dequeue := func() *repo.QueueItem {
				t.Helper()
				it, err := q.Dequeue(ctx, s.ID, repo.DequeueParams{Lease: time.Minute})
				if err != nil || it == nil {
					t.Fatalf("dequeue: %v, %v", it, err)
				}
				return it
			}
			idOnly := func(it *repo.QueueItem) repo.Lease { return repo.Lease{ItemID: it.ID, Token: *it.LeaseToken} }
			a, b, c, d := dequeue(), dequeue(), dequeue(), dequeue()
			audit.reset()
			if err := q.Complete(ctx, idOnly(a)); err != nil {
				t.Fatalf("complete: %v", err)
			}
			if err := q.Fail(ctx, idOnly(b), "no"); err != nil {
				t.Fatalf("fail: %v", err)
			}
			if err := q.Release(ctx, idOnly(c)); err != nil {
				t.Fatalf("release: %v", err)
			}
			if v.name == "postgres-general" {
				for en, n := range audit.sent("") {
					if en.class != "single" && en.class != "none" {
						t.Errorf("%s sent a %s statement (%d times): %s", en.op, en.class, n, en.template)
					}
				}
			}
			// an ended lease is forgotten: found by id alone, and stale
			if err := q.Complete(ctx, idOnly(a)); !errors.Is(err, agentstore.ErrLockLost) {
				t.Fatalf("second complete of an id-only lease: %v, want ErrLockLost", err)
			}
			// another Store does not know the lease: found by id alone
			if err := other.SessionQueue().Complete(ctx, idOnly(d)); err != nil {
				t.Fatalf("complete through another Store: %v", err)
			}
			for it, want := range map[*repo.QueueItem]repo.QueueStatus{a: repo.QueueCompleted, b: repo.QueueFailed, c: repo.QueuePending, d: repo.QueueCompleted} {
				got, err := q.Item(ctx, it.ID)
				if err != nil || got.Status != want {
					t.Fatalf("item %s: %v, %v; want status %s", it.Content, got, err, want)
				}
			}
		})
	}
}
