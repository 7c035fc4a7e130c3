package agentstore_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/agentstore/agentstore"
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
