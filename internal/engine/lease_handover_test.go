//go:build cgo

package engine

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// handOverStore is a Store of one dialect configuration with its
// statement log.
type handOverStore struct {
	st  *Store
	log *sqlLog
}

// handOverStores opens a migrated, logged Store per dialect
// configuration: SQLite, PostgreSQL with and without its fast paths, and
// MariaDB (the servers where reachable: pgTestStore, gcMariaDB).
func handOverStores(t *testing.T) map[string]handOverStore {
	t.Helper()
	ctx := context.Background()
	out := map[string]handOverStore{}
	// a long poll interval, and no cross-Store wake-up on SQLite (its
	// change watcher wakes every waiting fetch at each commit, the
	// Store's own included): the fetches wake only for this Store's
	// hand-offs and hand-overs
	quiet := WithPollInterval(10 * time.Second)
	l := &sqlLog{}
	lite, err := testOpen(ctx, "sqlite:"+filepath.Join(t.TempDir(), "handover.db"), WithLogger(l), quiet, WithoutCapabilities(CapWakeup))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lite.Close() })
	if err := lite.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	out["sqlite"] = handOverStore{lite, l}
	for name, opts := range map[string][]Option{"postgres": nil, "postgres-general": {WithoutCapabilities(CapFastPaths)}} {
		l := &sqlLog{}
		if st := pgTestStore(t, append(opts, WithLogger(l), quiet)...); st != nil {
			out[name] = handOverStore{st, l}
		}
	}
	l = &sqlLog{}
	if st := gcMariaDB(t, WithLogger(l), quiet); st != nil {
		out["mariadb"] = handOverStore{st, l}
	}
	return out
}

// workerClaims returns the statements of log that read or change the
// worker queue other than by an insert (a claim, a re-stamp, a release).
func workerClaims(log *sqlLog) []string {
	log.mu.Lock()
	defer log.mu.Unlock()
	var out []string
	for _, q := range log.stmts {
		if strings.Contains(q, models.TableWorkerQueue) && !strings.Contains(q, "INSERT INTO") {
			out = append(out, q)
		}
	}
	return out
}

// parkedTakers counts the plain worker fetches of p parked in their wait
// that take handed-over leases.
func parkedTakers(p *gormProvider) int {
	p.work.mu.Lock()
	defer p.work.mu.Unlock()
	n := 0
	for _, h := range p.work.plain {
		if h.parked && h.takes > 0 {
			n++
		}
	}
	return n
}

// waitParked waits until p has n parked takers.
func waitParked(t *testing.T, p *gormProvider, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); parkedTakers(p) < n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d worker fetches parked after 10 s, want %d", parkedTakers(p), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startTurn starts instance and fetches its first turn (its lock token).
func startTurn(t *testing.T, p *gormProvider, instance string) string {
	t.Helper()
	ctx := context.Background()
	if err := p.EnqueueForOrchestrator(ctx, &duroxide.StartOrchestration{Instance: instance, Orchestration: "o", ExecutionID: 1}, 0); err != nil {
		t.Fatal(err)
	}
	it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 5*time.Second, nil)
	if err != nil || it == nil || it.Instance != instance {
		t.Fatalf("fetch %s: %+v, %v", instance, it, err)
	}
	return it.LockToken
}

// ackScheduling acks instance's turn (tok) with one plain activity (no
// tag, no session) and returns the ack's clock.
func ackScheduling(t *testing.T, p *gormProvider, instance, tok string) int64 {
	t.Helper()
	name, ver := "o", "1.0.0"
	now := p.s.nowMS()
	if err := p.AckOrchestrationItem(context.Background(), tok, duroxide.OrchestrationAck{ExecutionID: 1,
		WorkerItems: []duroxide.WorkItem{&duroxide.ActivityExecute{Instance: instance, ExecutionID: 1, ID: 1, Name: "a", Input: "x"}},
		Metadata:    duroxide.ExecutionMetadata{OrchestrationName: &name, OrchestrationVersion: &ver}}); err != nil {
		t.Fatalf("ack %s: %v", instance, err)
	}
	return now
}

// settle lets the wake-ups of the commits so far reach p's waiting
// fetches (SQLite's change watcher polls) and waits until n worker
// fetches are parked again.
func settle(t *testing.T, p *gormProvider, n int) {
	t.Helper()
	time.Sleep(200 * time.Millisecond)
	waitParked(t, p, n)
}

// TestLeaseHandOverOnEveryDialect: an orchestration ack's plain activity
// is enqueued leased to the worker fetch parked waiting on the same Store,
// which returns that lease without a claim of its own:
//   - the lease is the item's (attempt 1, a token naming the row), stored
//     with locked_until the fetch's lock timeout after the ack's clock (a
//     valid lease: an immediate ack with it succeeds and enqueues the
//     completion);
//   - when the fetch leaves after the ack reserved it and before the
//     hand-over (its context ends), the item is released at once: the next
//     fetch, with no poll, takes it with attempt 1 (the release uncounts
//     the hand-over's attempt), not after the lock timeout;
//   - no reservation is left behind either way.
func TestLeaseHandOverOnEveryDialect(t *testing.T) {
	for name, hs := range handOverStores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			st := hs.st
			p := st.provider()
			const lt = 40 * time.Second

			// handed over
			got := make(chan *duroxide.WorkItemLease, 1)
			errc := make(chan error, 1)
			go func() {
				l, err := p.FetchWorkItem(ctx, lt, 20*time.Second, nil, duroxide.TagFilter{})
				got <- l
				errc <- err
			}()
			tok := startTurn(t, p, "ho-1")
			settle(t, p, 1)
			hs.log.reset()
			ackNow := ackScheduling(t, p, "ho-1", tok)
			var l *duroxide.WorkItemLease
			select {
			case l = <-got:
			case <-time.After(5 * time.Second):
				t.Fatal("the parked fetch did not return within 5 s of the ack")
			}
			if c := workerClaims(hs.log); len(c) > 0 {
				t.Fatalf("the handed-over fetch sent %d statements on the worker queue, want none: %q", len(c), c)
			}
			if err := <-errc; err != nil || l == nil {
				t.Fatalf("handed-over fetch: %v, %v", l, err)
			}
			ae, ok := l.Item.(*duroxide.ActivityExecute)
			if !ok || ae.Instance != "ho-1" || l.AttemptCount != 1 {
				t.Fatalf("handed-over lease: %+v (attempt %d), want ho-1's activity at attempt 1", l.Item, l.AttemptCount)
			}
			wl, ok := parseWorkToken(l.LockToken)
			if !ok || !wl.routed || wl.instance != "ho-1" {
				t.Fatalf("handed-over token %q does not name its row and instance", l.LockToken)
			}
			var row models.WorkerQueueItem
			if err := st.db.WithContext(ctx).Raw(`SELECT lock_token, locked_until, attempt_count FROM `+p.q(models.TableWorkerQueue)+` WHERE id = ?`, wl.id).
				Row().Scan(&row.LockToken, &row.LockedUntil, &row.AttemptCount); err != nil {
				t.Fatal(err)
			}
			if row.LockToken == nil || *row.LockToken != wl.stored || row.LockedUntil == nil || *row.LockedUntil < ackNow+lt.Milliseconds() ||
				*row.LockedUntil > p.s.nowMS()+lt.Milliseconds() || row.AttemptCount != 1 {
				t.Fatalf("stored lease: token %v until %v attempts %d; want %s until >= %d (ack's clock + lock timeout)",
					row.LockToken, row.LockedUntil, row.AttemptCount, wl.stored, ackNow+lt.Milliseconds())
			}
			if err := p.AckWorkItem(ctx, l.LockToken, &duroxide.ActivityCompleted{Instance: "ho-1", ExecutionID: 1, ID: 1, Result: "r"}); err != nil {
				t.Fatalf("ack with the handed-over lease: %v", err)
			}
			it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 5*time.Second, nil)
			if err != nil || it == nil || it.Instance != "ho-1" || len(it.Messages) != 1 {
				t.Fatalf("completion: %+v, %v", it, err)
			}
			done1, name1, ver1 := duroxide.StatusCompleted, "o", "1.0.0"
			if err := p.AckOrchestrationItem(ctx, it.LockToken, duroxide.OrchestrationAck{ExecutionID: 1,
				Metadata: duroxide.ExecutionMetadata{Status: &done1, OrchestrationName: &name1, OrchestrationVersion: &ver1}}); err != nil {
				t.Fatal(err)
			}

			// the fetch leaves between the reservation and the hand-over
			fctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() {
				defer close(done)
				l, err := p.FetchWorkItem(fctx, lt, 20*time.Second, nil, duroxide.TagFilter{})
				if l != nil || err == nil {
					t.Errorf("cancelled fetch: %+v, %v; want nothing and its context's error", l, err)
				}
			}()
			tok = startTurn(t, p, "ho-2")
			settle(t, p, 1)
			p.beforeHandOver = func() { cancel(); <-done }
			ackScheduling(t, p, "ho-2", tok)
			p.beforeHandOver = nil
			l2, err := p.FetchWorkItem(ctx, lt, 0, nil, duroxide.TagFilter{})
			if err != nil || l2 == nil {
				t.Fatalf("after a hand-over with no fetch left: %v, %v; want the item released at once", l2, err)
			}
			if ae, ok := l2.Item.(*duroxide.ActivityExecute); !ok || ae.Instance != "ho-2" || l2.AttemptCount != 1 {
				t.Fatalf("released item: %+v attempt %d; want ho-2's activity at attempt 1", l2.Item, l2.AttemptCount)
			}
			p.work.mu.Lock()
			reserved := p.work.reserved
			p.work.mu.Unlock()
			if reserved != 0 {
				t.Fatalf("%d takers still reserved after the acks", reserved)
			}
		})
	}
}
