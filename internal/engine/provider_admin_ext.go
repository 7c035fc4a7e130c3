package engine

import (
	"context"
	"fmt"
	"math"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// The admin surface beyond duroxide's ProviderAdmin
// (duroxide.ProviderAdminExt): bounded counts and the paged forms of the
// reads ProviderAdmin returns whole.

var _ duroxide.ProviderAdminExt = (*gormProvider)(nil)

// ProviderAdminExt returns the Store's provider admin with agentstore's
// extensions (bounded estimates, paged children and history): the value
// ProviderAdmin returns, typed as duroxide.ProviderAdminExt.
func (s *Store) ProviderAdminExt() duroxide.ProviderAdminExt { return s.providerAPI() }

// estimateCap validates opts.Cap and returns the cap in force.
func estimateCap(opts duroxide.EstimateOptions) (int64, error) {
	switch {
	case opts.Cap < 0:
		return 0, invalidf("estimate cap %d is negative", opts.Cap)
	case opts.Cap == 0:
		return duroxide.DefaultEstimateCap, nil
	}
	return opts.Cap, nil
}

// boundedCount is the SQL of a count of the rows of from matching where
// that stops at limit rows.
func boundedCount(from, where string, limit int64) string {
	return fmt.Sprintf(`(SELECT COUNT(*) FROM (SELECT 1 AS x FROM %s WHERE %s LIMIT %d) AS b)`, from, where, limit)
}

// capped turns a bounded count into a Count: exact below the cap;
// otherwise the statistics' figure when est finds one at or above the cap
// (statistics below a count that reached the cap are stale: the cap is
// the better lower bound), else CountAtLeast.
func capped(n, limit int64, est func() (int64, bool, error)) (duroxide.Count, error) {
	if n < limit {
		return duroxide.Count{Value: n, Kind: duroxide.CountExact}, nil
	}
	if est != nil {
		v, ok, err := est()
		if err != nil {
			return duroxide.Count{}, err
		}
		if ok && v >= limit {
			return duroxide.Count{Value: v, Kind: duroxide.CountEstimated}, nil
		}
	}
	return duroxide.Count{Value: limit, Kind: duroxide.CountAtLeast}, nil
}

// GetSystemMetricsEstimate implements duroxide.ProviderAdminExt: one
// statement of six bounded counts (each reads at most the cap's rows: a
// scan of the table or its smallest index stopped at the cap, or a range
// of the status index), and
// for each figure that reached the cap one or two statistics queries
// through the dialect's dialect.StatsReader.
func (p *gormProvider) GetSystemMetricsEstimate(ctx context.Context, opts duroxide.EstimateOptions) (*duroxide.SystemMetricsEstimate, error) {
	const op = "get_system_metrics_estimate"
	limit, err := estimateCap(opts)
	if err != nil {
		return nil, perr(op, err)
	}
	db := p.s.db.WithContext(ctx)
	// Status figures count executions with the status (one range of the
	// status index, stopped at the cap): joining each to its instance to
	// keep only current executions would make PostgreSQL's planner hash
	// the whole instances table for a rare status.
	exe := p.q(models.TableExecutions)
	var n struct {
		Instances, Executions, Running, Completed, Failed, Events int64
	}
	if err := db.Raw(`SELECT `+boundedCount(p.q(models.TableInstances), "1 = 1", limit)+` AS instances, `+
		boundedCount(p.q(models.TableExecutions), "1 = 1", limit)+` AS executions, `+
		boundedCount(exe, "status = ?", limit)+` AS running, `+boundedCount(exe, "status = ?", limit)+` AS completed, `+
		boundedCount(exe, "status = ?", limit)+` AS failed, `+boundedCount(p.q(models.TableHistory), "1 = 1", limit)+` AS events`,
		duroxide.StatusRunning, duroxide.StatusCompleted, duroxide.StatusFailed).Scan(&n).Error; err != nil {
		return nil, perr(op, err)
	}
	sr, _ := p.s.d.(dialect.StatsReader)
	table := func(base string) func() (int64, bool, error) {
		if sr == nil {
			return nil
		}
		return func() (int64, bool, error) { return sr.TableRows(db, p.s.env(), base) }
	}
	var execRows *struct { // the executions estimate, read once
		n  int64
		ok bool
	}
	status := func(st string) func() (int64, bool, error) {
		if sr == nil {
			return nil
		}
		return func() (int64, bool, error) {
			f, ok, err := sr.ValueFraction(db, p.s.env(), models.TableExecutions, "status", st)
			if err != nil || !ok {
				return 0, false, err
			}
			if execRows == nil {
				n, ok, err := sr.TableRows(db, p.s.env(), models.TableExecutions)
				if err != nil {
					return 0, false, err
				}
				execRows = &struct {
					n  int64
					ok bool
				}{n, ok}
			}
			return int64(math.Round(f * float64(execRows.n))), execRows.ok, nil
		}
	}
	var m duroxide.SystemMetricsEstimate
	for _, f := range []struct {
		dst *duroxide.Count
		n   int64
		est func() (int64, bool, error)
	}{
		{&m.TotalInstances, n.Instances, table(models.TableInstances)},
		{&m.TotalExecutions, n.Executions, table(models.TableExecutions)},
		{&m.RunningInstances, n.Running, status(duroxide.StatusRunning)},
		{&m.CompletedInstances, n.Completed, status(duroxide.StatusCompleted)},
		{&m.FailedInstances, n.Failed, status(duroxide.StatusFailed)},
		{&m.TotalEvents, n.Events, table(models.TableHistory)},
	} {
		if *f.dst, err = capped(f.n, limit, f.est); err != nil {
			return nil, perr(op, err)
		}
	}
	return &m, nil
}

// GetQueueDepthsEstimate implements duroxide.ProviderAdminExt: one
// statement of two bounded counts with GetQueueDepths's conditions.
func (p *gormProvider) GetQueueDepthsEstimate(ctx context.Context, opts duroxide.EstimateOptions) (*duroxide.QueueDepthsEstimate, error) {
	const op = "get_queue_depths_estimate"
	limit, err := estimateCap(opts)
	if err != nil {
		return nil, perr(op, err)
	}
	now := p.s.nowMS()
	vis := `visible_at <= ? AND (lock_token IS NULL OR locked_until <= ?)`
	var n struct{ Orch, Work int64 }
	if err := p.s.db.WithContext(ctx).Raw(`SELECT `+boundedCount(p.q(models.TableOrchestratorQueue), vis, limit)+` AS orch, `+
		boundedCount(p.q(models.TableWorkerQueue), vis, limit)+` AS work`, now, now, now, now).Scan(&n).Error; err != nil {
		return nil, perr(op, err)
	}
	var d duroxide.QueueDepthsEstimate
	d.OrchestratorQueue, _ = capped(n.Orch, limit, nil)
	d.WorkerQueue, _ = capped(n.Work, limit, nil)
	return &d, nil
}

// ListChildrenPage implements duroxide.ProviderAdminExt: one statement
// per page, the parent's children after the cursor by (created_at,
// instance_id).
func (p *gormProvider) ListChildrenPage(ctx context.Context, instance string, pp repo.PageParams) ([]string, string, error) {
	const op = "list_children_page"
	limit, err := pageLimit(pp)
	if err != nil {
		return nil, "", perr(op, err)
	}
	c, err := decodeCursor(pp, curInstanceChildren)
	if err != nil {
		return nil, "", perr(op, err)
	}
	where, args := `parent_instance_id = ?`, []any{instance}
	if c != nil {
		// created_at >= t is the index range; the rest steps over the
		// children created in the cursor's millisecond.
		where += ` AND created_at >= ? AND (created_at > ? OR instance_id > ?)`
		args = append(args, c.N, c.N, c.ID)
	}
	var rows []struct {
		InstanceID string
		CreatedAt  int64
	}
	if err := p.s.db.WithContext(ctx).Raw(`SELECT instance_id, created_at FROM `+p.q(models.TableInstances)+` WHERE `+where+
		fmt.Sprintf(` ORDER BY created_at, instance_id LIMIT %d`, limit+1), args...).Scan(&rows).Error; err != nil {
		return nil, "", perr(op, err)
	}
	next := ""
	if len(rows) > limit {
		rows = rows[:limit]
		last := rows[limit-1]
		next = encodeCursor(pageCursor{Kind: curInstanceChildren, N: last.CreatedAt, ID: last.InstanceID})
	}
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.InstanceID
	}
	return ids, next, nil
}

// ReadHistoryPage implements duroxide.ProviderAdminExt: one statement per
// page, a range of the history primary key (instance_id, execution_id,
// event_id) after the cursor's event id; each event decoded once, straight
// from the driver's buffer (readHistory).
func (p *gormProvider) ReadHistoryPage(ctx context.Context, instance string, executionID uint64, pp repo.PageParams) ([]duroxide.Event, string, error) {
	const op = "read_history_page"
	limit, err := pageLimit(pp)
	if err != nil {
		return nil, "", perr(op, err)
	}
	c, err := decodeCursor(pp, curHistory)
	if err != nil {
		return nil, "", perr(op, err)
	}
	after := int64(0)
	if c != nil {
		after = c.N
	}
	exec := int64(executionID)
	evs, last, n, err := readHistory(p.s.db.WithContext(ctx), instance, exec, limit, `SELECT event_id, event_data FROM `+p.q(models.TableHistory)+
		fmt.Sprintf(` WHERE instance_id = ? AND execution_id = ? AND event_id > ? ORDER BY event_id LIMIT %d`, limit+1), instance, exec, after)
	if err != nil {
		return nil, "", perr(op, err)
	}
	next := ""
	if n > limit {
		next = encodeCursor(pageCursor{Kind: curHistory, N: last})
	}
	return evs, next, nil
}
