package engine

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
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
	stores["sqlite"] = loggedLite(t, log)
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
			log.reset()
			errs := callsCoalesce(t, &st.gc.complete, n, name != "postgres-general", func(i int) error { return q.Complete(ctx, leases[i]) })
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

// callsCoalesce makes n calls at once (call(i)) while committer c
// pretends a flush is running, and checks that they queue for one flush
// (coalesced) or that, with nothing queued, each returns on its own; then
// it lets the flush run and returns the calls' errors.
func callsCoalesce[K comparable, T any](t *testing.T, c *committer[K, T], n int, coalesced bool, call func(i int) error) []error {
	t.Helper()
	c.mu.Lock()
	c.busy++
	c.mu.Unlock()
	before := c.batches.Load()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = call(i)
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	queued := func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.queue)
	}
	if coalesced {
		for queued() != n {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d calls queued for a flush", queued(), n)
			}
			time.Sleep(time.Millisecond)
		}
	} else {
		select {
		case <-done:
		case <-time.After(time.Until(deadline)):
			q := queued()
			c.mu.Lock()
			c.handOff() // let the queued calls end
			c.mu.Unlock()
			t.Fatalf("calls still waiting after 10 s, %d queued for a flush; want each on its own, none queued", q)
		}
		if q := queued(); q != 0 {
			t.Fatalf("%d calls queued for a flush, want none", q)
		}
	}
	c.mu.Lock()
	c.handOff()
	c.mu.Unlock()
	<-done
	want := int64(0)
	if coalesced {
		want = 1
	}
	if got := c.batches.Load() - before; got != want {
		t.Fatalf("%d flushes of several calls, want %d", got, want)
	}
	return errs
}

// TestWorkerFetchFlushInProcess: on SQLite (dialect.InProcess) a coalesced
// worker fetch of several attempts is one transaction of each attempt's
// own claim, never an UPDATE joined to a VALUES list; each attempt gets
// the next item in order, with its own token and lock end, and an attempt
// left without an item gets none.
func TestWorkerFetchFlushInProcess(t *testing.T) {
	ctx := context.Background()
	log := &sqlLog{}
	st := loggedLite(t, log)
	p := st.provider()
	for _, in := range []string{"i1", "i2", "i3"} {
		if err := p.EnqueueForWorker(ctx, &duroxide.ActivityExecute{Instance: "wf-" + in, ExecutionID: 1, ID: 1, Name: "a", Input: in}); err != nil {
			t.Fatal(err)
		}
	}
	locks := []time.Duration{time.Minute, 2 * time.Minute, 3 * time.Minute, 4 * time.Minute}
	reqs := make([]*gcReq[uint64, workFetchReq], len(locks))
	outs := make([]*duroxide.WorkItemLease, len(locks))
	for i, l := range locks {
		reqs[i] = &gcReq[uint64, workFetchReq]{ctx: ctx, key: uint64(i), in: workFetchReq{lockTimeout: l, out: &outs[i]}}
	}
	log.reset()
	before := st.nowMS()
	if err := p.fetchWorkBatch(ctx, reqs); err != nil {
		t.Fatalf("fetch batch: %v", err)
	}
	after := st.nowMS()
	for i, want := range []string{"i1", "i2", "i3", ""} {
		l := outs[i]
		if reqs[i].err != nil {
			t.Fatalf("attempt %d: %v", i, reqs[i].err)
		}
		if want == "" {
			if l != nil {
				t.Fatalf("attempt %d: got %+v, want none", i, l)
			}
			continue
		}
		if l == nil || l.Item.(*duroxide.ActivityExecute).Input != want {
			t.Fatalf("attempt %d: got %+v, want %s", i, l, want)
		}
		wl, ok := parseWorkToken(l.LockToken)
		if !ok {
			t.Fatalf("attempt %d: token %q", i, l.LockToken)
		}
		var until int64
		if err := st.db.WithContext(ctx).Raw("SELECT locked_until FROM "+st.quoted(models.TableWorkerQueue)+" WHERE id = ? AND lock_token = ?",
			wl.id, wl.stored).Scan(&until).Error; err != nil {
			t.Fatal(err)
		}
		if until < before+locks[i].Milliseconds() || until > after+locks[i].Milliseconds() {
			t.Errorf("attempt %d: locked until %d, want its own lock (%v) from the fetch", i, until, locks[i])
		}
		if err := p.AckWorkItem(ctx, l.LockToken, nil); err != nil {
			t.Errorf("attempt %d: ack: %v", i, err)
		}
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	claims := 0
	for _, stmt := range log.stmts {
		if strings.Contains(stmt, "VALUES") {
			t.Errorf("a joined statement in the flush: %s", stmt)
		}
		if strings.HasPrefix(stmt, "UPDATE") && strings.Contains(stmt, "SET lock_token") {
			if !strings.Contains(stmt, "LIMIT 1)") {
				t.Errorf("a claim picking more than its own row: %s", stmt)
			}
			claims++
		}
	}
	// four in the flush (the fourth finds nothing and ends it), then the
	// attempt left without an item runs alone once (claimByGroup)
	if claims != 5 {
		t.Errorf("%d single claims, want 4 in the flush and 1 alone: %q", claims, log.stmts)
	}
}

// loggedLite opens and migrates a Store on a new SQLite file whose
// statements go to log, closed at the end of the test.
func loggedLite(t *testing.T, log *sqlLog) *Store {
	t.Helper()
	return liteAt(t, filepath.Join(t.TempDir(), "logged.db"), WithLogger(log))
}

// liteAt opens a Store with opts on the SQLite file at path and migrates
// it; it is closed at the end of the test.
func liteAt(t *testing.T, path string, opts ...Option) *Store {
	t.Helper()
	ctx := context.Background()
	st, err := testOpen(ctx, "sqlite:"+path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return st
}
