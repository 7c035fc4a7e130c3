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
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
	"gorm.io/gorm"
)

// Plan traps (issue 24, item 6): a call whose answer does not depend on the
// data size must not cost more with it. Each case below fills a fresh store
// with planTrapRows rows that the call must NOT return (work visible only
// in the future, tagged or session-bound work, Completed instances, live
// sessions beside a full queue), runs the call through the public API with
// every statement captured, and checks each captured statement's plan:
//
//   - PostgreSQL: EXPLAIN ANALYZE of the statement as the store sent it
//     (arguments bound), once with the planner's custom plan after ANALYZE
//     and once with plan_cache_mode = force_generic_plan (the plan a pgx
//     statement cache switches to after five executions). No node may
//     read more than planTrapMaxRows rows of a table (rows returned plus
//     rows removed by a filter or an index recheck).
//   - SQLite: EXPLAIN QUERY PLAN, without statistics (a user's file has
//     none unless the store ran PRAGMA optimize) and after ANALYZE. No
//     full SCAN of a filled table: every access to one is a SEARCH.
//   - MariaDB: ANALYZE FORMAT=JSON of the statement (arguments bound, in a
//     transaction rolled back), without statistics and after ANALYZE
//     TABLE. No access to a filled table may read more than
//     planTrapMaxRows rows (r_rows × r_loops), and none is a full table
//     scan (access_type ALL).
//
// The row counts are what make a trap visible in EXPLAIN ANALYZE; timings
// are measured by bench -scale (BENCHMARKS.md), not here.

const (
	planTrapRows    = 100_000
	planTrapMaxRows = 1_000
)

// capturedStmt is one statement a store sent, with its arguments.
type capturedStmt struct {
	sql  string
	args []any
}

// stmtCapture records the statements a store sends through gorm while on.
type stmtCapture struct {
	mu    sync.Mutex
	on    bool
	stmts []capturedStmt
}

// install registers capture callbacks on st's gorm handle (query, row and
// raw: the provider's fetches and the admin reads go through them).
func (c *stmtCapture) install(t *testing.T, st *agentstore.Store) {
	t.Helper()
	rec := func(db *gorm.DB) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.on && db.Statement != nil && db.Statement.SQL.Len() > 0 {
			c.stmts = append(c.stmts, capturedStmt{sql: db.Statement.SQL.String(), args: append([]any(nil), db.Statement.Vars...)})
		}
	}
	cb := st.DB(context.Background()).Callback()
	for _, err := range []error{
		cb.Query().After("gorm:query").Register("plantrap:query", rec),
		cb.Row().After("gorm:row").Register("plantrap:row", rec),
		cb.Raw().After("gorm:raw").Register("plantrap:raw", rec),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// run captures the statements fn sends.
func (c *stmtCapture) run(fn func()) []capturedStmt {
	c.mu.Lock()
	c.on, c.stmts = true, nil
	c.mu.Unlock()
	fn()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.on = false
	return c.stmts
}

// planTrapCase is one call that must stay an index probe.
type planTrapCase struct {
	name   string
	tables []string // the filled tables (base names)
	fill   func(t *testing.T, st *agentstore.Store, now int64)
	call   func(t *testing.T, st *agentstore.Store)
	// skip names the dialects whose checker cannot judge the case, each
	// with its reason
	skip map[agentstore.Dialect]string
}

func TestPlanTraps(t *testing.T) {
	// fills 100,000-row tables: a scale test, run by CI in its load-test
	// step, without -race (the detector adds nothing to a plan check and
	// slows the fills several times)
	requireLongTests(t)
	t.Parallel()
	for _, c := range planTrapCases() {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			forEachDialect(t, func(t *testing.T, h *harness) {
				checkPlanTrap(t, h, c)
			})
		})
	}
}

func checkPlanTrap(t *testing.T, h *harness, c planTrapCase) {
	if why, ok := c.skip[h.Dialect]; ok {
		t.Skip(why)
	}
	ctx := context.Background()
	st := h.New(t)
	now := time.Now().UnixMilli()
	c.fill(t, st, now)
	pg := st.Dialect() == agentstore.Postgres
	var tables []string
	for _, base := range c.tables {
		tables = append(tables, st.Table(base))
	}
	if st.Dialect() == agentstore.MariaDB {
		cap := &stmtCapture{}
		cap.install(t, st)
		stmts := cap.run(func() { c.call(t, st) })
		checkMariaDBPlans(t, st, "no statistics", stmts, tables)
		for _, base := range c.tables {
			if err := st.DB(ctx).Exec("ANALYZE TABLE " + quote(st, base)).Error; err != nil {
				t.Fatal(err)
			}
		}
		stmts = cap.run(func() { c.call(t, st) })
		checkMariaDBPlans(t, st, "after ANALYZE TABLE", stmts, tables)
		return
	}
	if !pg {
		// Without statistics first (a fresh file), then after ANALYZE on a
		// new handle (the statistics are read when a connection opens).
		cap := &stmtCapture{}
		cap.install(t, st)
		stmts := cap.run(func() { c.call(t, st) })
		checkSQLitePlans(t, st, "no statistics", stmts, tables)
		if err := st.DB(ctx).Exec("ANALYZE").Error; err != nil {
			t.Fatal(err)
		}
		st2 := h.Open(t)
		cap2 := &stmtCapture{}
		cap2.install(t, st2)
		stmts = cap2.run(func() { c.call(t, st2) })
		checkSQLitePlans(t, st2, "after ANALYZE", stmts, tables)
		return
	}
	for _, base := range c.tables {
		if err := st.DB(ctx).Exec("ANALYZE " + quote(st, base)).Error; err != nil {
			t.Fatal(err)
		}
	}
	cap := &stmtCapture{}
	cap.install(t, st)
	stmts := cap.run(func() { c.call(t, st) })
	checkPostgresPlans(t, st, stmts, tables)
}

// planTrapCases are the calls of issue 24 item 6.
func planTrapCases() []planTrapCase {
	workFill := func(extra string, visible func(now int64) string) func(t *testing.T, st *agentstore.Store, now int64) {
		return func(t *testing.T, st *agentstore.Store, now int64) {
			cols, vals := "", ""
			if extra != "" {
				k, v, _ := strings.Cut(extra, "=")
				cols, vals = ", "+k, ", "+strings.ReplaceAll(v, "%", "%%")
			}
			fillSeries(t, st, "INSERT INTO "+quote(st, models.TableWorkerQueue)+" (work_item, visible_at, created_at, attempt_count, instance_id"+cols+")"+
				" SELECT '{}', "+visible(now)+", "+strconv.FormatInt(now, 10)+", 0, ''"+vals+" FROM %s")
		}
	}
	future := func(now int64) string { return strconv.FormatInt(now+86_400_000, 10) + " + g.i" }
	past := func(now int64) string { return strconv.FormatInt(now-86_400_000, 10) + " + g.i" }
	pollWork := func(session *duroxide.SessionFetchConfig, tags duroxide.TagFilter) func(t *testing.T, st *agentstore.Store) {
		return func(t *testing.T, st *agentstore.Store) {
			l, err := st.Provider().FetchWorkItem(context.Background(), time.Minute, 0, session, tags)
			if err != nil || l != nil {
				t.Fatalf("poll: %v, %v; want nothing", l, err)
			}
		}
	}
	return []planTrapCase{
		{
			name:   "worker poll, future-visible work",
			tables: []string{models.TableWorkerQueue},
			fill:   workFill("", future),
			call:   pollWork(nil, duroxide.TagFilter{}),
		},
		{
			name:   "untagged worker poll, only tagged work",
			tables: []string{models.TableWorkerQueue},
			fill:   workFill("tag='gpu'", past),
			call:   pollWork(nil, duroxide.TagFilter{}),
		},
		{
			name:   "worker poll without a session, only session-bound work",
			tables: []string{models.TableWorkerQueue},
			fill:   workFill("session_id='s-' || (g.i % 100)", past),
			call:   pollWork(nil, duroxide.TagFilter{}),
		},
		{
			// each kind alone leaves MariaDB a selective single-column
			// index (tag IS NULL, session_id IS NULL); together only the
			// plain claim's own index keeps the poll off them (V18)
			name:   "untagged worker poll, tagged and session-bound work",
			tables: []string{models.TableWorkerQueue},
			fill: func(t *testing.T, st *agentstore.Store, now int64) {
				workFill("tag='gpu'", past)(t, st, now)
				workFill("session_id='s-' || (g.i % 100)", past)(t, st, now)
			},
			call: pollWork(nil, duroxide.TagFilter{}),
		},
		{
			name:   "orchestrator poll, future-visible messages",
			tables: []string{models.TableOrchestratorQueue},
			fill: func(t *testing.T, st *agentstore.Store, now int64) {
				fillSeries(t, st, "INSERT INTO "+quote(st, models.TableOrchestratorQueue)+" (instance_id, work_item, visible_at, created_at, attempt_count)"+
					" SELECT 'i' || g.i, '{}', "+future(now)+", "+strconv.FormatInt(now, 10)+", 0 FROM %s")
			},
			call: func(t *testing.T, st *agentstore.Store) {
				it, err := st.Provider().FetchOrchestrationItem(context.Background(), time.Minute, 0, nil)
				if err != nil || it != nil {
					t.Fatalf("poll: %v, %v; want nothing", it, err)
				}
			},
		},
		{
			// the candidate walk steps over the locked instance: one read
			// of orchWalkSlice entries, the next after its id
			name:   "orchestrator poll, a locked instance's backlog",
			tables: []string{models.TableOrchestratorQueue},
			fill: func(t *testing.T, st *agentstore.Store, now int64) {
				ms := strconv.FormatInt(now, 10)
				if err := st.DB(context.Background()).Exec("INSERT INTO " + quote(st, models.TableInstanceLocks) + " (instance_id, lock_token, locked_until, locked_at)" +
					" VALUES ('busy', 'held', " + strconv.FormatInt(now+86_400_000, 10) + ", " + ms + ")").Error; err != nil {
					t.Fatal(err)
				}
				fillSeries(t, st, "INSERT INTO "+quote(st, models.TableOrchestratorQueue)+" (instance_id, work_item, visible_at, created_at, attempt_count)"+
					" SELECT 'busy', '{}', "+past(now)+", "+ms+", 0 FROM %s")
			},
			call: func(t *testing.T, st *agentstore.Store) {
				it, err := st.Provider().FetchOrchestrationItem(context.Background(), time.Minute, 0, nil)
				if err != nil || it != nil {
					t.Fatalf("poll: %v, %v; want nothing", it, err)
				}
			},
			skip: map[agentstore.Dialect]string{agentstore.SQLite: "EXPLAIN QUERY PLAN shows the walk's first read (ORDER BY instance_id, visible_at, id LIMIT 256) as a SCAN of the index, which stops at its LIMIT: the checker cannot tell it from a full scan (TestScaleFetchLockedBacklogDecades measures SQLite)"},
		},
		{
			name:   "ListInstancesByStatus of a rare status",
			tables: []string{models.TableInstances, models.TableExecutions},
			fill:   fillInstances,
			call: func(t *testing.T, st *agentstore.Store) {
				ids, err := st.ProviderAdmin().ListInstancesByStatus(context.Background(), duroxide.StatusRunning)
				if err != nil || len(ids) != 10 {
					t.Fatalf("ListInstancesByStatus: %d ids, %v; want 10", len(ids), err)
				}
			},
		},
		{
			name:   "DeleteInstanceBulk with nothing eligible",
			tables: []string{models.TableInstances, models.TableExecutions},
			fill:   fillInstances,
			call: func(t *testing.T, st *agentstore.Store) {
				before := time.UnixMilli(1_000)
				r, err := st.ProviderAdmin().DeleteInstanceBulk(context.Background(), duroxide.InstanceFilter{CompletedBefore: &before, Limit: 100})
				if err != nil || r.InstancesDeleted != 0 {
					t.Fatalf("DeleteInstanceBulk: %+v, %v; want nothing deleted", r, err)
				}
			},
		},
		{
			name:   "CleanupExpired beside a full queue",
			tables: []string{models.TableSessions, models.TableQueue},
			fill: func(t *testing.T, st *agentstore.Store, now int64) {
				uuidExpr, ts := "gen_random_uuid()", "now()"
				if st.Dialect() == agentstore.MariaDB {
					uuidExpr = "uuid()"
				}
				if st.Dialect() == agentstore.SQLite {
					uuidExpr, ts = "lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' || substr(hex(randomblob(2)), 2) || '-a' || substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(6)))", "CURRENT_TIMESTAMP"
				}
				// N live sessions (no expiry), one of them holding N pending queue items.
				fillSeries(t, st, "INSERT INTO "+quote(st, models.TableSessions)+" (id, created_at, updated_at) SELECT "+uuidExpr+", "+ts+", "+ts+" FROM %s")
				var sid string
				if err := st.DB(context.Background()).Raw("SELECT id FROM " + quote(st, models.TableSessions) + " LIMIT 1").Scan(&sid).Error; err != nil {
					t.Fatal(err)
				}
				fillSeries(t, st, "INSERT INTO "+quote(st, models.TableQueue)+" (id, session_id, content, status, attempts, created_at)"+
					" SELECT "+uuidExpr+", '"+sid+"', '\"x\"', 'pending', 0, "+ts+" FROM %s")
			},
			call: func(t *testing.T, st *agentstore.Store) {
				n, err := st.Sessions().CleanupExpired(context.Background(), 100)
				if err != nil || n != 0 {
					t.Fatalf("CleanupExpired: %d, %v; want 0", n, err)
				}
			},
		},
		{
			name:   "Search of a rare word among N messages",
			tables: []string{models.TableMessages},
			fill: func(t *testing.T, st *agentstore.Store, now int64) {
				s := repo.NewSession()
				if err := st.Sessions().Save(context.Background(), s); err != nil {
					t.Fatal(err)
				}
				ts, typ := "now()", "json"
				switch st.Dialect() {
				case agentstore.SQLite:
					ts, typ = "CURRENT_TIMESTAMP", "text"
				case agentstore.MariaDB:
					typ = "char"
				}
				// N messages (indexed by V8's triggers as they are inserted), 10 with the rare word.
				fillSeries(t, st, "INSERT INTO "+quote(st, models.TableMessages)+" (session_id, seq, id, role, content, created_at)"+
					" SELECT '"+s.ID.String()+"', g.i, 'm' || g.i, 'user', CAST('[{\"type\":\"text\",\"text\":\"ordinary filler ' ||"+
					" CASE WHEN g.i %% 10000 = 7 THEN 'zanzibar' ELSE 'text' END || ' ' || g.i || '\"}]' AS "+typ+"), "+ts+" FROM %s")
			},
			call: func(t *testing.T, st *agentstore.Store) {
				ctx := context.Background()
				page, err := st.Sessions().Search(ctx, repo.SearchParams{Query: "zanzibar"})
				if st.Dialect() == agentstore.MariaDB && err == nil && len(page.Hits) < 10 {
					// InnoDB's FULLTEXT index can miss rows of a large
					// commit for a moment after it (docs/search.md; seen
					// here as 7 and 2 of 10 hits, once in ~30 runs, beside
					// the other cases' fills, with a MATCH count a moment
					// later finding all 10): a transient of the server,
					// not of the search statement. Ask again until the
					// index has them all (bounded), and say how long that
					// took; the check below fails if it never does.
					start, misses := time.Now(), 1
					for time.Since(start) < 30*time.Second && err == nil && len(page.Hits) < 10 {
						time.Sleep(50 * time.Millisecond)
						page, err = st.Sessions().Search(ctx, repo.SearchParams{Query: "zanzibar"})
						if err == nil && len(page.Hits) < 10 {
							misses++
						}
					}
					t.Logf("MariaDB: the search missed rows %d time(s) after the fill; %v later: %d hits, %v", misses,
						time.Since(start).Round(time.Millisecond), len(page.Hits), err)
				}
				if err != nil || len(page.Hits) != 10 {
					t.Fatalf("Search: %d hits, %v; want 10", len(page.Hits), err)
				}
			},
		},
	}
}

// fillInstances plants planTrapRows Completed root instances and 10 Running.
func fillInstances(t *testing.T, st *agentstore.Store, now int64) {
	ms := strconv.FormatInt(now, 10)
	fillSeries(t, st, "INSERT INTO "+quote(st, models.TableInstances)+" (instance_id, orchestration_name, orchestration_version, current_execution_id, created_at, updated_at, custom_status_version)"+
		" SELECT 'c' || g.i, 'Orch', '1.0.0', 1, "+ms+", "+ms+", 0 FROM %s")
	fillSeries(t, st, "INSERT INTO "+quote(st, models.TableExecutions)+" (instance_id, execution_id, status, output, started_at, completed_at)"+
		" SELECT 'c' || g.i, 1, CASE WHEN g.i <= 10 THEN 'Running' ELSE 'Completed' END, CASE WHEN g.i <= 10 THEN NULL ELSE 'done' END, "+ms+
		", CASE WHEN g.i <= 10 THEN NULL ELSE "+ms+" END FROM %s")
}

// fillSeries runs stmt with %s replaced by a row source of planTrapRows
// rows g(i), i = 1..planTrapRows.
func fillSeries(t *testing.T, st *agentstore.Store, stmt string) {
	t.Helper()
	series := fmt.Sprintf("generate_series(1, %d) AS g(i)", planTrapRows)
	switch st.Dialect() {
	case agentstore.SQLite:
		series = fmt.Sprintf("(WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < %d) SELECT i FROM s) AS g", planTrapRows)
	case agentstore.MariaDB:
		series = fmt.Sprintf("(SELECT seq AS i FROM seq_1_to_%d) AS g", planTrapRows)
	}
	q := fmt.Sprintf(stmt, series) // (|| concatenates on MariaDB too: Open sets PIPES_AS_CONCAT)
	if err := st.DB(context.Background()).Exec(q).Error; err != nil {
		t.Fatalf("fill: %v\n%s", err, q)
	}
}

// checkMariaDBPlans runs ANALYZE FORMAT=JSON of every captured statement
// (in a transaction rolled back) and fails when an access to a filled
// table reads more than planTrapMaxRows rows or is a full table scan.
func checkMariaDBPlans(t *testing.T, st *agentstore.Store, when string, stmts []capturedStmt, tables []string) {
	t.Helper()
	ctx := context.Background()
	checked := 0
	for _, s := range stmts {
		up := strings.ToUpper(strings.TrimSpace(s.sql))
		if !touches(s.sql, tables) || !explainable(s.sql) || strings.HasPrefix(up, "INSERT") {
			continue // ANALYZE takes SELECT, UPDATE and DELETE
		}
		checked++
		plan := mariadbPlan(ctx, t, st, s)
		for _, a := range mariadbAccesses(t, plan) {
			for _, tb := range tables {
				if !mariadbNamesTable(a.table, tb, s.sql) {
					continue
				}
				if read := a.rows * a.loops; read > planTrapMaxRows || a.access == "ALL" {
					t.Errorf("%s: %s of %s (%s) reads %.0f rows (> %d):\n%s\nplan:\n%s", when, a.access, tb, a.table, read, planTrapMaxRows, s.sql, plan)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatalf("%s: no captured statement reads %v (captured %d)", when, tables, len(stmts))
	}
}

// mariadbPlan is ANALYZE FORMAT=JSON of s (its arguments interpolated by
// the driver), in a transaction rolled back.
func mariadbPlan(ctx context.Context, t *testing.T, st *agentstore.Store, s capturedStmt) string {
	t.Helper()
	tx, err := st.SQLDB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	var plan string
	if err := tx.QueryRowContext(ctx, "ANALYZE FORMAT=JSON "+s.sql, s.args...).Scan(&plan); err != nil {
		t.Fatalf("analyze: %v\n%s", err, s.sql)
	}
	return plan
}

// mariadbAccess is one table access of a MariaDB ANALYZE FORMAT=JSON plan.
type mariadbAccess struct {
	table, access string
	rows, loops   float64
}

// mariadbAccesses lists every table access of plan (at any depth). The
// text is read with patterns, not as JSON: MariaDB 10.11's ANALYZE
// FORMAT=JSON is not always valid JSON (a derived table's
// "attached_condition" lacks its comma; a condition's double-quoted
// identifiers are not escaped). A table object lists table_name, then
// access_type, then its own r_loops and r_rows before any nested object.
// A plan with no access it can read fails t.
func mariadbAccesses(t testing.TB, plan string) []mariadbAccess {
	t.Helper()
	starts := mariadbTableRe.FindAllStringSubmatchIndex(plan, -1)
	var out []mariadbAccess
	for k, m := range starts {
		end := len(plan)
		if k+1 < len(starts) {
			end = starts[k+1][0]
		}
		seg := plan[m[1]:end]
		a := mariadbAccess{table: plan[m[2]:m[3]]}
		if mm := mariadbAccessRe.FindStringSubmatch(seg); mm != nil {
			a.access = mm[1]
		}
		if mm := mariadbLoopsRe.FindStringSubmatch(seg); mm != nil {
			a.loops, _ = strconv.ParseFloat(mm[1], 64)
		}
		if mm := mariadbRowsRe.FindStringSubmatch(seg); mm != nil {
			a.rows, _ = strconv.ParseFloat(mm[1], 64)
		}
		out = append(out, a)
	}
	if len(out) == 0 && !strings.Contains(plan, "No tables used") {
		t.Fatalf("no table access in the plan:\n%s", plan)
	}
	return out
}

var (
	mariadbTableRe  = regexp.MustCompile(`"table_name": "([^"]*)"`)
	mariadbAccessRe = regexp.MustCompile(`"access_type": "([^"]*)"`)
	mariadbLoopsRe  = regexp.MustCompile(`"r_loops": ([0-9.e+-]+)`)
	mariadbRowsRe   = regexp.MustCompile(`"r_rows": ([0-9.e+-]+)`)
)

// mariadbNamesTable reports whether a plan's table_name is table, or an
// alias sql gives it.
func mariadbNamesTable(name, table, sql string) bool {
	return name == table || aliasedIn(name, table, sql)
}

// aliasedIn reports whether sql gives table the alias name.
func aliasedIn(name, table, sql string) bool {
	alias := regexp.MustCompile(regexp.QuoteMeta(table) + `"?\s+(?:AS\s+)?(\w+)`)
	for _, m := range alias.FindAllStringSubmatch(sql, -1) {
		if m[1] == name {
			return true
		}
	}
	return false
}

// checkSQLitePlans fails on a full SCAN of a filled table.
func checkSQLitePlans(t *testing.T, st *agentstore.Store, when string, stmts []capturedStmt, tables []string) {
	t.Helper()
	if len(stmts) == 0 {
		t.Fatalf("%s: no statement captured", when)
	}
	checked := 0
	for _, s := range stmts {
		if !touches(s.sql, tables) || !explainable(s.sql) {
			continue
		}
		checked++
		plan := sqlitePlan(t, st, s)
		for _, line := range strings.Split(plan, "\n") {
			if !strings.Contains(line, "SCAN ") {
				continue
			}
			for _, tb := range tables {
				if scansTable(line, tb, s.sql) && partialIndexRows(t, st, tb, line) > planTrapMaxRows {
					t.Errorf("%s: full scan of %s:\n%s\nplan:\n%s", when, tb, s.sql, plan)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatalf("%s: no captured statement reads %v (captured %d)", when, tables, len(stmts))
	}
}

// scansTable reports whether an EXPLAIN QUERY PLAN line is a full scan of
// table, named by its SQLite name or by an alias sql gives it.
func scansTable(line, table, sql string) bool {
	i := strings.Index(line, "SCAN ")
	rest := strings.Fields(line[i+len("SCAN "):])
	if len(rest) == 0 {
		return false
	}
	name := strings.Trim(rest[0], `"`)
	return name == table || strings.HasSuffix(name, "."+table) || aliasedIn(name, table, sql)
}

// partialIndexRows is how many rows a SCAN line reads: the entries of the
// partial index it names (a scan of a partial index reads only the rows its
// WHERE admits), else every row of table.
func partialIndexRows(t *testing.T, st *agentstore.Store, table, line string) int64 {
	t.Helper()
	ctx := context.Background()
	pred := "1 = 1"
	if m := regexp.MustCompile(`USING (?:COVERING )?INDEX (\w+)`).FindStringSubmatch(line); m != nil {
		var ddl string
		if err := st.SQLDB().QueryRowContext(ctx, "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = ?", m[1]).Scan(&ddl); err != nil {
			t.Fatalf("index %s: %v", m[1], err)
		}
		if i := strings.LastIndex(strings.ToUpper(ddl), " WHERE "); i >= 0 {
			pred = ddl[i+len(" WHERE "):]
		}
	}
	var n int64
	if err := st.SQLDB().QueryRowContext(ctx, `SELECT COUNT(*) FROM "`+table+`" WHERE `+pred).Scan(&n); err != nil {
		t.Fatalf("count %s WHERE %s: %v", table, pred, err)
	}
	return n
}

func sqlitePlan(t *testing.T, st *agentstore.Store, s capturedStmt) string {
	t.Helper()
	rows, err := st.SQLDB().QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+s.sql, s.args...)
	if err != nil {
		t.Fatalf("explain: %v\n%s", err, s.sql)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		b.WriteString(detail + "\n")
	}
	return b.String()
}

var (
	pgRowsRe    = regexp.MustCompile(`actual time=[^ ]+ rows=(\d+) loops=(\d+)`)
	pgRemovedRe = regexp.MustCompile(`Rows Removed by (?:Filter|Index Recheck): (\d+)`)
)

// checkPostgresPlans runs EXPLAIN ANALYZE of every captured statement on
// a filled table with the custom and with the generic plan, in a
// transaction rolled back, and fails when a node reads more than
// planTrapMaxRows rows.
func checkPostgresPlans(t *testing.T, st *agentstore.Store, stmts []capturedStmt, tables []string) {
	t.Helper()
	ctx := context.Background()
	checked := 0
	for _, s := range stmts {
		if !touches(s.sql, tables) || !explainable(s.sql) {
			continue
		}
		checked++
		for _, mode := range []string{"auto", "force_generic_plan"} {
			plan := pgPlan(ctx, t, st, s, mode)
			lines := strings.Split(plan, "\n")
			for i, line := range lines {
				node := line
				read := 0
				if m := pgRowsRe.FindStringSubmatch(line); m != nil && (strings.Contains(line, "Scan") || strings.Contains(line, "scan")) {
					r, _ := strconv.Atoi(m[1])
					l, _ := strconv.Atoi(m[2])
					read = r * l
					// the removed-rows lines follow their node
					for _, next := range lines[i+1:] {
						if pgRowsRe.MatchString(next) {
							break
						}
						if mm := pgRemovedRe.FindStringSubmatch(next); mm != nil {
							k, _ := strconv.Atoi(mm[1])
							read += k
						}
					}
				}
				if read > planTrapMaxRows {
					t.Errorf("plan_cache_mode=%s: a node reads %d rows (> %d): %s\nstatement:\n%s\nplan:\n%s", mode, read, planTrapMaxRows, strings.TrimSpace(node), s.sql, plan)
					break
				}
			}
		}
	}
	if checked == 0 {
		t.Fatalf("no captured statement reads %v (captured %d)", tables, len(stmts))
	}
}

// pgPlan is EXPLAIN ANALYZE of s under plan_cache_mode: the statement is
// prepared, so force_generic_plan gives the generic plan a statement cache
// would use. Everything runs in a transaction that is rolled back.
func pgPlan(ctx context.Context, t *testing.T, st *agentstore.Store, s capturedStmt, mode string) string {
	t.Helper()
	conn, err := st.SQLDB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "SET LOCAL plan_cache_mode = "+mode); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "PREPARE plantrap AS "+s.sql); err != nil {
		t.Fatalf("prepare: %v\n%s", err, s.sql)
	}
	defer func() { _, _ = tx.ExecContext(ctx, "DEALLOCATE plantrap") }()
	var params []string
	for _, a := range s.args {
		params = append(params, pgLiteral(t, a))
	}
	q := "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) EXECUTE plantrap"
	if len(params) > 0 {
		q += "(" + strings.Join(params, ", ") + ")"
	}
	rows, err := tx.QueryContext(ctx, q)
	if err != nil {
		t.Fatalf("explain: %v\n%s", err, s.sql)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		b.WriteString(line + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("explain: %v\n%s", err, s.sql)
	}
	return strings.ReplaceAll(b.String(), "actual rows=", "actual time=0 rows=")
}

// pgLiteral renders a bound argument as a PostgreSQL literal for EXECUTE
// (EXPLAIN EXECUTE takes no bind parameters of its own).
func pgLiteral(t *testing.T, a any) string {
	t.Helper()
	switch v := a.(type) {
	case nil:
		return "NULL"
	case string:
		return "'" + strings.ReplaceAll(v, "'", "''") + "'"
	case *string:
		if v == nil {
			return "NULL"
		}
		return pgLiteral(t, *v)
	case []byte:
		return "'" + strings.ReplaceAll(string(v), "'", "''") + "'"
	case bool:
		return strconv.FormatBool(v)
	case int, int8, int16, int32, int64, uint, uint16, uint32, uint64, float64:
		return fmt.Sprint(v)
	case *int64:
		if v == nil {
			return "NULL"
		}
		return strconv.FormatInt(*v, 10)
	case time.Time:
		return "'" + v.UTC().Format(time.RFC3339Nano) + "'"
	case fmt.Stringer:
		return "'" + strings.ReplaceAll(v.String(), "'", "''") + "'"
	}
	t.Fatalf("pgLiteral: unsupported argument %T", a)
	return ""
}

// touches reports whether sql names one of tables.
func touches(sql string, tables []string) bool {
	for _, tb := range tables {
		short := tb[strings.LastIndex(tb, ".")+1:]
		if strings.Contains(sql, short) {
			return true
		}
	}
	return false
}

// explainable reports whether sql is a statement EXPLAIN accepts.
func explainable(sql string) bool {
	s := strings.ToUpper(strings.TrimSpace(sql))
	for _, p := range []string{"SELECT", "WITH", "UPDATE", "DELETE", "INSERT"} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// TestPostgresOrchClaimKeepsGenericPlan: beside planTrapRows orchestrator
// messages visible only tomorrow, repeated empty fetches run on the cached
// generic plan of the claim statement, not a custom plan re-made on every
// call (a custom plan knew the clock, estimated no visible row and looked
// far cheaper than the generic plan, so PostgreSQL kept re-planning: about
// 0.8 ms of planning per fetch at 1e5 rows, bench -scale's
// poll_orch_nothing_eligible growing 1.7× per decade). The store has one
// connection, so pg_prepared_statements on it is the claim's statement
// cache entry.
func TestPostgresOrchClaimKeepsGenericPlan(t *testing.T) {
	requireLongTests(t) // fills a 100,000-row table: a scale test, run by CI
	t.Parallel()
	requirePostgres(t)
	ctx := context.Background()
	h := newHarness(t, agentstore.Postgres)
	pool := agentstore.DefaultPool()
	pool.MaxOpenConns, pool.MinIdleConns = 1, 0
	st := h.New(t, agentstore.WithPool(pool))
	tomorrow := time.Now().Add(24 * time.Hour).UnixMilli()
	fillSeries(t, st, "INSERT INTO "+quote(st, models.TableOrchestratorQueue)+" (instance_id, work_item, visible_at, created_at, attempt_count)"+
		" SELECT 'f' || g.i, '{}', "+strconv.FormatInt(tomorrow, 10)+" + g.i, 0, 0 FROM %s")
	if err := st.DB(ctx).Exec("ANALYZE " + quote(st, models.TableOrchestratorQueue)).Error; err != nil {
		t.Fatal(err)
	}
	const fetches = 20
	for range fetches {
		it, err := st.Provider().FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		if err != nil || it != nil {
			t.Fatalf("fetch: %v, %v; want nothing", it, err)
		}
	}
	var plans []struct {
		GenericPlans, CustomPlans int64
		Statement                 string
	}
	if err := st.DB(ctx).Raw(`SELECT generic_plans, custom_plans, statement FROM pg_prepared_statements WHERE statement LIKE '%pg_try_advisory_xact_lock%' AND statement NOT LIKE '%pg_prepared_statements%'`).Scan(&plans).Error; err != nil {
		t.Fatal(err)
	}
	if len(plans) != 1 {
		for _, p := range plans {
			t.Logf("%d custom, %d generic: %.300s", p.CustomPlans, p.GenericPlans, p.Statement)
		}
		t.Fatalf("%d cached claim statements on the store's one connection, want 1", len(plans))
	}
	// PostgreSQL makes five custom plans before it compares them with the
	// generic one
	if p := plans[0]; p.CustomPlans > 5 || p.GenericPlans < fetches-5 {
		t.Fatalf("the claim statement ran %d custom and %d generic plans in %d fetches: re-planned on every call", p.CustomPlans, p.GenericPlans, fetches)
	}
}
