package agentstore_test

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/internal/testkit"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// TestMariaDBConcurrentClaimersAllGetWork is issue 26's starvation trap:
// on MariaDB a SKIP LOCKED claim whose ORDER BY no index serves exactly
// locks every candidate it reads, and a concurrent claimer finds nothing.
// With 20,000 items queued in one session, 2 and then 16 claimers (each
// its own Store, so no group commit joins them) dequeue concurrently for
// a fixed number of rounds: every claimer gets work in every round, and
// no item is leased twice.
func TestMariaDBConcurrentClaimersAllGetWork(t *testing.T) {
	mariadbOnlyLongTest(t)
	t.Parallel()
	h := newHarness(t, agentstore.MariaDB)
	ctx := context.Background()
	st := h.New(t)
	s := repo.NewSession()
	if err := st.Sessions().Save(ctx, s); err != nil {
		t.Fatal(err)
	}
	const items = 20000
	// the queue filled in one statement (20,000 Enqueue round trips would
	// only slow the test)
	if err := st.DB(ctx).Exec(`INSERT INTO "agentstore_queue" (id, session_id, operation, content, priority, status, attempts, created_at)
		WITH d(x) AS (SELECT 0 UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5
			UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9),
		n(i) AS (SELECT a.x + 10 * b.x + 100 * c.x + 1000 * e.x + 10000 * f.x FROM d a, d b, d c, d e, d f)
		SELECT UUID(), ?, 'enqueue', CONCAT('item ', i), 0, 'pending', 0, UTC_TIMESTAMP(6) FROM n WHERE i < ?`, s.ID.String(), items).Error; err != nil {
		t.Fatal(err)
	}
	seen := sync.Map{}
	for _, claimers := range []int{2, 16} {
		stores := make([]*agentstore.Store, claimers)
		for i := range stores {
			stores[i] = h.Open(t, agentstore.WithPool(agentstore.PoolConfig{MaxOpenConns: 2, MinIdleConns: 1}))
		}
		const rounds = 5
		for round := range rounds {
			// each claimer holds its lease while the others claim: all of
			// them are in their claim at once, and a claimer that locked
			// every candidate would leave the others nothing
			var wg sync.WaitGroup
			start := make(chan struct{})
			got := make([]*repo.QueueItem, claimers)
			errs := make([]error, claimers)
			for i := range stores {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					got[i], errs[i] = stores[i].SessionQueue().Dequeue(ctx, s.ID, repo.DequeueParams{Owner: "c" + strconv.Itoa(i), Lease: time.Minute})
				}()
			}
			close(start)
			wg.Wait()
			for i := range stores {
				if errs[i] != nil || got[i] == nil {
					t.Fatalf("%d claimers, round %d: claimer %d got %v, %v: starved", claimers, round, i, got[i], errs[i])
				}
				if _, dup := seen.LoadOrStore(got[i].ID, i); dup {
					t.Fatalf("%d claimers, round %d: item %s leased twice", claimers, round, got[i].ID)
				}
			}
			for i := range stores {
				if err := stores[i].SessionQueue().Complete(ctx, got[i].Lease()); err != nil {
					t.Fatalf("complete: %v", err)
				}
			}
		}
		t.Logf("%d concurrent claimers on a %d-item queue: every claimer got an item in each of %d rounds", claimers, items, rounds)
	}
	var n int64
	if err := st.DB(ctx).Raw(`SELECT COUNT(*) FROM "agentstore_queue" WHERE status = 'pending'`).Scan(&n).Error; err != nil || n != items-int64(5*(2+16)) {
		t.Fatalf("pending items after the rounds: %d, %v; want %d", n, err, items-5*(2+16))
	}
}

// TestMariaDBMigrateFinishesAHalfAppliedStep: MariaDB's DDL commits
// statement by statement, so a migration interrupted half-way leaves part
// of its objects and no version row. Migrate run again finishes it (every
// statement of the MariaDB chain can run again); concurrent Migrate calls
// on an empty database are serialised by GET_LOCK and all succeed.
func TestMariaDBMigrateFinishesAHalfAppliedStep(t *testing.T) {
	mariadbOnlyLongTest(t)
	t.Parallel()
	h := newHarness(t, agentstore.MariaDB)
	ctx := context.Background()
	stores := make([]*agentstore.Store, 4)
	for i := range stores {
		stores[i] = h.Open(t)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(stores))
	for i := range stores {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = stores[i].Migrate(ctx) }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent Migrate %d: %v", i, err)
		}
	}
	st := stores[0]
	tables := func() int64 {
		var n int64
		if err := st.DB(ctx).Raw(`SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE 'agentstore\_%'`).
			Scan(&n).Error; err != nil {
			t.Fatal(err)
		}
		return n
	}
	all := tables()
	// V1 interrupted after some of its tables: two tables missing, no version recorded
	for _, q := range []string{`DROP TABLE "agentstore_kv_delta"`, `DROP TABLE "agentstore_worker_queue"`, `DELETE FROM "agentstore_schema_version"`} {
		if err := st.DB(ctx).Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	if v, err := st.RecordedSchemaVersion(ctx); err != nil || v != 0 {
		t.Fatalf("after the simulated interruption: version %d, %v", v, err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatalf("Migrate after a half-applied V1: %v", err)
	}
	if v, err := st.RecordedSchemaVersion(ctx); err != nil || v != agentstore.SchemaVersion {
		t.Fatalf("version after the re-run: %d, %v; want %d", v, err, agentstore.SchemaVersion)
	}
	if n := tables(); n != all {
		t.Fatalf("%d tables after the re-run, want %d", n, all)
	}
	// the finished schema works: a session round trip and a queue claim
	s := repo.NewSession()
	if err := st.Sessions().Save(ctx, s); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SessionQueue().Enqueue(ctx, s.ID, "x", 0); err != nil {
		t.Fatal(err)
	}
	if it, err := st.SessionQueue().Dequeue(ctx, s.ID, repo.DequeueParams{Lease: time.Minute}); err != nil || it == nil {
		t.Fatalf("dequeue after the re-run: %v, %v", it, err)
	}
	// a later step interrupted (V5's version row lost): the re-run records it again
	if err := st.DB(ctx).Exec(`DELETE FROM "agentstore_schema_version" WHERE version >= 5`).Error; err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatalf("Migrate from V4: %v", err)
	}
	if v, err := st.RecordedSchemaVersion(ctx); err != nil || v != agentstore.SchemaVersion {
		t.Fatalf("version after the re-run from V4: %d, %v", v, err)
	}
}

// TestMariaDBClaimWaitRestoresTheSessionBound: a provider fetch bounds its
// transaction's lock waits with innodb_lock_wait_timeout
// (dialect.ClaimLockWaitSession) and puts the connection's own bound back
// (here WithLockTimeout's 7 s) whether it claimed an item, found nothing,
// or passed an item over because its session claim waited too long; the
// one pooled connection is then asked for its bound.
func TestMariaDBClaimWaitRestoresTheSessionBound(t *testing.T) {
	mariadbOnlyLongTest(t)
	t.Parallel()
	h := newHarness(t, agentstore.MariaDB)
	ctx := context.Background()
	h.New(t) // migrated
	st := h.Open(t, agentstore.WithPool(agentstore.PoolConfig{MaxOpenConns: 1, MinIdleConns: 1}), agentstore.WithLockTimeout(7*time.Second))
	p := st.Provider()
	bound := func(when string) {
		t.Helper()
		var v int64
		if err := st.SQLDB().QueryRowContext(ctx, "SELECT @@SESSION.innodb_lock_wait_timeout").Scan(&v); err != nil || v != 7 {
			t.Fatalf("%s: the connection's innodb_lock_wait_timeout = %d, %v; want 7 (WithLockTimeout)", when, v, err)
		}
	}
	bound("before any fetch")
	cfg := &duroxide.SessionFetchConfig{OwnerID: "w1", LockTimeout: time.Minute}
	if l, err := p.FetchWorkItem(ctx, time.Minute, 0, cfg, duroxide.TagFilter{}); err != nil || l != nil {
		t.Fatalf("fetch from an empty queue = %v, %v", l, err)
	}
	bound("after a fetch that found nothing")

	a := testkit.Activity("i1", 1, 1)
	sid := "s1"
	a.SessionID = &sid
	if err := p.EnqueueForWorker(ctx, a); err != nil {
		t.Fatal(err)
	}
	// another transaction holds the (empty) activity sessions table: the
	// session claim's INSERT waits on its next-key lock, past the bound
	holder, err := sql.Open("mysql", mustTarget(t, h.DSN))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	tx, err := holder.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "SELECT * FROM `agentstore_activity_sessions` FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	l, err := p.FetchWorkItem(ctx, time.Minute, 0, cfg, duroxide.TagFilter{})
	if took := time.Since(start); err != nil || l != nil || took > 5*time.Second {
		t.Fatalf("fetch behind the holder = %v, %v after %v; want nothing, within the claim bound (1 s), not WithLockTimeout's 7 s", l, err, took)
	}
	bound("after a fetch that passed an item over")
	_ = tx.Rollback()

	l, err = p.FetchWorkItem(ctx, time.Minute, 0, cfg, duroxide.TagFilter{})
	if err != nil || l == nil {
		t.Fatalf("fetch = %v, %v; want the item", l, err)
	}
	bound("after a fetch that claimed an item")
}

// mustTarget returns the driver DSN of dsn.
func mustTarget(t *testing.T, dsn string) string {
	t.Helper()
	_, target, err := agentstore.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return target
}

// TestMariaDBWorkerReadyIndex: MariaDB's stand-in for the plain claim's
// partial index (V18) is (session_id, tag, visible_at, id), which Verify
// reports as the models' (visible_at, id): a fresh schema has no issue; the
// index before V18 ((visible_at, id) over every row) is a mismatch whose
// fix rebuilds the stand-in; and the plain claim reads only the plain rows
// (ANALYZE: with 20,000 visible tagged and 20,000 visible session-bound
// items, an untagged poll reads none of them).
func TestMariaDBWorkerReadyIndex(t *testing.T) {
	mariadbOnlyLongTest(t)
	t.Parallel()
	h := newHarness(t, agentstore.MariaDB)
	ctx := context.Background()
	st := h.New(t)
	if rep := testkit.MustVerify(t, st); len(rep.Issues) != 0 {
		t.Fatalf("fresh schema: %s", rep)
	}
	wq, idx := quote(st, models.TableWorkerQueue), "idx_"+st.TablePrefix()+models.TableWorkerQueue+"_ready"
	cols := func() string {
		var got []string
		if err := st.DB(ctx).Raw(`SELECT column_name FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name = ? AND index_name = ? ORDER BY seq_in_index`,
			st.TablePrefix()+models.TableWorkerQueue, idx).Scan(&got).Error; err != nil {
			t.Fatal(err)
		}
		return strings.Join(got, ",")
	}
	if got := cols(); got != "session_id,tag,visible_at,id" {
		t.Fatalf("ready index columns %q, want session_id,tag,visible_at,id", got)
	}
	// the plain claim beside tagged and session-bound work
	if err := st.DB(ctx).Exec(`INSERT INTO ` + wq + ` (work_item, visible_at, created_at, attempt_count, instance_id, tag, session_id)` +
		` SELECT '{}', seq, seq, 0, '', CASE WHEN seq % 2 = 0 THEN 'gpu' END, CASE WHEN seq % 2 = 1 THEN CONCAT('s-', seq % 100) END FROM seq_1_to_40000`).Error; err != nil {
		t.Fatal(err)
	}
	l, err := st.Provider().FetchWorkItem(ctx, time.Minute, 0, nil, duroxide.TagFilter{})
	if err != nil || l != nil {
		t.Fatalf("untagged poll: %v, %v; want nothing", l, err)
	}
	var plan string
	if err := st.SQLDB().QueryRowContext(ctx, `ANALYZE FORMAT=JSON SELECT q.id FROM `+wq+` q WHERE q.visible_at <= 1000000 AND (q.lock_token IS NULL OR q.locked_until <= 1000000)`+
		` AND q.session_id IS NULL AND q.tag IS NULL ORDER BY q.visible_at, q.id LIMIT 1 FOR UPDATE SKIP LOCKED`).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	for _, a := range mariadbAccesses(t, plan) {
		if a.rows*a.loops > 0 || a.access != "range" {
			t.Fatalf("plain claim: %s access reading %.0f rows, want a range reading none:\n%s", a.access, a.rows*a.loops, plan)
		}
	}
	// the schema before V18
	if err := st.DB(ctx).Exec(`ALTER TABLE ` + wq + ` DROP INDEX "` + idx + `", ADD INDEX "` + idx + `" ("visible_at","id")`).Error; err != nil {
		t.Fatal(err)
	}
	rep := testkit.MustVerify(t, st)
	if len(rep.Issues) != 1 || rep.Issues[0].Kind != agentstore.IssueIndexMismatch || rep.Issues[0].Object != idx || rep.Issues[0].Fix == "" {
		t.Fatalf("index before V18: %s", rep)
	}
	for _, stmt := range strings.Split(rep.Issues[0].Fix, ";\n") {
		if err := st.DB(ctx).Exec(stmt).Error; err != nil {
			t.Fatalf("fix %q: %v", stmt, err)
		}
	}
	if got := cols(); got != "session_id,tag,visible_at,id" {
		t.Fatalf("ready index after the fix %q, want session_id,tag,visible_at,id", got)
	}
	if rep := testkit.MustVerify(t, st); len(rep.Issues) != 0 {
		t.Fatalf("after the fix: %s", rep)
	}
}
