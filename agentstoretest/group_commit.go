package agentstoretest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// Concurrent lease-ending calls of one Store may be committed together
// (CapGroupCommit); these tests hold whether they are or not: each call
// reports its own outcome, exactly as it would alone.

// groupCommitQueueTests are the SessionQueue area's tests of this file.
func groupCommitQueueTests() []test {
	return tests(
		test{"SessionsQueueConcurrentCompletesOwnOutcome", testSessionsQueueConcurrentCompletesOwnOutcome},
		test{"SessionsQueueCompleteCancelledOrClosed", testSessionsQueueCompleteCancelledOrClosed},
		test{"SessionsQueueConcurrentDequeuesOwnItems", testSessionsQueueConcurrentDequeuesOwnItems},
	)
}

// groupCommitWorkerTests are the WorkerQueue area's tests of this file.
func groupCommitWorkerTests() []test {
	return tests(
		test{"ProviderWorkerConcurrentAcksOwnOutcome", testProviderWorkerConcurrentAcksOwnOutcome},
		test{"ProviderWorkerConcurrentFetchesOwnItems", testProviderWorkerConcurrentFetchesOwnItems},
	)
}

// completeCase is one concurrent Complete call and the outcome it must get.
type completeCase struct {
	name  string
	q     repo.SessionQueue
	l     repo.Lease
	want  error // nil, ErrLockLost or ErrNotFound
	twins bool  // one of two calls of one lease: exactly one of the pair succeeds
}

// testSessionsQueueConcurrentCompletesOwnOutcome: 32 concurrent Completes
// over three Stores on one database (16 per Store on the first, so they
// overlap), a mix of valid leases, stale ones (already completed,
// superseded by a newer Dequeue after expiry, forged token), an unknown
// item, an item of another tenant, and two calls of one lease: every valid
// lease is completed exactly once and the call reports success; every stale
// one gets ErrLockLost, the unknown and foreign ones ErrNotFound, and their
// items are unchanged; of the pair exactly one succeeds. After the calls
// return, another Store sees every completion. Repeated over several
// rounds.
func testSessionsQueueConcurrentCompletesOwnOutcome(t *testing.T, h *harness) {
	clock := newTestClock()
	stores := []Store{h.New(t, withClock(clock.Now)), h.Open(t, withClock(clock.Now)),
		h.Open(t, withClock(clock.Now))}
	reader := h.Open(t, withClock(clock.Now)).SessionQueue()
	ctx := context.Background()
	s := repo.NewSession()
	mustSave(t, stores[0].Sessions(), s)
	acme := stores[0].ForTenant("acme")
	sa := repo.NewSession()
	mustSave(t, acme.Sessions(), sa)
	q0 := stores[0].SessionQueue()
	dequeue := func(sid uuid.UUID, q repo.SessionQueue, lease time.Duration) *repo.QueueItem {
		t.Helper()
		it, err := q.Dequeue(ctx, sid, repo.DequeueParams{Owner: "w", Lease: lease})
		if err != nil || it == nil {
			t.Fatalf("dequeue: %v, %v", it, err)
		}
		return it
	}
	for round := range 3 {
		for i := range 40 {
			if _, err := q0.Enqueue(ctx, s.ID, fmt.Sprint(round, "/", i), 0); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := acme.SessionQueue().Enqueue(ctx, sa.ID, "acme", 0); err != nil {
			t.Fatal(err)
		}
		var cases []completeCase
		// superseded: leased for 1 s, expired, leased again; the old lease is stale
		var superseded []*repo.QueueItem
		for range 3 {
			superseded = append(superseded, dequeue(s.ID, q0, time.Second))
		}
		clock.Advance(2 * time.Second)
		var current []*repo.QueueItem
		for range 3 {
			current = append(current, dequeue(s.ID, q0, time.Hour))
		}
		for i, old := range superseded {
			cases = append(cases, completeCase{name: "superseded", q: stores[i%3].SessionQueue(), l: old.Lease(), want: agentstore.ErrLockLost})
		}
		// already completed
		for i := range 3 {
			it := dequeue(s.ID, q0, time.Hour)
			if err := q0.Complete(ctx, it.Lease()); err != nil {
				t.Fatal(err)
			}
			cases = append(cases, completeCase{name: "completed before", q: stores[i%3].SessionQueue(), l: it.Lease(), want: agentstore.ErrLockLost})
		}
		// forged token of a processing item (the item stays processing)
		var forgedItems []*repo.QueueItem
		for i := range 3 {
			it := dequeue(s.ID, q0, time.Hour)
			forgedItems = append(forgedItems, it)
			l := it.Lease()
			l.Token = uuid.New()
			cases = append(cases, completeCase{name: "forged token", q: stores[i%3].SessionQueue(), l: l, want: agentstore.ErrLockLost})
		}
		// unknown item; the other tenant's item through the wrong view
		cases = append(cases, completeCase{name: "unknown item", q: stores[1].SessionQueue(), l: repo.Lease{ItemID: uuid.New(), Token: uuid.New()},
			want: agentstore.ErrNotFound})
		foreign := dequeue(sa.ID, acme.SessionQueue(), time.Hour)
		cases = append(cases, completeCase{name: "other tenant", q: stores[0].ForTenant("globex").SessionQueue(), l: foreign.Lease(),
			want: agentstore.ErrNotFound})
		// one lease completed by two calls at once
		twin := dequeue(s.ID, q0, time.Hour)
		cases = append(cases, completeCase{name: "twin", q: q0, l: twin.Lease(), twins: true},
			completeCase{name: "twin", q: stores[1].SessionQueue(), l: twin.Lease(), twins: true})
		// the rest: valid leases, most of them through the first Store
		var valid []*repo.QueueItem
		for len(cases)+len(valid) < 32 {
			valid = append(valid, dequeue(s.ID, q0, time.Hour))
		}
		for i, it := range valid {
			cases = append(cases, completeCase{name: "valid", q: stores[(i/2)%3].SessionQueue(), l: it.Lease()})
		}

		errs := make([]error, len(cases))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, c := range cases {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = c.q.Complete(ctx, c.l)
			}()
		}
		close(start)
		wg.Wait()

		twinOK := 0
		for i, c := range cases {
			switch {
			case c.twins:
				if errs[i] == nil {
					twinOK++
				} else if !errors.Is(errs[i], agentstore.ErrLockLost) {
					t.Errorf("round %d: twin Complete = %v, want nil or ErrLockLost", round, errs[i])
				}
			case c.want == nil:
				if errs[i] != nil {
					t.Errorf("round %d: %s Complete of %s = %v, want success", round, c.name, c.l.ItemID, errs[i])
				}
			default:
				if !errors.Is(errs[i], c.want) {
					t.Errorf("round %d: %s Complete of %s = %v, want %v", round, c.name, c.l.ItemID, errs[i], c.want)
				}
				var re *repo.Error
				if !errors.As(errs[i], &re) || re.Op != "complete" || !strings.Contains(errs[i].Error(), c.l.ItemID.String()) {
					t.Errorf("round %d: %s Complete error %v is not a *repo.Error of op complete naming the item", round, c.name, errs[i])
				}
			}
		}
		if twinOK != 1 {
			t.Errorf("round %d: %d of the two Completes of one lease succeeded, want exactly 1", round, twinOK)
		}
		// Another Store sees the outcome of every call.
		status := func(id uuid.UUID) repo.QueueStatus {
			t.Helper()
			it, err := reader.Item(ctx, id)
			if err != nil {
				t.Fatalf("item %s: %v", id, err)
			}
			return it.Status
		}
		for _, it := range append(valid, twin) {
			if st := status(it.ID); st != repo.QueueCompleted {
				t.Errorf("round %d: completed item %s is %s in another Store", round, it.ID, st)
			}
		}
		for _, it := range append(append(append([]*repo.QueueItem{}, current...), forgedItems...), foreign) {
			if st := status(it.ID); st != repo.QueueProcessing {
				t.Errorf("round %d: item %s of a refused Complete is %s, want still processing", round, it.ID, st)
			}
		}
		// the superseded items' current leases still hold; they and the
		// forged-against items complete with their real leases
		for _, it := range current {
			cur, err := reader.Item(ctx, it.ID)
			if err != nil {
				t.Fatal(err)
			}
			if cur.LeaseToken == nil || *cur.LeaseToken != it.Lease().Token {
				t.Errorf("round %d: item %s lost its current lease", round, it.ID)
			}
		}
		for _, it := range append(append([]*repo.QueueItem{}, current...), forgedItems...) {
			if err := q0.Complete(ctx, it.Lease()); err != nil {
				t.Errorf("round %d: the real lease of %s after a forged Complete: %v", round, it.ID, err)
			}
		}
		if err := acme.SessionQueue().Complete(ctx, foreign.Lease()); err != nil {
			t.Errorf("round %d: the tenant's own Complete of %s: %v", round, foreign.ID, err)
		}
		if t.Failed() {
			return
		}
		// drain what is left for the next round
		for {
			it, err := q0.Dequeue(ctx, s.ID, repo.DequeueParams{Lease: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			if it == nil {
				break
			}
			if err := q0.Complete(ctx, it.Lease()); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// testSessionsQueueCompleteCancelledOrClosed: a Complete whose context is
// already done returns the context's error (as a *repo.Error) and leaves
// its item processing, also among concurrent Completes of other items that
// succeed; and when the Store is closed while 24 Completes run, every call
// that reported success has its item completed (seen from another Store),
// and every item not completed is still leased.
func testSessionsQueueCompleteCancelledOrClosed(t *testing.T, h *harness) {
	st := h.New(t)
	reader := h.Open(t).SessionQueue()
	ctx := context.Background()
	s := repo.NewSession()
	mustSave(t, st.Sessions(), s)
	q := st.SessionQueue()
	for i := range 48 {
		if _, err := q.Enqueue(ctx, s.ID, fmt.Sprint(i), 0); err != nil {
			t.Fatal(err)
		}
	}
	lease := func() *repo.QueueItem {
		t.Helper()
		it, err := q.Dequeue(ctx, s.ID, repo.DequeueParams{Lease: time.Hour})
		if err != nil || it == nil {
			t.Fatalf("dequeue: %v, %v", it, err)
		}
		return it
	}
	status := func(id uuid.UUID) repo.QueueStatus {
		t.Helper()
		it, err := reader.Item(ctx, id)
		if err != nil {
			t.Fatalf("item %s: %v", id, err)
		}
		return it.Status
	}

	// 8 cancelled among 16 live calls
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	items := make([]*repo.QueueItem, 24)
	for i := range items {
		items[i] = lease()
	}
	errs := make([]error, len(items))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, it := range items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			c := ctx
			if i%3 == 0 {
				c = cancelled
			}
			errs[i] = q.Complete(c, it.Lease())
		}()
	}
	close(start)
	wg.Wait()
	for i, it := range items {
		if i%3 == 0 {
			var re *repo.Error
			if !errors.Is(errs[i], context.Canceled) || !errors.As(errs[i], &re) {
				t.Errorf("cancelled Complete of %s = %v, want a *repo.Error matching context.Canceled", it.ID, errs[i])
			}
			if st := status(it.ID); st != repo.QueueProcessing {
				t.Errorf("item %s of a cancelled Complete is %s, want processing", it.ID, st)
			}
			if err := q.Complete(ctx, it.Lease()); err != nil {
				t.Errorf("Complete of %s after the cancelled one: %v", it.ID, err)
			}
			continue
		}
		if errs[i] != nil {
			t.Errorf("live Complete of %s = %v", it.ID, errs[i])
		}
		if st := status(it.ID); st != repo.QueueCompleted {
			t.Errorf("item %s is %s after its Complete returned", it.ID, st)
		}
	}

	// Close the Store while 24 Completes are running.
	items = items[:0]
	for range 24 {
		items = append(items, lease())
	}
	errs = make([]error, len(items))
	start = make(chan struct{})
	for i, it := range items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = q.Complete(ctx, it.Lease())
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-start
		_ = st.Close()
	}()
	close(start)
	wg.Wait()
	for i, it := range items {
		switch st := status(it.ID); {
		case errs[i] == nil && st != repo.QueueCompleted:
			t.Errorf("Complete of %s reported success, but the item is %s", it.ID, st)
		case st != repo.QueueCompleted && st != repo.QueueProcessing:
			t.Errorf("item %s is %s, want completed or still processing", it.ID, st)
		}
	}
}

// ackCase is one concurrent AckWorkItem call and the outcome it must get.
type ackCase struct {
	name       string
	p          duroxide.Provider
	token      string
	completion duroxide.WorkItem
	valid      bool // must succeed
	twins      bool // one of two acks of one lease: exactly one succeeds
}

// testProviderWorkerConcurrentAcksOwnOutcome: 32 concurrent AckWorkItem
// calls over three Stores (most through the first), a mix of valid acks
// with and without a completion, acks of expired locks, of items already
// acked, with forged tokens, and two acks of one lease: every valid ack
// deletes its item and enqueues exactly its completion; every other one
// fails with a permanent ErrInvalidLockToken and changes nothing (its item
// stays, nothing is enqueued for it); of the pair exactly one succeeds.
// Another Store then sees exactly the expected queues.
func testProviderWorkerConcurrentAcksOwnOutcome(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	providers := []duroxide.Provider{e.p, e.other(t), e.other(t)}
	reader := h.Open(t, withClock(e.clock.Now))
	const items = 40
	for id := uint64(1); id <= items; id++ {
		if err := e.p.EnqueueForWorker(e.ctx, activity("gc", 1, id)); err != nil {
			t.Fatal(err)
		}
	}
	// 3 leases that expire, then every other item under a long lock
	var expired []*duroxide.WorkItemLease
	for range 3 {
		expired = append(expired, e.wfetch(t, nil, time.Second, nil, duroxide.TagFilter{}))
	}
	e.clock.Advance(2 * time.Second)
	var leases []*duroxide.WorkItemLease
	for {
		l := e.wfetch(t, nil, time.Hour, nil, duroxide.TagFilter{})
		if l == nil {
			break
		}
		leases = append(leases, l)
	}
	if len(leases) != items {
		t.Fatalf("fetched %d leases, want %d (the expired ones again)", len(leases), items)
	}
	var cases []ackCase
	for i, l := range expired {
		cases = append(cases, ackCase{name: "expired lock", p: providers[i%3], token: l.LockToken,
			completion: &duroxide.ActivityCompleted{Instance: "gc", ExecutionID: 1, ID: actID(t, l), Result: "stale"}})
	}
	next := leases
	take := func() *duroxide.WorkItemLease { l := next[0]; next = next[1:]; return l }
	// already acked
	for i := range 3 {
		l := take()
		if err := e.p.AckWorkItem(e.ctx, l.LockToken, nil); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, ackCase{name: "acked before", p: providers[i%3], token: l.LockToken,
			completion: &duroxide.ActivityCompleted{Instance: "gc", ExecutionID: 1, ID: actID(t, l), Result: "again"}})
	}
	// forged tokens of locked items (the items stay)
	var forgedLeases []*duroxide.WorkItemLease
	for i := range 3 {
		l := take()
		forgedLeases = append(forgedLeases, l)
		dot := strings.LastIndexByte(l.LockToken, '.')
		cases = append(cases, ackCase{name: "forged token", p: providers[i%3], token: "lock_forged" + l.LockToken[dot:],
			completion: &duroxide.ActivityCompleted{Instance: "gc", ExecutionID: 1, ID: actID(t, l), Result: "forged"}})
	}
	// two acks of one lease
	twin := take()
	cases = append(cases, ackCase{name: "twin", p: providers[0], token: twin.LockToken, twins: true,
		completion: &duroxide.ActivityCompleted{Instance: "gc", ExecutionID: 1, ID: actID(t, twin), Result: "twin"}},
		ackCase{name: "twin", p: providers[1], token: twin.LockToken, twins: true,
			completion: &duroxide.ActivityCompleted{Instance: "gc", ExecutionID: 1, ID: actID(t, twin), Result: "twin"}})
	// valid acks: with a completion, a failure, or none
	var validIDs []uint64
	for i := 0; len(cases) < 32; i++ {
		l := take()
		id := actID(t, l)
		c := ackCase{name: "valid", p: providers[(i/4)%3], token: l.LockToken, valid: true}
		switch i % 3 {
		case 0:
			c.completion = &duroxide.ActivityCompleted{Instance: "gc", ExecutionID: 1, ID: id, Result: fmt.Sprint("r", id)}
		case 1:
			c.completion = &duroxide.ActivityFailed{Instance: "gc", ExecutionID: 1, ID: id,
				Details: duroxide.ErrorDetails{Application: &duroxide.ApplicationError{Kind: duroxide.AppErrorKind{Name: "ActivityFailed"}, Message: "boom"}}}
		}
		validIDs = append(validIDs, id)
		cases = append(cases, c)
	}

	errs := make([]error, len(cases))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = c.p.AckWorkItem(e.ctx, c.token, c.completion)
		}()
	}
	close(start)
	wg.Wait()
	twinOK, wantCompletions := 0, 0
	for i, c := range cases {
		switch {
		case c.twins:
			if errs[i] == nil {
				twinOK++
			} else {
				wantErr(t, errs[i], agentstore.ErrInvalidLockToken)
			}
		case c.valid:
			if errs[i] != nil {
				t.Errorf("valid ack %d = %v", i, errs[i])
			}
			if c.completion != nil {
				wantCompletions++
			}
		default:
			if !errors.Is(errs[i], agentstore.ErrInvalidLockToken) {
				t.Errorf("%s ack = %v, want ErrInvalidLockToken", c.name, errs[i])
			}
		}
	}
	if twinOK != 1 {
		t.Errorf("%d of the two acks of one lease succeeded, want exactly 1", twinOK)
	}
	wantCompletions++ // the twin's
	// Another Store sees exactly the completions of the successful acks,
	// and exactly the worker items whose acks failed.
	got := h.values(t, reader, models.TableOrchestratorQueue, nil, "work_item")
	if len(got) != wantCompletions {
		t.Errorf("%d completions enqueued, want %d", len(got), wantCompletions)
	}
	for _, g := range got {
		if strings.Contains(g, "stale") || strings.Contains(g, "again") || strings.Contains(g, "forged") {
			t.Errorf("the completion of a refused ack was enqueued: %s", g)
		}
	}
	// left: the items of the expired leases (fetched again: in leases), the
	// forged ones, and the untouched rest of leases
	if n, want := h.count(t, reader, models.TableWorkerQueue, nil), int64(items-3-1-len(validIDs)); n != want {
		t.Errorf("%d worker items left, want %d", n, want)
	}
	for _, l := range forgedLeases {
		if err := e.p.AckWorkItem(e.ctx, l.LockToken, nil); err != nil {
			t.Errorf("the real lease after a forged ack: %v", err)
		}
	}
}

// testSessionsQueueConcurrentDequeuesOwnItems: 24 workers over three
// Stores on one database (12 on the first, so their Dequeues overlap and
// may be claimed together) drain two sessions of 150 items each, every
// worker with its own owner and lease duration, alternating sessions and
// calling through a second, tenant-scoped view for one of them. Every item
// is delivered exactly once; each returned item carries its caller's own
// owner, lease end (the Store's clock + the caller's lease) and a lease
// token no other call got, is processing with attempts 1, and is stored
// that way (Item through another Store); Complete with that lease
// succeeds. A Dequeue of a session of another tenant is ErrNotFound and
// one of a drained queue nil. Afterwards every item is completed.
func testSessionsQueueConcurrentDequeuesOwnItems(t *testing.T, h *harness) {
	clock := newTestClock()
	stores := []Store{h.New(t, withClock(clock.Now)), h.Open(t, withClock(clock.Now)),
		h.Open(t, withClock(clock.Now))}
	reader := h.Open(t, withClock(clock.Now)).SessionQueue()
	ctx := context.Background()
	s := repo.NewSession()
	mustSave(t, stores[0].Sessions(), s)
	sa := repo.NewSession()
	mustSave(t, stores[0].ForTenant("acme").Sessions(), sa)
	const perSession = 150
	for i := range perSession {
		if _, err := stores[0].SessionQueue().Enqueue(ctx, s.ID, fmt.Sprint("s/", i), int32(i%3)); err != nil {
			t.Fatal(err)
		}
		if _, err := stores[0].ForTenant("acme").SessionQueue().Enqueue(ctx, sa.ID, fmt.Sprint("a/", i), int32(i%5)); err != nil {
			t.Fatal(err)
		}
	}
	type got struct {
		it    *repo.QueueItem
		owner string
		lease time.Duration
	}
	var (
		mu      sync.Mutex
		items   []got
		errs    []string
		wg      sync.WaitGroup
		start   = make(chan struct{})
		workers = 24
	)
	fail := func(format string, a ...any) {
		mu.Lock()
		errs = append(errs, fmt.Sprintf(format, a...))
		mu.Unlock()
	}
	for w := range workers {
		st := stores[0]
		if w >= 12 {
			st = stores[1+w%2]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			owner := fmt.Sprint("worker-", w)
			lease := time.Duration(w+1) * time.Minute
			qs := []repo.SessionQueue{st.SessionQueue(), st.ForTenant("acme").SessionQueue()}
			sids := []uuid.UUID{s.ID, sa.ID}
			drained := [2]bool{}
			for k := 0; !drained[0] || !drained[1]; k++ {
				i := (k + w) % 2
				if drained[i] {
					continue
				}
				it, err := qs[i].Dequeue(ctx, sids[i], repo.DequeueParams{Owner: owner, Lease: lease})
				if err != nil {
					fail("dequeue %d: %v", i, err)
					return
				}
				if it == nil {
					drained[i] = true
					continue
				}
				mu.Lock()
				items = append(items, got{it: it, owner: owner, lease: lease})
				mu.Unlock()
				if it.SessionID != sids[i] {
					fail("item %s of session %s dequeued from %s", it.ID, it.SessionID, sids[i])
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	for _, e := range errs {
		t.Error(e)
	}
	if t.Failed() {
		return
	}
	if len(items) != 2*perSession {
		t.Fatalf("%d items dequeued, want %d", len(items), 2*perSession)
	}
	seen := map[uuid.UUID]bool{}
	tokens := map[uuid.UUID]bool{}
	wantUntil := func(d time.Duration) time.Time { return time.UnixMilli(clock.Now().Add(d).UnixMilli()).UTC() }
	for _, g := range items {
		it := g.it
		if seen[it.ID] {
			t.Fatalf("item %s (%s) dequeued twice", it.ID, it.Content)
		}
		seen[it.ID] = true
		if it.LeaseToken == nil || tokens[*it.LeaseToken] {
			t.Fatalf("item %s: lease token %v missing or shared", it.ID, it.LeaseToken)
		}
		tokens[*it.LeaseToken] = true
		if it.Status != repo.QueueProcessing || it.Attempts != 1 || it.LeaseOwner == nil || *it.LeaseOwner != g.owner ||
			it.LeasedUntil == nil || !it.LeasedUntil.Equal(wantUntil(g.lease)) {
			t.Fatalf("item %s as returned = status %s attempts %d owner %v until %v; want processing, 1, %s, %v",
				it.ID, it.Status, it.Attempts, it.LeaseOwner, it.LeasedUntil, g.owner, wantUntil(g.lease))
		}
		stored, err := reader.Item(ctx, it.ID)
		if err != nil || stored.LeaseToken == nil || *stored.LeaseToken != *it.LeaseToken || stored.Status != repo.QueueProcessing ||
			*stored.LeaseOwner != g.owner || !stored.LeasedUntil.Equal(*it.LeasedUntil) || stored.Content != it.Content ||
			stored.Priority != it.Priority || stored.Seq != it.Seq {
			t.Fatalf("item %s stored = %+v, %v; returned %+v", it.ID, stored, err, it)
		}
	}
	if _, err := stores[1].ForTenant("globex").SessionQueue().Dequeue(ctx, sa.ID, repo.DequeueParams{}); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("dequeue from another tenant's session = %v, want ErrNotFound", err)
	}
	for _, g := range items {
		if err := stores[2].SessionQueue().Complete(ctx, g.it.Lease()); err != nil {
			t.Fatalf("complete %s: %v", g.it.ID, err)
		}
	}
	for _, sid := range []uuid.UUID{s.ID, sa.ID} {
		left, err := reader.Items(ctx, sid, repo.QueuePending, repo.QueueProcessing)
		if err != nil || len(left) != 0 {
			t.Fatalf("session %s after the drain: %d items not completed, %v", sid, len(left), err)
		}
	}
}

// testProviderWorkerConcurrentFetchesOwnItems: 24 workers over three
// Stores on one database (12 on the first, so their fetches overlap and
// may be claimed together) drain 240 work items, a third of them tagged
// "gpu": half the workers fetch untagged items only, half "gpu" items
// only, each with its own lock timeout. Every item is handed out exactly
// once, to a worker whose filter admits it, with a lock token no other
// fetch got and attempt count 1; every lease acks; the queue ends empty.
func testProviderWorkerConcurrentFetchesOwnItems(t *testing.T, h *harness) {
	stores := []Store{h.New(t), h.Open(t), h.Open(t)}
	ctx := context.Background()
	const n = 240
	gpu := "gpu"
	for i := range n {
		it := &duroxide.ActivityExecute{Instance: fmt.Sprint("wf-", i), ExecutionID: 1, ID: 1, Name: "a", Input: fmt.Sprint(i)}
		if i%3 == 0 {
			it.Tag = &gpu
		}
		if err := stores[0].Provider().EnqueueForWorker(ctx, it); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu     sync.Mutex
		seen   = map[string]int{}
		tokens = map[string]bool{}
		errs   []string
		wg     sync.WaitGroup
		start  = make(chan struct{})
	)
	fail := func(format string, a ...any) {
		mu.Lock()
		errs = append(errs, fmt.Sprintf(format, a...))
		mu.Unlock()
	}
	for w := range 24 {
		st := stores[0]
		if w >= 12 {
			st = stores[1+w%2]
		}
		tagged := w%2 == 1
		filter := duroxide.TagFilter{}
		if tagged {
			filter = duroxide.TagFilter{Mode: duroxide.TagTags, Tags: []string{gpu}}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			p := st.Provider()
			for {
				l, err := p.FetchWorkItem(ctx, time.Duration(w+1)*time.Minute, 0, nil, filter)
				if err != nil {
					fail("fetch: %v", err)
					return
				}
				if l == nil {
					return
				}
				it, ok := l.Item.(*duroxide.ActivityExecute)
				if !ok || (it.Tag != nil) != tagged || l.AttemptCount != 1 {
					fail("worker %d (tagged %v) got %+v attempt %d", w, tagged, l.Item, l.AttemptCount)
					return
				}
				mu.Lock()
				seen[it.Input]++
				dup := tokens[l.LockToken]
				tokens[l.LockToken] = true
				mu.Unlock()
				if dup {
					fail("lock token %s handed out twice", l.LockToken)
				}
				if err := p.AckWorkItem(ctx, l.LockToken, nil); err != nil {
					fail("ack %s: %v", it.Input, err)
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	for _, e := range errs {
		t.Error(e)
	}
	if len(seen) != n {
		t.Fatalf("%d distinct items fetched, want %d", len(seen), n)
	}
	for in, k := range seen {
		if k != 1 {
			t.Fatalf("item %s fetched %d times", in, k)
		}
	}
	l, err := stores[1].Provider().FetchWorkItem(ctx, time.Minute, 0, nil, duroxide.TagFilter{Mode: duroxide.TagAny})
	if err != nil || l != nil {
		t.Fatalf("queue after the drain: %+v, %v; want empty", l, err)
	}
}
