package agentstoretest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/internal/testkit"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// errorsTests are the Errors area's tests of this file.
func errorsTests() []test {
	return tests(
		test{"ProviderCallerDeadlineIsNotRetryable", testProviderCallerDeadlineIsNotRetryable},
		test{"ProviderCustomTablePrefix", testProviderCustomTablePrefix},
		test{"ProviderRejectsInvalidUTF8", testProviderRejectsInvalidUTF8},
	)
}

// testProviderCallerDeadlineIsNotRetryable: a call whose context deadline
// has passed fails with a *duroxide.ProviderError naming the operation that
// matches context.DeadlineExceeded and is not retryable (retrying with the
// same context cannot succeed), for fetches and enqueues alike.
func testProviderCallerDeadlineIsNotRetryable(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, err := e.p.FetchOrchestrationItem(ctx, testLock, 0, nil)
	var pe *duroxide.ProviderError
	if !errors.As(err, &pe) || pe.Retryable || errors.Is(err, agentstore.ErrRetryable) || !errors.Is(err, context.DeadlineExceeded) || pe.Op != "fetch_orchestration_item" {
		t.Fatalf("deadline error = %#v", err)
	}
	err = e.p.EnqueueForWorker(ctx, activity("i1", 1, 1))
	if !errors.As(err, &pe) || pe.Retryable || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("enqueue deadline error = %v", err)
	}
}

// testProviderCustomTablePrefix: the provider works end to end (start
// turn, worker item, admin list) on a store migrated with a custom table
// prefix.
func testProviderCustomTablePrefix(t *testing.T, h *harness) {
	st := h.New(t, withTablePrefix("orch_"))
	testkit.ProviderCycle(t, st.Provider(), st.ProviderAdmin())
}

// testProviderRejectsInvalidUTF8: invalid UTF-8 in an enqueued message, a
// worker item, a history event or the execution metadata of an ack is
// refused with a permanent ErrInvalidInput; nothing is written and the
// turn's lock stays usable.
func testProviderRejectsInvalidUTF8(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	bad := "bad\xff"
	wantErr(t, e.p.EnqueueForOrchestrator(e.ctx, &duroxide.ExternalRaised{Instance: "i1", Name: bad}, 0), agentstore.ErrInvalidInput)
	wantErr(t, e.p.EnqueueForWorker(e.ctx, activity(bad, 1, 1)), agentstore.ErrInvalidInput)
	e.enqueue(t, startItem("i1", nil))
	it := e.fetch(t)
	wantErr(t, e.p.AckOrchestrationItem(e.ctx, it.LockToken, duroxide.OrchestrationAck{ExecutionID: 1,
		HistoryDelta: []duroxide.Event{ev("i1", 1, 1, &duroxide.ExternalEventEvent{Name: "x", Data: bad})}}), agentstore.ErrInvalidInput)
	wantErr(t, e.p.AckOrchestrationItem(e.ctx, it.LockToken, duroxide.OrchestrationAck{ExecutionID: 1,
		Metadata: duroxide.ExecutionMetadata{Output: sp(bad)}}), agentstore.ErrInvalidInput)
	// nothing was written and the lock is still usable
	e.ack(t, it, duroxide.OrchestrationAck{HistoryDelta: []duroxide.Event{startedEv("i1", 1, 1, nil)}, Metadata: runningMeta(nil)})
	if m, _ := e.a.GetSystemMetrics(e.ctx); m.TotalEvents != 1 {
		t.Fatalf("metrics = %+v", m)
	}
}

// errorsDriverTests is the Errors area's test of a driver error.
func errorsDriverTests() []test {
	return tests(test{"ProviderDriverErrorsCarryNoDriverText", testProviderDriverErrorsCarryNoDriverText})
}

// testProviderDriverErrorsCarryNoDriverText: a provider call that meets a
// database error (here: a table dropped by hand) returns a
// *duroxide.ProviderError matching the documented sentinel
// (ErrSchemaBehind) whose message names the operation and holds no driver
// text (SQLSTATE, "ERROR:", sqlite3's "no such table").
func testProviderDriverErrorsCarryNoDriverText(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	e.startInstance(t, "i1", nil)
	// plant: the key-value delta table disappears.
	if err := h.ops(t).DropTable(e.ctx, e.st, models.TableKVDelta); err != nil {
		t.Fatal(err)
	}
	_, err := e.p.GetKVAllValues(e.ctx, "i1")
	var pe *duroxide.ProviderError
	if !errors.As(err, &pe) || !errors.Is(err, agentstore.ErrSchemaBehind) || pe.Op == "" {
		t.Fatalf("error = %#v, want a *ProviderError matching ErrSchemaBehind", err)
	}
	for _, raw := range []string{"SQLSTATE", "ERROR:", "no such table", "does not exist"} {
		if strings.Contains(err.Error(), raw) {
			t.Fatalf("error text %q carries driver text %q", err.Error(), raw)
		}
	}
}
