package engine

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentstore/agentstore/repo"
)

// TestCompleteCoalesces: concurrent Completes are one flush wherever the
// dialect coalesces them — SQLite (no fast paths of its own: a change for
// the Citus route once left it out, so every Complete committed alone) and
// PostgreSQL — but not on the Citus route (PostgreSQL with its fast paths
// switched off), where each is its own statement pinned to its session.
// On SQLite the flush is one transaction of each call's plain UPDATE
// (dialect.InProcess), never an UPDATE joined to a VALUES list.
func TestCompleteCoalesces(t *testing.T) {
	ctx := context.Background()
	stores := gcStores(t)
	log := &sqlLog{}
	lite, err := testOpen(ctx, "sqlite:"+filepath.Join(t.TempDir(), "cc.db"), WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lite.Close() })
	if err := lite.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	stores["sqlite"] = lite
	for name, st := range stores {
		t.Run(name, func(t *testing.T) {
			q := st.SessionQueue()
			s := repo.NewSession()
			if err := st.Sessions().Save(ctx, s); err != nil {
				t.Fatal(err)
			}
			const n = 4
			leases := make([]repo.Lease, n)
			for i := range leases {
				if _, err := q.Enqueue(ctx, s.ID, "x", 0); err != nil {
					t.Fatal(err)
				}
				it, err := q.Dequeue(ctx, s.ID, repo.DequeueParams{Lease: time.Hour})
				if err != nil || it == nil {
					t.Fatalf("dequeue: %v %v", it, err)
				}
				leases[i] = it.Lease()
			}
			coalesced := name != "postgres-general"
			c := &st.gc.complete
			// pretend a flush is running, so that every coalesced call queues
			c.mu.Lock()
			c.busy++
			c.mu.Unlock()
			before := c.batches.Load()
			log.reset()
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i, l := range leases {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = q.Complete(ctx, l)
				}()
			}
			if coalesced {
				deadline := time.Now().Add(10 * time.Second)
				for {
					c.mu.Lock()
					queued := len(c.queue)
					c.mu.Unlock()
					if queued == n {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("%d of %d Completes queued for a flush", queued, n)
					}
					time.Sleep(time.Millisecond)
				}
			} else {
				wg.Wait() // each went its own way: nothing queued
				c.mu.Lock()
				queued := len(c.queue)
				c.mu.Unlock()
				if queued != 0 {
					t.Fatalf("%d Completes queued on the Citus route, want none", queued)
				}
			}
			c.mu.Lock()
			c.handOff()
			c.mu.Unlock()
			wg.Wait()
			want := int64(0)
			if coalesced {
				want = 1
			}
			if got := c.batches.Load() - before; got != want {
				t.Fatalf("%d flushes of several Completes, want %d", got, want)
			}
			for i, l := range leases {
				if errs[i] != nil {
					t.Fatalf("complete %d: %v", i, errs[i])
				}
				it, err := q.Item(ctx, l.ItemID)
				if err != nil || it.Status != repo.QueueCompleted {
					t.Fatalf("item %d after the flush: %+v, %v", i, it, err)
				}
			}
			if name == "sqlite" {
				log.mu.Lock()
				defer log.mu.Unlock()
				updates := 0
				for _, stmt := range log.stmts {
					if strings.Contains(stmt, "VALUES") {
						t.Errorf("a joined statement in the flush: %s", stmt)
					}
					if strings.HasPrefix(stmt, "UPDATE") && strings.Contains(stmt, "status = 'completed'") {
						updates++
					}
				}
				if updates != n {
					t.Errorf("%d plain UPDATEs in the flush, want one per call (%d): %q", updates, n, log.stmts)
				}
			}
		})
	}
}
