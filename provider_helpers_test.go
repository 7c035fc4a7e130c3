package agentstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// pEnv is one provider under test with its injected clock.
type pEnv struct {
	h     *harness
	st    *agentstore.Store
	p     duroxide.Provider
	a     duroxide.ProviderAdmin
	clock *testClock
	ctx   context.Context
}

const testLock = 30 * time.Second

func newPEnv(t *testing.T, h *harness) *pEnv {
	t.Helper()
	clock := newTestClock()
	st := h.New(t, agentstore.WithClock(clock.Now))
	return &pEnv{h: h, st: st, p: st.Provider(), a: st.ProviderAdmin(), clock: clock, ctx: context.Background()}
}

// other opens another Store handle on the same database and clock.
func (e *pEnv) other(t *testing.T) duroxide.Provider {
	t.Helper()
	return e.h.Open(t, agentstore.WithClock(e.clock.Now)).Provider()
}

func (e *pEnv) enqueue(t *testing.T, w duroxide.WorkItem) {
	t.Helper()
	if err := e.p.EnqueueForOrchestrator(e.ctx, w, 0); err != nil {
		t.Fatalf("enqueue %s: %v", w.WorkItemType(), err)
	}
}

func (e *pEnv) fetch(t *testing.T) *duroxide.OrchestrationItem {
	t.Helper()
	it, err := e.p.FetchOrchestrationItem(e.ctx, testLock, 0, nil)
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	if it == nil {
		t.Fatalf("fetch: got nothing, want an item")
	}
	return it
}

func (e *pEnv) fetchNone(t *testing.T) {
	t.Helper()
	it, err := e.p.FetchOrchestrationItem(e.ctx, testLock, 0, nil)
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	if it != nil {
		t.Fatalf("fetch: got instance %s (%d messages), want nothing", it.Instance, len(it.Messages))
	}
}

func (e *pEnv) ack(t *testing.T, it *duroxide.OrchestrationItem, a duroxide.OrchestrationAck) {
	t.Helper()
	if a.ExecutionID == 0 {
		a.ExecutionID = it.ExecutionID
	}
	if err := e.p.AckOrchestrationItem(e.ctx, it.LockToken, a); err != nil {
		t.Fatalf("ack %s: %v", it.Instance, err)
	}
}

// startInstance enqueues a start, fetches it and acks the first turn
// (OrchestrationStarted, status Running, name+version).
func (e *pEnv) startInstance(t *testing.T, inst string, parent *string) {
	t.Helper()
	e.enqueue(t, startItem(inst, parent))
	it := e.fetch(t)
	if it.Instance != inst {
		t.Fatalf("fetched %s, want %s", it.Instance, inst)
	}
	e.ack(t, it, duroxide.OrchestrationAck{ExecutionID: 1,
		HistoryDelta: []duroxide.Event{startedEv(inst, 1, 1, parent)},
		Metadata:     runningMeta(parent)})
}

// finishInstance completes (status) the current execution of inst via an external event turn.
func (e *pEnv) finishInstance(t *testing.T, inst, status string, nextEvent uint64) {
	t.Helper()
	e.enqueue(t, &duroxide.ExternalRaised{Instance: inst, Name: "go", Data: "x"})
	it := e.fetch(t)
	if it.Instance != inst {
		t.Fatalf("fetched %s, want %s", it.Instance, inst)
	}
	e.ack(t, it, duroxide.OrchestrationAck{HistoryDelta: []duroxide.Event{ev(inst, it.ExecutionID, nextEvent, &duroxide.OrchestrationCompletedEvent{Output: "done"})},
		Metadata: duroxide.ExecutionMetadata{Status: sp(status), Output: sp("done")}})
}

func startItem(inst string, parent *string) *duroxide.StartOrchestration {
	return &duroxide.StartOrchestration{Instance: inst, Orchestration: "Orch", Input: "{}", Version: sp("1.0.0"), ParentInstance: parent, ExecutionID: 1}
}

func startedEv(inst string, exec, id uint64, parent *string) duroxide.Event {
	return ev(inst, exec, id, &duroxide.OrchestrationStartedEvent{Name: "Orch", Version: "1.0.0", Input: "{}", ParentInstance: parent})
}

func ev(inst string, exec, id uint64, k duroxide.EventKind) duroxide.Event {
	return duroxide.Event{EventID: id, InstanceID: inst, ExecutionID: exec, TimestampMS: 1, DuroxideVersion: "0.1.29", Kind: k}
}

func runningMeta(parent *string) duroxide.ExecutionMetadata {
	return duroxide.ExecutionMetadata{Status: sp(duroxide.StatusRunning), OrchestrationName: sp("Orch"), OrchestrationVersion: sp("1.0.0"), ParentInstanceID: parent}
}

func sp(s string) *string { return &s }

func activity(inst string, exec, id uint64) *duroxide.ActivityExecute {
	return &duroxide.ActivityExecute{Instance: inst, ExecutionID: exec, ID: id, Name: "act", Input: "in"}
}

func wantErr(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error = %v, want errors.Is %v", err, target)
	}
	var pe *duroxide.ProviderError
	if !errors.As(err, &pe) {
		t.Fatalf("error %v is not a *duroxide.ProviderError", err)
	}
	if pe.Retryable || errors.Is(err, agentstore.ErrRetryable) {
		t.Fatalf("error %v is retryable, want permanent", err)
	}
}

// count returns the number of rows of table base.
func (e *pEnv) count(t *testing.T, base string) int64 {
	t.Helper()
	var n int64
	if err := e.st.DB(e.ctx).Table(e.st.Table(base)).Count(&n).Error; err != nil {
		t.Fatalf("count %s: %v", base, err)
	}
	return n
}

func (e *pEnv) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if err := e.st.DB(e.ctx).Exec(sql, args...).Error; err != nil {
		t.Fatalf("exec %q: %v", sql, err)
	}
}

var _ = models.TableHistory
