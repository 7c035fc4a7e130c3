package agentstore_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
)

// MariaDB statement counts and plans of the session queue, List and
// CleanupExpired (issue 26; bench -scenarios queue and -scale).

// stmtsOf returns the statements st ran (its logger, l) while fn ran.
func stmtsOf(l *stmtLogger, fn func()) []string {
	l.reset()
	fn()
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.last...)
}

// planTable is one table of an ANALYZE FORMAT=JSON plan: its text (the
// JSON is read as text: MariaDB writes an ANSI-quoted identifier into a
// condition string unescaped).
type planTable string

var planFieldRE = regexp.MustCompile(`"(access_type|key|r_rows|used_key_parts)": ("[^"]*"|[0-9.]+|null|\[[^\]]*\])`)

// field returns the plan's value of name as text (quotes dropped), "" if absent.
func (p planTable) field(name string) string {
	for _, m := range planFieldRE.FindAllStringSubmatch(string(p), -1) {
		if m[1] == name {
			return strings.Trim(m[2], `"`)
		}
	}
	return ""
}

// rows returns the plan's r_rows (0 when null or absent).
func (p planTable) rows() float64 {
	r, _ := strconv.ParseFloat(p.field("r_rows"), 64)
	return r
}

// analyze runs ANALYZE FORMAT=JSON of stmt (in a transaction rolled back:
// stmt may lock) and returns its plan's tables by name.
func analyze(t *testing.T, st *agentstore.Store, stmt string) map[string]planTable {
	t.Helper()
	ctx := context.Background()
	tx := st.DB(ctx).Begin()
	defer tx.Rollback()
	var plan string
	if err := tx.Raw("ANALYZE FORMAT=JSON " + stmt).Row().Scan(&plan); err != nil {
		t.Fatalf("analyze %s: %v", stmt, err)
	}
	tables := map[string]planTable{}
	parts := strings.Split(plan, `"table_name": "`)
	for _, part := range parts[1:] {
		name, rest, _ := strings.Cut(part, `"`)
		tables[name] = planTable(rest)
	}
	return tables
}

// TestMariaDBSessionQueueRoundTrips: with no group commit to coalesce
// calls, a Dequeue is the locking pick and the UPDATE (in a transaction:
// four round trips with BEGIN and COMMIT, as the raw SKIP LOCKED claim),
// no read-back of the leased row; a Complete is one UPDATE, also when
// eight run at once through one Store with group commit (MariaDB has no
// statement that ends several leases and reports which: the coalesced
// UPDATE ... FROM (VALUES ...) RETURNING failed with a syntax error and
// its calls ran again one by one).
func TestMariaDBSessionQueueRoundTrips(t *testing.T) {
	mariadbOnlyLongTest(t)
	t.Parallel()
	h := newHarness(t, agentstore.MariaDB)
	ctx := context.Background()
	h.New(t)
	for _, gc := range []bool{false, true} {
		l := &stmtLogger{}
		opts := []agentstore.Option{agentstore.WithLogger(l)}
		if !gc {
			opts = append(opts, agentstore.WithoutCapabilities(agentstore.CapGroupCommit))
		}
		st := h.Open(t, opts...)
		s := repo.NewSession()
		if err := st.Sessions().Save(ctx, s); err != nil {
			t.Fatal(err)
		}
		q := st.SessionQueue()
		for i := range 8 {
			if _, err := q.Enqueue(ctx, s.ID, fmt.Sprintf(`{"i":%d}`, i), int32(i%3)); err != nil {
				t.Fatal(err)
			}
		}
		if !gc {
			var it *repo.QueueItem
			stmts := stmtsOf(l, func() {
				var err error
				if it, err = q.Dequeue(ctx, s.ID, repo.DequeueParams{Owner: "w", Lease: time.Minute}); err != nil || it == nil {
					t.Fatalf("dequeue: %v, %v", it, err)
				}
			})
			if len(stmts) != 2 || !strings.HasPrefix(stmts[0], "SELECT") || !strings.HasPrefix(stmts[1], "UPDATE") {
				t.Fatalf("a Dequeue ran %d statements, want the pick and the UPDATE:\n%s", len(stmts), strings.Join(stmts, "\n"))
			}
			if it.Attempts != 1 || it.Status != repo.QueueProcessing || it.Priority != 2 {
				t.Fatalf("dequeued %+v, want attempts 1, processing, the top priority", it)
			}
			stored, err := q.Item(ctx, it.ID)
			if err != nil || stored.Attempts != 1 || stored.Content != it.Content || *stored.LeaseToken != *it.LeaseToken {
				t.Fatalf("stored item %+v (%v), dequeued %+v", stored, err, it)
			}
			stmts = stmtsOf(l, func() {
				if err := q.Complete(ctx, it.Lease()); err != nil {
					t.Fatal(err)
				}
			})
			if len(stmts) != 1 {
				t.Fatalf("a Complete ran %d statements, want 1:\n%s", len(stmts), strings.Join(stmts, "\n"))
			}
			continue
		}
		var items []*repo.QueueItem
		for range 8 {
			it, err := q.Dequeue(ctx, s.ID, repo.DequeueParams{Owner: "w", Lease: time.Minute})
			if err != nil || it == nil {
				t.Fatalf("dequeue: %v, %v", it, err)
			}
			items = append(items, it)
		}
		stmts := stmtsOf(l, func() {
			var wg sync.WaitGroup
			for _, it := range items {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := q.Complete(ctx, it.Lease()); err != nil {
						t.Errorf("complete %s: %v", it.ID, err)
					}
				}()
			}
			wg.Wait()
		})
		if len(stmts) != 8 {
			t.Fatalf("8 concurrent Completes ran %d statements, want 8:\n%s", len(stmts), strings.Join(stmts, "\n"))
		}
		if done, err := q.Items(ctx, s.ID, repo.QueueCompleted); err != nil || len(done) != 8 {
			t.Fatalf("%d items completed (%v), want 8", len(done), err)
		}
	}
}

// TestMariaDBSessionQueueClaimSkipsFinishedItems: after 300 of a session's
// 320 items are completed, the claim's pick reads only live rows (V17's
// index (session_id, processed_at, priority DESC, seq)); with the
// pre-V17 index (session_id, priority DESC, seq) it stepped over the
// finished items, which sort before the live ones of lower priority.
// Verify reports that older form, and Migrate at head makes the new one.
func TestMariaDBSessionQueueClaimSkipsFinishedItems(t *testing.T) {
	mariadbOnlyLongTest(t)
	t.Parallel()
	h := newHarness(t, agentstore.MariaDB)
	ctx := context.Background()
	l := &stmtLogger{}
	st := h.New(t, agentstore.WithLogger(l), agentstore.WithoutCapabilities(agentstore.CapGroupCommit))
	s := repo.NewSession()
	if err := st.Sessions().Save(ctx, s); err != nil {
		t.Fatal(err)
	}
	q := st.SessionQueue()
	for i := range 320 {
		// the first 300 dequeued are the higher priorities
		if _, err := q.Enqueue(ctx, s.ID, fmt.Sprintf(`{"i":%d}`, i), int32(min(i/150, 2))); err != nil {
			t.Fatal(err)
		}
	}
	for range 300 {
		it, err := q.Dequeue(ctx, s.ID, repo.DequeueParams{Lease: time.Minute})
		if err != nil || it == nil {
			t.Fatalf("dequeue: %v, %v", it, err)
		}
		if err := q.Complete(ctx, it.Lease()); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.DB(ctx).Exec(`ANALYZE TABLE "agentstore_queue"`).Error; err != nil {
		t.Fatal(err)
	}
	pick := stmtsOf(l, func() {
		if it, err := q.Dequeue(ctx, s.ID, repo.DequeueParams{Lease: time.Minute}); err != nil || it == nil {
			t.Fatalf("dequeue: %v, %v", it, err)
		}
	})[0]
	rowsRead := func() float64 {
		tb := analyze(t, st, pick)["agentstore_queue"]
		if tb.field("key") != "idx_agentstore_queue_session_status" {
			t.Fatalf("the pick reads %v, want the live-items index: %s", tb.field("key"), tb)
		}
		return tb.rows()
	}
	if r := rowsRead(); r > 5 {
		t.Fatalf("the pick read %v rows with 300 finished items, want at most 5 (the live ones it passes)", r)
	}
	if rep, err := st.Verify(ctx); err != nil || !rep.OK() {
		t.Fatalf("verify: %v, %v", rep, err)
	}
	// the pre-V17 form: Verify reports it, the pick reads the finished items
	if err := st.DB(ctx).Exec(`ALTER TABLE "agentstore_queue" DROP INDEX "idx_agentstore_queue_session_status",` +
		` ADD INDEX "idx_agentstore_queue_session_status" ("session_id", "priority" DESC, "seq")`).Error; err != nil {
		t.Fatal(err)
	}
	if r := rowsRead(); r < 300 {
		t.Fatalf("with the pre-V17 index the pick read %v rows, want the 300 finished ones too (the test would not see the change)", r)
	}
	rep, err := st.Verify(ctx)
	if err != nil || len(rep.Issues) != 1 || rep.Issues[0].Object != "idx_agentstore_queue_session_status" {
		t.Fatalf("verify of the pre-V17 index: %v, %v", rep, err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if r := rowsRead(); r > 5 {
		t.Fatalf("after Migrate's repair the pick read %v rows, want at most 5", r)
	}
	if rep, err := st.Verify(ctx); err != nil || !rep.OK() {
		t.Fatalf("verify after the repair: %v, %v", rep, err)
	}
}

// TestMariaDBListAndCleanupPlans: the statements of a one-tenant List page
// after a cursor and of CleanupExpired have plans bounded by their result
// on MariaDB (bench -scale grew 2.8x and 1.9x per decade): the List page
// is a range over (tenant_id, updated_at, id) (without the index hint:
// ref on tenant_id, the tenant's rows before the cursor filtered), and
// CleanupExpired's recursive step reads the sessions by their parent
// index once per expired session (without STRAIGHT_JOIN: the whole index).
func TestMariaDBListAndCleanupPlans(t *testing.T) {
	mariadbOnlyLongTest(t)
	t.Parallel()
	h := newHarness(t, agentstore.MariaDB)
	ctx := context.Background()
	l := &stmtLogger{}
	st := h.New(t, agentstore.WithLogger(l))
	const n = 20000
	if err := st.DB(ctx).Exec(`INSERT INTO "agentstore_sessions" (id, tenant_id, config, permissions, created_at, updated_at)
		SELECT UUID(), 'tenant-a', '{}', '{}', TIMESTAMPADD(MICROSECOND, -1000 * CAST(seq AS SIGNED), UTC_TIMESTAMP(6)),
		TIMESTAMPADD(MICROSECOND, -1000 * CAST(seq AS SIGNED), UTC_TIMESTAMP(6)) FROM seq_1_to_20000`).Error; err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(-time.Minute)
	for range 5 {
		s := repo.NewSession()
		s.ExpiresAt = &exp
		if err := st.Sessions().Save(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.DB(ctx).Exec(`ANALYZE TABLE "agentstore_sessions"`).Error; err != nil {
		t.Fatal(err)
	}
	tenant := "tenant-a"
	ss := st.Sessions()
	var after *repo.Cursor
	for seen := 0; seen < n/2; {
		pg, err := ss.List(ctx, repo.ListParams{TenantID: &tenant, After: after, Limit: min(repo.MaxListLimit, n/2-seen)})
		if err != nil || pg.Next == nil {
			t.Fatalf("list: %v", err)
		}
		seen += len(pg.Sessions)
		after = pg.Next
	}
	var list string
	for _, s := range stmtsOf(l, func() {
		if pg, err := ss.List(ctx, repo.ListParams{TenantID: &tenant, After: after, Limit: 100}); err != nil || len(pg.Sessions) != 100 {
			t.Fatalf("list: %v", err)
		}
	}) {
		if strings.Contains(s, "tenant_id") {
			list = s
		}
	}
	tb := analyze(t, st, list)["agentstore_sessions"]
	if parts := tb.field("used_key_parts"); tb.field("access_type") != "range" || !strings.Contains(parts, "updated_at") {
		t.Fatalf("the one-tenant page after a cursor is %v over %v, want a range over (tenant_id, updated_at, id):\n%s", tb.field("access_type"), parts, list)
	}
	var cte string
	for _, s := range stmtsOf(l, func() {
		if k, err := ss.CleanupExpired(ctx, 100); err != nil || k != 5 {
			t.Fatalf("cleanup: %d, %v", k, err)
		}
	}) {
		if strings.HasPrefix(s, "WITH RECURSIVE") {
			cte = s
		}
	}
	// the same statement over 5 expired sessions that exist, each with a fork
	var ids []string
	for range 5 {
		s := repo.NewSession()
		s.ExpiresAt = &exp
		if err := ss.Save(ctx, s); err != nil {
			t.Fatal(err)
		}
		child := repo.NewSession()
		child.ParentID = &s.ID
		if err := ss.Save(ctx, child); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, "'"+s.ID.String()+"'")
	}
	if i := strings.Index(cte, "WHERE id IN ("); i >= 0 {
		j := i + strings.Index(cte[i:], ")")
		cte = cte[:i] + "WHERE id IN (" + strings.Join(ids, ",") + cte[j:]
	}
	c := analyze(t, st, cte)["c"]
	if c.field("access_type") != "ref" || c.rows() > 10 {
		t.Fatalf("CleanupExpired's recursive step reads the sessions by %v (%v rows), want ref on the parent index:\n%s", c.field("access_type"), c.rows(), cte)
	}
}
