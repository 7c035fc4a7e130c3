package agentstoretest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// Lease validity (duroxide#46/#47, duroxide-pg#21): every lease a fetch
// hands out is valid for the requested lock timeout measured from when
// the fetch returns, however long the claim waited, so an immediate ack
// (or abandon, or poison) with it succeeds and no other fetcher gets the
// item while it lasts.

// orchestrationLeaseTests are the Orchestration area's tests of this file.
func orchestrationLeaseTests() []test {
	return tests(
		test{"ProviderLeaseValidAfterSlowClaim", testProviderLeaseValidAfterSlowClaimOrch},
		test{"ProviderLeaseValidAfterWaitingBehindATransaction", testProviderLeaseValidAfterWaitOrch},
		test{"ProviderLeasesValidUnderContention", testProviderLeasesValidUnderContentionOrch},
		test{"ProviderFetchDoesNotWaitOnAHeldInstanceLockRow", testProviderFetchDoesNotWaitOnAHeldInstanceLockRow},
	)
}

// workerQueueLeaseTests are the WorkerQueue area's tests of this file.
func workerQueueLeaseTests() []test {
	return tests(
		test{"ProviderWorkerLeaseValidAfterSlowClaim", testProviderLeaseValidAfterSlowClaimWork},
		test{"ProviderWorkerLeaseValidAfterWaitingBehindATransaction", testProviderLeaseValidAfterWaitWork},
		test{"ProviderWorkerLeasesValidUnderContention", testProviderLeasesValidUnderContentionWork},
	)
}

// activitySessionsLeaseTests are the ActivitySessions area's tests of this file.
func activitySessionsLeaseTests() []test {
	return tests(
		test{"ProviderSessionLeaseValidAfterSlowClaim", testProviderLeaseValidAfterSlowClaimSession},
		test{"ProviderSessionLeaseValidAfterWaitingBehindATransaction", testProviderLeaseValidAfterWaitSession},
		test{"ProviderSessionLeasesValidUnderContention", testProviderLeasesValidUnderContentionSession},
		test{"ProviderSessionFetchDoesNotWaitBehindATransaction", testProviderSessionFetchDoesNotWait},
	)
}

// slowNextClaim makes the next statement of st that mentions lock_token
// (every claim and candidate query does) "slow": the clock jumps by d
// before it runs, after the fetch read its clock, as if the statement had
// waited that long (on a lock, a busy database, a descheduled process). It
// returns a function reporting whether the jump happened.
func slowNextClaim(t *testing.T, h *harness, st Store, clock *testClock, d time.Duration) func() bool {
	t.Helper()
	var armed, fired atomic.Bool
	armed.Store(true)
	hook := func(text string) {
		if strings.Contains(text, "lock_token") && armed.CompareAndSwap(true, false) {
			clock.Advance(d)
			fired.Store(true)
		}
	}
	if err := h.ops(t).BeforeStatement(st, hook); err != nil {
		t.Fatal(err)
	}
	return fired.Load
}

// testProviderLeaseValidAfterSlowClaimOrch: an orchestration fetch whose
// claim took longer than the lock timeout (the clock moved past the lease
// the claim computed) still returns a lease that lasts the lock timeout
// from its return: another Store fetches nothing until then, and the ack
// succeeds just before it ends.
func testProviderLeaseValidAfterSlowClaimOrch(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	other := e.other(t)
	const lock = 10 * time.Second
	e.enqueue(t, startItem("i1", nil))
	fired := slowNextClaim(t, h, e.st, e.clock, lock+5*time.Second)
	it, err := e.p.FetchOrchestrationItem(e.ctx, lock, 0, nil)
	if err != nil || it == nil {
		t.Fatalf("fetch = %v, %v", it, err)
	}
	if !fired() {
		t.Fatal("the claim was not slowed (no statement mentioned lock_token)")
	}
	if got, err := other.FetchOrchestrationItem(e.ctx, lock, 0, nil); err != nil || got != nil {
		t.Fatalf("another Store fetched %v, %v right after the slow claim returned", got, err)
	}
	e.clock.Advance(lock - time.Millisecond)
	if got, err := other.FetchOrchestrationItem(e.ctx, lock, 0, nil); err != nil || got != nil {
		t.Fatalf("another Store fetched %v, %v 1 ms before the lease ends", got, err)
	}
	e.ack(t, it, duroxide.OrchestrationAck{HistoryDelta: []duroxide.Event{startedEv("i1", 1, 1, nil)}, Metadata: runningMeta(nil)})
}

// testProviderLeaseValidAfterSlowClaimWork: the same for a worker fetch
// (no session).
func testProviderLeaseValidAfterSlowClaimWork(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	other := e.other(t)
	const lock = 10 * time.Second
	if err := e.p.EnqueueForWorker(e.ctx, activity("i1", 1, 1)); err != nil {
		t.Fatal(err)
	}
	fired := slowNextClaim(t, h, e.st, e.clock, lock+5*time.Second)
	l := e.wfetch(t, e.p, lock, nil, duroxide.TagFilter{})
	if l == nil {
		t.Fatal("fetch: nothing")
	}
	if !fired() {
		t.Fatal("the claim was not slowed (no statement mentioned lock_token)")
	}
	if got := e.wfetch(t, other, lock, nil, duroxide.TagFilter{}); got != nil {
		t.Fatalf("another Store fetched %v right after the slow claim returned", got.Item)
	}
	e.clock.Advance(lock - time.Millisecond)
	if got := e.wfetch(t, other, lock, nil, duroxide.TagFilter{}); got != nil {
		t.Fatalf("another Store fetched %v 1 ms before the lease ends", got.Item)
	}
	if err := e.p.AckWorkItem(e.ctx, l.LockToken, &duroxide.ActivityCompleted{Instance: "i1", ExecutionID: 1, ID: 1, Result: "r"}); err != nil {
		t.Fatalf("ack with the lease: %v", err)
	}
}

// testProviderLeaseValidAfterSlowClaimSession: the same for a
// session-affine worker fetch; the session lease it claimed lasts its
// timeout from the return as well (another owner cannot take the session).
func testProviderLeaseValidAfterSlowClaimSession(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	other := e.other(t)
	const lock = 10 * time.Second
	for id := uint64(1); id <= 2; id++ {
		if err := e.p.EnqueueForWorker(e.ctx, sessionItem("i1", "s1", id)); err != nil {
			t.Fatal(err)
		}
	}
	mine := &duroxide.SessionFetchConfig{OwnerID: "w1", LockTimeout: lock}
	theirs := &duroxide.SessionFetchConfig{OwnerID: "w2", LockTimeout: lock}
	fired := slowNextClaim(t, h, e.st, e.clock, lock+5*time.Second)
	l := e.wfetch(t, e.p, lock, mine, duroxide.TagFilter{})
	if l == nil {
		t.Fatal("fetch: nothing")
	}
	if !fired() {
		t.Fatal("the claim was not slowed (no statement mentioned lock_token)")
	}
	e.clock.Advance(lock - time.Millisecond)
	if got := e.wfetch(t, other, lock, theirs, duroxide.TagFilter{}); got != nil {
		t.Fatalf("another owner fetched %v 1 ms before the session lease ends", got.Item)
	}
	if err := e.p.AckWorkItem(e.ctx, l.LockToken, &duroxide.ActivityCompleted{Instance: "i1", ExecutionID: 1, ID: actID(t, l), Result: "r"}); err != nil {
		t.Fatalf("ack with the lease: %v", err)
	}
}

// holdWrites runs, on its own handle, a transaction that blocks the
// writes a fetch makes to table (DatabaseOps.LockTable: plain reads still
// go through where the database tells them apart) for d, then rolls it
// back. It returns once the lock is held; the returned channel is closed
// when it was released.
func holdWrites(t *testing.T, h *harness, table string, d time.Duration) <-chan struct{} {
	t.Helper()
	ops := h.ops(t)
	st := h.Open(t)
	held, done := make(chan struct{}), make(chan struct{})
	failed := make(chan error, 1)
	go func() {
		defer close(done)
		err := ops.LockTable(context.Background(), st, table, func() {
			close(held)
			time.Sleep(d)
		})
		select {
		case <-held: // the caller goes on: report here
			if err != nil {
				t.Errorf("competing transaction: %v", err)
			}
		default:
			failed <- err
		}
	}()
	select {
	case <-held:
	case err := <-failed:
		t.Fatalf("competing transaction: %v", err)
	}
	return done
}

// realEnv is a provider on the real clock (lease waits are real time here).
func realEnv(t *testing.T, h *harness) *pEnv {
	t.Helper()
	st := h.New(t)
	return &pEnv{h: h, st: st, p: st.Provider(), a: st.ProviderAdmin(), ctx: context.Background()}
}

// Real-time figures of the waiting tests: the lease, and how long the
// competing transaction holds its lock (longer than the lease).
const (
	waitLease = 1500 * time.Millisecond
	waitHold  = 2 * time.Second
)

// testProviderLeaseValidAfterWaitOrch: an orchestration fetch that had to
// wait behind a competing transaction longer than its lock timeout returns
// a live lease: another Store fetches nothing, and an immediate ack
// succeeds.
func testProviderLeaseValidAfterWaitOrch(t *testing.T, h *harness) {
	e := realEnv(t, h)
	other := e.h.Open(t).Provider()
	e.enqueue(t, startItem("i1", nil))
	start := time.Now()
	done := holdWrites(t, h, models.TableOrchestratorQueue, waitHold)
	it, err := e.p.FetchOrchestrationItem(e.ctx, waitLease, 30*time.Second, nil)
	<-done
	if err != nil || it == nil {
		t.Fatalf("fetch = %v, %v", it, err)
	}
	if waited := time.Since(start); waited < waitLease {
		t.Fatalf("the fetch waited only %v, want longer than its lock timeout %v", waited, waitLease)
	}
	if got, err := other.FetchOrchestrationItem(e.ctx, waitLease, 0, nil); err != nil || got != nil {
		t.Fatalf("another Store fetched %v, %v during the lease", got, err)
	}
	e.ack(t, it, duroxide.OrchestrationAck{HistoryDelta: []duroxide.Event{startedEv("i1", 1, 1, nil)}, Metadata: runningMeta(nil)})
}

// testProviderLeaseValidAfterWaitWork: the same for a worker fetch.
func testProviderLeaseValidAfterWaitWork(t *testing.T, h *harness) {
	e := realEnv(t, h)
	other := e.h.Open(t).Provider()
	if err := e.p.EnqueueForWorker(e.ctx, activity("i1", 1, 1)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	done := holdWrites(t, h, models.TableWorkerQueue, waitHold)
	l, err := e.p.FetchWorkItem(e.ctx, waitLease, 30*time.Second, nil, duroxide.TagFilter{})
	<-done
	if err != nil || l == nil {
		t.Fatalf("fetch = %v, %v", l, err)
	}
	if waited := time.Since(start); waited < waitLease {
		t.Fatalf("the fetch waited only %v, want longer than its lock timeout %v", waited, waitLease)
	}
	if got, err := other.FetchWorkItem(e.ctx, waitLease, 0, nil, duroxide.TagFilter{}); err != nil || got != nil {
		t.Fatalf("another Store fetched %v, %v during the lease", got, err)
	}
	if err := e.p.AckWorkItem(e.ctx, l.LockToken, &duroxide.ActivityCompleted{Instance: "i1", ExecutionID: 1, ID: 1, Result: "r"}); err != nil {
		t.Fatalf("immediate ack: %v", err)
	}
}

// testProviderLeaseValidAfterWaitSession: the same for a session-affine
// worker fetch (the claim also writes the session lease).
func testProviderLeaseValidAfterWaitSession(t *testing.T, h *harness) {
	e := realEnv(t, h)
	other := e.h.Open(t).Provider()
	if err := e.p.EnqueueForWorker(e.ctx, sessionItem("i1", "s1", 1)); err != nil {
		t.Fatal(err)
	}
	cfg := &duroxide.SessionFetchConfig{OwnerID: "w1", LockTimeout: waitLease}
	start := time.Now()
	done := holdWrites(t, h, models.TableActivitySessions, waitHold)
	l, err := e.p.FetchWorkItem(e.ctx, waitLease, 30*time.Second, cfg, duroxide.TagFilter{})
	<-done
	if err != nil || l == nil {
		t.Fatalf("fetch = %v, %v", l, err)
	}
	if waited := time.Since(start); waited < waitLease {
		t.Fatalf("the fetch waited only %v, want longer than its lock timeout %v", waited, waitLease)
	}
	if got, err := other.FetchWorkItem(e.ctx, waitLease, 0, &duroxide.SessionFetchConfig{OwnerID: "w1", LockTimeout: waitLease},
		duroxide.TagFilter{}); err != nil || got != nil {
		t.Fatalf("another Store fetched %v, %v during the lease", got, err)
	}
	if err := e.p.AckWorkItem(e.ctx, l.LockToken, &duroxide.ActivityCompleted{Instance: "i1", ExecutionID: 1, ID: 1, Result: "r"}); err != nil {
		t.Fatalf("immediate ack: %v", err)
	}
}

// testProviderSessionFetchDoesNotWait: a session-affine fetch whose
// session claim must wait for a transaction that holds the activity
// sessions table (for far longer than any lease) returns within a bounded
// time, with nothing: the claim's lock wait is bounded, the item passed
// over until the next poll. After the transaction the item is fetched.
// (A database without row locks is skipped, as in
// ProviderFetchDoesNotWaitOnAHeldInstanceLockRow.)
func testProviderSessionFetchDoesNotWait(t *testing.T, h *harness) {
	e := realEnv(t, h)
	if !capable(e.st, agentstore.CapRowLocks) {
		t.Skip("the backend has no row locks (agentstore.CapRowLocks)")
	}
	if err := e.p.EnqueueForWorker(e.ctx, sessionItem("i1", "s1", 1)); err != nil {
		t.Fatal(err)
	}
	const hold = 6 * time.Second
	cfg := &duroxide.SessionFetchConfig{OwnerID: "w1", LockTimeout: waitLease}
	done := holdWrites(t, h, models.TableActivitySessions, hold)
	start := time.Now()
	l, err := e.p.FetchWorkItem(e.ctx, waitLease, 0, cfg, duroxide.TagFilter{})
	took := time.Since(start)
	if err != nil || l != nil {
		t.Fatalf("fetch while the sessions table is held = %v, %v (after %v), want nothing", l, err, took)
	}
	if took > hold*2/3 {
		t.Fatalf("fetch waited %v behind a transaction holding the sessions table", took)
	}
	<-done
	l, err = e.p.FetchWorkItem(e.ctx, waitLease, 10*time.Second, cfg, duroxide.TagFilter{})
	if err != nil || l == nil {
		t.Fatalf("fetch after the transaction = %v, %v", l, err)
	}
	if err := e.p.AckWorkItem(e.ctx, l.LockToken, &duroxide.ActivityCompleted{Instance: "i1", ExecutionID: 1, ID: 1, Result: "r"}); err != nil {
		t.Fatalf("immediate ack: %v", err)
	}
}

// transient reports a retryable failure (a connection refused by a busy
// server, a deadlock), which a runtime retries; the contention tests do
// too. An invalid lock token is never transient.
func transient(err error) bool {
	return err != nil && errors.Is(err, agentstore.ErrRetryable) && !errors.Is(err, agentstore.ErrInvalidLockToken)
}

// retryTransient calls fn until it returns something other than a
// transient failure (at most 5 times).
func retryTransient(fn func() error) error {
	var err error
	for range 5 {
		if err = fn(); !transient(err) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

// leaseRanOut reports whether an ack that failed with err may have failed
// only because its lease really was over: the ack call ended more than a
// lease after the fetch returned (on a loaded machine a goroutine can wait
// that long for the CPU or a connection). Any other failure of an ack — in
// particular of one that completed within the lease — is a lease handed out
// already expired or taken by another fetcher, which the contention tests
// exist to catch.
func leaseRanOut(fetched time.Time, err error) bool {
	return time.Since(fetched) >= contLease &&
		(errors.Is(err, agentstore.ErrInvalidLockToken) || errors.Is(err, agentstore.ErrNotFound))
}

// contention is the shape of the contention tests: Stores, fetching
// goroutines per Store, items, and the lease each fetch asks for.
const (
	contStores  = 3
	contWorkers = 4
	contItems   = 60
	contLease   = 2 * time.Second
)

// testProviderLeasesValidUnderContentionOrch: many goroutines on several
// Stores fetch and immediately ack instances while a competing
// transaction blocks the queue for longer than the lease: every ack
// succeeds (no lease was handed out expired) and every instance is acked
// exactly once (no two fetchers held one at the same time).
func testProviderLeasesValidUnderContentionOrch(t *testing.T, h *harness) {
	e := realEnv(t, h)
	for i := range contItems {
		e.enqueue(t, startItem(fmt.Sprintf("i%02d", i), nil))
	}
	ps := []duroxide.Provider{e.p}
	for len(ps) < contStores {
		ps = append(ps, e.h.Open(t).Provider())
	}
	var (
		mu    sync.Mutex
		acked = map[string]int{}
		wg    sync.WaitGroup
		total atomic.Int64
	)
	done := holdWrites(t, h, models.TableOrchestratorQueue, contLease+500*time.Millisecond)
	deadline := time.Now().Add(60 * time.Second)
	for _, p := range ps {
		for range contWorkers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for total.Load() < contItems && time.Now().Before(deadline) {
					it, err := p.FetchOrchestrationItem(e.ctx, contLease, 200*time.Millisecond, nil)
					if transient(err) {
						continue
					}
					if err != nil {
						t.Errorf("fetch: %v", err)
						return
					}
					if it == nil {
						continue
					}
					got := time.Now()
					err = retryTransient(func() error {
						return p.AckOrchestrationItem(e.ctx, it.LockToken, duroxide.OrchestrationAck{ExecutionID: 1,
							HistoryDelta: []duroxide.Event{startedEv(it.Instance, 1, 1, nil)}, Metadata: runningMeta(nil)})
					})
					if err != nil && leaseRanOut(got, err) {
						t.Logf("ack of %s after %v, past its %v lease (a loaded machine): %v", it.Instance, time.Since(got), contLease, err)
						continue // another fetch takes the instance once the lease is over
					}
					if err != nil {
						t.Errorf("immediate ack of %s (%v after the fetch returned): %v", it.Instance, time.Since(got), err)
						return
					}
					mu.Lock()
					acked[it.Instance]++
					mu.Unlock()
					total.Add(1)
				}
			}()
		}
	}
	wg.Wait()
	<-done
	if len(acked) != contItems {
		t.Fatalf("acked %d instances, want %d", len(acked), contItems)
	}
	for inst, n := range acked {
		if n != 1 {
			t.Fatalf("%s acked %d times", inst, n)
		}
	}
}

// testProviderLeasesValidUnderContentionWork: the same for worker items.
func testProviderLeasesValidUnderContentionWork(t *testing.T, h *harness) {
	leasesUnderContention(t, h, false)
}

// testProviderLeasesValidUnderContentionSession: the same for items of
// activity sessions, each Store one session owner (the session leases
// expire while the competing transaction holds the queue, so sessions may
// change owner): every ack succeeds, every item is acked once.
func testProviderLeasesValidUnderContentionSession(t *testing.T, h *harness) {
	leasesUnderContention(t, h, true)
}

// leasesUnderContention runs the worker contention test, with sessions
// (contItems/10 sessions) or without.
func leasesUnderContention(t *testing.T, h *harness, sessions bool) {
	e := realEnv(t, h)
	for i := range contItems {
		a := activity("i1", 1, uint64(i+1))
		if sessions {
			a = sessionItem("i1", fmt.Sprintf("s%d", i%(contItems/10)), uint64(i+1))
		}
		if err := e.p.EnqueueForWorker(e.ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	ps := []duroxide.Provider{e.p}
	for len(ps) < contStores {
		ps = append(ps, e.h.Open(t).Provider())
	}
	var (
		mu    sync.Mutex
		acked = map[uint64]int{}
		wg    sync.WaitGroup
		total atomic.Int64
	)
	done := holdWrites(t, h, models.TableWorkerQueue, contLease+500*time.Millisecond)
	deadline := time.Now().Add(60 * time.Second)
	for si, p := range ps {
		var cfg *duroxide.SessionFetchConfig
		if sessions {
			cfg = &duroxide.SessionFetchConfig{OwnerID: fmt.Sprintf("w%d", si), LockTimeout: contLease}
		}
		for range contWorkers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for total.Load() < contItems && time.Now().Before(deadline) {
					l, err := p.FetchWorkItem(e.ctx, contLease, 200*time.Millisecond, cfg, duroxide.TagFilter{})
					if transient(err) {
						continue
					}
					if err != nil {
						t.Errorf("fetch: %v", err)
						return
					}
					if l == nil {
						continue
					}
					id := l.Item.(*duroxide.ActivityExecute).ID
					got := time.Now()
					err = retryTransient(func() error {
						return p.AckWorkItem(e.ctx, l.LockToken, &duroxide.ActivityCompleted{Instance: "i1", ExecutionID: 1, ID: id, Result: "r"})
					})
					if err != nil && leaseRanOut(got, err) {
						t.Logf("ack of item %d after %v, past its %v lease (a loaded machine): %v", id, time.Since(got), contLease, err)
						continue // another fetch takes the item once the lease is over
					}
					if err != nil {
						t.Errorf("immediate ack of item %d (%v after the fetch returned): %v", id, time.Since(got), err)
						return
					}
					mu.Lock()
					acked[id]++
					mu.Unlock()
					total.Add(1)
				}
			}()
		}
	}
	wg.Wait()
	<-done
	if len(acked) != contItems {
		t.Fatalf("acked %d items, want %d", len(acked), contItems)
	}
	for id, n := range acked {
		if n != 1 {
			t.Fatalf("item %d acked %d times", id, n)
		}
	}
}

// testProviderFetchDoesNotWaitOnAHeldInstanceLockRow: a transaction that
// holds the instance lock row of an instance (row-locked, for far longer
// than any lease) does not hold up fetches: a fetch returns within a
// bounded time, with nothing or another instance, never that one.
// (A database without row locks (CapRowLocks, e.g. SQLite) is skipped: a
// write transaction blocks every writer for at most the busy timeout,
// which the waiting tests cover.)
func testProviderFetchDoesNotWaitOnAHeldInstanceLockRow(t *testing.T, h *harness) {
	e := realEnv(t, h)
	if !capable(e.st, agentstore.CapRowLocks) {
		t.Skip("the backend has no row locks (agentstore.CapRowLocks)")
	}
	e.enqueue(t, startItem("i1", nil))
	e.enqueue(t, startItem("i2", nil))
	// an expired instance lock row for i1
	it, err := e.p.FetchOrchestrationItem(e.ctx, 20*time.Millisecond, 0, nil)
	if err != nil || it == nil || it.Instance != "i1" {
		t.Fatalf("first fetch = %v, %v", it, err)
	}
	time.Sleep(50 * time.Millisecond)
	st := h.Open(t)
	if n := h.count(t, st, models.TableInstanceLocks, Row{"instance_id": "i1"}); n != 1 {
		t.Fatalf("instance lock rows of i1: %d, want 1", n)
	}
	ops := h.ops(t)
	release := holdTx(t, func(ctx context.Context, held func()) error {
		return ops.LockRows(ctx, st, models.TableInstanceLocks, Row{"instance_id": "i1"}, held)
	})
	defer func() {
		if err := release(); err != nil {
			t.Errorf("lock the instance lock row: %v", err)
		}
	}()
	ctx, cancel := context.WithTimeout(e.ctx, 20*time.Second)
	defer cancel()
	start := time.Now()
	got, err := e.p.FetchOrchestrationItem(ctx, testLock, 0, nil)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("fetch while i1's lock row is held: %v (after %v)", err, took)
	}
	if took > 5*time.Second {
		t.Fatalf("fetch waited %v for a row another transaction holds", took)
	}
	if got != nil && got.Instance != "i2" {
		t.Fatalf("fetched %s while its lock row is held", got.Instance)
	}
}
