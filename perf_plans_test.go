package agentstore_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

// TestPerfClaimPlansUseIndexes fills the three queues with 100,000 rows each
// (no ANALYZE: a queue filled by a burst has no statistics yet) and checks
// that the claim queries' plans read an index in claim order: no sequential
// scan, no sort of the queue. The SQL mirrors the claims in
// sessions_queue.go and provider*.go; see BENCHMARKS.md for the plans that
// made the worker and orchestrator queues O(n) per claim before their
// indexes were fixed.
func TestPerfClaimPlansUseIndexes(t *testing.T) {
	// fills 100,000-row tables: a scale test, run by CI in its load-test
	// step, without -race (as TestPlanTraps)
	requireLongTests(t)
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		const n = 100000
		st := h.New(t)
		ctx := context.Background()
		db := st.DB(ctx)
		pg := st.Dialect() == agentstore.Postgres
		maria := st.Dialect() == agentstore.MariaDB
		q := func(base string) string { return quote(st, base) }
		sess := repo.NewSession()
		if err := st.Sessions().Save(ctx, sess); err != nil {
			t.Fatal(err)
		}
		sid := sess.ID.String()
		now := "1700000000000"
		var series string
		switch {
		case pg:
			series = "generate_series(1, 100000) AS g(i)"
		case maria:
			series = "(SELECT seq AS i FROM seq_1_to_100000) AS g"
		default:
			series = "(WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 100000) SELECT i FROM s) AS g"
		}
		uuidExpr, instanceID := "gen_random_uuid()", "'i' || g.i"
		switch {
		case maria:
			uuidExpr, instanceID = "uuid()", "CONCAT('i', g.i)"
		case !pg:
			uuidExpr = "lower(hex(randomblob(16)))"
		}
		fill := []string{
			"INSERT INTO " + q(models.TableQueue) + " (id, session_id, operation, content, priority, status, attempts, created_at, processed_at)" +
				" SELECT " + uuidExpr + ", '" + sid + "', 'enqueue', 'x', g.i % 4," +
				" CASE WHEN g.i % 2 = 0 THEN 'completed' ELSE 'pending' END, 0, CURRENT_TIMESTAMP," +
				" CASE WHEN g.i % 2 = 0 THEN CURRENT_TIMESTAMP END FROM " + series,
			"INSERT INTO " + q(models.TableWorkerQueue) + " (work_item, visible_at, created_at, attempt_count, instance_id) SELECT '{}', g.i, g.i, 0, '' FROM " + series,
			"INSERT INTO " + q(models.TableOrchestratorQueue) + " (instance_id, work_item, visible_at, created_at, attempt_count)" +
				" SELECT " + instanceID + ", '{}', g.i, g.i, 0 FROM " + series,
		}
		for _, stmt := range fill {
			if err := db.Exec(stmt).Error; err != nil {
				t.Fatalf("fill: %s\n%s", errorChain(err), stmt)
			}
		}
		var count int64
		if err := db.Raw("SELECT COUNT(*) FROM " + q(models.TableWorkerQueue)).Scan(&count).Error; err != nil || count != n {
			t.Fatalf("worker queue holds %d rows (%v), want %d", count, err, n)
		}
		lock, lockOf := "", ""
		if pg || maria {
			lock = " FOR UPDATE SKIP LOCKED"
			lockOf = lock
		}
		if pg {
			lockOf = " FOR UPDATE OF q SKIP LOCKED"
		}
		claims := map[string]string{
			"session queue dequeue": "SELECT seq, priority FROM " + q(models.TableQueue) + " WHERE session_id = '" + sid +
				"' AND processed_at IS NULL AND (status = 'pending' OR (status = 'processing' AND leased_until < " + now + "))" +
				" ORDER BY priority DESC, seq LIMIT 1" + lock,
			"worker queue plain claim": "SELECT q.id FROM " + q(models.TableWorkerQueue) + " q WHERE q.visible_at <= " + now +
				" AND (q.lock_token IS NULL OR q.locked_until <= " + now + ") AND q.session_id IS NULL AND q.tag IS NULL ORDER BY q.visible_at, q.id LIMIT 1" + lockOf,
			"orchestrator queue candidate": "SELECT q.instance_id FROM " + q(models.TableOrchestratorQueue) + " q WHERE q.visible_at <= " + now +
				" AND (q.lock_token IS NULL OR q.locked_until <= " + now + ") AND NOT EXISTS (SELECT 1 FROM " + q(models.TableInstanceLocks) +
				" il WHERE il.instance_id = q.instance_id AND il.locked_until > " + now + ") ORDER BY q.visible_at, q.id LIMIT 1",
		}
		tables := map[string]string{"session queue dequeue": models.TableQueue, "worker queue plain claim": models.TableWorkerQueue,
			"orchestrator queue candidate": models.TableOrchestratorQueue}
		// The orchestration candidate's window and walk levels
		// (orchCandidateSQL, orchWalkSQL) may sort what they read (at most
		// 8 and 256 rows), but must read the queue through its indexes.
		oq, il := q(models.TableOrchestratorQueue), q(models.TableInstanceLocks)
		notLocked := func(src string) string {
			return " AND " + src + ".instance_id NOT IN (SELECT il.instance_id FROM " + il + " il WHERE il.instance_id IN (SELECT instance_id FROM " + src + ")" +
				" AND il.locked_until > " + now + ")"
		}
		hint := "" // the engine's forceIndex on MariaDB
		if maria {
			hint = ` FORCE INDEX ("idx_` + st.TablePrefix() + `orchestrator_queue_instance_visible")`
		}
		walk := func(after string) string {
			return "WITH b AS (SELECT q.instance_id, q.visible_at, q.id, q.lock_token, q.locked_until FROM " + oq + " q" + hint + after +
				" ORDER BY q.instance_id, q.visible_at, q.id LIMIT 256)" +
				" SELECT 0 AS k, c.instance_id, c.visible_at, c.id FROM (SELECT b.instance_id, b.visible_at, b.id FROM b" +
				" WHERE b.visible_at <= " + now + " AND (b.lock_token IS NULL OR b.locked_until <= " + now + ")" + notLocked("b") + " ORDER BY b.visible_at, b.id LIMIT 1) c" +
				" UNION ALL SELECT 1, MAX(b.instance_id), COUNT(*), NULL FROM b"
		}
		levels := map[string]string{
			"orchestrator candidate window": "WITH w AS (SELECT q.id, q.instance_id, q.visible_at, q.lock_token, q.locked_until FROM " + oq + " q" +
				" WHERE q.visible_at <= " + now + " ORDER BY q.visible_at, q.id LIMIT 8)" +
				" SELECT u.instance_id FROM (SELECT 0 AS ph, w.instance_id, w.visible_at, w.id FROM w" +
				" WHERE (w.lock_token IS NULL OR w.locked_until <= " + now + ")" + notLocked("w") +
				" UNION ALL SELECT 1, NULL, NULL, NULL WHERE (SELECT COUNT(*) FROM w) >= 8) u ORDER BY u.ph, u.visible_at, u.id LIMIT 1",
			"orchestrator candidate walk, first read": walk(""),
			"orchestrator candidate walk, next read":  walk(" WHERE q.instance_id > 'i5'"),
		}
		// Both without statistics (a fresh burst) and after ANALYZE.
		for _, phase := range []string{"no statistics", "analysed"} {
			if phase == "analysed" {
				analyzeQueues(t, st)
			}
			if maria {
				// MariaDB's EXPLAIN: a claim reads an index in claim order
				// (no full scan, no filesort of the queue: with SKIP LOCKED
				// an unordered read locks every row it reads); the walk's
				// levels read the queue through ranges and lookups (no
				// full scan: at most a few hundred rows read)
				for name, sql := range claims {
					for _, r := range mariadbExplain(t, st, sql) {
						if r["table"] == "q" || r["table"] == st.TablePrefix()+tables[name] {
							if r["type"] == "ALL" || r["type"] == "index" || strings.Contains(r["Extra"], "filesort") {
								t.Errorf("%s (%s): %s access of %s (%s), want an index read in claim order", name, phase, r["type"], r["table"], r["Extra"])
							}
						}
					}
				}
				for name, sql := range levels {
					// (ANALYZE: with one message per instance the optimizer
					// may read the walk's 257 ids by an ordered index scan
					// stopping at the LIMIT rather than a loose scan)
					plan := mariadbPlan(ctx, t, st, capturedStmt{sql: sql})
					for _, a := range mariadbAccesses(t, plan) {
						if a.table == "q" && (a.access == "ALL" || a.rows*a.loops > 1000) {
							t.Errorf("%s (%s): %s access of the queue reads %.0f rows, want ranges and lookups:\n%s", name, phase, a.access, a.rows*a.loops, plan)
						}
					}
				}
				continue
			}
			for name, sql := range claims {
				plan := explain(t, st, sql)
				bad := []string{"Seq Scan on " + st.TablePrefix() + tables[name], "Sort"}
				if !pg {
					bad = []string{"USE TEMP B-TREE"}
				}
				for _, b := range bad {
					if strings.Contains(plan, b) {
						t.Errorf("%s (%s): plan has %q, want an index read in claim order:\n%s", name, phase, b, plan)
					}
				}
				// PostgreSQL must read an index; SQLite may also walk the
				// table in rowid (= id, the claim order) order.
				if pg && !strings.Contains(plan, "Index") {
					t.Errorf("%s (%s): plan uses no index:\n%s", name, phase, plan)
				}
			}
			for name, sql := range levels {
				plan := explain(t, st, sql)
				for _, line := range strings.Split(plan, "\n") {
					if pg && strings.Contains(line, "Seq Scan on "+st.TablePrefix()+models.TableOrchestratorQueue) ||
						!pg && strings.Contains(line, "SCAN q ") && !strings.Contains(line, "USING") {
						t.Errorf("%s (%s): plan scans the queue table:\n%s", name, phase, plan)
					}
				}
			}
		}
	})
}

// quote returns the quoted, schema-qualified table name for raw SQL.
// analyzeQueues gathers statistics on the three queue tables and the
// instance locks (PostgreSQL: those tables only; a database-wide ANALYZE
// can deadlock with other tests dropping schemas).
func analyzeQueues(t *testing.T, st *agentstore.Store) {
	t.Helper()
	stmts := []string{"ANALYZE"}
	if st.Dialect() != agentstore.SQLite {
		stmts = nil
		for _, base := range []string{models.TableQueue, models.TableWorkerQueue, models.TableOrchestratorQueue, models.TableInstanceLocks} {
			if st.Dialect() == agentstore.MariaDB {
				stmts = append(stmts, "ANALYZE TABLE "+quote(st, base))
				continue
			}
			stmts = append(stmts, "ANALYZE "+quote(st, base))
		}
	}
	for _, stmt := range stmts {
		if err := st.DB(context.Background()).Exec(stmt).Error; err != nil {
			t.Fatal(err)
		}
	}
}

func quote(st *agentstore.Store, base string) string {
	parts := strings.Split(st.Table(base), ".")
	for i, p := range parts {
		parts[i] = `"` + p + `"`
	}
	return strings.Join(parts, ".")
}

// explain returns the plan of sql, one line per plan node.
func explain(t *testing.T, st *agentstore.Store, sql string) string {
	t.Helper()
	prefix := "EXPLAIN "
	if st.Dialect() == agentstore.SQLite {
		prefix = "EXPLAIN QUERY PLAN "
	}
	rows, err := st.SQLDB().QueryContext(context.Background(), prefix+sql)
	if err != nil {
		t.Fatalf("explain: %v\n%s", err, sql)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var b strings.Builder
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		for _, v := range vals {
			switch v := v.(type) {
			case string:
				b.WriteString(v + " ")
			case []byte:
				b.WriteString(string(v) + " ")
			}
		}
		b.WriteString("\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// mariadbExplain returns MariaDB's tabular EXPLAIN of sql, a row per
// access, by column name (table, type, key, Extra, ...).
func mariadbExplain(t *testing.T, st *agentstore.Store, stmt string) []map[string]string {
	t.Helper()
	rows, err := st.SQLDB().QueryContext(context.Background(), "EXPLAIN "+stmt)
	if err != nil {
		t.Fatalf("explain: %v\n%s", err, stmt)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out []map[string]string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		r := map[string]string{}
		for i, c := range cols {
			r[c] = vals[i].String
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// errorChain renders err and every error it wraps (a Fault's text is its
// sentinel's alone; a test that fails wants the driver's words too).
func errorChain(err error) string {
	var b strings.Builder
	var walk func(e error, depth int)
	walk = func(e error, depth int) {
		if e == nil || depth > 8 {
			return
		}
		b.WriteString(strings.Repeat("  ", depth) + e.Error() + "\n")
		if m, ok := e.(interface{ Unwrap() []error }); ok {
			for _, c := range m.Unwrap() {
				walk(c, depth+1)
			}
			return
		}
		walk(errors.Unwrap(e), depth+1)
	}
	walk(err, 0)
	return b.String()
}
