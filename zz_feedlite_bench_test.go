package agentstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
)

func BenchmarkZZLiteFeed(b *testing.B) {
	const items, workers = 2000, 8
	ctx := context.Background()
	type subject struct {
		name string
		st   *agentstore.Store
		sid  repo.Session
		dur  time.Duration
		n    int
	}
	tbl := `CREATE TABLE "agentstore_session_changes" ("id" integer PRIMARY KEY %s,"ord" integer NOT NULL DEFAULT 0,"tenant_id" text,"session_id" uuid NOT NULL,"kind" varchar(32) NOT NULL,"item_id" uuid,"state" varchar(32),"from_seq" integer NOT NULL DEFAULT 0,"to_seq" integer NOT NULL DEFAULT 0,"version" integer NOT NULL DEFAULT 0,"at" integer NOT NULL)`
	ordIdx := `CREATE INDEX "idx_agentstore_session_changes_ord" ON "agentstore_session_changes"("ord","id")`
	sesIdx := `CREATE INDEX "idx_agentstore_session_changes_session" ON "agentstore_session_changes"("session_id","ord","id")`
	var subs []*subject
	for _, name := range []string{"row", "none", "noautoinc", "noordidx", "noautoinc_noordidx"} {
		h := newHarness(b, agentstore.SQLite)
		st := h.New(b)
		var stmts []string
		switch name {
		case "none":
			stmts = []string{`DROP TRIGGER "agentstore_queue_change_insert"`, `DROP TRIGGER "agentstore_queue_change_status"`}
		case "noautoinc":
			stmts = []string{`DROP TABLE "agentstore_session_changes"`, fmt.Sprintf(tbl, ""), ordIdx, sesIdx}
		case "noordidx":
			stmts = []string{`DROP INDEX "idx_agentstore_session_changes_ord"`}
		case "noautoinc_noordidx":
			stmts = []string{`DROP TABLE "agentstore_session_changes"`, fmt.Sprintf(tbl, ""), sesIdx}
		}
		for _, s := range stmts {
			if _, err := st.SQLDB().ExecContext(ctx, s); err != nil {
				b.Fatalf("%s: %v", strings.Fields(s)[0], err)
			}
		}
		s := repo.NewSession()
		if err := st.Sessions().Save(ctx, s); err != nil {
			b.Fatal(err)
		}
		subs = append(subs, &subject{name: name, st: st, sid: *s})
	}
	fill := func(s *subject) {
		for i := 0; i < items; i++ {
			if _, err := s.st.SessionQueue().Enqueue(ctx, s.sid.ID, fmt.Sprint("job-", i), 0); err != nil {
				b.Fatal(err)
			}
		}
	}
	drain := func(s *subject) {
		q := s.st.SessionQueue()
		var wg sync.WaitGroup
		var mu sync.Mutex
		var firstErr error
		t0 := time.Now()
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					it, err := q.Dequeue(ctx, s.sid.ID, repo.DequeueParams{Lease: time.Minute})
					if err == nil && it == nil {
						return
					}
					if err == nil {
						err = q.Complete(ctx, it.Lease())
					}
					if err != nil {
						mu.Lock()
						firstErr = err
						mu.Unlock()
						return
					}
				}
			}()
		}
		wg.Wait()
		if firstErr != nil {
			b.Fatal(firstErr)
		}
		s.dur += time.Since(t0)
		s.n += items
	}
	round := 0
	for b.Loop() {
		for i := range subs {
			s := subs[(i+round)%len(subs)]
			fill(s)
			drain(s)
		}
		round++
	}
	for _, s := range subs {
		b.ReportMetric(float64(s.n)/s.dur.Seconds(), s.name+"-items/s")
	}
}
