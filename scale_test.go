package agentstore_test

import (
	"context"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
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
