package engine

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// Group commit (CapGroupCommit).
//
// Concurrent calls of one Store — SessionQueue.Dequeue,
// SessionQueue.Complete and Provider.AckWorkItem (and appends on the
// transaction path) — are coalesced where the dialect claims CapGroupCommit
// (both dialects). Each kind has a committer that runs one flush at a time
// (Store.gcFlushes). A call that finds no flush running becomes a leader: it
// yields the processor once (runtime.Gosched, so that calls woken by the
// same event — the other callers of the flush that just ended — can queue
// behind it) and then takes what is waiting; when that is only itself it
// runs alone through the single-item path (exactly the code that runs
// without group commit). A call that finds a flush running waits in the
// queue. When a flush ends, its leader hands the lead to the first waiting
// call, which takes its own call and every call waiting at that moment (at
// most maxGroupCommit, never two of the same row) and runs them as one
// statement or one transaction that checks each item on its own and reports
// which matched, hands each caller its own outcome, and passes the lead on.
// So there is never a timer waiting for company: calls are batched only
// while an earlier flush runs (or during a new leader's one yield). Each
// lease-ending call returns after the commit that applied its item was
// acknowledged by the database (synchronous commit), as without group
// commit; a coalesced Dequeue returns after its claim statement, as alone.
//
// Per-item truth:
//   - A call whose context ends before a leader takes its item returns the
//     context's error, and its item is not applied.
//   - Once taken, the call waits for that flush (one statement or one
//     transaction) and reports its outcome, even if its context ends
//     meanwhile. A flush runs under none of its callers' cancellation (a
//     caller giving up must not fail the others); it has a deadline only
//     when every caller has one (the latest of them).
//   - Each item is checked against its own lease in the flush: one stale
//     or invalid token fails only its own call, with the error it would
//     get alone (ErrLockLost / ErrNotFound, ErrInvalidLockToken).
//   - When the flush itself fails (a statement or commit error: the
//     database went away, a deadlock, the Store closed), every item of it
//     runs again alone, under its own caller's context, so each caller
//     gets the error (or success) of its own single-item call. Every item
//     is guarded by its lease token, so a flush whose commit did succeed
//     although the driver reported an error is never applied twice: the
//     lone re-run then reports the token as no longer valid, and no call
//     ever reports success for an item that was not applied.

// maxGroupCommit bounds one flush (parameters per item × this stays far
// below every dialect's limit on bound parameters).
const maxGroupCommit = 64

// gcReq is one call waiting in a committer.
type gcReq[K comparable, T any] struct {
	ctx context.Context
	key K // the row it ends; two requests of one row never share a flush
	in  T
	err error
	// taken: a leader took it into a flush (set under the committer's
	// mutex); promoted: it was handed the lead.
	taken, promoted bool
	done            chan struct{} // closed when err is final
	lead            chan struct{} // receives the lead (capacity 1)
}

// committer coalesces concurrent calls of one kind (leader/follower).
// The zero value is ready to use.
type committer[K comparable, T any] struct {
	mu    sync.Mutex
	busy  int // leaders running (or the lead being handed over)
	queue []*gcReq[K, T]
	// batches counts the flushes of several calls (batch was called)
	batches atomic.Int64
}

// do runs in through the committer, with at most flushes flushes running
// at once (see Store.gcFlushes). single applies one item alone;
// batch applies several (at least 2) in one flush, setting each request's
// err, or returns an error when the flush as a whole failed (then each
// item is re-run with single under its own context).
func (c *committer[K, T]) do(ctx context.Context, flushes int, key K, in T,
	single func(ctx context.Context, in T) error,
	batch func(ctx context.Context, reqs []*gcReq[K, T]) error) error {
	r := &gcReq[K, T]{ctx: ctx, key: key, in: in, done: make(chan struct{}), lead: make(chan struct{}, 1)}
	c.mu.Lock()
	c.queue = append(c.queue, r)
	if c.busy < flushes {
		c.busy++
		r.promoted = true
		c.mu.Unlock()
		// Let the calls that are about to arrive (the other workers
		// woken by the same flush) queue first: one yield of the
		// processor, no timer; alone, it returns at once.
		runtime.Gosched()
		c.run(r, single, batch)
		<-r.done
		return r.err
	}
	c.mu.Unlock()
	select {
	case <-r.done:
	case <-r.lead:
		c.run(r, single, batch)
	case <-ctx.Done():
		c.mu.Lock()
		// A promoted request is only ever taken by itself, so here it is
		// still queued: it gives up and passes the lead on.
		if r.taken || r.isDone() {
			c.mu.Unlock()
			break
		}
		c.remove(r)
		if r.promoted {
			c.handOff()
		}
		c.mu.Unlock()
		return ctx.Err()
	}
	<-r.done
	return r.err
}

func (r *gcReq[K, T]) isDone() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// remove drops r from the queue (c.mu held).
func (c *committer[K, T]) remove(r *gcReq[K, T]) {
	for i, q := range c.queue {
		if q == r {
			c.queue = append(c.queue[:i], c.queue[i+1:]...)
			return
		}
	}
}

// handOff passes a finishing leader's lead to the first waiting call that
// does not hold one yet, or gives it up (c.mu held).
func (c *committer[K, T]) handOff() {
	for _, n := range c.queue {
		if !n.promoted {
			n.promoted = true
			n.lead <- struct{}{} // never sent before: the buffer is free
			return
		}
	}
	c.busy--
}

// run is one leader's turn: take what is waiting, flush it, hand off.
func (c *committer[K, T]) run(self *gcReq[K, T], single func(context.Context, T) error, batch func(context.Context, []*gcReq[K, T]) error) {
	c.mu.Lock()
	reqs := c.take(self)
	c.mu.Unlock()
	c.flush(reqs, single, batch)
	for _, r := range reqs {
		close(r.done)
	}
	c.mu.Lock()
	c.handOff()
	c.mu.Unlock()
}

// take removes the next flush from the queue (c.mu held): the leader's
// own call first, then the waiting calls that hold no lead of their own,
// at most maxGroupCommit; calls whose context already ended are answered
// with its error and not applied; of two calls of one row only the first
// is taken (the other waits for the next flush).
func (c *committer[K, T]) take(self *gcReq[K, T]) []*gcReq[K, T] {
	var reqs []*gcReq[K, T]
	keys := make(map[K]struct{}, len(c.queue))
	// consider reports whether r leaves the queue (taken or answered).
	consider := func(r *gcReq[K, T]) bool {
		if err := r.ctx.Err(); err != nil {
			r.err = err
			close(r.done)
			return true
		}
		if _, dup := keys[r.key]; dup || len(reqs) == maxGroupCommit {
			return false
		}
		keys[r.key] = struct{}{}
		r.taken = true
		reqs = append(reqs, r)
		return true
	}
	if slices.Contains(c.queue, self) {
		consider(self) // first: never a duplicate, never over the limit
	}
	kept := c.queue[:0]
	for _, r := range c.queue {
		if r == self {
			continue
		}
		if r.promoted || !consider(r) {
			kept = append(kept, r)
		}
	}
	clear(c.queue[len(kept):])
	c.queue = kept
	return reqs
}

// flush applies reqs: one alone through single under its own context,
// several through batch, falling back to single per item when the flush
// failed as a whole.
func (c *committer[K, T]) flush(reqs []*gcReq[K, T], single func(context.Context, T) error, batch func(context.Context, []*gcReq[K, T]) error) {
	switch len(reqs) {
	case 0:
		return
	case 1:
		reqs[0].err = single(reqs[0].ctx, reqs[0].in)
		return
	}
	c.batches.Add(1)
	ctx, cancel := flushContext(reqs)
	err := batch(ctx, reqs)
	cancel()
	if err != nil {
		for _, r := range reqs {
			r.err = single(r.ctx, r.in)
		}
	}
}

// flushContext is the context of a flush of several calls: the first
// call's values without any caller's cancellation, with the latest of
// their deadlines when every one has a deadline.
func flushContext[K comparable, T any](reqs []*gcReq[K, T]) (context.Context, context.CancelFunc) {
	ctx := context.WithoutCancel(reqs[0].ctx)
	var latest time.Time
	for _, r := range reqs {
		d, ok := r.ctx.Deadline()
		if !ok {
			return ctx, func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(ctx, latest)
}

// groupCommitters are a Store's committers, one per coalesced call.
type groupCommitters struct {
	complete committer[uuid.UUID, completeReq] // SessionQueue.Complete, by queue item id
	ackWork  committer[int64, ackWorkReq]      // Provider.AckWorkItem, by worker row id
	// Sessions.AppendMessages (the transaction path), by call: appends
	// to one session may share a flush (they run one after the other in
	// its transaction)
	appends   committer[uint64, appendReq]
	appendSeq atomic.Uint64
	// SessionQueue.Dequeue, by call (every call claims an item of its own)
	dequeue    committer[uint64, dequeueReq]
	dequeueSeq atomic.Uint64
	// Provider.FetchWorkItem without a session config, by call
	fetchWork    committer[uint64, workFetchReq]
	fetchWorkSeq atomic.Uint64
}

// groupCommit reports whether the store coalesces concurrent calls.
func (s *Store) groupCommit() bool { return s.has(CapGroupCommit) }

// gcFlushes is how many flushes of one committer may run at once: one. A
// call that finds no flush running runs at once (after one yield of the
// processor, which lets calls woken at the same moment join it); calls that
// arrive while it runs queue and are taken together by the next leader.
// Measured on PostgreSQL at 8 workers with Dequeue and Complete both
// coalesced (BENCHMARKS.md): one flush each 3,100 items/s, two each
// 2,560–2,760, one commit per call 2,050. (Coalescing Complete alone, a
// second flush had helped: there every call waited for the one in front.)
func (s *Store) gcFlushes() int { return 1 }

// claimByGroup runs a coalesced claim: the requests are grouped by key (in
// arrival order), each group of several is claimed in one statement by
// claim, which returns the requests it found no item for; those, the
// requests of a group of one, and every request of a group whose
// statement failed run alone through single.
func claimByGroup[G comparable, T any](reqs []*gcReq[uint64, T], key func(T) G,
	claim func([]*gcReq[uint64, T]) ([]*gcReq[uint64, T], error), single func(*gcReq[uint64, T])) {
	var order []G
	groups := map[G][]*gcReq[uint64, T]{}
	for _, r := range reqs {
		k := key(r.in)
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	for _, k := range order {
		g := groups[k]
		left := g
		if len(g) > 1 {
			var err error
			if left, err = claim(g); err != nil {
				left = g
			}
		}
		for _, r := range left {
			single(r)
		}
	}
}

// ---------------------------------------------------------------------------
// Provider.FetchWorkItem

// workFetchReq is one attempt of a FetchWorkItem call without a session
// config: its lock timeout and tag filter, and where its lease goes.
type workFetchReq struct {
	lockTimeout time.Duration
	tags        duroxide.TagFilter
	out         **duroxide.WorkItemLease
}

// fetchWorkBatch claims work items for several fetch attempts: for the
// attempts with one tag filter, one statement that locks the first k
// visible, unlocked items outside activity sessions in id order (k = the
// number of attempts; FOR UPDATE SKIP LOCKED where the database has row
// locks) and gives the i-th of them to the i-th attempt, with its own
// token and lock end (committed asynchronously, like the single claim).
// An attempt for which no item was left runs the single claim under its
// own context (nil when the queue has nothing for it, and then
// FetchWorkItem's long poll waits as usual); a statement that fails runs
// each attempt of its filter alone. An item whose stored work item does
// not decode is that attempt's CorruptRowError, as alone.
func (p *gormProvider) fetchWorkBatch(ctx context.Context, reqs []*gcReq[uint64, workFetchReq]) error {
	claimByGroup(reqs, func(r workFetchReq) string {
		// the filter's mode and each tag, length-prefixed (tags may hold
		// any text)
		k := strconv.Itoa(int(r.tags.Mode))
		for _, t := range r.tags.Tags {
			k += "/" + strconv.Itoa(len(t)) + ":" + t
		}
		return k
	}, func(g []*gcReq[uint64, workFetchReq]) ([]*gcReq[uint64, workFetchReq], error) {
		return p.claimWorkGroup(ctx, g)
	},
		func(r *gcReq[uint64, workFetchReq]) {
			l, err := p.fetchWorkPlain(r.ctx, r.in.lockTimeout, r.in.tags)
			*r.in.out, r.err = l, err
		})
	return nil
}

// claimWorkGroup runs fetchWorkBatch's claim for the attempts of one tag
// filter, sets the claimed attempts' leases (or errors) and returns the
// attempts that got no item, or the statement's error (then none has one).
func (p *gormProvider) claimWorkGroup(ctx context.Context, g []*gcReq[uint64, workFetchReq]) ([]*gcReq[uint64, workFetchReq], error) {
	now := p.s.nowMS()
	tp, targs := tagSQL(g[0].in.tags)
	wq := p.q(models.TableWorkerQueue)
	with, async := p.s.asyncCommitCTE()
	var b strings.Builder
	b.WriteString(with + `UPDATE ` + wq + ` SET lock_token = w.column2, locked_until = w.column3, attempt_count = attempt_count + 1` +
		` FROM (SELECT cid, row_number() OVER (ORDER BY cid) AS rn FROM (SELECT q.id AS cid FROM ` + wq + ` q` +
		` WHERE +q.visible_at <= ? AND (q.lock_token IS NULL OR q.locked_until <= ?) AND q.session_id IS NULL AND ` + tp +
		` ORDER BY q.id LIMIT ` + strconv.Itoa(len(g)) + p.s.forUpdateSkip("q") + `) AS c0) AS c, (VALUES `)
	writeTuples(&b, len(g), "("+p.s.castParam("bigint")+", "+p.s.castParam("text")+", "+p.s.castParam("bigint")+")")
	b.WriteString(`) AS w WHERE id = c.cid AND w.column1 = c.rn` + async + ` RETURNING lock_token, id, work_item, attempt_count`)
	args := append([]any{now, now}, targs...)
	byToken := make(map[string]*gcReq[uint64, workFetchReq], len(g))
	for i, r := range g {
		tok := newLockToken()
		byToken[tok] = r
		args = append(args, int64(i+1), tok, now+durMS(r.in.lockTimeout))
	}
	claimed := make(map[*gcReq[uint64, workFetchReq]]bool, len(g))
	rows, err := p.s.db.WithContext(ctx).Raw(b.String(), args...).Rows()
	if err == nil {
		for rows.Next() {
			var (
				tok, workItem string
				id            int64
				attempts      int32
			)
			if err = rows.Scan(&tok, &id, &workItem, &attempts); err != nil {
				break
			}
			r, ok := byToken[tok]
			if !ok {
				err = fmt.Errorf("claim returned an unknown lock token")
				break
			}
			claimed[r] = true
			w, derr := duroxide.UnmarshalWorkItem([]byte(workItem))
			if derr != nil {
				r.err = &CorruptRowError{Table: models.TableWorkerQueue, RowID: fmt.Sprint(id), Column: "work_item", Err: derr}
				continue
			}
			*r.in.out = &duroxide.WorkItemLease{Item: w, LockToken: workToken(tok, id), AttemptCount: uint32(attempts)}
		}
		if err == nil {
			err = translateVia(p.s.db, rows.Err())
		}
		if cerr := rows.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		// items claimed before the reply broke off stay locked until
		// their lock times out (as after a lost reply to a single claim)
		for r := range claimed {
			*r.in.out, r.err = nil, nil
		}
		return nil, fmt.Errorf("claim work items: %w", err)
	}
	var left []*gcReq[uint64, workFetchReq]
	for _, r := range g {
		if !claimed[r] {
			left = append(left, r)
		}
	}
	return left, nil
}

// ---------------------------------------------------------------------------
// Provider.AckWorkItem

// ackWorkReq is one AckWorkItem call: the stored token and row id of its
// lease, the completion to enqueue (nil for none) and the call's clock.
type ackWorkReq struct {
	stored string
	id     int64
	row    *models.OrchestratorQueueItem
	nowMS  int64
}

// workAckBatcher is implemented by a dialect with a one-statement form of
// several worker acks (used with CapFastPaths). It sets each request's err
// and returns an error only when the statement as a whole failed.
type workAckBatcher interface {
	ackWorkBatch(p *gormProvider, ctx context.Context, reqs []*gcReq[int64, ackWorkReq]) error
}

// ackWorkBatch acks several worker items in one flush: the dialect's one
// statement (workAckBatcher, CapFastPaths), else one transaction: one
// DELETE of the items whose own token and lock still hold (id IN the
// batch's ids, each row's token and clock picked by CASE id), returning
// which went, then the completions of those (one multi-row INSERT) and
// their activity sessions' touches. A token that matched nothing fails
// its own call only (ErrInvalidLockToken).
func (p *gormProvider) ackWorkBatch(ctx context.Context, reqs []*gcReq[int64, ackWorkReq]) error {
	sorted := slices.Clone(reqs)
	slices.SortFunc(sorted, func(a, b *gcReq[int64, ackWorkReq]) int { return cmp.Compare(a.key, b.key) })
	if p.s.has(CapFastPaths) {
		return cteFastPaths{}.ackWorkBatch(p, ctx, sorted)
	}
	const op = "ack_work_item"
	n := len(sorted)
	args := make([]any, 0, 5*n)
	for _, r := range sorted {
		args = append(args, r.in.id)
	}
	var tok, clk strings.Builder
	for range sorted {
		tok.WriteString(" WHEN ? THEN " + p.s.castParam("text"))
		clk.WriteString(" WHEN ? THEN " + p.s.castParam("bigint"))
	}
	for _, r := range sorted {
		args = append(args, r.in.id, r.in.stored)
	}
	for _, r := range sorted {
		args = append(args, r.in.id, r.in.nowMS)
	}
	stmt := `DELETE FROM ` + p.q(models.TableWorkerQueue) + ` WHERE id IN (` + placeholders(n) + `)` +
		` AND lock_token = CASE id` + tok.String() + ` END AND locked_until > CASE id` + clk.String() + ` END RETURNING id, session_id`
	acked := make(map[int64]bool, n)
	err := p.tx(ctx, func(tx *gorm.DB) error {
		clear(acked)
		var gone []struct {
			ID        int64
			SessionID *string
		}
		if err := scanAll(tx, &gone, stmt, args...); err != nil {
			return fmt.Errorf("delete work items: %w", err)
		}
		sessions := map[int64]string{}
		for _, g := range gone {
			acked[g.ID] = true
			if g.SessionID != nil {
				sessions[g.ID] = *g.SessionID
			}
		}
		var rows []models.OrchestratorQueueItem
		for _, r := range sorted {
			if !acked[r.in.id] {
				continue
			}
			if row := r.in.row; row != nil {
				rows = append(rows, models.OrchestratorQueueItem{InstanceID: row.InstanceID, WorkItem: row.WorkItem,
					VisibleAt: r.in.nowMS, CreatedAt: r.in.nowMS})
			}
			if sid, ok := sessions[r.in.id]; ok {
				if err := tx.Exec(`UPDATE `+p.q(models.TableActivitySessions)+` SET last_activity_at = ? WHERE session_id = ? AND locked_until > ?`,
					r.in.nowMS, sid, r.in.nowMS).Error; err != nil {
					return fmt.Errorf("touch session %s: %w", sid, err)
				}
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
		return err
	}
	for _, r := range sorted {
		r.err = nil
		if !acked[r.in.id] {
			r.err = pfail(op, ErrInvalidLockToken, "Worker queue item not found or already processed")
		}
	}
	return nil
}
