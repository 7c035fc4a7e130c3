package agentstore_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/internal/testkit"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// scaleRows is the queue size of the scale measurements; they run only
// with AGENTSTORE_SCALE=1 (they print timings, they assert only that the
// operations succeed).
const scaleRows = 100_000

func requireScale(t *testing.T) {
	if os.Getenv("AGENTSTORE_SCALE") != "1" {
		t.Skip("scale measurement: set AGENTSTORE_SCALE=1")
	}
}

// median runs fn n times and returns the median of the durations it reports.
func median(n int, fn func() time.Duration) time.Duration {
	d := make([]time.Duration, n)
	for i := range d {
		d[i] = fn()
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[n/2]
}

// TestScaleDeleteSessionBigQueue measures Delete of an empty session while
// the queue table holds scaleRows finished items of another session.
func TestScaleDeleteSessionBigQueue(t *testing.T) {
	requireScale(t)
	forEachDialect(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		st := h.New(t)
		ss := st.Sessions()
		owner := &repo.Session{ID: uuid.New()}
		if err := ss.Save(ctx, owner); err != nil {
			t.Fatal(err)
		}
		qt := st.Table(models.TableQueue)
		var gen string
		if h.Dialect == agentstore.Postgres {
			gen = `INSERT INTO ` + qt + ` (id, session_id, content, status, created_at, processed_at)
				SELECT gen_random_uuid(), ?, 'x', 'completed', now(), now() FROM generate_series(1, ?)`
		} else {
			gen = `WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM g WHERE n < ?)
				INSERT INTO ` + qt + ` (id, session_id, content, status, created_at, processed_at)
				SELECT lower(hex(randomblob(16))), ?, 'x', 'completed', datetime('now'), datetime('now') FROM g`
		}
		args := []any{owner.ID, scaleRows}
		if h.Dialect != agentstore.Postgres {
			args = []any{scaleRows, owner.ID}
		}
		// plant: a big finished queue history, faster than the API.
		if err := st.DB(ctx).Exec(gen, args...).Error; err != nil {
			t.Fatal(err)
		}
		if h.Dialect == agentstore.Postgres {
			st.DB(ctx).Exec("ANALYZE " + qt)
		} else {
			st.DB(ctx).Exec("ANALYZE")
		}
		measure := func() time.Duration {
			return median(15, func() time.Duration {
				s := &repo.Session{ID: uuid.New()}
				if err := ss.Save(ctx, s); err != nil {
					t.Fatal(err)
				}
				t0 := time.Now()
				if ok, err := ss.Delete(ctx, s.ID); err != nil || !ok {
					t.Fatalf("delete: %v %v", ok, err)
				}
				return time.Since(t0)
			})
		}
		with := measure()
		// The same without the index led by session_id (the schema before
		// V4): the cascade scans the queue.
		idx := `"idx_` + st.TablePrefix() + `queue_session_idem"`
		if h.Schema != "" {
			idx = `"` + h.Schema + `".` + idx
		}
		if err := st.DB(ctx).Exec("DROP INDEX " + idx).Error; err != nil {
			t.Fatal(err)
		}
		without := measure()
		t.Logf("%s: Delete of an empty session, queue table of %d: median %v (without an index led by session_id: %v)",
			h.Dialect, scaleRows, with, without)
	})
}

// TestScalePagingAndPurge measures, with scaleRows rows: the first page
// and a page half-way of GetSummariesPage (one session holding every
// summary) and of ListChildrenPage, and PurgeFinished of scaleRows
// finished queue items (default batch).
func TestScalePagingAndPurge(t *testing.T) {
	requireScale(t)
	forEachDialect(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clock := newTestClock()
		st := h.New(t, agentstore.WithClock(clock.Now))
		ss, q := st.Sessions(), st.SessionQueue()
		owner := &repo.Session{ID: uuid.New()}
		if err := ss.Save(ctx, owner); err != nil {
			t.Fatal(err)
		}
		pg := h.Dialect == agentstore.Postgres
		sum, sess, qt := st.Table(models.TableSummaries), st.Table(models.TableSessions), st.Table(models.TableQueue)
		// plant: scaleRows summaries of owner, scaleRows children of owner
		// and scaleRows queue items finished 30 days ago, faster than the API.
		var stmts []string
		if pg {
			stmts = []string{
				`INSERT INTO ` + sum + ` (id, session_id, summary, created_at) SELECT gen_random_uuid(), $1, 'x', now() - make_interval(secs => g / 1000.0) FROM generate_series(1, $2) g`,
				`INSERT INTO ` + sess + ` (id, parent_id, created_at, updated_at) SELECT gen_random_uuid(), $1, now() - make_interval(secs => g / 1000.0), now() FROM generate_series(1, $2) g`,
				`INSERT INTO ` + qt + ` (id, session_id, content, status, created_at, processed_at) SELECT gen_random_uuid(), $1, 'x', 'completed', timestamptz '2025-01-01', timestamptz '2025-01-01' FROM generate_series(1, $2)`,
			}
		} else {
			g := `WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM g WHERE n < ?2) `
			stmts = []string{
				g + `INSERT INTO ` + sum + ` (id, session_id, summary, created_at) SELECT lower(hex(randomblob(16))), ?1, 'x', strftime('%Y-%m-%d %H:%M:%f', '2025-01-01', '+' || n || ' seconds') FROM g`,
				g + `INSERT INTO ` + sess + ` (id, parent_id, created_at, updated_at) SELECT lower(hex(randomblob(16))), ?1, strftime('%Y-%m-%d %H:%M:%f', '2025-01-01', '+' || n || ' seconds'), '2025-01-01' FROM g`,
				g + `INSERT INTO ` + qt + ` (id, session_id, content, status, created_at, processed_at) SELECT lower(hex(randomblob(16))), ?1, 'x', 'completed', '2025-01-01', '2025-01-01 00:00:00' FROM g`,
			}
		}
		for _, s := range stmts {
			if err := st.DB(ctx).Exec(s, owner.ID, scaleRows).Error; err != nil {
				t.Fatal(err)
			}
		}
		st.DB(ctx).Exec("ANALYZE")
		// the cursor half-way: walk with big pages
		halfway := func(page func(repo.PageParams) (int, string, error)) string {
			after, seen := "", 0
			for seen < scaleRows/2 {
				n, next, err := page(repo.PageParams{Limit: repo.MaxPageLimit, After: after})
				if err != nil || next == "" {
					t.Fatalf("walk: %v", err)
				}
				seen += n
				after = next
			}
			return after
		}
		sumPage := func(p repo.PageParams) (int, string, error) {
			out, next, err := ss.GetSummariesPage(ctx, owner.ID, p)
			return len(out), next, err
		}
		kidPage := func(p repo.PageParams) (int, string, error) {
			out, next, err := ss.ListChildrenPage(ctx, owner.ID, p)
			return len(out), next, err
		}
		for _, c := range []struct {
			name string
			page func(repo.PageParams) (int, string, error)
		}{{"GetSummariesPage", sumPage}, {"ListChildrenPage", kidPage}} {
			mid := halfway(c.page)
			for _, after := range []string{"", mid} {
				d := median(15, func() time.Duration {
					t0 := time.Now()
					if n, _, err := c.page(repo.PageParams{Limit: 100, After: after}); err != nil || n != 100 {
						t.Fatalf("%s: %d %v", c.name, n, err)
					}
					return time.Since(t0)
				})
				where := "first page"
				if after != "" {
					where = "page half-way"
				}
				t.Logf("%s: %s of 100, %d rows: %s median %v", h.Dialect, c.name, scaleRows, where, d)
			}
		}
		t0 := time.Now()
		n, err := q.PurgeFinished(ctx, 0, 0)
		if err != nil || n != scaleRows {
			t.Fatalf("purge: %d %v", n, err)
		}
		t.Logf("%s: PurgeFinished of %d finished items (batches of %d): %v", h.Dialect, n, repo.DefaultPurgeBatch, time.Since(t0))
		t0 = time.Now()
		if n, err := q.PurgeFinished(ctx, 0, 0); err != nil || n != 0 {
			t.Fatalf("purge again: %d %v", n, err)
		}
		t.Logf("%s: PurgeFinished with nothing to purge: %v", h.Dialect, time.Since(t0))
	})
}

// TestScaleFetchLockedBacklog measures Fetch+Ack of an instance while
// another instance, locked by a turn in progress, has 16384 visible
// messages queued ahead of it.
func TestScaleFetchLockedBacklog(t *testing.T) {
	requireScale(t)
	forEachDialect(t, func(t *testing.T, h *harness) {
		for _, general := range []bool{false, true} {
			if general && h.Dialect != agentstore.Postgres {
				continue
			}
			var opts []agentstore.Option
			name := string(h.Dialect)
			if general {
				opts = append(opts, agentstore.WithoutCapabilities(agentstore.CapAdvisoryLocks))
				name += "-general"
				h = newHarness(t, h.Dialect)
			}
			clock := newTestClock()
			st := h.New(t, append(opts, agentstore.WithClock(clock.Now))...)
			e := newPEnvOn(h, st, clock)
			e.StartInstance(t, "busy", nil)
			e.StartInstance(t, "other", nil)
			e.Enqueue(t, &duroxide.ExternalRaised{Instance: "busy", Name: "x", Data: "d"})
			held := e.Fetch(t) // busy stays locked for the whole measurement
			e.Enqueue(t, &duroxide.ExternalRaised{Instance: "busy", Name: "x", Data: "d"})
			oq := st.Table(models.TableOrchestratorQueue)
			measure := func() (time.Duration, time.Duration) {
				var fetchOnly []time.Duration
				d := median(15, func() time.Duration {
					e.Enqueue(t, &duroxide.ExternalRaised{Instance: "other", Name: "x", Data: "d"})
					t0 := time.Now()
					it := e.Fetch(t)
					fetchOnly = append(fetchOnly, time.Since(t0))
					if it.Instance != "other" {
						t.Fatalf("fetched %s", it.Instance)
					}
					e.Ack(t, it, duroxide.OrchestrationAck{Metadata: testkit.RunningMeta(nil)})
					return time.Since(t0)
				})
				return d, median(len(fetchOnly), func() time.Duration { v := fetchOnly[0]; fetchOnly = fetchOnly[1:]; return v })
			}
			d0, f0 := measure()
			// plant: double busy's unlocked backlog 14 times (16384 rows).
			for i := 0; i < 14; i++ {
				e.exec(t, `INSERT INTO `+oq+` (instance_id, work_item, visible_at, created_at, attempt_count)`+
					` SELECT instance_id, work_item, visible_at, created_at, 0 FROM `+oq+` WHERE instance_id = 'busy' AND lock_token IS NULL`)
			}
			st.DB(e.Ctx).Exec("ANALYZE")
			d, f := measure()
			t.Logf("%s: Fetch+Ack (Fetch alone) while a locked instance holds 16384 queued messages ahead: median %v (%v); with 1 message: %v (%v)",
				name, d, f, d0, f0)
			_ = held
		}
	})
}

// scaleDecades are the sizes of the per-decade scale measurements; with
// AGENTSTORE_SCALE_1E6=1 also 1e6 (minutes).
var scaleDecades = func() []int {
	if os.Getenv("AGENTSTORE_SCALE_1E6") == "1" {
		return []int{1_000, 10_000, 100_000, 1_000_000}
	}
	return []int{1_000, 10_000, 100_000}
}()

// logGrowth prints the medians at each size of scaleDecades and their ratio
// per decade (flat is at most 1.3).
func logGrowth(t *testing.T, what string, ds []time.Duration) {
	t.Helper()
	var b strings.Builder
	for i, d := range ds {
		fmt.Fprintf(&b, " N=%d %.2f ms", scaleDecades[i], float64(d)/float64(time.Millisecond))
		if i > 0 {
			fmt.Fprintf(&b, " (%.2fx)", float64(d)/float64(ds[i-1]))
		}
	}
	t.Logf("%s:%s", what, b.String())
}

// TestScaleFetchLockedBacklogDecades measures Fetch+Ack of an instance
// while another instance, locked by a turn in progress, has N visible
// messages queued ahead of it, for N in scaleDecades, and prints the
// growth per decade.
func TestScaleFetchLockedBacklogDecades(t *testing.T) {
	requireScale(t)
	forEachDialect(t, func(t *testing.T, h *harness) {
		for _, general := range []bool{false, true} {
			if general && h.Dialect != agentstore.Postgres {
				continue
			}
			var opts []agentstore.Option
			name := string(h.Dialect)
			if general {
				opts = append(opts, agentstore.WithoutCapabilities(agentstore.CapAdvisoryLocks))
				name += "-general"
				h = newHarness(t, h.Dialect)
			}
			clock := newTestClock()
			st := h.New(t, append(opts, agentstore.WithClock(clock.Now))...)
			e := newPEnvOn(h, st, clock)
			e.StartInstance(t, "busy", nil)
			e.StartInstance(t, "other", nil)
			e.Enqueue(t, &duroxide.ExternalRaised{Instance: "busy", Name: "x", Data: "d"})
			_ = e.Fetch(t) // busy stays locked for the whole measurement
			oq := st.Table(models.TableOrchestratorQueue)
			var work string
			if err := st.DB(e.Ctx).Raw(`SELECT work_item FROM ` + oq + ` WHERE instance_id = 'busy' LIMIT 1`).Scan(&work).Error; err != nil || work == "" {
				t.Fatalf("busy's message: %q %v", work, err)
			}
			var plant string
			if h.Dialect == agentstore.Postgres {
				plant = `INSERT INTO ` + oq + ` (instance_id, work_item, visible_at, created_at, attempt_count) SELECT 'busy', $1, 0, 0, 0 FROM generate_series(1, $2)`
			} else {
				plant = `WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM g WHERE n < ?2)` +
					` INSERT INTO ` + oq + ` (instance_id, work_item, visible_at, created_at, attempt_count) SELECT 'busy', ?1, 0, 0, 0 FROM g`
			}
			var all, fetchAlone []time.Duration
			queued := 0
			for _, n := range scaleDecades {
				// plant: busy's unlocked backlog, ahead of every message of other.
				e.exec(t, plant, work, n-queued)
				queued = n
				analyzeTables(t, st, models.TableOrchestratorQueue, models.TableInstanceLocks, models.TableInstances)
				var fetchOnly []time.Duration
				d := median(21, func() time.Duration {
					e.Enqueue(t, &duroxide.ExternalRaised{Instance: "other", Name: "x", Data: "d"})
					t0 := time.Now()
					it := e.Fetch(t)
					fetchOnly = append(fetchOnly, time.Since(t0))
					if it.Instance != "other" {
						t.Fatalf("fetched %s", it.Instance)
					}
					e.Ack(t, it, duroxide.OrchestrationAck{Metadata: testkit.RunningMeta(nil)})
					return time.Since(t0)
				})
				all = append(all, d)
				fetchAlone = append(fetchAlone, median(len(fetchOnly), func() time.Duration { v := fetchOnly[0]; fetchOnly = fetchOnly[1:]; return v }))
			}
			logGrowth(t, name+": Fetch+Ack while a locked instance holds N queued messages", all)
			logGrowth(t, name+": Fetch alone while a locked instance holds N queued messages", fetchAlone)
		}
	})
}

// TestScaleDeleteInstanceBulkLimitDecades measures DeleteInstanceBulk
// with Limit 100 among N completed root instances, for N in
// scaleDecades (the 100 deleted roots are planted again before each
// call), and prints the growth per decade.
func TestScaleDeleteInstanceBulkLimitDecades(t *testing.T) {
	requireScale(t)
	forEachDialect(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		st := h.New(t)
		a := st.ProviderAdmin()
		inst, exe := st.Table(models.TableInstances), st.Table(models.TableExecutions)
		var stmts []string
		if h.Dialect == agentstore.Postgres {
			g := `FROM generate_series($1::bigint + 1, $1::bigint + $2) g`
			stmts = []string{
				`INSERT INTO ` + inst + ` (instance_id, orchestration_name, current_execution_id, created_at, updated_at) SELECT 'bulk-' || g, 'Orch', 1, g, g ` + g,
				`INSERT INTO ` + exe + ` (instance_id, execution_id, status, started_at, completed_at) SELECT 'bulk-' || g, 1, 'Completed', g, g ` + g,
			}
		} else {
			g := `WITH RECURSIVE g(n) AS (SELECT ?1 + 1 UNION ALL SELECT n+1 FROM g WHERE n < ?1 + ?2) `
			stmts = []string{
				g + `INSERT INTO ` + inst + ` (instance_id, orchestration_name, current_execution_id, created_at, updated_at) SELECT 'bulk-' || n, 'Orch', 1, n, n FROM g`,
				g + `INSERT INTO ` + exe + ` (instance_id, execution_id, status, started_at, completed_at) SELECT 'bulk-' || n, 1, 'Completed', n, n FROM g`,
			}
		}
		planted := 0
		plant := func(n int) {
			for _, s := range stmts {
				if err := st.DB(ctx).Exec(s, planted, n).Error; err != nil {
					t.Fatal(err)
				}
			}
			planted += n
		}
		var ds []time.Duration
		live := 0
		for _, n := range scaleDecades {
			plant(n - live)
			live = n
			analyzeTables(t, st, models.TableInstances, models.TableExecutions)
			ds = append(ds, median(7, func() time.Duration {
				t0 := time.Now()
				res, err := a.DeleteInstanceBulk(ctx, duroxide.InstanceFilter{Limit: 100})
				d := time.Since(t0)
				if err != nil || res.InstancesDeleted != 100 {
					t.Fatalf("delete bulk: %+v %v", res, err)
				}
				plant(100)
				return d
			}))
		}
		logGrowth(t, string(h.Dialect)+": DeleteInstanceBulk Limit 100 among N completed roots", ds)
	})
}

// analyzeTables refreshes the planner statistics of the given tables (on
// PostgreSQL only those: a database-wide ANALYZE can deadlock with other
// tests dropping schemas).
func analyzeTables(t *testing.T, st *agentstore.Store, bases ...string) {
	t.Helper()
	stmts := []string{"ANALYZE"}
	if st.Dialect() == agentstore.Postgres {
		stmts = stmts[:0]
		for _, b := range bases {
			stmts = append(stmts, "ANALYZE "+st.Table(b))
		}
	}
	for _, s := range stmts {
		if err := st.DB(context.Background()).Exec(s).Error; err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}
