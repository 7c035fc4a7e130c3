package agentstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

// stmtCounter is a pgx query tracer: it records every statement sent on
// the wire, BEGIN and COMMIT included (pgx sends them as statements), so
// its count is the number of round trips of a call (statements are
// prepared once per connection; those prepares are not counted).
type stmtCounter struct {
	mu   sync.Mutex
	sqls []string
}

// TraceQueryStart implements pgx.QueryTracer.
func (c *stmtCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	// the coalesced LISTEN/NOTIFY publisher runs in the background, off
	// the call's path
	if !strings.Contains(d.SQL, "pg_notify") {
		c.mu.Lock()
		c.sqls = append(c.sqls, d.SQL)
		c.mu.Unlock()
	}
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (c *stmtCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// take returns and clears the statements recorded so far.
func (c *stmtCounter) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.sqls
	c.sqls = nil
	return out
}

// countingStore opens a migrated PostgreSQL store on h whose connections
// report every statement to the returned counter.
func countingStore(t *testing.T, h *harness, opts ...agentstore.Option) (*agentstore.Store, *stmtCounter) {
	t.Helper()
	cfg, err := pgx.ParseConfig(postgresDSN())
	if err != nil {
		t.Fatal(err)
	}
	counter := &stmtCounter{}
	cfg.Tracer = counter
	sqlDB := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { _ = sqlDB.Close() })
	gdb, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), &gorm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := agentstore.New(gdb, append([]agentstore.Option{agentstore.WithSchema(h.Schema)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return st, counter
}

// TestProviderRoundTripsPerTurn runs a 1-activity orchestration (start
// turn, activity, completion turn) and, on PostgreSQL, asserts the
// statements (= round trips) of each provider call: a fetch is one
// autocommit statement (two for an instance not created yet: the metadata
// is read after the lock), an ack one, the worker's fetch and ack one
// each; none opens a transaction. Before the one-statement fetch and ack,
// the orchestration fetch took 6-7 and the ack 8-9 round trips.
func TestProviderRoundTripsPerTurn(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clock := newTestClock()
		var st *agentstore.Store
		counter := &stmtCounter{}
		if h.Dialect == agentstore.Postgres {
			st, counter = countingStore(t, h, agentstore.WithClock(clock.Now))
		} else {
			st = h.New(t, agentstore.WithClock(clock.Now))
		}
		p := st.Provider()
		expect := func(what string, want int) {
			t.Helper()
			got := counter.take()
			if h.Dialect != agentstore.Postgres {
				return
			}
			t.Logf("%s: %d statements", what, len(got))
			for _, s := range got {
				up := strings.ToUpper(strings.TrimSpace(s))
				if up == "BEGIN" || strings.HasPrefix(up, "BEGIN ") || up == "COMMIT" || strings.HasPrefix(up, "SET LOCAL") {
					t.Errorf("%s: runs %q; want autocommit statements only", what, s)
				}
			}
			if len(got) != want {
				for i, s := range got {
					t.Logf("  %d: %.160s", i+1, s)
				}
				t.Errorf("%s: %d statements (round trips), want %d", what, len(got), want)
			}
		}

		if err := p.EnqueueForOrchestrator(ctx, startItem("rt", nil), 0); err != nil {
			t.Fatal(err)
		}
		counter.take()

		// turn 1: new instance
		it, err := p.FetchOrchestrationItem(ctx, testLock, 0, nil)
		if err != nil || it == nil {
			t.Fatalf("fetch 1: %v, %v", it, err)
		}
		expect("fetch (new instance)", 2)
		if it.OrchestrationName != "Orch" || it.Version != "1.0.0" || it.ExecutionID != 1 || len(it.History) != 0 || len(it.Messages) != 1 {
			t.Fatalf("fetch 1 = %q %q exec %d, %d events, %d messages", it.OrchestrationName, it.Version, it.ExecutionID, len(it.History), len(it.Messages))
		}
		err = p.AckOrchestrationItem(ctx, it.LockToken, repo.OrchestrationAck{ExecutionID: 1,
			HistoryDelta: []repo.Event{startedEv("rt", 1, 1, nil), ev("rt", 1, 2, &repo.ActivityScheduledEvent{Name: "act", Input: "in"})},
			WorkerItems:  []repo.WorkItem{activity("rt", 1, 2)},
			Metadata:     runningMeta(nil)})
		if err != nil {
			t.Fatal(err)
		}
		expect("ack (history, activity, metadata)", 1)

		// the activity
		lease, err := p.FetchWorkItem(ctx, testLock, 0, nil, repo.TagFilter{})
		if err != nil || lease == nil {
			t.Fatalf("fetch work: %v, %v", lease, err)
		}
		expect("worker fetch", 1)
		if err := p.AckWorkItem(ctx, lease.LockToken, &repo.ActivityCompleted{Instance: "rt", ExecutionID: 1, ID: 2, Result: "out"}); err != nil {
			t.Fatal(err)
		}
		expect("worker ack", 1)

		// turn 2: existing instance, metadata and history read in the same statement
		it, err = p.FetchOrchestrationItem(ctx, testLock, 0, nil)
		if err != nil || it == nil {
			t.Fatalf("fetch 2: %v, %v", it, err)
		}
		expect("fetch (existing instance)", 1)
		if it.OrchestrationName != "Orch" || it.ExecutionID != 1 || len(it.History) != 2 || len(it.Messages) != 1 {
			t.Fatalf("fetch 2 = %q exec %d, %d events, %d messages", it.OrchestrationName, it.ExecutionID, len(it.History), len(it.Messages))
		}
		if _, ok := it.History[1].Kind.(*repo.ActivityScheduledEvent); !ok {
			t.Fatalf("history[1] = %T", it.History[1].Kind)
		}
		err = p.AckOrchestrationItem(ctx, it.LockToken, repo.OrchestrationAck{ExecutionID: 1,
			HistoryDelta: []repo.Event{ev("rt", 1, 3, &repo.ActivityCompletedEvent{Result: "out"}), ev("rt", 1, 4, &repo.OrchestrationCompletedEvent{Output: "out"})},
			Metadata:     repo.ExecutionMetadata{Status: sp(repo.StatusCompleted), Output: sp("out"), OrchestrationName: sp("Orch"), OrchestrationVersion: sp("1.0.0")}})
		if err != nil {
			t.Fatal(err)
		}
		expect("ack (completion)", 1)

		// a second ack of the same token: one statement, nothing written
		err = p.AckOrchestrationItem(ctx, it.LockToken, repo.OrchestrationAck{ExecutionID: 1,
			HistoryDelta: []repo.Event{ev("rt", 1, 5, &repo.OrchestrationCompletedEvent{Output: "again"})}})
		wantErr(t, err, agentstore.ErrInvalidLockToken)
		expect("second ack", 1)

		// an empty queue: one statement
		if it, err := p.FetchOrchestrationItem(ctx, testLock, 0, nil); err != nil || it != nil {
			t.Fatalf("fetch on empty queue: %v, %v", it, err)
		}
		expect("fetch (nothing to do)", 1)

		info, err := st.ProviderAdmin().GetInstanceInfo(ctx, "rt")
		if err != nil {
			t.Fatal(err)
		}
		if info.Status != repo.StatusCompleted || info.Output == nil || *info.Output != "out" {
			t.Fatalf("instance = %s %v", info.Status, info.Output)
		}
		evs, err := p.Read(ctx, "rt")
		if err != nil || len(evs) != 4 {
			t.Fatalf("history = %d events, %v; want 4", len(evs), err)
		}
	})
}

// TestProviderConcurrentTurnsSeeLatestHistory races turns of a few
// instances across several Stores while events keep arriving: every turn
// appends one event per fetched message after the fetched history, so a
// fetch that returned history older than the last ack (the PostgreSQL
// fetch reads in the snapshot its statement started with, before it took
// the lock) would make the ack collide on event ids (ErrDuplicateEvent),
// and a lost or doubled message would show in the final history.
func TestProviderConcurrentTurnsSeeLatestHistory(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		const instances, events, stores, loopsPerStore = 4, 40, 3, 2
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		first := h.New(t)
		provs := []repo.Provider{first.Provider()}
		for range stores - 1 {
			provs = append(provs, h.Open(t).Provider())
		}
		for i := range instances {
			if err := first.Provider().EnqueueForOrchestrator(ctx, startItem(fmt.Sprintf("race%d", i), nil), 0); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		// producer: events interleaved over the instances
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := range events {
				for i := range instances {
					w := &repo.ExternalRaised{Instance: fmt.Sprintf("race%d", i), Name: "e", Data: fmt.Sprint(e)}
					if err := provs[e%stores].EnqueueForOrchestrator(ctx, w, 0); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
		var mu sync.Mutex
		delivered := 0 // ExternalEventEvents acked
		loopCtx, stop := context.WithCancel(ctx)
		defer stop()
		for _, p := range provs {
			for range loopsPerStore {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for loopCtx.Err() == nil {
						it, err := p.FetchOrchestrationItem(loopCtx, testLock, 20*time.Millisecond, nil)
						if err != nil {
							if loopCtx.Err() == nil && !errors.Is(err, agentstore.ErrRetryable) {
								errs <- fmt.Errorf("fetch: %w", err)
							}
							continue
						}
						if it == nil {
							continue
						}
						next := uint64(len(it.History)) + 1
						if len(it.History) > 0 && it.History[len(it.History)-1].EventID != next-1 {
							errs <- fmt.Errorf("%s: history ends at id %d with %d events", it.Instance, it.History[len(it.History)-1].EventID, len(it.History))
						}
						var delta []repo.Event
						n := 0
						for _, m := range it.Messages {
							switch m := m.(type) {
							case *repo.StartOrchestration:
								delta = append(delta, startedEv(it.Instance, 1, next, nil))
							case *repo.ExternalRaised:
								delta = append(delta, ev(it.Instance, 1, next, &repo.ExternalEventEvent{Name: m.Name, Data: m.Data}))
								n++
							default:
								errs <- fmt.Errorf("unexpected message %T", m)
								continue
							}
							next++
						}
						err = p.AckOrchestrationItem(loopCtx, it.LockToken, repo.OrchestrationAck{ExecutionID: 1, HistoryDelta: delta, Metadata: runningMeta(nil)})
						switch {
						case err == nil:
							mu.Lock()
							delivered += n
							mu.Unlock()
						case loopCtx.Err() != nil:
						default:
							errs <- fmt.Errorf("ack %s (%d events from id %d): %w", it.Instance, len(delta), next-uint64(len(delta)), err)
						}
					}
				}()
			}
		}
		deadline := time.Now().Add(90 * time.Second)
		for {
			mu.Lock()
			d := delivered
			mu.Unlock()
			if d >= instances*events || time.Now().After(deadline) || len(errs) > 0 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		stop()
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		for i := range instances {
			inst := fmt.Sprintf("race%d", i)
			evs, err := first.Provider().Read(ctx, inst)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]int{}
			for j, e := range evs {
				if e.EventID != uint64(j+1) {
					t.Fatalf("%s: event %d has id %d", inst, j, e.EventID)
				}
				if x, ok := e.Kind.(*repo.ExternalEventEvent); ok {
					seen[x.Data]++
				}
			}
			for e := range events {
				if seen[fmt.Sprint(e)] != 1 {
					t.Errorf("%s: event %d delivered %d times, want once", inst, e, seen[fmt.Sprint(e)])
				}
			}
		}
	})
}

// TestProviderFetchSnapshotOlderThanLock makes the PostgreSQL fetch
// statement take its snapshot before a concurrent "ack" commits and its
// lock after: transaction T deletes the instance's (expired) lock row and
// writes a new instance row version and a history event, the fetch
// starts and waits in its lock upsert for T, then T commits. The fetch
// must return T's event (its snapshot alone would not have it).
func TestProviderFetchSnapshotOlderThanLock(t *testing.T) {
	h := newHarness(t, agentstore.Postgres)
	admin := requirePostgres(t)
	e := newPEnv(t, h)
	e.startInstance(t, "snap", nil)
	e.enqueue(t, &repo.ExternalRaised{Instance: "snap", Name: "x", Data: "1"})
	now := e.clock.Now().UnixMilli()
	locks, inst, hist := quote(e.st, models.TableInstanceLocks), quote(e.st, models.TableInstances), quote(e.st, models.TableHistory)
	e.exec(t, "INSERT INTO "+locks+" (instance_id, lock_token, locked_until, locked_at) VALUES ('snap', 'old', ?, ?)", now-1, now-1000)
	ctx := context.Background()
	tx, err := admin.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	data, err := json.Marshal(ev("snap", 1, 2, &repo.ExternalEventEvent{Name: "late", Data: "ack"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"DELETE FROM " + locks + " WHERE instance_id = 'snap'",
		fmt.Sprintf("UPDATE %s SET updated_at = %d WHERE instance_id = 'snap'", inst, now),
		fmt.Sprintf("INSERT INTO %s (instance_id, execution_id, event_id, event_type, event_data, created_at) VALUES ('snap', 1, 2, 'ExternalEvent', '%s', %d)",
			hist, strings.ReplaceAll(string(data), "'", "''"), now),
	} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	type result struct {
		it  *repo.OrchestrationItem
		err error
	}
	done := make(chan result, 1)
	go func() {
		it, err := e.p.FetchOrchestrationItem(ctx, testLock, 0, nil)
		done <- result{it, err}
	}()
	// wait until the fetch waits for T's row lock
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := admin.QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%"+h.Schema+"%instance_locks%'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		select {
		case r := <-done:
			t.Fatalf("fetch returned before T committed: %v, %v", r.it, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the fetch never waited for T")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.it == nil {
		t.Fatalf("fetch: %v, %v", r.it, r.err)
	}
	if len(r.it.History) != 2 || len(r.it.Messages) != 1 {
		t.Fatalf("fetch returned %d history events (want 2: the one committed while it waited) and %d messages", len(r.it.History), len(r.it.Messages))
	}
	if x, ok := r.it.History[1].Kind.(*repo.ExternalEventEvent); !ok || x.Data != "ack" {
		t.Fatalf("history[1] = %#v", r.it.History[1].Kind)
	}
}
