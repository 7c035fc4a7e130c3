package agentstore_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
)

// BenchmarkProviderAdminScale measures the admin reads whose cost the
// issue-15 scale table lists, on both dialects, over N instances (one
// execution and one event each; 1% Running, 9% Failed, the rest
// Completed) and N/10 visible messages in each queue, loaded by SQL and
// then ANALYZEd:
//
//	AGENTSTORE_BENCH_ROWS=100000 go test -run '^$' -bench 'BenchmarkProviderAdminScale' -benchtime 10x .
//
// metrics-exact is GetSystemMetrics, depths-exact GetQueueDepths; tree is
// GetInstanceTree of a tree of 1,111 instances (fan-out 10, depth 3).
// The estimate variants (provider_admin_ext_bench_test.go) run beside them.
func BenchmarkProviderAdminScale(b *testing.B) {
	n := 100000
	if v, err := strconv.Atoi(os.Getenv("AGENTSTORE_BENCH_ROWS")); err == nil && v >= 10 {
		n = v
	}
	for _, d := range dialects {
		b.Run(fmt.Sprintf("%s/rows=%d", d, n), func(b *testing.B) {
			h := newHarness(b, d)
			st := h.New(b)
			ctx := context.Background()
			loadAdminScale(b, st, n)
			a := st.ProviderAdmin()
			b.Run("metrics-exact", func(b *testing.B) {
				for b.Loop() {
					if m, err := a.GetSystemMetrics(ctx); err != nil || m.TotalInstances != int64(n)+1111 {
						b.Fatalf("metrics %+v %v", m, err)
					}
				}
			})
			b.Run("depths-exact", func(b *testing.B) {
				for b.Loop() {
					if q, err := a.GetQueueDepths(ctx); err != nil || q.OrchestratorQueue != int64(n/10) {
						b.Fatalf("depths %+v %v", q, err)
					}
				}
			})
			b.Run("tree", func(b *testing.B) {
				for b.Loop() {
					if t, err := a.GetInstanceTree(ctx, "t"); err != nil || len(t.AllIDs) != 1111 {
						b.Fatalf("tree %v %v", t, err)
					}
				}
			})
			if extraAdminBenches != nil {
				extraAdminBenches(b, st, n)
			}
		})
	}
}

// extraAdminBenches runs the estimate benchmarks (set by
// provider_admin_ext_bench_test.go).
var extraAdminBenches func(b *testing.B, st *agentstore.Store, n int)

// qt returns the quoted, qualified name of table base of st.
func qt(st *agentstore.Store, base string) string {
	if st.Schema() != "" {
		return `"` + st.Schema() + `"."` + st.TablePrefix() + base + `"`
	}
	return `"` + st.TablePrefix() + base + `"`
}

// loadAdminScale inserts the benchmark's rows with set-based SQL both
// dialects run (a recursive CTE counting 1..N), then ANALYZEs the tables.
func loadAdminScale(b *testing.B, st *agentstore.Store, n int) {
	b.Helper()
	db := st.DB(context.Background())
	seq := func(k int) string {
		return fmt.Sprintf(`WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < %d) `, k)
	}
	stmts := []string{
		seq(n) + `INSERT INTO ` + qt(st, models.TableInstances) + ` (instance_id, orchestration_name, current_execution_id, created_at, updated_at, custom_status_version)` +
			` SELECT 'i' || n, 'O', 1, n, n, 0 FROM s`,
		seq(n) + `INSERT INTO ` + qt(st, models.TableExecutions) + ` (instance_id, execution_id, status, started_at, completed_at)` +
			` SELECT 'i' || n, 1, CASE WHEN n % 100 = 0 THEN 'Running' WHEN n % 10 = 0 THEN 'Failed' ELSE 'Completed' END, n, CASE WHEN n % 100 = 0 THEN NULL ELSE n END FROM s`,
		seq(n) + `INSERT INTO ` + qt(st, models.TableHistory) + ` (instance_id, execution_id, event_id, event_type, event_data, created_at)` +
			` SELECT 'i' || n, 1, 1, 'OrchestrationStarted', '{}', n FROM s`,
		seq(n/10) + `INSERT INTO ` + qt(st, models.TableOrchestratorQueue) + ` (instance_id, work_item, visible_at, created_at, attempt_count)` +
			` SELECT 'i' || n, '{}', 0, 0, 0 FROM s`,
		seq(n/10) + `INSERT INTO ` + qt(st, models.TableWorkerQueue) + ` (work_item, visible_at, created_at, attempt_count, instance_id) SELECT '{}', 0, 0, 0, '' FROM s`,
		// the tree: t, t.1..t.10, t.1.1..., t.1.1.1... (fan-out 10, depth 3)
		`INSERT INTO ` + qt(st, models.TableInstances) + ` (instance_id, orchestration_name, current_execution_id, created_at, updated_at, custom_status_version) VALUES ('t', 'O', 1, 0, 0, 0)`,
		seq(10) + `INSERT INTO ` + qt(st, models.TableInstances) + ` (instance_id, orchestration_name, current_execution_id, created_at, updated_at, custom_status_version, parent_instance_id)` +
			` SELECT 't.' || n, 'O', 1, n, n, 0, 't' FROM s`,
		seq(100) + `INSERT INTO ` + qt(st, models.TableInstances) + ` (instance_id, orchestration_name, current_execution_id, created_at, updated_at, custom_status_version, parent_instance_id)` +
			` SELECT 't.' || ((n - 1) / 10 + 1) || '.' || ((n - 1) % 10 + 1), 'O', 1, n, n, 0, 't.' || ((n - 1) / 10 + 1) FROM s`,
		seq(1000) + `INSERT INTO ` + qt(st, models.TableInstances) + ` (instance_id, orchestration_name, current_execution_id, created_at, updated_at, custom_status_version, parent_instance_id)` +
			` SELECT 't.' || ((n - 1) / 100 + 1) || '.' || ((n - 1) / 10 % 10 + 1) || '.' || ((n - 1) % 10 + 1), 'O', 1, n, n, 0,` +
			` 't.' || ((n - 1) / 100 + 1) || '.' || ((n - 1) / 10 % 10 + 1) FROM s`,
	}
	for _, base := range []string{models.TableInstances, models.TableExecutions, models.TableHistory, models.TableOrchestratorQueue, models.TableWorkerQueue} {
		stmts = append(stmts, `ANALYZE `+qt(st, base))
	}
	for _, s := range stmts {
		if err := db.Exec(s).Error; err != nil {
			b.Fatalf("load: %v\n%s", err, s)
		}
	}
}
