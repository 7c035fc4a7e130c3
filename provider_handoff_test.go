package agentstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/orchloop"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// waitingFetches starts n fetches (fetch, long-polling) and returns their
// results' channel and a stop that cancels the ones still waiting and
// waits for them.
func waitingFetches[T any](n int, fetch func(ctx context.Context) (*T, error)) (<-chan *T, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan *T, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := fetch(ctx)
			if err == nil && v != nil {
				out <- v
			}
		}()
	}
	return out, func() { cancel(); wg.Wait() }
}

// idleWait is how long the tests let waiting fetches settle into their
// wait (first claim, next-due query) before they count statements: well
// under the idle re-check of a healthy wake-up (1 s).
const idleWait = 300 * time.Millisecond

// handOffPoll is the poll interval of the hand-off tests' Stores: their
// waiting fetches re-check the database only every 10 s, so a fetch that
// returns within handOffAtOnce was woken, not found the item by a re-check.
// handOffAtOnce leaves a loaded machine (CI beside the whole suite, load
// 16) time to schedule the woken fetch: 500 ms was exceeded there once.
const (
	handOffPoll   = 10 * time.Second
	handOffAtOnce = 3 * time.Second
)

// testProviderHandOffWakesOneFetcher
// (TestTimingSensitive/ProviderHandOffWakesOneFetcher): with two fetches of
// one Store waiting (no capability filter, no session, untagged items), a
// new item wakes one of them: the statements from the enqueue until that
// fetch returned are the enqueue and the one claim (on PostgreSQL one
// statement, a new instance's metadata included), not a claim of every
// waiting fetch that finds nothing (and its next-due query). The second
// fetch, still waiting, gets the next item at once.
func testProviderHandOffWakesOneFetcher(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		l := &stmtLogger{}
		st := h.New(t, agentstore.WithLogger(l), agentstore.WithPollInterval(handOffPoll))
		p := st.Provider()
		ctx := context.Background()
		for _, q := range []string{"worker", "orchestrator"} {
			var got <-chan string
			var stop func()
			var enqueue func(i int) error
			if q == "worker" {
				ch, s := waitingFetches(2, func(ctx context.Context) (*duroxide.WorkItemLease, error) {
					return p.FetchWorkItem(ctx, 30*time.Second, 20*time.Second, nil, duroxide.TagFilter{})
				})
				got, stop = leaseIDs(ch), s
				enqueue = func(i int) error {
					return p.EnqueueForWorker(ctx, &duroxide.ActivityExecute{Instance: "w" + strconv.Itoa(i), ExecutionID: 1, ID: 1, Name: "a", Input: "x"})
				}
			} else {
				ch, s := waitingFetches(2, func(ctx context.Context) (*duroxide.OrchestrationItem, error) {
					return p.FetchOrchestrationItem(ctx, 30*time.Second, 20*time.Second, nil)
				})
				got, stop = itemIDs(ch), s
				enqueue = func(i int) error {
					return p.EnqueueForOrchestrator(ctx, &duroxide.StartOrchestration{Instance: "o" + strconv.Itoa(i), Orchestration: "x", ExecutionID: 1}, 0)
				}
			}
			time.Sleep(idleWait)
			l.reset()
			if err := enqueue(1); err != nil {
				t.Fatal(err)
			}
			select {
			case id := <-got:
				if id != "1" {
					t.Fatalf("%s: fetched %s, want item 1", q, id)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: no waiting fetch returned the new item", q)
			}
			time.Sleep(50 * time.Millisecond) // a woken loser's claim would run now
			l.mu.Lock()
			stmts := append([]string(nil), l.last...)
			l.mu.Unlock()
			t.Logf("%s %s: %d statements", h.Dialect, q, len(stmts))
			if max := handOffStatements()[h.Dialect][q]; len(stmts) > max {
				t.Fatalf("%s: %d statements from the enqueue until the fetch returned, want at most %d (the enqueue, one claim):\n%s", q, len(stmts), max, strings.Join(stmts, "\n"))
			}
			// the other fetch still waits, and takes the next item at once
			t0 := time.Now()
			if err := enqueue(2); err != nil {
				t.Fatal(err)
			}
			select {
			case id := <-got:
				if id != "2" {
					t.Fatalf("%s: fetched %s, want item 2", q, id)
				}
				if el := time.Since(t0); el > handOffAtOnce {
					t.Fatalf("%s: the second waiting fetch took %v to return the item (its re-check is every %v)", q, el, handOffPoll)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: the second waiting fetch did not return the new item", q)
			}
			stop()
		}
	})
}

// handOffStatements bounds the statements from an enqueue until the
// waiting fetch it woke returned: the enqueue and one claim (on
// PostgreSQL one statement, a new instance's metadata included since
// the claim checks that its snapshot is fresh; SQLite and MariaDB claim
// in a transaction of several steps). A claim of the other waiting fetch would add its
// statements (the candidate query at least) and its next-due query. On
// SQLite the data_version watcher wakes every waiting fetch at any commit
// of another connection, the Store's own included: no bound there.
func handOffStatements() map[agentstore.Dialect]map[string]int {
	return map[agentstore.Dialect]map[string]int{
		agentstore.Postgres: {"worker": 2, "orchestrator": 2},
		agentstore.SQLite:   {"worker": 1 << 20, "orchestrator": 1 << 20},
		agentstore.MariaDB:  {"worker": 4, "orchestrator": 12},
	}
}

// leaseIDs maps fetched worker leases to their item's instance number.
func leaseIDs(ch <-chan *duroxide.WorkItemLease) <-chan string {
	out := make(chan string, cap(ch))
	go func() {
		for l := range ch {
			out <- strings.TrimPrefix(l.Item.RoutingInstance(), "w")
		}
	}()
	return out
}

// itemIDs maps fetched orchestration items to their instance number.
func itemIDs(ch <-chan *duroxide.OrchestrationItem) <-chan string {
	out := make(chan string, cap(ch))
	go func() {
		for it := range ch {
			out <- strings.TrimPrefix(it.Instance, "o")
		}
	}()
	return out
}

// testProviderHandOffPassedOn
// (TestTimingSensitive/ProviderHandOffPassedOn): a fetch handed an item
// that it does not use (its context ends as the hand-off comes) passes it
// on: the other waiting fetch returns the item at once, not at its next
// re-check.
func testProviderHandOffPassedOn(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		st := h.New(t, agentstore.WithPollInterval(handOffPoll))
		p := st.Provider()
		ctx := context.Background()
		for i := range 10 {
			// fetch A waits first (it is handed the item), then B
			actx, cancelA := context.WithCancel(ctx)
			aDone := make(chan error, 1)
			go func() {
				l, err := p.FetchWorkItem(actx, 30*time.Second, 20*time.Second, nil, duroxide.TagFilter{})
				if l != nil {
					err = fmt.Errorf("A fetched %v", l.Item.RoutingInstance())
				}
				aDone <- err
			}()
			time.Sleep(idleWait / 2)
			bGot, stopB := waitingFetches(1, func(ctx context.Context) (*duroxide.WorkItemLease, error) {
				return p.FetchWorkItem(ctx, 30*time.Second, 20*time.Second, nil, duroxide.TagFilter{})
			})
			time.Sleep(idleWait)
			// A's context ends together with the enqueue's hand-off
			go cancelA()
			t0 := time.Now()
			if err := p.EnqueueForWorker(ctx, &duroxide.ActivityExecute{Instance: "p" + strconv.Itoa(i), ExecutionID: 1, ID: 1, Name: "a", Input: "x"}); err != nil {
				t.Fatal(err)
			}
			aErr := <-aDone
			var fetchedByA bool
			if aErr != nil && !errors.Is(aErr, context.Canceled) {
				if !strings.HasPrefix(aErr.Error(), "A fetched") {
					t.Fatal(aErr)
				}
				fetchedByA = true // A claimed it before its context ended
			}
			if !fetchedByA {
				select {
				case l := <-bGot:
					if el := time.Since(t0); el > handOffAtOnce {
						t.Fatalf("round %d: the item reached the other waiting fetch after %v (its re-check is every %v)", i, el, handOffPoll)
					}
					_ = l
				case <-time.After(5 * time.Second):
					t.Fatalf("round %d: the item handed to a fetch that left never reached the other waiting fetch", i)
				}
			}
			stopB()
			drainWork(t, p)
		}
	})
}

// drainWork acks every worker item left (a test round's leftovers).
func drainWork(t *testing.T, p duroxide.Provider) {
	t.Helper()
	for {
		l, err := p.FetchWorkItem(context.Background(), 30*time.Second, 0, nil, duroxide.TagFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if l == nil {
			return
		}
		if err := p.AckWorkItem(context.Background(), l.LockToken, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// testProviderFetchWakesOnEnqueue
// (TestTimingSensitive/ProviderFetchWakesOnEnqueue): a fetch waiting with a
// long poll returns within a few milliseconds of an enqueue through the
// same Store, and within the cross-Store wake-up's delay of one through
// another Store (LISTEN/NOTIFY, PRAGMA data_version; MariaDB has no
// cross-Store wake-up: its poll interval).
func testProviderFetchWakesOnEnqueue(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		st := h.New(t)
		other := h.Open(t)
		ctx := context.Background()
		for _, via := range []struct {
			name  string
			p     duroxide.Provider
			limit time.Duration
		}{{"same Store", st.Provider(), 150 * time.Millisecond}, {"another Store", other.Provider(), 400 * time.Millisecond}} {
			if via.name == "another Store" && h.Dialect == agentstore.MariaDB {
				via.limit = 1500 * time.Millisecond
			}
			for _, q := range []string{"worker", "orchestrator"} {
				var best time.Duration
				// the best of three: a loaded machine's scheduling delays
				// are not what is measured
				for i := range 3 {
					done := make(chan time.Time, 1)
					fctx, cancel := context.WithCancel(ctx)
					go func() {
						var ok bool
						if q == "worker" {
							l, err := st.Provider().FetchWorkItem(fctx, 30*time.Second, 20*time.Second, nil, duroxide.TagFilter{})
							ok = err == nil && l != nil
							if ok {
								_ = st.Provider().AckWorkItem(ctx, l.LockToken, nil)
							}
						} else {
							it, err := st.Provider().FetchOrchestrationItem(fctx, 30*time.Second, 20*time.Second, nil)
							ok = err == nil && it != nil
							if ok {
								_ = st.Provider().AbandonOrchestrationItem(ctx, it.LockToken, time.Hour, true)
							}
						}
						if ok {
							done <- time.Now()
						}
						close(done)
					}()
					time.Sleep(idleWait)
					id := fmt.Sprintf("%s-%s-%d", strings.ReplaceAll(via.name, " ", ""), q, i)
					t0 := time.Now()
					var err error
					if q == "worker" {
						err = via.p.EnqueueForWorker(ctx, &duroxide.ActivityExecute{Instance: id, ExecutionID: 1, ID: 1, Name: "a", Input: "x"})
					} else {
						err = via.p.EnqueueForOrchestrator(ctx, &duroxide.StartOrchestration{Instance: id, Orchestration: "x", ExecutionID: 1}, 0)
					}
					if err != nil {
						t.Fatal(err)
					}
					var at time.Time
					select {
					case at = <-done:
					case <-time.After(10 * time.Second):
					}
					cancel()
					if at.IsZero() {
						t.Fatalf("%s, %s queue: the waiting fetch did not return the item", via.name, q)
					}
					if el := at.Sub(t0); i == 0 || el < best {
						best = el
					}
				}
				if best > via.limit {
					t.Fatalf("%s, %s queue: the waiting fetch returned %v after the enqueue (best of 3), want within %v", via.name, q, best, via.limit)
				}
				t.Logf("%s, %s queue: woken in %v", via.name, q, best)
			}
		}
	})
}

// testProviderStatementsPerWorkflow
// (TestTimingSensitive/ProviderStatementsPerWorkflow) counts the statements
// of one workflow (start, a turn scheduling one activity, the activity, the
// completing turn) run by two orchestrator and two worker loops of one
// Store, workflows one at a time: each new item wakes one waiting loop, so
// no loop's claim finds nothing. It fails when a round trip removed from
// the workflow's path comes back.
func testProviderStatementsPerWorkflow(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		l := &stmtLogger{}
		st := h.New(t, agentstore.WithLogger(l))
		waiter := h.Open(t) // the waiter's reads are not counted
		eng := &orchloop.Engine{
			P: st.Provider(),
			Orchestrations: map[string]orchloop.Orchestration{"one": func(c *orchloop.Ctx, in string) (string, bool, error) {
				return c.Activity("inc", in)
			}},
			Activities:  map[string]orchloop.Activity{"inc": func(_ context.Context, in string) (string, error) { return in + "+1", nil }},
			PollTimeout: 30 * time.Second, // the loops stay in their long polls
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(2)
			go func() { defer wg.Done(); _ = eng.RunOrchestrator(ctx) }()
			go func() { defer wg.Done(); _ = eng.RunWorker(ctx) }()
		}
		defer func() { cancel(); wg.Wait() }()
		const n = 20
		run := func(id string) {
			if err := eng.Start(ctx, id, "one", "x"); err != nil {
				t.Fatal(err)
			}
			if _, err := orchloop.Wait(ctx, waiter.ProviderAdmin(), []string{id}, 2*time.Millisecond); err != nil {
				t.Fatal(err)
			}
		}
		run("warm")
		time.Sleep(idleWait)
		l.reset()
		t0 := time.Now()
		for i := range n {
			run("wf-" + strconv.Itoa(i))
		}
		el := time.Since(t0)
		got := float64(l.n.Load()) / n
		// the statements of one workflow, with every loop woken only for
		// an item it takes and no loop's fetch after its item claiming
		// again: PostgreSQL's are the start, two claims (the first one
		// reads the new instance's metadata too), two acks, the worker
		// claim and ack;
		// SQLite's and MariaDB's claims and acks are transactions of
		// several statements
		// (measured before the hand-off and the quiet skip: PostgreSQL
		// 18.4, SQLite 49, MariaDB 62.5; after: 8.1, 45.5 to 49, 49;
		// PostgreSQL 7.0 since the claim reads a new instance's metadata;
		// 6.0 since the ack that schedules the activity enqueues it
		// leased to the waiting worker loop, which takes it without a
		// claim: the worker ack, the start, two claims, two acks).
		// SQLite's count varied with when its change watcher woke the
		// waiting loops: 45.5 to 64.1 for one build (a2f1e84) in six runs
		// on an idle machine, 2026-12-04; 23.0 in three runs since the
		// watcher no longer wakes them for the Store's own commits
		// (2026-12-05)
		want := map[agentstore.Dialect]float64{agentstore.Postgres: 6, agentstore.SQLite: 28, agentstore.MariaDB: 52}[h.Dialect]
		// idle re-checks (one a second per waiting loop) are not the
		// workflows'
		slack := 4 * el.Seconds() / n
		t.Logf("%s: %.2f statements per workflow (%d workflows in %v)", h.Dialect, got, n, el.Round(time.Millisecond))
		// (+1.5: the retries and lease re-stamps a loaded CI machine adds,
		// 8.70 once on PostgreSQL beside the whole suite; a fetch that woke
		// every waiting loop again would add several claims per workflow)
		if got > want+slack+1.5 {
			l.mu.Lock()
			first := strings.Join(l.last, "\n")
			l.mu.Unlock()
			t.Fatalf("%.2f statements per workflow, want at most %.0f (+%.2f for idle re-checks); the first ones:\n%s", got, want, slack, first)
		}
	})
}
