package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"gorm.io/gorm"

	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

func msTime(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// ListInstances implements duroxide.ProviderAdmin.
func (p *gormProvider) ListInstances(ctx context.Context) ([]string, error) {
	ids := []string{}
	err := p.s.db.WithContext(ctx).Raw(`SELECT instance_id FROM ` + p.q(models.TableInstances) + ` ORDER BY created_at DESC, instance_id DESC`).Scan(&ids).Error
	return ids, perr("list_instances", err)
}

// ListInstancesByStatus implements duroxide.ProviderAdmin.
func (p *gormProvider) ListInstancesByStatus(ctx context.Context, status string) ([]string, error) {
	ids := []string{}
	cond, args := statusCond("e.status", status)
	err := p.s.db.WithContext(ctx).Raw(`SELECT e.instance_id FROM `+p.q(models.TableExecutions)+` e JOIN `+p.q(models.TableInstances)+
		` i ON i.instance_id = e.instance_id AND i.current_execution_id = e.execution_id WHERE `+cond+` ORDER BY e.started_at DESC, e.instance_id DESC`,
		args...).Scan(&ids).Error
	return ids, perr("list_instances_by_status", err)
}

// ListExecutions implements duroxide.ProviderAdmin.
func (p *gormProvider) ListExecutions(ctx context.Context, instance string) ([]uint64, error) {
	var ids []int64
	if err := p.s.db.WithContext(ctx).Raw(`SELECT execution_id FROM `+p.q(models.TableExecutions)+` WHERE instance_id = ? ORDER BY execution_id`,
		instance).Scan(&ids).Error; err != nil {
		return nil, perr("list_executions", err)
	}
	out := make([]uint64, len(ids))
	for i, id := range ids {
		out[i] = uint64(id)
	}
	return out, nil
}

// instancesPage returns one page of the instances of from that match
// where, newest first by (tcol, idcol) — i.created_at, i.instance_id for
// the instances table aliased i; e.started_at, e.instance_id for the
// status walk over executions e — after the cursor of kind.
func (p *gormProvider) instancesPage(ctx context.Context, op, kind, from, where, tcol, idcol string, args []any, pp repo.PageParams) ([]string, string, error) {
	limit, err := pageLimit(pp)
	if err != nil {
		return nil, "", perr(op, err)
	}
	c, err := decodeCursor(pp, kind)
	if err != nil {
		return nil, "", perr(op, err)
	}
	if c != nil {
		// tcol <= t is the range of the index; the rest only steps over
		// the rows of the cursor's millisecond.
		where += " AND " + tcol + " <= ? AND (" + tcol + " < ? OR " + idcol + " < ?)"
		args = append(args, c.N, c.N, c.ID)
	}
	var rows []struct {
		InstanceID string
		CreatedAt  int64
	}
	if err := p.s.db.WithContext(ctx).Raw(`SELECT `+idcol+` AS instance_id, `+tcol+` AS created_at FROM `+from+` WHERE `+where+
		fmt.Sprintf(` ORDER BY %s DESC, %s DESC LIMIT %d`, tcol, idcol, limit+1), args...).Scan(&rows).Error; err != nil {
		return nil, "", perr(op, err)
	}
	next := ""
	if len(rows) > limit {
		rows = rows[:limit]
		last := rows[limit-1]
		next = encodeCursor(pageCursor{Kind: kind, N: last.CreatedAt, ID: last.InstanceID})
	}
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.InstanceID
	}
	return ids, next, nil
}

// ListInstancesPage implements duroxide.ProviderAdmin.
func (p *gormProvider) ListInstancesPage(ctx context.Context, pp repo.PageParams) ([]string, string, error) {
	return p.instancesPage(ctx, "list_instances_page", curInstances, p.q(models.TableInstances)+` i`, "1 = 1", "i.created_at", "i.instance_id", nil, pp)
}

// ListInstancesByStatusPage implements duroxide.ProviderAdmin.
func (p *gormProvider) ListInstancesByStatusPage(ctx context.Context, status string, pp repo.PageParams) ([]string, string, error) {
	cond, args := statusCond("e.status", status)
	return p.instancesPage(ctx, "list_instances_by_status_page", curByStatus,
		p.q(models.TableExecutions)+` e JOIN `+p.q(models.TableInstances)+` i ON i.instance_id = e.instance_id AND i.current_execution_id = e.execution_id`,
		cond, "e.started_at", "e.instance_id", args, pp)
}

// ListExecutionsPage implements duroxide.ProviderAdmin.
func (p *gormProvider) ListExecutionsPage(ctx context.Context, instance string, pp repo.PageParams) ([]uint64, string, error) {
	const op = "list_executions_page"
	limit, err := pageLimit(pp)
	if err != nil {
		return nil, "", perr(op, err)
	}
	c, err := decodeCursor(pp, curExecutions)
	if err != nil {
		return nil, "", perr(op, err)
	}
	after := int64(0)
	if c != nil {
		after = c.N
	}
	var ids []int64
	if err := p.s.db.WithContext(ctx).Raw(`SELECT execution_id FROM `+p.q(models.TableExecutions)+
		fmt.Sprintf(` WHERE instance_id = ? AND execution_id > ? ORDER BY execution_id LIMIT %d`, limit+1),
		instance, after).Scan(&ids).Error; err != nil {
		return nil, "", perr(op, err)
	}
	next := ""
	if len(ids) > limit {
		ids = ids[:limit]
		next = encodeCursor(pageCursor{Kind: curExecutions, N: ids[limit-1]})
	}
	out := make([]uint64, len(ids))
	for i, id := range ids {
		out[i] = uint64(id)
	}
	return out, next, nil
}

// ReadHistoryWithExecutionID implements duroxide.ProviderAdmin.
func (p *gormProvider) ReadHistoryWithExecutionID(ctx context.Context, instance string, executionID uint64) ([]duroxide.Event, error) {
	return p.readExec(ctx, "read_history_with_execution_id", instance, int64(executionID))
}

// ReadHistory implements duroxide.ProviderAdmin.
func (p *gormProvider) ReadHistory(ctx context.Context, instance string) ([]duroxide.Event, error) {
	exec, err := p.LatestExecutionID(ctx, instance)
	if err != nil {
		return nil, err
	}
	return p.readExec(ctx, "read_history", instance, int64(exec))
}

// LatestExecutionID implements duroxide.ProviderAdmin.
func (p *gormProvider) LatestExecutionID(ctx context.Context, instance string) (uint64, error) {
	const op = "latest_execution_id"
	var ids []int64
	if err := p.s.db.WithContext(ctx).Raw(`SELECT current_execution_id FROM `+p.q(models.TableInstances)+` WHERE instance_id = ?`,
		instance).Scan(&ids).Error; err != nil {
		return 0, perr(op, err)
	}
	if len(ids) == 0 {
		return 0, pfail(op, ErrNotFound, "Instance not found: %s", instance)
	}
	return uint64(ids[0]), nil
}

// GetInstanceInfo implements duroxide.ProviderAdmin.
func (p *gormProvider) GetInstanceInfo(ctx context.Context, instance string) (*duroxide.InstanceInfo, error) {
	const op = "get_instance_info"
	var r struct {
		InstanceID           string
		OrchestrationName    string
		OrchestrationVersion *string
		CurrentExecutionID   int64
		CreatedAt            int64
		UpdatedAt            int64
		ParentInstanceID     *string
		Status               *string
		Output               *string
	}
	// scanned by position (scanRow): an admin poll of one instance (the
	// runtime's wait for a result) pays no reflective mapping
	found, err := scanRow(p.s.db.WithContext(ctx), `SELECT i.instance_id, i.orchestration_name, i.orchestration_version, i.current_execution_id,`+
		` i.created_at, i.updated_at, i.parent_instance_id, e.status, e.output FROM `+p.q(models.TableInstances)+` i LEFT JOIN `+
		p.q(models.TableExecutions)+` e ON e.instance_id = i.instance_id AND e.execution_id = i.current_execution_id WHERE i.instance_id = ?`,
		[]any{instance}, &r.InstanceID, &r.OrchestrationName, &r.OrchestrationVersion, &r.CurrentExecutionID, &r.CreatedAt, &r.UpdatedAt,
		&r.ParentInstanceID, &r.Status, &r.Output)
	if err != nil {
		return nil, perr(op, err)
	}
	if !found {
		return nil, pfail(op, ErrNotFound, "Instance not found: %s", instance)
	}
	info := &duroxide.InstanceInfo{InstanceID: r.InstanceID, OrchestrationName: r.OrchestrationName, OrchestrationVersion: "unknown",
		CurrentExecutionID: uint64(r.CurrentExecutionID), Status: duroxide.StatusRunning, Output: r.Output,
		CreatedAt: msTime(r.CreatedAt), UpdatedAt: msTime(r.UpdatedAt), ParentInstanceID: r.ParentInstanceID}
	if r.OrchestrationVersion != nil {
		info.OrchestrationVersion = *r.OrchestrationVersion
	}
	if r.Status != nil {
		info.Status = *r.Status
	}
	if r.UpdatedAt == 0 {
		info.UpdatedAt = info.CreatedAt
	}
	return info, nil
}

// GetExecutionInfo implements duroxide.ProviderAdmin.
func (p *gormProvider) GetExecutionInfo(ctx context.Context, instance string, executionID uint64) (*duroxide.ExecutionInfo, error) {
	const op = "get_execution_info"
	var rows []struct {
		Status      string
		Output      *string
		StartedAt   int64
		CompletedAt *int64
		EventCount  int64
	}
	if err := p.s.db.WithContext(ctx).Raw(`SELECT e.status, e.output, e.started_at, e.completed_at, (SELECT COUNT(*) FROM `+p.q(models.TableHistory)+
		` h WHERE h.instance_id = e.instance_id AND h.execution_id = e.execution_id) AS event_count FROM `+p.q(models.TableExecutions)+
		` e WHERE e.instance_id = ? AND e.execution_id = ?`, instance, int64(executionID)).Scan(&rows).Error; err != nil {
		return nil, perr(op, err)
	}
	if len(rows) == 0 {
		return nil, pfail(op, ErrNotFound, "Execution not found: %s/%d", instance, executionID)
	}
	r := rows[0]
	info := &duroxide.ExecutionInfo{ExecutionID: executionID, Status: r.Status, Output: r.Output, StartedAt: msTime(r.StartedAt), EventCount: r.EventCount}
	if r.CompletedAt != nil {
		info.CompletedAt = ptr(msTime(*r.CompletedAt))
	}
	return info, nil
}

// GetSystemMetrics implements duroxide.ProviderAdmin: exact counts, one
// statement of six subqueries. COUNT(*) of the instances, executions and
// history tables reads every row of each (PostgreSQL: a sequential or
// index-only scan; SQLite: a full scan of the table's smallest index), and
// each status figure reads every execution with the status (the status
// index) and its instance row; the cost is linear in the data.
// GetSystemMetricsEstimate is the bounded form.
func (p *gormProvider) GetSystemMetrics(ctx context.Context) (*duroxide.SystemMetrics, error) {
	var m duroxide.SystemMetrics
	cur := `SELECT COUNT(*) FROM ` + p.q(models.TableInstances) + ` i JOIN ` + p.q(models.TableExecutions) +
		` e ON e.instance_id = i.instance_id AND e.execution_id = i.current_execution_id WHERE e.status = ?`
	err := p.s.db.WithContext(ctx).Raw(`SELECT (SELECT COUNT(*) FROM `+p.q(models.TableInstances)+`) AS total_instances,`+
		` (SELECT COUNT(*) FROM `+p.q(models.TableExecutions)+`) AS total_executions,`+
		` (`+cur+`) AS running_instances, (`+cur+`) AS completed_instances, (`+cur+`) AS failed_instances,`+
		` (SELECT COUNT(*) FROM `+p.q(models.TableHistory)+`) AS total_events`,
		duroxide.StatusRunning, duroxide.StatusCompleted, duroxide.StatusFailed).Scan(&m).Error
	if err != nil {
		return nil, perr("get_system_metrics", err)
	}
	return &m, nil
}

// GetQueueDepths implements duroxide.ProviderAdmin: exact counts, one
// statement. The orchestrator figure reads the range of the (visible_at,
// id) index up to now and checks each row's lock; the worker figure reads
// every row of the worker queue (it has no visible_at index). The cost is
// linear in the queues' backlog; GetQueueDepthsEstimate is the bounded form.
func (p *gormProvider) GetQueueDepths(ctx context.Context) (*duroxide.QueueDepths, error) {
	now := p.s.nowMS()
	var d duroxide.QueueDepths
	vis := ` WHERE visible_at <= ? AND (lock_token IS NULL OR locked_until <= ?)`
	err := p.s.db.WithContext(ctx).Raw(`SELECT (SELECT COUNT(*) FROM `+p.q(models.TableOrchestratorQueue)+vis+`) AS orchestrator_queue,`+
		` (SELECT COUNT(*) FROM `+p.q(models.TableWorkerQueue)+vis+`) AS worker_queue`, now, now, now, now).Scan(&d).Error
	if err != nil {
		return nil, perr("get_queue_depths", err)
	}
	return &d, nil
}

// ListChildren implements duroxide.ProviderAdmin.
func (p *gormProvider) ListChildren(ctx context.Context, instance string) ([]string, error) {
	ids := []string{}
	err := p.s.db.WithContext(ctx).Raw(`SELECT instance_id FROM `+p.q(models.TableInstances)+` WHERE parent_instance_id = ? ORDER BY created_at, instance_id`,
		instance).Scan(&ids).Error
	return ids, perr("list_children", err)
}

// GetParentID implements duroxide.ProviderAdmin.
func (p *gormProvider) GetParentID(ctx context.Context, instance string) (string, error) {
	const op = "get_parent_id"
	var rows []struct{ ParentInstanceID *string }
	if err := p.s.db.WithContext(ctx).Raw(`SELECT parent_instance_id FROM `+p.q(models.TableInstances)+` WHERE instance_id = ?`,
		instance).Scan(&rows).Error; err != nil {
		return "", perr(op, err)
	}
	if len(rows) == 0 {
		return "", pfail(op, ErrNotFound, "Instance not found: %s", instance)
	}
	if rows[0].ParentInstanceID == nil {
		return "", nil
	}
	return *rows[0].ParentInstanceID, nil
}

// GetInstanceTree implements duroxide.ProviderAdmin.
func (p *gormProvider) GetInstanceTree(ctx context.Context, instance string) (*duroxide.InstanceTree, error) {
	return p.instanceTree(p.s.db.WithContext(ctx), instance)
}

// instanceTree returns root and its descendants in one statement: a
// recursive walk down the parent_instance_id index collects every
// descendant with its parent and creation time, and the breadth-first
// order (each instance's children oldest first) is built here. The walk's
// UNION drops rows already found, so even a parent cycle (root among its
// own descendants) ends; the visited set keeps the root listed once.
func (p *gormProvider) instanceTree(db *gorm.DB, root string) (*duroxide.InstanceTree, error) {
	inst := p.q(models.TableInstances)
	var rows []struct {
		InstanceID       string
		ParentInstanceID string
		CreatedAt        int64
	}
	if err := db.Raw(`WITH RECURSIVE tree(instance_id, parent_instance_id, created_at) AS (SELECT instance_id, parent_instance_id, created_at FROM `+inst+
		` WHERE parent_instance_id = ? UNION SELECT c.instance_id, c.parent_instance_id, c.created_at FROM `+inst+
		` c JOIN tree t ON c.parent_instance_id = t.instance_id) SELECT instance_id, parent_instance_id, created_at FROM tree ORDER BY created_at, instance_id`,
		root).Scan(&rows).Error; err != nil {
		return nil, perr("get_instance_tree", err)
	}
	kids := make(map[string][]string, len(rows))
	for _, r := range rows { // oldest first: each parent's list is in order
		kids[r.ParentInstanceID] = append(kids[r.ParentInstanceID], r.InstanceID)
	}
	tree := &duroxide.InstanceTree{RootID: root, AllIDs: make([]string, 1, len(rows)+1)}
	tree.AllIDs[0] = root
	seen := map[string]bool{root: true}
	for i := 0; i < len(tree.AllIDs); i++ {
		for _, k := range kids[tree.AllIDs[i]] {
			if !seen[k] {
				seen[k] = true
				tree.AllIDs = append(tree.AllIDs, k)
			}
		}
	}
	return tree, nil
}

// DeleteInstancesAtomic implements duroxide.ProviderAdmin.
func (p *gormProvider) DeleteInstancesAtomic(ctx context.Context, ids []string, force bool) (duroxide.DeleteInstanceResult, error) {
	const op = "delete_instances_atomic"
	var out duroxide.DeleteInstanceResult
	if len(ids) == 0 {
		return out, nil
	}
	err := p.tx(ctx, func(tx *gorm.DB) error {
		var e error
		out, e = p.deleteAtomic(tx, ids, force)
		return e
	})
	if err != nil {
		return duroxide.DeleteInstanceResult{}, perr(op, err)
	}
	return out, nil
}

func (p *gormProvider) deleteAtomic(tx *gorm.DB, ids []string, force bool) (duroxide.DeleteInstanceResult, error) {
	const op = "delete_instances_atomic"
	var out duroxide.DeleteInstanceResult
	in := ` IN (` + placeholders(len(ids)) + `)`
	args := strArgs(ids)
	lock := p.s.forUpdate()
	// Instance locks first, in the same order as an ack (lock row, then
	// instance row), so a concurrent ack and delete cannot deadlock; removing
	// them makes in-flight acks fail with ErrInvalidLockToken (no zombie
	// re-creation). Rolled back with everything else on error.
	if err := tx.Exec(`DELETE FROM `+p.q(models.TableInstanceLocks)+` WHERE instance_id`+in, args...).Error; err != nil {
		return out, fmt.Errorf("delete instance locks: %w", err)
	}
	var locked []string
	if err := tx.Raw(`SELECT instance_id FROM `+p.q(models.TableInstances)+` WHERE instance_id`+in+` ORDER BY instance_id`+lock, args...).Scan(&locked).Error; err != nil {
		return out, fmt.Errorf("lock instances: %w", err)
	}
	if !force {
		var running []string
		if err := tx.Raw(`SELECT i.instance_id FROM `+p.q(models.TableInstances)+` i JOIN `+p.q(models.TableExecutions)+
			` e ON e.instance_id = i.instance_id AND e.execution_id = i.current_execution_id WHERE e.status = ? AND i.instance_id`+in+` LIMIT 1`,
			append([]any{duroxide.StatusRunning}, args...)...).Scan(&running).Error; err != nil {
			return out, fmt.Errorf("check running: %w", err)
		}
		if len(running) > 0 {
			return out, pfail(op, ErrInstanceRunning, "Instance %s is Running. Use force=true to delete.", running[0])
		}
	}
	var orphans []string
	if err := tx.Raw(`SELECT instance_id FROM `+p.q(models.TableInstances)+` WHERE parent_instance_id`+in+` AND instance_id NOT`+in+` LIMIT 1`,
		append(append([]any{}, args...), args...)...).Scan(&orphans).Error; err != nil {
		return out, fmt.Errorf("check orphans: %w", err)
	}
	if len(orphans) > 0 {
		return out, pfail(op, ErrOrphan, "Orphan detected: instance %s has parent in delete list but is not included", orphans[0])
	}
	del := func(table string) (int64, error) {
		res := tx.Exec(`DELETE FROM `+p.q(table)+` WHERE instance_id`+in, args...)
		return res.RowsAffected, res.Error
	}
	var err error
	if out.EventsDeleted, err = del(models.TableHistory); err != nil {
		return out, err
	}
	if out.ExecutionsDeleted, err = del(models.TableExecutions); err != nil {
		return out, err
	}
	n1, err := del(models.TableOrchestratorQueue)
	if err != nil {
		return out, err
	}
	// activity sessions the deleted worker items used go with them, unless
	// a queued item of another instance still needs the session
	var sids []string
	if err := tx.Raw(`SELECT DISTINCT session_id FROM `+p.q(models.TableWorkerQueue)+` WHERE session_id IS NOT NULL AND instance_id`+in, args...).Scan(&sids).Error; err != nil {
		return out, fmt.Errorf("find activity sessions: %w", err)
	}
	n2, err := del(models.TableWorkerQueue)
	if err != nil {
		return out, err
	}
	out.QueueMessagesDeleted = n1 + n2
	// the instance's key-value store (both tables: it lives as long as the instance)
	if _, err := del(models.TableKVDelta); err != nil {
		return out, err
	}
	if _, err := del(models.TableKVStore); err != nil {
		return out, err
	}
	if len(sids) > 0 {
		sess := p.q(models.TableActivitySessions)
		if err := tx.Exec(`DELETE FROM `+sess+` WHERE session_id IN (`+placeholders(len(sids))+`) AND NOT EXISTS (SELECT 1 FROM `+
			p.q(models.TableWorkerQueue)+` w WHERE w.session_id = `+sess+`.session_id)`, strArgs(sids)...).Error; err != nil {
			return out, fmt.Errorf("delete activity sessions: %w", err)
		}
	}
	if out.InstancesDeleted, err = del(models.TableInstances); err != nil {
		return out, err
	}
	return out, nil
}

// DeleteInstance implements duroxide.ProviderAdmin.
func (p *gormProvider) DeleteInstance(ctx context.Context, instance string, force bool) (duroxide.DeleteInstanceResult, error) {
	const op = "delete_instance"
	parent, err := p.GetParentID(ctx, instance)
	if err != nil {
		return duroxide.DeleteInstanceResult{}, err
	}
	if parent != "" {
		return duroxide.DeleteInstanceResult{}, pfail(op, ErrSubOrchestration,
			"Cannot delete sub-orchestration %s directly. Delete root instance instead.", instance)
	}
	var out duroxide.DeleteInstanceResult
	err = p.tx(ctx, func(tx *gorm.DB) error {
		tree, err := p.instanceTree(tx, instance)
		if err != nil {
			return err
		}
		out, err = p.deleteAtomic(tx, tree.AllIDs, force)
		return err
	})
	if err != nil {
		return duroxide.DeleteInstanceResult{}, perr(op, err)
	}
	return out, nil
}

// bulkSelect returns instance ids matching filter and extra (conditions on
// i and its current execution e), oldest first, at most filter.Limit.
// with is an optional WITH clause the conditions use; args are its
// arguments followed by extra's.
func (p *gormProvider) bulkSelect(ctx context.Context, filter duroxide.InstanceFilter, with, extra string, extraArgs ...any) ([]string, error) {
	if filter.InstanceIDs != nil && len(filter.InstanceIDs) == 0 {
		return nil, nil
	}
	limit := filter.Limit
	if limit <= 0 {
		limit = duroxide.DefaultBulkLimit
	}
	sql := with + `SELECT i.instance_id FROM ` + p.q(models.TableInstances) + ` i LEFT JOIN ` + p.q(models.TableExecutions) +
		` e ON e.instance_id = i.instance_id AND e.execution_id = i.current_execution_id WHERE 1 = 1` + extra
	args := append([]any{}, extraArgs...)
	if filter.InstanceIDs != nil {
		sql += ` AND i.instance_id IN (` + placeholders(len(filter.InstanceIDs)) + `)`
		args = append(args, strArgs(filter.InstanceIDs)...)
	}
	if filter.CompletedBefore != nil {
		// a literal, not a parameter: a generic plan of "< $n" cannot tell a
		// cutoff that excludes every row from one that excludes none
		sql += ` AND e.completed_at < ` + strconv.FormatInt(filter.CompletedBefore.UnixMilli(), 10)
	}
	sql += ` ORDER BY i.created_at, i.instance_id LIMIT ` + strconv.Itoa(limit)
	var ids []string
	err := p.s.db.WithContext(ctx).Raw(sql, args...).Scan(&ids).Error
	return ids, err
}

// DeleteInstanceBulk implements duroxide.ProviderAdmin. Only deletable
// roots take places in the limit: terminal roots whose tree holds a Running
// instance (found by walking up from every Running sub-orchestration) are
// excluded in the query, so repeated calls with any Limit reach every
// deletable tree. A descendant that starts running between the query and
// its tree's transaction makes that tree skipped in this call.
func (p *gormProvider) DeleteInstanceBulk(ctx context.Context, filter duroxide.InstanceFilter) (duroxide.DeleteInstanceResult, error) {
	const op = "delete_instance_bulk"
	var total duroxide.DeleteInstanceResult
	inst, exe := p.q(models.TableInstances), p.q(models.TableExecutions)
	// busy starts from the sub-orchestrations (the children index holds
	// only them; CROSS JOIN keeps SQLite from scanning every execution
	// for the Running ones when its statistics say all are Completed) and
	// walks up to their roots.
	with := `WITH RECURSIVE busy(instance_id, parent_instance_id) AS (SELECT c.instance_id, c.parent_instance_id FROM ` + inst + ` c CROSS JOIN ` + exe +
		` ce WHERE ce.instance_id = c.instance_id AND ce.execution_id = c.current_execution_id AND ce.status = 'Running' AND c.parent_instance_id IS NOT NULL` +
		` UNION SELECT a.instance_id, a.parent_instance_id FROM ` + inst + ` a JOIN busy ON a.instance_id = busy.parent_instance_id) `
	roots, err := p.bulkSelect(ctx, filter, with, ` AND i.parent_instance_id IS NULL AND e.status IN ('Completed', 'Failed', 'ContinuedAsNew')`+
		` AND i.instance_id NOT IN (SELECT instance_id FROM busy WHERE parent_instance_id IS NULL)`)
	if err != nil {
		return total, perr(op, err)
	}
	for _, root := range roots {
		var res duroxide.DeleteInstanceResult
		err := p.tx(ctx, func(tx *gorm.DB) error {
			tree, err := p.instanceTree(tx, root)
			if err != nil {
				return err
			}
			// not forced: a tree with a Running descendant is skipped (the root was terminal when selected)
			res, err = p.deleteAtomic(tx, tree.AllIDs, false)
			return err
		})
		if errors.Is(err, ErrInstanceRunning) {
			continue
		}
		if err != nil {
			return total, perr(op, err)
		}
		total = total.Add(res)
	}
	return total, nil
}

// PruneExecutions implements duroxide.ProviderAdmin.
func (p *gormProvider) PruneExecutions(ctx context.Context, instance string, opts duroxide.PruneOptions) (duroxide.PruneResult, error) {
	const op = "prune_executions"
	if opts.KeepLast < 0 {
		return duroxide.PruneResult{}, perr(op, invalidf("negative keep_last"))
	}
	var out duroxide.PruneResult
	err := p.tx(ctx, func(tx *gorm.DB) error {
		var cur []int64
		lock := p.s.forUpdate()
		if err := tx.Raw(`SELECT current_execution_id FROM `+p.q(models.TableInstances)+` WHERE instance_id = ?`+lock, instance).Scan(&cur).Error; err != nil {
			return err
		}
		if len(cur) == 0 {
			return pfail(op, ErrNotFound, "Instance %s not found", instance)
		}
		var execs []struct {
			ExecutionID int64
			Status      string
			CompletedAt *int64
		}
		if err := tx.Raw(`SELECT execution_id, status, completed_at FROM `+p.q(models.TableExecutions)+` WHERE instance_id = ? ORDER BY execution_id DESC`,
			instance).Scan(&execs).Error; err != nil {
			return err
		}
		var victims []any
		for i, e := range execs {
			if e.ExecutionID == cur[0] || e.Status == duroxide.StatusRunning {
				continue
			}
			if opts.KeepLast > 0 && i < opts.KeepLast {
				continue
			}
			if opts.CompletedBefore != nil && (e.CompletedAt == nil || *e.CompletedAt >= opts.CompletedBefore.UnixMilli()) {
				continue
			}
			victims = append(victims, e.ExecutionID)
		}
		out.InstancesProcessed = 1
		if len(victims) == 0 {
			return nil
		}
		in := ` AND execution_id IN (` + placeholders(len(victims)) + `)`
		args := append([]any{instance}, victims...)
		res := tx.Exec(`DELETE FROM `+p.q(models.TableHistory)+` WHERE instance_id = ?`+in, args...)
		if res.Error != nil {
			return res.Error
		}
		out.EventsDeleted = res.RowsAffected
		res = tx.Exec(`DELETE FROM `+p.q(models.TableExecutions)+` WHERE instance_id = ?`+in, args...)
		if res.Error != nil {
			return res.Error
		}
		out.ExecutionsDeleted = res.RowsAffected
		return nil
	})
	if err != nil {
		return duroxide.PruneResult{}, perr(op, err)
	}
	return out, nil
}

// PruneExecutionsBulk implements duroxide.ProviderAdmin.
func (p *gormProvider) PruneExecutionsBulk(ctx context.Context, filter duroxide.InstanceFilter, opts duroxide.PruneOptions) (duroxide.PruneResult, error) {
	const op = "prune_executions_bulk"
	var total duroxide.PruneResult
	if opts.KeepLast < 0 {
		return total, perr(op, invalidf("negative keep_last"))
	}
	// only instances with something to prune take places in the limit
	// (the same rules as PruneExecutions), so repeated calls progress
	cond := ` AND EXISTS (SELECT 1 FROM ` + p.q(models.TableExecutions) + ` x WHERE x.instance_id = i.instance_id` +
		` AND x.execution_id <> i.current_execution_id AND x.status <> 'Running'`
	var args []any
	if opts.CompletedBefore != nil {
		cond += ` AND x.completed_at < ` + strconv.FormatInt(opts.CompletedBefore.UnixMilli(), 10) // a literal: see bulkSelect
	}
	if opts.KeepLast > 0 {
		cond += ` AND (SELECT COUNT(*) FROM ` + p.q(models.TableExecutions) + ` y WHERE y.instance_id = x.instance_id AND y.execution_id > x.execution_id) >= ?`
		args = append(args, opts.KeepLast)
	}
	ids, err := p.bulkSelect(ctx, filter, "", cond+`)`, args...)
	if err != nil {
		return total, perr(op, err)
	}
	for _, id := range ids {
		r, err := p.PruneExecutions(ctx, id, opts)
		if errors.Is(err, ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return total, err
		}
		total.InstancesProcessed += r.InstancesProcessed
		total.ExecutionsDeleted += r.ExecutionsDeleted
		total.EventsDeleted += r.EventsDeleted
	}
	return total, nil
}

// statusCond is col compared with an execution status. A status of the
// closed set is written as a literal: the statuses are skewed (Completed
// rows outnumber Running ones by orders of magnitude), and a generic plan
// of "col = $n" — the one a statement cache settles on — cannot tell a rare
// status from a common one, so it scans (issue 24, TestPlanTraps). Any
// other string is bound as an argument.
func statusCond(col, status string) (string, []any) {
	switch status {
	case duroxide.StatusRunning, duroxide.StatusCompleted, duroxide.StatusFailed, duroxide.StatusContinuedAsNew:
		return col + ` = '` + status + `'`, nil
	}
	return col + ` = ?`, []any{status}
}
