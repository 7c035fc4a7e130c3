//go:build cgo

package engine

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

// TestBatchedLeaseEndsProbeKeys: on PostgreSQL a flush of several
// SessionQueue Completes and one of several worker acks read each row by
// its key, also while the queue tables have no statistics (a new table, a
// server without autovacuum). An UPDATE or DELETE joined to a VALUES list
// was planned as a hash join over the whole table there: 2.0–2.4 ms per
// flush beside 20,000 rows against 0.17 ms for one plain Complete, so
// group commit halved the bench's session-queue rate (BENCHMARKS.md
// 2026-12-04). The check reads the generic plan (plan_cache_mode =
// force_generic_plan), as cached after five executions. The old Complete
// flush fails it; the old worker-ack flush (2.0–2.2 ms per flush in the
// same bench) passes it here, its cached plan there depended on the run's
// table history: the test keeps the per-ack probes from going back to a
// join.
func TestBatchedLeaseEndsProbeKeys(t *testing.T) {
	ctx := context.Background()
	st := pgTestStore(t)
	if st == nil {
		t.Skip("PostgreSQL unreachable (CI requires it: AGENTSTORE_REQUIRE_POSTGRES)")
	}
	s := repo.NewSession()
	if err := st.Sessions().Save(ctx, s); err != nil {
		t.Fatal(err)
	}
	qt, wq := st.quoted(models.TableQueue), st.quoted(models.TableWorkerQueue)
	// 20,000 rows in each queue, never analyzed
	if err := st.db.WithContext(ctx).Exec(`INSERT INTO `+qt+` (id, session_id, content, status, attempts, created_at)`+
		` SELECT gen_random_uuid(), ?, 'x', 'completed', 1, now() FROM generate_series(1, 20000)`, s.ID).Error; err != nil {
		t.Fatal(err)
	}
	if err := st.db.WithContext(ctx).Exec(`INSERT INTO ` + wq + ` (work_item, visible_at, created_at, attempt_count, instance_id)` +
		` SELECT '{}', 0, 0, 0, 'i' || g FROM generate_series(1, 20000) g`).Error; err != nil {
		t.Fatal(err)
	}
	// the plan PostgreSQL caches for the statement (generic: planned without
	// the values, as after five executions of a prepared statement)
	noScan := func(what, stmt string, args []any, table string) {
		t.Helper()
		var ps strings.Builder
		n := 0
		for _, c := range stmt {
			if c == '?' {
				n++
				ps.WriteString("$" + strconv.Itoa(n))
				continue
			}
			ps.WriteRune(c)
		}
		tx := st.db.WithContext(ctx).Begin()
		defer tx.Rollback()
		if err := tx.Exec("SET LOCAL plan_cache_mode = force_generic_plan").Error; err != nil {
			t.Fatal(err)
		}
		name := "lease_plan_" + strings.ReplaceAll(uuid.NewString(), "-", "")
		if err := tx.Exec("PREPARE " + name + " AS " + ps.String()).Error; err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		lits := make([]string, len(args))
		for i, a := range args {
			switch v := a.(type) {
			case nil:
				lits[i] = "NULL"
			case int:
				lits[i] = strconv.Itoa(v)
			case int64:
				lits[i] = strconv.FormatInt(v, 10)
			case time.Time:
				lits[i] = "'" + v.UTC().Format(time.RFC3339Nano) + "'"
			case uuid.UUID:
				lits[i] = "'" + v.String() + "'"
			case string:
				lits[i] = "'" + strings.ReplaceAll(v, "'", "''") + "'"
			default:
				t.Fatalf("%s: argument %d: %T", what, i, a)
			}
		}
		// (EXPLAIN EXECUTE takes no protocol parameters: the values inline)
		rows, err := tx.Raw("EXPLAIN EXECUTE " + name + "(" + strings.Join(lits, ", ") + ")").Rows()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		defer func() { rows.Close(); tx.Exec("DEALLOCATE " + name) }()
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		if len(plan) == 0 {
			t.Fatalf("%s: no plan", what)
		}
		for _, line := range plan {
			if strings.Contains(line, "Seq Scan on ") && strings.Contains(line, table) {
				t.Fatalf("%s reads the whole %s table:\n%s", what, table, strings.Join(plan, "\n"))
			}
		}
	}

	sq := &sessionQueue{sessionStore{s: st}}
	var calls []completeReq
	for range 3 {
		calls = append(calls, sq.leaseCall(repo.Lease{ItemID: uuid.New(), Token: uuid.New(), SessionID: s.ID}))
	}
	calls[2].l.SessionID = uuid.Nil // the by-id form
	stmt, args := st.endLeasesSQL(completeSet, nil, calls)
	noScan("a flush of 3 Completes", stmt, args, models.TableQueue)

	ack, ok := st.d.(dialect.WorkerAckStatement)
	if !ok {
		t.Fatal("PostgreSQL has no one-statement worker ack")
	}
	var aargs []any
	for k := range 3 {
		var ri any = "i7" // a routed token names the row's instance; the old form does not
		if k == 2 {
			ri = nil
		}
		aargs = append(aargs, k, int64(100+k), "lock_x", int64(1), nil, nil, ri)
	}
	noScan("a flush of 3 worker acks", ack.WorkerAckSQL(3, st.quoted), aargs, models.TableWorkerQueue)
}
