package agentstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// TestCapabilities: each dialect reports its capabilities; features can be
// switched off with WithoutCapabilities, properties of the database cannot
// (ErrInvalidConfig before any SQL).
func TestCapabilities(t *testing.T) {
	t.Parallel()
	want := map[agentstore.Dialect]agentstore.Capability{
		agentstore.SQLite: agentstore.CapSingleWriter | agentstore.CapPartialIndexes | agentstore.CapWakeup | agentstore.CapGroupCommit |
			agentstore.CapUpdateReturning | agentstore.CapMaterializedCTE | agentstore.CapChangeFeed,
		agentstore.Postgres: agentstore.CapRowLocks | agentstore.CapSkipLocked | agentstore.CapAsyncCommit | agentstore.CapAdvisoryLocks |
			agentstore.CapWakeup | agentstore.CapSnapshotReads | agentstore.CapValidatedJSON | agentstore.CapPartialIndexes |
			agentstore.CapAlterColumns | agentstore.CapFastPaths | agentstore.CapGroupCommit | agentstore.CapUpdateReturning | agentstore.CapLockOf |
			agentstore.CapMaterializedCTE | agentstore.CapChangeFeed,
		agentstore.MariaDB: agentstore.CapRowLocks | agentstore.CapSkipLocked | agentstore.CapSnapshotReads | agentstore.CapAlterColumns |
			agentstore.CapGroupCommit | agentstore.CapChangeFeed,
	}
	forEachDialect(t, func(t *testing.T, h *harness) {
		st := h.Open(t)
		if got := st.Capabilities(); got != want[h.Dialect] {
			t.Fatalf("capabilities = %s, want %s", got, want[h.Dialect])
		}
		off := h.Open(t, agentstore.WithoutCapabilities(agentstore.CapFastPaths, agentstore.CapWakeup))
		if got := off.Capabilities(); got.Has(agentstore.CapFastPaths) || got.Has(agentstore.CapWakeup) ||
			got != want[h.Dialect]&^(agentstore.CapFastPaths|agentstore.CapWakeup) {
			t.Fatalf("capabilities with fast paths and wake-up off = %s", got)
		}
		for _, c := range []agentstore.Capability{agentstore.CapRowLocks, agentstore.CapSingleWriter, agentstore.CapPartialIndexes, agentstore.CapAlterColumns,
			agentstore.CapUpdateReturning, agentstore.CapLockOf, agentstore.CapMaterializedCTE, 1 << 30} {
			_, err := agentstore.Open(context.Background(), h.DSN, agentstore.WithoutCapabilities(c))
			if !errors.Is(err, agentstore.ErrInvalidConfig) {
				t.Errorf("WithoutCapabilities(%s) = %v, want ErrInvalidConfig", c, err)
			}
		}
	})
}

// TestCapabilityAdvisoryLocksOff: without advisory locks (a PostgreSQL-wire
// database that lacks them) concurrent Migrate calls of 6 Stores still all
// succeed and leave a clean schema.
func TestCapabilityAdvisoryLocksOff(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		const n = 6
		stores := make([]*agentstore.Store, n)
		for i := range stores {
			stores[i] = h.Open(t, agentstore.WithoutCapabilities(agentstore.CapAdvisoryLocks))
		}
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range stores {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = stores[i].Migrate(context.Background()) }()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("store %d: Migrate: %v", i, err)
			}
		}
		rep, err := stores[0].Verify(context.Background())
		if err != nil || !rep.OK() {
			t.Fatalf("Verify after concurrent migrations without advisory locks: %v\n%v", err, rep)
		}
	})
}

// TestCapabilityWakeupOff: without the cross-Store wake-up (LISTEN/NOTIFY,
// data_version) a fetch waiting on one Store still gets work enqueued
// through another, at its fallback re-check.
func TestCapabilityWakeupOff(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		opts := []agentstore.Option{agentstore.WithoutCapabilities(agentstore.CapWakeup), agentstore.WithPollInterval(50 * time.Millisecond)}
		a := h.New(t, opts...)
		b := h.Open(t, opts...)
		ctx := context.Background()
		done := make(chan error, 1)
		go func() {
			l, err := a.Provider().FetchWorkItem(ctx, time.Minute, 5*time.Second, nil, duroxide.TagFilter{})
			if err == nil && l == nil {
				err = errors.New("fetch returned nothing")
			}
			done <- err
		}()
		time.Sleep(100 * time.Millisecond)
		if err := b.Provider().EnqueueForWorker(ctx, &duroxide.ActivityExecute{Instance: "i1", ExecutionID: 1, ID: 1, Name: "act", Input: "x"}); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("fetch: %v", err)
			}
		case <-time.After(4 * time.Second):
			t.Fatal("fetch on another Store not woken by its fallback re-check")
		}
	})
}
