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

// BenchmarkSessionQueueFeedCost measures what the change feed's queue
// triggers cost the session queue on PostgreSQL, side by side in one run:
// three databases (schemas) at head, one with V10's row-level queue
// triggers ("row", as shipped), one with them replaced by the
// statement-level design tried for issue 27 (one INSERT over the
// statement's transition tables per writing statement, "stmt"; not
// shipped, docs/changes.md), one with the queue triggers dropped (the
// queue without the feed, "none"). Each round fills every queue with 500
// items of one session (not timed) and drains them with 8 workers
// (Dequeue+Complete, group commit on), the subjects' order rotating, so
// machine load hits all three alike. Reported: items/s of each and the
// ratios.
func BenchmarkSessionQueueFeedCost(b *testing.B) {
	const items, workers = 500, 8
	ctx := context.Background()
	type subject struct {
		name string
		st   *agentstore.Store
		sid  repo.Session
		dur  time.Duration
		n    int
	}
	var subs []*subject
	for _, name := range []string{"row", "stmt", "none"} {
		h := newHarness(b, agentstore.Postgres)
		st := h.New(b)
		q := func(n string) string { return `"` + h.Schema + `"."` + n + `"` }
		var stmts []string
		switch name {
		case "stmt":
			stmts = []string{
				`DROP TRIGGER "trg_queue_change_insert" ON ` + q("agentstore_queue"),
				`DROP TRIGGER "trg_queue_change_status" ON ` + q("agentstore_queue"),
				strings.ReplaceAll(stmtQueueChangeFn, `"agentstore_`, `"`+h.Schema+`"."agentstore_`),
				`CREATE TRIGGER "trg_queue_change_insert" AFTER INSERT ON ` + q("agentstore_queue") + ` REFERENCING NEW TABLE AS n FOR EACH STATEMENT EXECUTE FUNCTION ` + q("agentstore_queue_changes") + `()`,
				`CREATE TRIGGER "trg_queue_change_status" AFTER UPDATE ON ` + q("agentstore_queue") + ` REFERENCING OLD TABLE AS o NEW TABLE AS n FOR EACH STATEMENT EXECUTE FUNCTION ` + q("agentstore_queue_changes") + `()`,
			}
		case "none":
			stmts = []string{
				`DROP TRIGGER "trg_queue_change_insert" ON ` + q("agentstore_queue"),
				`DROP TRIGGER "trg_queue_change_status" ON ` + q("agentstore_queue"),
			}
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
	rate := map[string]float64{}
	for _, s := range subs {
		rate[s.name] = float64(s.n) / s.dur.Seconds()
		b.ReportMetric(rate[s.name], s.name+"-items/s")
	}
	b.ReportMetric(rate["stmt"]/rate["row"], "stmt/row")
	b.ReportMetric(rate["row"]/rate["none"], "row/none")
	b.ReportMetric(rate["stmt"]/rate["none"], "stmt/none")
}

// stmtQueueChangeFn is the statement-level design of the feed's queue
// trigger function (not shipped): one INSERT per writing statement over its
// transition tables, ord raised to each session's newest ord read once per
// session, rows in the items' seq order; an UPDATE writes a row for each
// item whose status changed.
const stmtQueueChangeFn = `CREATE OR REPLACE FUNCTION "agentstore_queue_changes"() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE x bigint := CAST(CAST(pg_current_xact_id() AS text) AS bigint); t bigint := CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS bigint);
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO "agentstore_session_changes" ("ord","tenant_id","session_id","kind","item_id","state","at")
    SELECT GREATEST(x, COALESCE((SELECT c."ord" FROM "agentstore_session_changes" c WHERE c."session_id" = k.sid ORDER BY c."ord" DESC, c."id" DESC LIMIT 1), x)), s."tenant_id", n."session_id", 'queue.item', n."id", n."status", t
    FROM n JOIN (SELECT DISTINCT n2."session_id" AS sid FROM n AS n2) k ON k.sid = n."session_id" LEFT JOIN "agentstore_sessions" s ON s."id" = k.sid
    ORDER BY n."seq";
  ELSE
    INSERT INTO "agentstore_session_changes" ("ord","tenant_id","session_id","kind","item_id","state","at")
    SELECT GREATEST(x, COALESCE((SELECT c."ord" FROM "agentstore_session_changes" c WHERE c."session_id" = k.sid ORDER BY c."ord" DESC, c."id" DESC LIMIT 1), x)), s."tenant_id", n."session_id", 'queue.item', n."id", n."status", t
    FROM n JOIN o ON o."seq" = n."seq" JOIN (SELECT DISTINCT n2."session_id" AS sid FROM n AS n2) k ON k.sid = n."session_id" LEFT JOIN "agentstore_sessions" s ON s."id" = k.sid
    WHERE o."status" IS DISTINCT FROM n."status"
    ORDER BY n."seq";
  END IF;
  RETURN NULL;
END
$$`
