package engine

import (
	"context"
	"fmt"
	"strings"

	"github.com/agentstore/agentstore/models"
)

// PostgreSQL's one-statement form of a group of worker acks
// (CapGroupCommit with CapFastPaths; see groupcommit.go).

var _ workAckBatcher = cteFastPaths{}

func (cteFastPaths) ackWorkBatch(p *gormProvider, ctx context.Context, reqs []*gcReq[int64, ackWorkReq]) error {
	return p.ackWorkBatchPG(ctx, reqs)
}

// ackWorkBatchPG acks reqs (sorted by row id) in one autocommit statement
// (one round trip, one commit): the VALUES list carries each ack's index,
// row id, stored token, clock and completion; the DELETE joined to it
// removes exactly the rows whose own token and lock still hold and returns
// their indexes, and data-modifying CTEs fed by that RETURNING touch their
// activity sessions and enqueue their completions (in index order), so for
// each item either all of its writes happen or none, as in ackWorkPG.
func (p *gormProvider) ackWorkBatchPG(ctx context.Context, reqs []*gcReq[int64, ackWorkReq]) error {
	const op = "ack_work_item"
	var b strings.Builder
	b.WriteString(`WITH v (k, id, tok, now, ii, wi) AS (VALUES `)
	writeTuples(&b, len(reqs), `(CAST(? AS integer), CAST(? AS bigint), CAST(? AS text), CAST(? AS bigint), CAST(? AS text), CAST(? AS text))`)
	b.WriteString(`), d AS (DELETE FROM ` + p.q(models.TableWorkerQueue) + ` w USING v WHERE w.id = v.id AND w.lock_token = v.tok` +
		` AND w.locked_until > v.now RETURNING v.k, w.session_id, v.now),` +
		` t AS (UPDATE ` + p.q(models.TableActivitySessions) + ` s SET last_activity_at = d.now FROM d` +
		` WHERE s.session_id = d.session_id AND s.locked_until > d.now),` +
		` i AS (INSERT INTO ` + p.q(models.TableOrchestratorQueue) + ` (instance_id, work_item, visible_at, created_at, attempt_count)` +
		` SELECT v.ii, v.wi, d.now, d.now, 0 FROM d JOIN v ON v.k = d.k WHERE v.wi IS NOT NULL ORDER BY d.k)` +
		` SELECT k FROM d`)
	args := make([]any, 0, 6*len(reqs))
	for k, r := range reqs {
		var ii, wi any
		if row := r.in.row; row != nil {
			ii, wi = row.InstanceID, row.WorkItem
		}
		args = append(args, k, r.in.id, r.in.stored, r.in.nowMS, ii, wi)
	}
	var acked []int
	if err := scanAll(p.s.db.WithContext(ctx), &acked, b.String(), args...); err != nil {
		return fmt.Errorf("ack work items: %w", err)
	}
	ok := make([]bool, len(reqs))
	for _, k := range acked {
		if k >= 0 && k < len(reqs) {
			ok[k] = true
		}
	}
	for k, r := range reqs {
		r.err = nil
		if !ok[k] {
			r.err = pfail(op, ErrInvalidLockToken, "Worker queue item not found or already processed")
		}
	}
	return nil
}
