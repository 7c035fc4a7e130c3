package agentstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

func TestProviderErrorContract(t *testing.T) {
	base := errors.New("driver said no")
	pe := &duroxide.ProviderError{Op: "fetch_work_item", Message: "deadlock", Retryable: true, Err: base}
	if pe.Error() != "fetch_work_item: deadlock" || !errors.Is(pe, repo.ErrRetryable) || !errors.Is(pe, base) || !duroxide.IsRetryableProviderError(pe) {
		t.Fatalf("retryable ProviderError: %q", pe.Error())
	}
	if d := pe.ToInfrastructureError(); d.Infrastructure == nil || d.Infrastructure.Operation != "fetch_work_item" || !d.Infrastructure.Retryable {
		t.Fatalf("infrastructure details = %+v", d)
	}
	perm := &duroxide.ProviderError{Op: "ack", Message: "Invalid lock token", Err: duroxide.ErrInvalidLockToken}
	if errors.Is(perm, repo.ErrRetryable) || duroxide.IsRetryableProviderError(perm) {
		t.Fatalf("permanent error is retryable")
	}
	if !errors.Is(perm, agentstore.ErrInvalidLockToken) || !errors.Is(perm, agentstore.ErrLockLost) {
		t.Fatalf("invalid token does not match its sentinels")
	}
	if errors.Is(repo.ErrLockLost, duroxide.ErrInvalidLockToken) {
		t.Fatalf("ErrLockLost must not match the narrower ErrInvalidLockToken")
	}
	for _, s := range []error{agentstore.ErrInstanceRunning, agentstore.ErrSubOrchestration, agentstore.ErrOrphan, agentstore.ErrDuplicateEvent} {
		if errors.Is(s, repo.ErrRetryable) || errors.Is(s, repo.ErrLockLost) {
			t.Fatalf("%v matches an unrelated sentinel", s)
		}
	}
}

func TestProviderTransientFailuresAreRetryable(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newPEnv(t, h)
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		defer cancel()
		_, err := e.p.FetchOrchestrationItem(ctx, testLock, 0, nil)
		var pe *duroxide.ProviderError
		if !errors.As(err, &pe) || !pe.Retryable || !errors.Is(err, agentstore.ErrRetryable) || pe.Op != "fetch_orchestration_item" {
			t.Fatalf("deadline error = %#v", err)
		}
		err = e.p.EnqueueForWorker(ctx, activity("i1", 1, 1))
		if !errors.As(err, &pe) || !pe.Retryable {
			t.Fatalf("enqueue deadline error = %v", err)
		}
	})
}

func TestProviderCustomTablePrefixAndMemoryStore(t *testing.T) {
	cycle := func(t *testing.T, st *agentstore.Store) {
		t.Helper()
		ctx := context.Background()
		p := st.Provider()
		if err := p.EnqueueForOrchestrator(ctx, startItem("i1", nil), 0); err != nil {
			t.Fatal(err)
		}
		it, err := p.FetchOrchestrationItem(ctx, testLock, 0, nil)
		if err != nil || it == nil {
			t.Fatalf("fetch: %v %v", it, err)
		}
		if err := p.AckOrchestrationItem(ctx, it.LockToken, duroxide.OrchestrationAck{ExecutionID: 1,
			HistoryDelta: []duroxide.Event{startedEv("i1", 1, 1, nil)}, WorkerItems: []duroxide.WorkItem{activity("i1", 1, 2)}, Metadata: runningMeta(nil)}); err != nil {
			t.Fatal(err)
		}
		l, err := p.FetchWorkItem(ctx, testLock, 0, nil, duroxide.TagFilter{})
		if err != nil || l == nil {
			t.Fatalf("worker fetch: %v %v", l, err)
		}
		if ids, err := st.ProviderAdmin().ListInstances(ctx); err != nil || len(ids) != 1 {
			t.Fatalf("list = %v %v", ids, err)
		}
	}
	forEachDialect(t, func(t *testing.T, h *harness) {
		cycle(t, h.New(t, agentstore.WithTablePrefix("orch_")))
	})
	t.Run("sqlite-memory", func(t *testing.T) {
		st, err := agentstore.Open(context.Background(), "sqlite::memory:")
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if err := st.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		cycle(t, st)
	})
}

func TestProviderRejectsInvalidUTF8(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
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
	})
}
