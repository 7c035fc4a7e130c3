package agentstoretest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// closedTests are the Errors area's tests of this file.
func closedTests() []test {
	return tests(
		test{"CallsAfterCloseAreErrClosed", testCallsAfterCloseAreErrClosed},
		test{"WaitingFetchEndsWithErrClosed", testWaitingFetchEndsWithErrClosed},
	)
}

// closedDriverWords returns fragments of database driver and database/sql
// messages that must never reach a caller.
func closedDriverWords() []string {
	return []string{"sql: ", "database is closed", "connection is already closed", "SQLSTATE", "ERROR:", "sqlite3", "pgx", "conn closed"}
}

// wantClosed fails t unless err matches ErrClosed, is not retryable and
// holds no driver text.
func wantClosed(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, agentstore.ErrClosed) {
		t.Errorf("%s after Close = %v, want ErrClosed", what, err)
		return
	}
	if agentstore.IsRetryable(err) {
		t.Errorf("%s after Close is retryable: %v", what, err)
	}
	for _, w := range closedDriverWords() {
		if strings.Contains(err.Error(), w) {
			t.Errorf("%s after Close: message %q carries driver text %q", what, err.Error(), w)
		}
	}
}

// testCallsAfterCloseAreErrClosed: after Close every call through the
// handle — sessions, session queue, tenant view, provider, admin,
// key-value reads and, on an agentstore Store (a StoreBackend), Migrate,
// Verify, the recorded version and Store.DB's GORM handle (through
// DatabaseOps) — fails with an error matching ErrClosed (not retryable, no
// driver text; a *repo.Error or *duroxide.ProviderError naming the call
// where the API has one), and a second Close returns nil.
func testCallsAfterCloseAreErrClosed(t *testing.T, h *harness) {
	ctx := context.Background()
	var st Store
	var raw *agentstore.Store // the agentstore Store, when the backend opens them
	if _, ok := h.b.(StoreBackend); ok {
		raw, st = h.store(t)
		if err := raw.Migrate(ctx); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
	} else {
		st = h.New(t)
		t.Logf("the backend %T is no StoreBackend: Migrate, Verify and Store.DB after Close are not tested", h.b)
	}
	s := repo.NewSession()
	s.AddMessage(textMsg("m1", repo.RoleUser, "hi"))
	mustSave(t, st.Sessions(), s)
	it, err := st.SessionQueue().Enqueue(ctx, s.ID, "job", 0)
	if err != nil {
		t.Fatal(err)
	}
	p, a := st.Provider(), st.ProviderAdmin()
	if err := p.EnqueueForOrchestrator(ctx, startItem("i1", nil), 0); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatalf("second Close = %v, want nil", err)
	}
	r, q := st.Sessions(), st.SessionQueue()
	sessionCalls := map[string]func() error{
		"Load":   func() error { _, err := r.Load(ctx, s.ID); return err },
		"Save":   func() error { return r.Save(ctx, repo.NewSession()) },
		"List":   func() error { _, err := r.List(ctx, repo.ListParams{}); return err },
		"Delete": func() error { _, err := r.Delete(ctx, s.ID); return err },
		"AppendMessages": func() error {
			_, err := r.AppendMessages(ctx, s.ID, textMsg("m2", repo.RoleUser, "x"))
			return err
		},
		"Fork":           func() error { _, err := r.Fork(ctx, s.ID, "m1"); return err },
		"SetTodos":       func() error { _, err := r.SetTodos(ctx, s.ID, nil); return err },
		"GetSummaries":   func() error { _, err := r.GetSummaries(ctx, s.ID); return err },
		"ListChildren":   func() error { _, err := r.ListChildren(ctx, s.ID); return err },
		"CleanupExpired": func() error { _, err := r.CleanupExpired(ctx, 0); return err },
		"WithSessionLock": func() error {
			return r.WithSessionLock(ctx, s.ID, func(context.Context, repo.Sessions) error { return nil })
		},
		"tenant Load":   func() error { _, err := st.ForTenant("acme").Sessions().Load(ctx, s.ID); return err },
		"Enqueue":       func() error { _, err := q.Enqueue(ctx, s.ID, "job2", 0); return err },
		"Dequeue":       func() error { _, err := q.Dequeue(ctx, s.ID, repo.DequeueParams{}); return err },
		"Item":          func() error { _, err := q.Item(ctx, it.ID); return err },
		"PendingQueue":  func() error { _, err := q.PendingQueue(ctx, s.ID); return err },
		"PurgeFinished": func() error { _, err := q.PurgeFinished(ctx, 0, 0); return err },
	}
	for what, call := range sessionCalls {
		err := call()
		wantClosed(t, what, err)
		var re *repo.Error
		if !errors.As(err, &re) || re.Op == "" {
			t.Errorf("%s after Close = %#v, want a *repo.Error naming the call", what, err)
		}
	}
	providerCalls := map[string]func() error{
		"FetchOrchestrationItem": func() error { _, err := p.FetchOrchestrationItem(ctx, time.Second, 0, nil); return err },
		"FetchWorkItem": func() error {
			_, err := p.FetchWorkItem(ctx, time.Second, 0, nil, duroxide.TagFilter{})
			return err
		},
		"EnqueueForOrchestrator": func() error { return p.EnqueueForOrchestrator(ctx, startItem("i2", nil), 0) },
		"EnqueueForWorker":       func() error { return p.EnqueueForWorker(ctx, activity("i1", 1, 1)) },
		"Read":                   func() error { _, err := p.Read(ctx, "i1"); return err },
		"GetKVValue":             func() error { _, err := p.GetKVValue(ctx, "i1", "k"); return err },
		"GetKVAllValues":         func() error { _, err := p.GetKVAllValues(ctx, "i1"); return err },
		"ListInstances":          func() error { _, err := a.ListInstances(ctx); return err },
		"GetSystemMetrics":       func() error { _, err := a.GetSystemMetrics(ctx); return err },
		"GetQueueDepths":         func() error { _, err := a.GetQueueDepths(ctx); return err },
		"DeleteInstance":         func() error { _, err := a.DeleteInstance(ctx, "i1", true); return err },
	}
	for what, call := range providerCalls {
		err := call()
		wantClosed(t, what, err)
		var pe *duroxide.ProviderError
		if !errors.As(err, &pe) || pe.Op == "" || pe.Retryable {
			t.Errorf("%s after Close = %#v, want a permanent *duroxide.ProviderError naming the call", what, err)
		}
	}
	if raw == nil {
		return
	}
	wantClosed(t, "Migrate", raw.Migrate(ctx))
	_, err = raw.Verify(ctx)
	wantClosed(t, "Verify", err)
	_, err = raw.RecordedSchemaVersion(ctx)
	wantClosed(t, "RecordedSchemaVersion", err)
	ops := h.ops(t)
	wantClosed(t, "DB().Exec", ops.Delete(ctx, st, models.TableSessions, nil))
	_, err = ops.Count(ctx, st, models.TableSessions, nil)
	wantClosed(t, "DB().Count", err)
}

// testWaitingFetchEndsWithErrClosed: fetches long-polling empty queues
// when the Store is closed end promptly with ErrClosed (not retryable, no
// driver text), and so does a session-queue dequeue with a wait.
func testWaitingFetchEndsWithErrClosed(t *testing.T, h *harness) {
	st := h.New(t)
	ctx := context.Background()
	s := repo.NewSession()
	mustSave(t, st.Sessions(), s)
	p := st.Provider()
	errs := make(chan error, 2)
	go func() {
		_, err := p.FetchOrchestrationItem(ctx, time.Second, 20*time.Second, nil)
		errs <- err
	}()
	go func() {
		_, err := p.FetchWorkItem(ctx, time.Second, 20*time.Second, nil, duroxide.TagFilter{})
		errs <- err
	}()
	time.Sleep(300 * time.Millisecond) // both are waiting
	start := time.Now()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case err := <-errs:
			wantClosed(t, "waiting fetch", err)
		case <-time.After(10 * time.Second):
			t.Fatal("a waiting fetch did not end within 10 s of Close")
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("waiting fetches ended %v after Close, want promptly", d)
	}
}
