//go:build cgo

package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
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

// noReservation fails t when p's worker signal still counts takers
// reserved by acks (signal.reserveTakers) after they all ended.
func noReservation(t *testing.T, p *gormProvider) {
	t.Helper()
	p.work.mu.Lock()
	reserved := p.work.reserved
	p.work.mu.Unlock()
	if reserved != 0 {
		t.Fatalf("%d takers still reserved after the acks", reserved)
	}
}

// sometimesCancelled returns parent for two fetches in three and, for the
// third, a context of parent that ends after 1–20 ms.
func sometimesCancelled(parent context.Context, rng *rand.Rand) (context.Context, context.CancelFunc) {
	if rng.IntN(3) != 0 {
		return parent, func() {}
	}
	return context.WithTimeout(parent, time.Duration(1+rng.IntN(20))*time.Millisecond)
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
			noReservation(t, p)
		})
	}
}

// TestLeaseHandOverConcurrent: two orchestrator goroutines ack turns that
// schedule three activities each while eight worker goroutines fetch on
// the same Store, a third of their fetches cancelled after a few
// milliseconds (so hand-overs meet fetches that leave, before, during and
// after the reservation). Every activity is handed out exactly once, at
// attempt 1 (no lease lost to a fetch that left: it would come back only
// after its 30 s lock timeout, at attempt 2), every ack with a handed-out
// lease succeeds, the worker queue ends empty and no reservation is left.
func TestLeaseHandOverConcurrent(t *testing.T) {
	for name, hs := range handOverStores(t) {
		t.Run(name, func(t *testing.T) {
			ctx, cancelAll := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancelAll()
			p := hs.st.provider()
			const instances, perTurn, workers = 60, 3, 8
			const lt = 30 * time.Second
			var mu sync.Mutex
			seen := map[string]int{}
			var failures []string
			fail := func(format string, args ...any) {
				mu.Lock()
				failures = append(failures, fmt.Sprintf(format, args...))
				mu.Unlock()
			}
			want := instances * perTurn
			acked := make(chan struct{}, want)
			wctx, stopWorkers := context.WithCancel(ctx)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(w), 7))
					for wctx.Err() == nil {
						fctx, cancel := sometimesCancelled(wctx, rng)
						l, err := p.FetchWorkItem(fctx, lt, 200*time.Millisecond, nil, duroxide.TagFilter{})
						cancel()
						if err != nil || l == nil {
							continue
						}
						ae, ok := l.Item.(*duroxide.ActivityExecute)
						if !ok {
							fail("unexpected item %+v", l.Item)
							continue
						}
						key := fmt.Sprintf("%s/%d", ae.Instance, ae.ID)
						mu.Lock()
						seen[key]++
						mu.Unlock()
						if l.AttemptCount != 1 {
							fail("%s handed out at attempt %d", key, l.AttemptCount)
						}
						if err := p.AckWorkItem(ctx, l.LockToken, &duroxide.ActivityCompleted{Instance: ae.Instance, ExecutionID: 1, ID: ae.ID, Result: "r"}); err != nil {
							fail("ack %s: %v", key, err)
							continue
						}
						acked <- struct{}{}
					}
				}()
			}
			// the orchestrators: start every instance, then ack each turn
			// that starts one with perTurn activities and each later turn
			// (completions) as completed
			for i := range instances {
				if err := p.EnqueueForOrchestrator(ctx, &duroxide.StartOrchestration{Instance: fmt.Sprintf("hc-%03d", i), Orchestration: "o", ExecutionID: 1}, 0); err != nil {
					t.Fatal(err)
				}
			}
			name, ver, doneSt := "o", "1.0.0", duroxide.StatusCompleted
			var started atomic.Int64
			octx, stopOrch := context.WithCancel(ctx)
			var og sync.WaitGroup
			for range 2 {
				og.Add(1)
				go func() {
					defer og.Done()
					for octx.Err() == nil {
						it, err := p.FetchOrchestrationItem(octx, lt, 200*time.Millisecond, nil)
						if err != nil || it == nil {
							continue
						}
						ack := duroxide.OrchestrationAck{ExecutionID: 1, Metadata: duroxide.ExecutionMetadata{OrchestrationName: &name, OrchestrationVersion: &ver}}
						start := false
						for _, m := range it.Messages {
							if _, ok := m.(*duroxide.StartOrchestration); ok {
								start = true
							}
						}
						if start {
							for a := range perTurn {
								ack.WorkerItems = append(ack.WorkerItems, &duroxide.ActivityExecute{Instance: it.Instance, ExecutionID: 1, ID: uint64(a + 1), Name: "a", Input: "x"})
							}
							started.Add(1)
						} else {
							ack.Metadata.Status = &doneSt
						}
						if err := p.AckOrchestrationItem(ctx, it.LockToken, ack); err != nil {
							fail("ack turn of %s: %v", it.Instance, err)
						}
					}
				}()
			}
			for n := 0; n < want; n++ {
				select {
				case <-acked:
				case <-ctx.Done():
					mu.Lock()
					t.Fatalf("%d of %d activities acked after 2 minutes (a lease lost to a fetch that left waits for its lock timeout); failures: %v", n, want, failures)
				}
			}
			stopWorkers()
			wg.Wait()
			stopOrch()
			og.Wait()
			mu.Lock()
			defer mu.Unlock()
			if len(failures) > 0 {
				t.Fatalf("%d failures, first: %s", len(failures), failures[0])
			}
			if started.Load() != instances || len(seen) != want {
				t.Fatalf("%d instances started, %d distinct activities handed out; want %d and %d", started.Load(), len(seen), instances, want)
			}
			for k, c := range seen {
				if c != 1 {
					t.Fatalf("activity %s handed out %d times", k, c)
				}
			}
			if d, err := p.GetQueueDepths(ctx); err != nil || d.WorkerQueue != 0 {
				t.Fatalf("worker queue after the run: %+v, %v; want empty", d, err)
			}
			noReservation(t, p)
		})
	}
}

// TestOrchFetchCancelledGivesBack: six orchestration fetchers, a third of
// their fetches cancelled after 1–20 ms, take 60 started instances' first
// turns and complete them. Every turn is handed out exactly once, at
// attempt 1: a fetch cancelled while its claim ran either returns the turn
// or gives the instance back at once (not locked until its 30 s lock
// timeout, then handed out at attempt 2).
func TestOrchFetchCancelledGivesBack(t *testing.T) {
	for name, hs := range handOverStores(t) {
		t.Run(name, func(t *testing.T) {
			ctx, cancelAll := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancelAll()
			p := hs.st.provider()
			const instances, fetchers = 60, 6
			const lt = 30 * time.Second
			for i := range instances {
				if err := p.EnqueueForOrchestrator(ctx, &duroxide.StartOrchestration{Instance: fmt.Sprintf("oc-%03d", i), Orchestration: "o", ExecutionID: 1}, 0); err != nil {
					t.Fatal(err)
				}
			}
			var mu sync.Mutex
			seen := map[string]int{}
			var failures []string
			done := make(chan struct{}, instances)
			name, ver, st := "o", "1.0.0", duroxide.StatusCompleted
			fctx, stop := context.WithCancel(ctx)
			var wg sync.WaitGroup
			for f := range fetchers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(f), 11))
					for fctx.Err() == nil {
						c, cancel := sometimesCancelled(fctx, rng)
						it, err := p.FetchOrchestrationItem(c, lt, 200*time.Millisecond, nil)
						cancel()
						if err != nil || it == nil {
							continue
						}
						mu.Lock()
						seen[it.Instance]++
						if it.AttemptCount != 1 {
							failures = append(failures, fmt.Sprintf("%s handed out at attempt %d", it.Instance, it.AttemptCount))
						}
						mu.Unlock()
						if err := p.AckOrchestrationItem(ctx, it.LockToken, duroxide.OrchestrationAck{ExecutionID: 1,
							Metadata: duroxide.ExecutionMetadata{Status: &st, OrchestrationName: &name, OrchestrationVersion: &ver}}); err != nil {
							mu.Lock()
							failures = append(failures, fmt.Sprintf("ack %s: %v", it.Instance, err))
							mu.Unlock()
							continue
						}
						done <- struct{}{}
					}
				}()
			}
			for n := 0; n < instances; n++ {
				select {
				case <-done:
				case <-ctx.Done():
					stop()
					wg.Wait()
					t.Fatalf("%d of %d turns completed after 2 minutes; failures: %v", n, instances, failures)
				}
			}
			stop()
			wg.Wait()
			if len(failures) > 0 {
				t.Fatalf("%d failures, first: %s", len(failures), failures[0])
			}
			for k, c := range seen {
				if c != 1 {
					t.Fatalf("%s's turn handed out %d times", k, c)
				}
			}
			if len(seen) != instances {
				t.Fatalf("%d turns handed out, want %d", len(seen), instances)
			}
		})
	}
}

// TestClaimGraceBoundsCancelledFetch: a claim runs on after its caller's
// context ends only for claimGrace. Behind a worker queue (and an
// instance-lock table) locked ACCESS EXCLUSIVE by another transaction on
// PostgreSQL, a fetch whose context ends after 100 ms returns an error
// within claimGrace and a second of slack, not when the lock is released.
func TestClaimGraceBoundsCancelledFetch(t *testing.T) {
	st := pgTestStore(t)
	if st == nil {
		t.Skip("PostgreSQL unreachable (CI requires it: AGENTSTORE_REQUIRE_POSTGRES)")
	}
	p := st.provider()
	bg := context.Background()
	for _, c := range []struct {
		table string
		fetch func(ctx context.Context) error
	}{
		{models.TableWorkerQueue, func(ctx context.Context) error {
			_, err := p.FetchWorkItem(ctx, 30*time.Second, 0, nil, duroxide.TagFilter{})
			return err
		}},
		{models.TableOrchestratorQueue, func(ctx context.Context) error {
			_, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
			return err
		}},
	} {
		t.Run(c.table, func(t *testing.T) {
			tx := st.db.WithContext(bg).Begin()
			if tx.Error != nil {
				t.Fatal(tx.Error)
			}
			defer tx.Rollback()
			if err := tx.Exec(`LOCK TABLE ` + p.q(c.table) + ` IN ACCESS EXCLUSIVE MODE`).Error; err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
			defer cancel()
			t0 := time.Now()
			err := c.fetch(ctx)
			el := time.Since(t0)
			if err == nil {
				t.Fatalf("fetch behind a locked %s returned no error", c.table)
			}
			if el > claimGrace+time.Second {
				t.Fatalf("fetch behind a locked %s returned after %v, want within %v of its 100 ms context", c.table, el, claimGrace+time.Second)
			}
			t.Logf("%s: %v after %v", c.table, err, el.Round(time.Millisecond))
		})
	}
}

// TestRoutedClaimFailureReleasesInBackground: a routed worker claim (the
// Citus route) that fails after it claimed items returns at once and gives
// them back in the background: the releases wait for the database as the
// claim did, and used to run before the fetch returned (each up to
// releaseWorkLease's bound; behind a table lock here they timed out and
// the items stayed locked until their lock timeout).
func TestRoutedClaimFailureReleasesInBackground(t *testing.T) {
	// the Store's lock timeout, shorter than claimLockWait, fails the
	// blocked claim with ErrLockTimeout (skipsBusy is false) and bounds
	// each release's lock wait
	st := pgTestStore(t, WithoutCapabilities(CapFastPaths), WithLockTimeout(500*time.Millisecond))
	if st == nil {
		t.Skip("PostgreSQL unreachable (CI requires it: AGENTSTORE_REQUIRE_POSTGRES)")
	}
	p := st.provider()
	if !p.routedWork() {
		t.Fatal("a Store without CapFastPaths does not claim routed")
	}
	ctx := context.Background()
	for i := range 2 {
		if err := p.EnqueueForWorker(ctx, &duroxide.ActivityExecute{Instance: fmt.Sprint("r", i), ExecutionID: 1, ID: 1, Name: "a", Input: "{}"}); err != nil {
			t.Fatal(err)
		}
	}
	// after the first item is claimed, another transaction locks the
	// worker queue: the second claim fails, and so would a release
	lock := st.db.WithContext(ctx).Begin()
	if lock.Error != nil {
		t.Fatal(lock.Error)
	}
	defer lock.Rollback()
	var once sync.Once
	p.afterRoutedClaim = func() {
		once.Do(func() {
			if err := lock.Exec(`LOCK TABLE ` + p.q(models.TableWorkerQueue) + ` IN ACCESS EXCLUSIVE MODE`).Error; err != nil {
				t.Error(err)
			}
		})
	}
	var l1, l2 *duroxide.WorkItemLease
	g := []*gcReq[uint64, workFetchReq]{
		{ctx: ctx, in: workFetchReq{lockTimeout: time.Minute, out: &l1}},
		{ctx: ctx, in: workFetchReq{lockTimeout: time.Minute, out: &l2}},
	}
	t0 := time.Now()
	_, err := p.claimWork(ctx, g)
	el := time.Since(t0)
	if err == nil {
		t.Fatal("the claim behind the table lock did not fail")
	}
	lock.Rollback() // the releases may proceed now
	p.afterRoutedClaim = nil
	t.Logf("claim failed after %v: %v", el.Round(time.Millisecond), err)
	if l1 != nil || l2 != nil {
		t.Fatalf("a failed claim handed out leases: %v %v", l1, l2)
	}
	// the blocked claim's lock wait (500 ms) and no release's
	if el > 900*time.Millisecond {
		t.Fatalf("the failed claim returned after %v, want within 900 ms (its lock wait of 500 ms, not the releases')", el)
	}
	// both items come back unlocked, their attempt uncounted
	deadline := time.Now().Add(5 * time.Second)
	for {
		var locked, attempts int64
		if err := st.db.WithContext(ctx).Raw(`SELECT COUNT(*) FILTER (WHERE lock_token IS NOT NULL), COALESCE(SUM(attempt_count), 0) FROM `+
			p.q(models.TableWorkerQueue)).Row().Scan(&locked, &attempts); err != nil {
			t.Fatal(err)
		}
		if locked == 0 && attempts == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5 s after the failed claim: %d items still locked, %d attempts counted", locked, attempts)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
