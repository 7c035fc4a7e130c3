package engine

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// AckWorkItem implements duroxide.Provider. It returns after the ack (the
// delete and the completion's enqueue, in one transaction) is committed
// synchronously. With CapGroupCommit, concurrent acks of the Store are
// coalesced into one statement or transaction (see groupcommit.go): an ack
// that finds no flush running commits at once on its own (after yielding the
// processor once, which lets acks arriving at the same moment join it); acks
// that arrive while one runs are committed together in the next, each
// checked against its own token and told its own outcome
// (ErrInvalidLockToken fails only its own call). An ack whose ctx ends
// before it is taken into a flush returns the context's error and is not
// applied; once taken, it waits for that flush's outcome. Alone or
// coalesced, an ack runs the same code (ackWorkBatch). On the Citus route
// (a PostgreSQL Store with CapFastPaths switched off) acks are not
// coalesced: each commits alone (with a token that names its item's
// instance, as every token issued since schema version 13 does, each of
// its statements pinned to that instance), where a flush would write
// several instances' shards in one statement.
func (p *gormProvider) AckWorkItem(ctx context.Context, lockToken string, completion duroxide.WorkItem) error {
	const op = "ack_work_item"
	var row *models.OrchestratorQueueItem
	if completion != nil {
		switch completion.(type) {
		case *duroxide.ActivityCompleted, *duroxide.ActivityFailed:
		default:
			return perr(op, invalidf("Invalid completion work item type %s", completion.WorkItemType()))
		}
		if err := validateWorkItem(completion); err != nil {
			return perr(op, err)
		}
		data, err := json.Marshal(completion)
		if err != nil {
			return perr(op, invalidf("encode completion: %v", err))
		}
		row = &models.OrchestratorQueueItem{InstanceID: completion.RoutingInstance(), WorkItem: string(data)}
	}
	wl, ok := parseWorkToken(lockToken)
	if !ok || !issuedToken(wl.stored) {
		return pfail(op, ErrInvalidLockToken, "Worker queue item not found or already processed")
	}
	in := ackWorkReq{stored: wl.stored, id: wl.id, instance: wl.instance, routed: wl.routed, row: row, nowMS: p.s.nowMS()}
	var err error
	if p.s.groupCommit() && !p.routedWork() {
		err = p.s.gc.ackWork.do(ctx, p.s.gcFlushes(), wl.id, in, p.ackWorkOne, p.ackWorkBatch)
	} else {
		err = p.ackWorkOne(ctx, in)
	}
	if err != nil {
		return perr(op, err)
	}
	if row != nil {
		p.orch.handOff(1, false) // the completion is visible at once
	}
	return nil
}

// ackWorkReq is one AckWorkItem call: the stored token and row id of its
// lease, the completion to enqueue (nil for none) and the call's clock.
type ackWorkReq struct {
	stored   string
	id       int64
	instance string // the row's instance_id the token names, when routed
	routed   bool
	row      *models.OrchestratorQueueItem
	nowMS    int64
}

// ackWorkOne acks one item: a batch of one.
func (p *gormProvider) ackWorkOne(ctx context.Context, in ackWorkReq) error {
	r := &gcReq[int64, ackWorkReq]{ctx: ctx, key: in.id, in: in}
	if err := p.ackWorkBatch(ctx, []*gcReq[int64, ackWorkReq]{r}); err != nil {
		return err
	}
	return r.err
}

// ackWorkBatch acks reqs (one call, or a group-commit flush of several;
// the row ids are distinct), in row id order: with the dialect's one
// statement (dialect.WorkerAckStatement, CapFastPaths), else the portable
// sequence (ackWorkSteps). Each item is checked against its own token,
// lock and clock: a token that matched nothing fails its own call only
// (ErrInvalidLockToken). It returns an error only when nothing was acked
// because the statement or transaction as a whole failed.
func (p *gormProvider) ackWorkBatch(ctx context.Context, reqs []*gcReq[int64, ackWorkReq]) error {
	const op = "ack_work_item"
	sorted := reqs
	if len(reqs) > 1 {
		sorted = slices.Clone(reqs)
		slices.SortFunc(sorted, func(a, b *gcReq[int64, ackWorkReq]) int { return cmp.Compare(a.key, b.key) })
	}
	var acked []bool
	var err error
	if st, ok := p.s.d.(dialect.WorkerAckStatement); ok && p.s.has(CapFastPaths) {
		acked, err = p.ackWorkStatement(ctx, st, sorted)
	} else {
		acked, err = p.ackWorkSteps(ctx, sorted)
	}
	if err != nil {
		err = fmt.Errorf("ack work items: %w", err)
		if !slices.Contains(acked, true) {
			return err
		}
	}
	for k, r := range sorted {
		switch {
		case acked[k]:
			r.err = nil
		case err != nil:
			r.err = err
		default:
			r.err = pfail(op, ErrInvalidLockToken, "Worker queue item not found or already processed")
		}
	}
	return nil
}

// ackWorkStatement acks reqs in the dialect's one autocommit statement
// (one round trip, one commit) and reports which were acked (none when it
// failed: the statement is atomic).
func (p *gormProvider) ackWorkStatement(ctx context.Context, st dialect.WorkerAckStatement, reqs []*gcReq[int64, ackWorkReq]) ([]bool, error) {
	args := make([]any, 0, 7*len(reqs))
	for k, r := range reqs {
		var ii, wi any
		if row := r.in.row; row != nil {
			ii, wi = row.InstanceID, row.WorkItem
		}
		var ri any // the row's instance the token names (nil: not routed)
		if r.in.routed {
			ri = r.in.instance
		}
		args = append(args, k, r.in.id, r.in.stored, r.in.nowMS, ii, wi, ri)
	}
	acked := make([]bool, len(reqs))
	err := queryDirect(p.s.db.WithContext(ctx), st.WorkerAckSQL(len(reqs), p.q), args, func(rows *sql.Rows) error {
		var k int
		if err := rows.Scan(&k); err != nil {
			return err
		}
		if k >= 0 && k < len(acked) {
			acked[k] = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return acked, nil
}

// ackWorkSteps is the portable sequence. When no item has a completion,
// one autocommit DELETE first removes the items outside activity sessions
// whose token and lock hold (the usual ack without a completion: one
// statement, no transaction). The rest (completions to enqueue, sessions
// to touch, tokens that matched nothing) run in one transaction: one
// DELETE of the items whose own token and lock still hold (id IN the
// ids, each row's token and clock picked by CASE id), returning which
// went, then their activity sessions' touches and their completions (one
// multi-row INSERT).
func (p *gormProvider) ackWorkSteps(ctx context.Context, reqs []*gcReq[int64, ackWorkReq]) ([]bool, error) {
	acked := make([]bool, len(reqs))
	left := make([]int, 0, len(reqs))
	for k := range reqs {
		left = append(left, k)
	}
	if !slices.ContainsFunc(reqs, func(r *gcReq[int64, ackWorkReq]) bool { return r.in.row != nil }) {
		var gone []int64
		q, args := p.ackWorkDelete(reqs, left, ` AND session_id IS NULL RETURNING id`)
		if err := scanAll(p.s.db.WithContext(ctx), &gone, q, args...); err != nil {
			return nil, fmt.Errorf("delete work items: %w", err)
		}
		left = p.markAcked(reqs, left, acked, gone)
		if len(left) == 0 {
			return acked, nil
		}
	}
	q, args := p.ackWorkDelete(reqs, left, ` RETURNING id, session_id`)
	var ids []int64
	err := p.tx(ctx, func(tx *gorm.DB) error {
		var gone []struct {
			ID        int64
			SessionID *string
		}
		if err := scanAll(tx, &gone, q, args...); err != nil {
			return fmt.Errorf("delete work items: %w", err)
		}
		sessions := make(map[int64]string, len(gone))
		ids = ids[:0]
		for _, g := range gone {
			ids = append(ids, g.ID)
			if g.SessionID != nil {
				sessions[g.ID] = *g.SessionID
			}
		}
		var rows []models.OrchestratorQueueItem
		for _, k := range left {
			r := reqs[k].in
			if !slices.Contains(ids, r.id) {
				continue
			}
			if sid, ok := sessions[r.id]; ok {
				if err := tx.Exec(`UPDATE `+p.q(models.TableActivitySessions)+` SET last_activity_at = ? WHERE session_id = ? AND locked_until > ?`,
					r.nowMS, sid, r.nowMS).Error; err != nil {
					return fmt.Errorf("touch session %s: %w", sid, err)
				}
			}
			if row := r.row; row != nil {
				rows = append(rows, models.OrchestratorQueueItem{InstanceID: row.InstanceID, WorkItem: row.WorkItem, VisibleAt: r.nowMS, CreatedAt: r.nowMS})
			}
		}
		if len(rows) > 0 {
			if err := tx.Create(&rows).Error; err != nil {
				return fmt.Errorf("enqueue completion: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return acked, err
	}
	p.markAcked(reqs, left, acked, ids)
	return acked, nil
}

// ackWorkDelete returns the DELETE of the items reqs[k], k in ks, whose
// own token and lock hold at their own clock, followed by tail.
func (p *gormProvider) ackWorkDelete(reqs []*gcReq[int64, ackWorkReq], ks []int, tail string) (string, []any) {
	n := len(ks)
	args := make([]any, 0, 5*n)
	for _, k := range ks {
		args = append(args, reqs[k].in.id)
	}
	var tok, clk strings.Builder
	for _, k := range ks {
		tok.WriteString(" WHEN ? THEN " + p.s.castParam("text"))
		args = append(args, reqs[k].in.id, reqs[k].in.stored)
	}
	for _, k := range ks {
		clk.WriteString(" WHEN ? THEN " + p.s.castParam("bigint"))
		args = append(args, reqs[k].in.id, reqs[k].in.nowMS)
	}
	// Every token names its row's instance: pin them too (the
	// distribution column; one instance: a single-shard statement).
	pin := ""
	if !slices.ContainsFunc(ks, func(k int) bool { return !reqs[k].in.routed }) {
		var insts []string
		for _, k := range ks {
			if !slices.Contains(insts, reqs[k].in.instance) {
				insts = append(insts, reqs[k].in.instance)
			}
		}
		pin = ` AND instance_id IN (` + placeholders(len(insts)) + `)`
		for _, i := range insts {
			args = append(args, i)
		}
	}
	return `DELETE FROM ` + p.q(models.TableWorkerQueue) + ` WHERE id IN (` + placeholders(n) + `)` +
		` AND lock_token = CASE id` + tok.String() + ` END AND locked_until > CASE id` + clk.String() + ` END` + pin + tail, args
}

// markAcked marks the items reqs[k], k in ks, whose row id is in gone and
// returns the others.
func (p *gormProvider) markAcked(reqs []*gcReq[int64, ackWorkReq], ks []int, acked []bool, gone []int64) []int {
	var left []int
	for _, k := range ks {
		if slices.Contains(gone, reqs[k].in.id) {
			acked[k] = true
		} else {
			left = append(left, k)
		}
	}
	return left
}

// RenewWorkItemLock implements duroxide.Provider.
func (p *gormProvider) RenewWorkItemLock(ctx context.Context, lockToken string, extendFor time.Duration) error {
	const op = "renew_work_item_lock"
	if extendFor <= 0 {
		return perr(op, invalidf("extension must be positive"))
	}
	wl, ok := parseWorkToken(lockToken)
	if !ok || !issuedToken(wl.stored) {
		return pfail(op, ErrInvalidLockToken, "Lock token invalid, expired, or already acked")
	}
	ic, iargs := wl.cond()
	err := p.tx(ctx, func(tx *gorm.DB) error {
		now := p.s.nowMS()
		var rows []struct{ SessionID *string }
		if err := p.s.updateReturning(tx, &rows, `UPDATE `+p.q(models.TableWorkerQueue)+` SET locked_until = ? WHERE id = ? AND lock_token = ? AND locked_until > ?`+ic,
			`session_id`, append([]any{now + durMS(extendFor), wl.id, wl.stored, now}, iargs...), `FROM `+p.q(models.TableWorkerQueue)+` WHERE id = ?`+ic,
			append([]any{wl.id}, iargs...)...); err != nil {
			return err
		}
		if len(rows) == 0 {
			return pfail(op, ErrInvalidLockToken, "Lock token invalid, expired, or already acked")
		}
		if sid := rows[0].SessionID; sid != nil {
			return tx.Exec(`UPDATE `+p.q(models.TableActivitySessions)+` SET last_activity_at = ? WHERE session_id = ? AND locked_until > ?`,
				now, *sid, now).Error
		}
		return nil
	})
	return perr(op, err)
}

// AbandonWorkItem implements duroxide.Provider.
func (p *gormProvider) AbandonWorkItem(ctx context.Context, lockToken string, delay time.Duration, ignoreAttempt bool) error {
	const op = "abandon_work_item"
	if delay < 0 {
		return perr(op, invalidf("negative delay"))
	}
	wl, ok := parseWorkToken(lockToken)
	if !ok || !issuedToken(wl.stored) {
		return pfail(op, ErrInvalidLockToken, "Invalid lock token or already acked")
	}
	ic, iargs := wl.cond()
	now := p.s.nowMS()
	set := `lock_token = NULL, locked_until = NULL, visible_at = ?`
	if ignoreAttempt {
		set += `, attempt_count = CASE WHEN attempt_count > 0 THEN attempt_count - 1 ELSE 0 END`
	}
	res := p.s.db.WithContext(ctx).Exec(`UPDATE `+p.q(models.TableWorkerQueue)+` SET `+set+` WHERE id = ? AND lock_token = ?`+ic,
		append([]any{now + durMS(delay), wl.id, wl.stored}, iargs...)...)
	if res.Error != nil {
		return perr(op, res.Error)
	}
	if res.RowsAffected == 0 {
		return pfail(op, ErrInvalidLockToken, "Invalid lock token or already acked")
	}
	p.work.notify()
	return nil
}

// RenewSessionLock implements duroxide.Provider.
func (p *gormProvider) RenewSessionLock(ctx context.Context, ownerIDs []string, extendFor, idleTimeout time.Duration) (int, error) {
	const op = "renew_session_lock"
	if len(ownerIDs) == 0 {
		return 0, nil
	}
	if extendFor <= 0 || idleTimeout < 0 {
		return 0, perr(op, invalidf("extension must be positive and idle timeout non-negative"))
	}
	now := p.s.nowMS()
	args := append([]any{now + durMS(extendFor)}, strArgs(ownerIDs)...)
	args = append(args, now, now-durMS(idleTimeout))
	res := p.s.db.WithContext(ctx).Exec(`UPDATE `+p.q(models.TableActivitySessions)+` SET locked_until = ? WHERE worker_id IN (`+placeholders(len(ownerIDs))+`)`+
		` AND locked_until > ? AND last_activity_at > ?`, args...)
	if res.Error != nil {
		return 0, perr(op, res.Error)
	}
	return int(res.RowsAffected), nil
}

// CleanupOrphanedSessions implements duroxide.Provider. A session with no
// queued item (locked or not) is deleted when its lease expired or, for
// idleTimeout > 0, when it saw no activity for idleTimeout (duroxide-pg
// ignores the argument). idleTimeout 0 deletes expired sessions only;
// negative is ErrInvalidInput.
func (p *gormProvider) CleanupOrphanedSessions(ctx context.Context, idleTimeout time.Duration) (int, error) {
	const op = "cleanup_orphaned_sessions"
	if idleTimeout < 0 {
		return 0, perr(op, invalidf("negative idle timeout"))
	}
	now := p.s.nowMS()
	cond, args := `locked_until <= ?`, []any{now}
	if idleTimeout > 0 {
		cond, args = `(locked_until <= ? OR last_activity_at <= ?)`, []any{now, now - durMS(idleTimeout)}
	}
	res := p.s.db.WithContext(ctx).Exec(`DELETE FROM `+p.q(models.TableActivitySessions)+` WHERE `+cond+
		` AND NOT EXISTS (SELECT 1 FROM `+p.q(models.TableWorkerQueue)+` w WHERE w.session_id = `+p.q(models.TableActivitySessions)+`.session_id)`, args...)
	if res.Error != nil {
		return 0, perr(op, res.Error)
	}
	return int(res.RowsAffected), nil
}
