package agentstoretest

import (
	"context"
	"testing"

	"github.com/agentstore/agentstore/internal/testkit"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// pEnv is one provider under test with its injected clock; the helpers
// themselves are testkit's (shared with the root package's tests).
type pEnv struct {
	h     *harness
	st    Store
	p     duroxide.Provider
	a     duroxide.ProviderAdmin
	clock *testClock
	ctx   context.Context
}

const testLock = testkit.TestLock

func newPEnv(t *testing.T, h *harness) *pEnv {
	t.Helper()
	clock := newTestClock()
	st := h.New(t, withClock(clock.Now))
	return &pEnv{h: h, st: st, p: st.Provider(), a: st.ProviderAdmin(), clock: clock, ctx: context.Background()}
}

// other opens another handle on the same backend and clock.
func (e *pEnv) other(t *testing.T) duroxide.Provider {
	t.Helper()
	return e.h.Open(t, withClock(e.clock.Now)).Provider()
}

func (e *pEnv) kit() *testkit.ProviderEnv {
	return &testkit.ProviderEnv{P: e.p, A: e.a, Clock: e.clock, Ctx: e.ctx}
}

func (e *pEnv) enqueue(t *testing.T, w duroxide.WorkItem) { t.Helper(); e.kit().Enqueue(t, w) }

func (e *pEnv) fetch(t *testing.T) *duroxide.OrchestrationItem { t.Helper(); return e.kit().Fetch(t) }

func (e *pEnv) fetchNone(t *testing.T) { t.Helper(); e.kit().FetchNone(t) }

func (e *pEnv) ack(t *testing.T, it *duroxide.OrchestrationItem, a duroxide.OrchestrationAck) {
	t.Helper()
	e.kit().Ack(t, it, a)
}

// startInstance enqueues a start, fetches it and acks the first turn
// (OrchestrationStarted, status Running, name+version).
func (e *pEnv) startInstance(t *testing.T, inst string, parent *string) {
	t.Helper()
	e.kit().StartInstance(t, inst, parent)
}

// finishInstance completes (status) the current execution of inst via an external event turn.
func (e *pEnv) finishInstance(t *testing.T, inst, status string, nextEvent uint64) {
	t.Helper()
	e.kit().FinishInstance(t, inst, status, nextEvent)
}

// count returns the number of rows of table base.
func (e *pEnv) count(t *testing.T, base string) int64 {
	t.Helper()
	return e.h.count(t, e.st, base, nil)
}

// update plants set on the rows of table base that where selects.
func (e *pEnv) update(t *testing.T, base string, where, set Row) {
	t.Helper()
	e.h.update(t, e.st, base, where, set)
}

func startItem(inst string, parent *string) *duroxide.StartOrchestration {
	return testkit.StartItem(inst, parent)
}

func startedEv(inst string, exec, id uint64, parent *string) duroxide.Event {
	return testkit.StartedEv(inst, exec, id, parent)
}

func ev(inst string, exec, id uint64, k duroxide.EventKind) duroxide.Event {
	return testkit.Ev(inst, exec, id, k)
}

func runningMeta(parent *string) duroxide.ExecutionMetadata { return testkit.RunningMeta(parent) }

func sp(s string) *string { return testkit.Sp(s) }

func activity(inst string, exec, id uint64) *duroxide.ActivityExecute {
	return testkit.Activity(inst, exec, id)
}

func wantErr(t *testing.T, err, target error) { t.Helper(); testkit.WantErr(t, err, target) }
