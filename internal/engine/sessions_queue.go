package engine

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

// sessionQueue implements repo.SessionQueue on the {prefix}queue table.
//
// Dequeue is one atomic statement on both dialects:
//
//	UPDATE queue SET status = 'processing', lease... , attempts = attempts + 1
//	WHERE seq = (SELECT seq FROM queue WHERE session_id = ? AND processed_at IS NULL
//	             AND (status = 'pending' OR (status = 'processing' AND leased_until < now))
//	             ORDER BY priority DESC, seq LIMIT 1 [FOR UPDATE SKIP LOCKED])
//	RETURNING ...
//
// an ordered walk of the partial index of live (pending or processing)
// items that stops at the first claimable one, so a dequeue costs
// O(log n + workers) however long the queue and its history are.
//
// On PostgreSQL the subquery takes the row with FOR UPDATE SKIP LOCKED, so
// concurrent workers never wait on or share an item. On SQLite (where GORM
// drops clause.Locking) the single UPDATE holds the database write lock for
// its whole run, which makes the claim atomic.
//
// With CapGroupCommit, concurrent Dequeues of one session that wait while
// a claim statement runs are claimed together in the next: the same walk
// with LIMIT k, the i-th item leased to the i-th call (dequeueBatch in
// groupcommit.go).
type sessionQueue struct {
	sessionStore
}

// liveQueue is the predicate of the queue's partial index (session_id,
// priority DESC, seq): live items are those not finished yet (Complete,
// Fail and CancelQueued set processed_at; a claim and Release do not).
// Queries that walk the index repeat it so SQLite's planner can match it.
const liveQueue = " AND processed_at IS NULL"

const queueCols = "seq, id, session_id, operation, content, priority, status, attempts, lease_token, lease_owner, leased_until, last_error, created_at, processed_at, idempotency_key"

// Enqueue implements repo.SessionQueue.
func (sq *sessionQueue) Enqueue(ctx context.Context, sessionID uuid.UUID, content string, priority int32) (*repo.QueueItem, error) {
	return sq.EnqueueWith(ctx, sessionID, repo.EnqueueParams{Content: content, Priority: priority})
}

// EnqueueWith implements repo.SessionQueue. The insert reads the session
// row with a lock (FOR UPDATE where the database has row locks), so an
// Enqueue racing a Delete of its session is ErrNotFound, never a
// foreign-key error; with an idempotency key it is an INSERT ... ON
// CONFLICT DO NOTHING on the (session_id, idempotency_key) unique index,
// and a key already taken reads the stored item back.
func (sq *sessionQueue) EnqueueWith(ctx context.Context, sessionID uuid.UUID, p repo.EnqueueParams) (*repo.QueueItem, error) {
	if sq.scopeErr != nil {
		return nil, sq.scopeErr
	}
	if len(p.Content) > sq.s.cfg.maxContent {
		return nil, fmt.Errorf("enqueue to %s: %w", sessionID,
			invalidf("queue content is %d bytes, the limit is %d (WithMaxContentBytes)", len(p.Content), sq.s.cfg.maxContent))
	}
	if err := checkText("queue content", p.Content, 0); err != nil {
		return nil, fmt.Errorf("enqueue to %s: %w", sessionID, err)
	}
	if err := checkText("idempotency key", p.IdempotencyKey, repo.MaxIdempotencyKeyLen); err != nil {
		return nil, fmt.Errorf("enqueue to %s: %w", sessionID, err)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	now := sq.s.now()
	tc, targs := sq.tenantCond("tenant_id")
	key := nilIfEmpty(p.IdempotencyKey)
	args := append([]any{id, p.Content, p.Priority, now, key, sessionID}, targs...)
	onConflict := ""
	if key != nil {
		onConflict = " ON CONFLICT (session_id, idempotency_key) DO NOTHING"
	}
	qt := sq.s.quoted(models.TableQueue)
	var seqs []int64
	defer sq.writeLock(ctx)()
	res := sq.db(ctx).Raw("INSERT INTO "+qt+
		" (id, session_id, operation, content, priority, status, attempts, created_at, idempotency_key) SELECT "+
		sq.param("uuid")+", id, 'enqueue', "+sq.param("text")+", "+sq.param("integer")+", 'pending', 0, "+
		sq.param("timestamptz")+", "+sq.param("text")+" FROM "+sq.s.quoted(models.TableSessions)+" WHERE id = ?"+tc+
		sq.s.forUpdate()+onConflict+" RETURNING seq", args...).Scan(&seqs)
	if res.Error != nil {
		return nil, fmt.Errorf("enqueue to %s: %w", sessionID, dbErr(res.Error))
	}
	if len(seqs) == 0 {
		if key == nil {
			return nil, sq.notFound("enqueue to", sessionID)
		}
		// The session is missing, or the key is taken: read its item.
		itc, itargs := sq.inTenantCond()
		rows, err := sq.db(ctx).Raw("SELECT "+queueCols+" FROM "+qt+" WHERE session_id = ? AND idempotency_key = ?"+itc,
			append([]any{sessionID, *key}, itargs...)...).Rows()
		if err != nil {
			return nil, fmt.Errorf("enqueue to %s: %w", sessionID, dbErr(err))
		}
		items, err := scanQueueItems(rows)
		err = translateVia(sq.s.db, err)
		if err != nil {
			return nil, fmt.Errorf("enqueue to %s: %w", sessionID, err)
		}
		if len(items) == 0 {
			return nil, sq.notFound("enqueue to", sessionID)
		}
		it := items[0]
		if it.Content != p.Content || it.Priority != p.Priority {
			return nil, fmt.Errorf("enqueue to %s: idempotency key %q is taken by item %s with other content or priority: %w",
				sessionID, clip(*key), it.ID, ErrDuplicate)
		}
		return &it, nil
	}
	return &repo.QueueItem{ID: id, SessionID: sessionID, Seq: seqs[0], Operation: "enqueue", Content: p.Content,
		Priority: p.Priority, Status: repo.QueuePending, CreatedAt: now, IdempotencyKey: key}, nil
}

// Item implements repo.SessionQueue.
func (sq *sessionQueue) Item(ctx context.Context, itemID uuid.UUID) (*repo.QueueItem, error) {
	if sq.scopeErr != nil {
		return nil, sq.scopeErr
	}
	tc, targs := sq.inTenantCond()
	rows, err := sq.db(ctx).Raw("SELECT "+queueCols+" FROM "+sq.s.quoted(models.TableQueue)+" WHERE id = ?"+tc,
		append([]any{itemID}, targs...)...).Rows()
	if err != nil {
		return nil, fmt.Errorf("queue item %s: %w", itemID, dbErr(err))
	}
	items, err := scanQueueItems(rows)
	err = translateVia(sq.s.db, err)
	if err != nil {
		return nil, fmt.Errorf("queue item %s: %w", itemID, err)
	}
	if len(items) == 0 {
		return nil, sq.notFound("queue item", itemID)
	}
	return &items[0], nil
}

// Items implements repo.SessionQueue.
func (sq *sessionQueue) Items(ctx context.Context, sessionID uuid.UUID, statuses ...repo.QueueStatus) ([]repo.QueueItem, error) {
	if sq.scopeErr != nil {
		return nil, sq.scopeErr
	}
	tc, targs := sq.inTenantCond()
	q := "SELECT " + queueCols + " FROM " + sq.s.quoted(models.TableQueue) + " WHERE session_id = ?" + tc
	args := append([]any{sessionID}, targs...)
	if len(statuses) > 0 {
		sts := make([]string, len(statuses))
		for i, st := range statuses {
			v, err := repo.ParseQueueStatus(string(st))
			if err != nil {
				return nil, fmt.Errorf("queue items of %s: %w", sessionID, err)
			}
			sts[i] = string(v)
		}
		q += " AND status IN ?"
		args = append(args, sts)
	}
	db := sq.db(ctx)
	rows, err := db.Raw(q+" ORDER BY seq", args...).Rows()
	if err != nil {
		return nil, fmt.Errorf("queue items of %s: %w", sessionID, dbErr(err))
	}
	items, err := scanQueueItems(rows)
	err = translateVia(sq.s.db, err)
	if err != nil {
		return nil, fmt.Errorf("queue items of %s: %w", sessionID, err)
	}
	if len(items) == 0 {
		if ok, err := sq.sessionExists(db, sessionID); err != nil || !ok {
			return nil, sq.missing("queue items of", sessionID, err)
		}
	}
	return items, nil
}

// scanQueueItems decodes queue rows; an unknown status is a *CorruptRowError.
func scanQueueItems(rows *sql.Rows) ([]repo.QueueItem, error) {
	defer rows.Close()
	out := []repo.QueueItem{}
	for rows.Next() {
		var (
			it                 repo.QueueItem
			status             string
			owner, lastErr     sql.NullString
			until              sql.NullInt64
			created, processed dbTime
			tokenScan          uuid.NullUUID
			idemKey            sql.NullString
		)
		if err := rows.Scan(&it.Seq, &it.ID, &it.SessionID, &it.Operation, &it.Content, &it.Priority, &status,
			&it.Attempts, &tokenScan, &owner, &until, &lastErr, &created, &processed, &idemKey); err != nil {
			return nil, dbErr(err)
		}
		st, err := repo.ParseQueueStatus(status)
		if err != nil {
			return nil, corrupt(models.TableQueue, it.ID.String(), "status", err)
		}
		it.Status = st
		if tokenScan.Valid {
			t := tokenScan.UUID
			it.LeaseToken = &t
		}
		if owner.Valid {
			o := owner.String
			it.LeaseOwner = &o
		}
		if until.Valid {
			u := time.UnixMilli(until.Int64).UTC()
			it.LeasedUntil = &u
		}
		if lastErr.Valid {
			e := lastErr.String
			it.LastError = &e
		}
		it.CreatedAt = created.T
		it.ProcessedAt = processed.ptr()
		if idemKey.Valid {
			k := idemKey.String
			it.IdempotencyKey = &k
		}
		out = append(out, it)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr(err)
	}
	return out, nil
}

// Dequeue implements repo.SessionQueue.
func (sq *sessionQueue) Dequeue(ctx context.Context, sessionID uuid.UUID, p repo.DequeueParams) (*repo.QueueItem, error) {
	if sq.scopeErr != nil {
		return nil, sq.scopeErr
	}
	if p.Lease < 0 {
		return nil, invalidf("dequeue from %s: negative lease", sessionID)
	}
	if p.Lease == 0 {
		p.Lease = repo.DefaultLease
	}
	if p.Owner != "" {
		if err := checkText("lease owner", p.Owner, repo.MaxIDLen); err != nil {
			return nil, fmt.Errorf("dequeue from %s: %w", sessionID, err)
		}
	}
	r := dequeueReq{sq: sq, session: sessionID, owner: p.Owner, lease: p.Lease, token: uuid.New(), nowMS: sq.s.nowMS()}
	var it *repo.QueueItem
	r.out = &it
	if !sq.s.groupCommit() || sq.tx != nil {
		if err := sq.dequeueOne(ctx, r); err != nil {
			return nil, err
		}
		return it, nil
	}
	err := sq.s.gc.dequeue.do(ctx, sq.s.gcFlushes(), sq.s.gc.dequeueSeq.Add(1), r,
		func(ctx context.Context, r dequeueReq) error { return r.sq.dequeueOne(ctx, r) },
		sq.s.dequeueBatch)
	if err != nil {
		if err == ctx.Err() {
			return nil, fmt.Errorf("dequeue from %s: %w", sessionID, err)
		}
		return nil, err
	}
	return it, nil
}

// dequeueReq is one Dequeue call: its view, session, lease parameters,
// new lease token and clock reading, and where its item goes.
type dequeueReq struct {
	sq      *sessionQueue
	session uuid.UUID
	owner   string
	lease   time.Duration
	token   uuid.UUID
	nowMS   int64
	out     **repo.QueueItem
}

// claimCols are the columns a claim returns: the ones it does not set
// itself (the claimed item's session, status, lease and (NULL)
// processed_at are the caller's own values).
const claimCols = "seq, id, operation, content, priority, attempts, last_error, created_at, idempotency_key"

// claimedRow receives one claimed item's claimCols.
type claimedRow struct {
	it               repo.QueueItem
	lastErr, idemKey sql.NullString
	created          dbTime
}

func (c *claimedRow) dest() []any {
	return []any{&c.it.Seq, &c.it.ID, &c.it.Operation, &c.it.Content, &c.it.Priority, &c.it.Attempts, &c.lastErr, &c.created, &c.idemKey}
}

// item completes the claimed item with r's own values.
func (c *claimedRow) item(r dequeueReq) *repo.QueueItem {
	it := c.it
	it.SessionID = r.session
	it.Status = repo.QueueProcessing
	tok := r.token
	it.LeaseToken = &tok
	if r.owner != "" {
		o := r.owner
		it.LeaseOwner = &o
	}
	until := time.UnixMilli(r.nowMS + r.lease.Milliseconds()).UTC()
	it.LeasedUntil = &until
	if c.lastErr.Valid {
		e := c.lastErr.String
		it.LastError = &e
	}
	it.CreatedAt = c.created.T
	if c.idemKey.Valid {
		k := c.idemKey.String
		it.IdempotencyKey = &k
	}
	return &it
}

// claimable is the condition of an item a claim may take at nowMS:
// live, and pending or with an expired lease.
const claimable = " AND (status = 'pending' OR (status = 'processing' AND leased_until < ?))"

// dequeueOne claims one item for r in its own statement and stores it in
// *r.out (nil when nothing is available).
func (sq *sessionQueue) dequeueOne(ctx context.Context, r dequeueReq) error {
	qt := sq.s.quoted(models.TableQueue)
	tc, targs := sq.inTenantCond()
	lock := sq.s.forUpdateSkip("")
	// One ordered walk of the partial index (session_id, priority DESC,
	// seq) WHERE processed_at IS NULL: the first row that is pending or
	// whose lease expired. Rows leased to live workers (at most one per
	// worker) are stepped over; finished rows are not in the index. The
	// literal predicate lets SQLite prove the index usable.
	args := []any{r.token, nilIfEmpty(r.owner), r.nowMS + r.lease.Milliseconds(), r.session, r.nowMS}
	args = append(args, targs...)
	// On PostgreSQL the claim commits asynchronously (set_config with
	// is_local = this statement's own transaction, same round trip): a
	// claim only hands out a lease, so if a server crash loses its commit
	// the item is simply pending again and its Complete reports
	// ErrLockLost — the at-least-once delivery a lease expiry gives anyway.
	// Complete, Fail, Release and Enqueue commit synchronously, and each
	// synchronous commit also flushes every earlier asynchronous one.
	with, async := sq.s.asyncCommitCTE()
	db := sq.db(ctx)
	unlock := sq.writeLock(ctx)
	var c claimedRow
	found, err := newDirectTx(db).queryRow(with+"UPDATE "+qt+" SET status = 'processing', lease_token = ?, lease_owner = ?, leased_until = ?,"+
		" attempts = attempts + 1 WHERE seq = (SELECT seq FROM "+qt+" WHERE session_id = ?"+liveQueue+claimable+tc+
		" ORDER BY priority DESC, seq LIMIT 1"+lock+")"+async+" RETURNING "+claimCols, args, c.dest()...)
	unlock()
	if err != nil {
		return fmt.Errorf("dequeue from %s: %w", r.session, err)
	}
	if !found {
		if ok, err := sq.sessionExists(db, r.session); err != nil || !ok {
			return sq.missing("dequeue from", r.session, err)
		}
		*r.out = nil
		return nil
	}
	*r.out = c.item(r)
	return nil
}

// endLease runs a lease-ending update; zero rows is ErrLockLost, or
// ErrNotFound when the item does not exist (in the view's tenant).
func (sq *sessionQueue) endLease(ctx context.Context, op string, l repo.Lease, set string, setArgs ...any) error {
	if sq.scopeErr != nil {
		return sq.scopeErr
	}
	qt := sq.s.quoted(models.TableQueue)
	tc, targs := sq.inTenantCond()
	args := append(setArgs, l.ItemID, l.Token, sq.s.nowMS())
	args = append(args, targs...)
	db := sq.db(ctx)
	unlock := sq.writeLock(ctx)
	n, err := newDirectTx(db).exec("UPDATE "+qt+" SET "+set+" WHERE id = ? AND lease_token = ? AND status = 'processing'"+
		" AND leased_until >= ?"+tc, args...)
	unlock()
	if err != nil {
		return fmt.Errorf("%s queue item %s: %w", op, l.ItemID, err)
	}
	if n == 1 {
		return nil
	}
	return sq.leaseMiss(ctx, op, l)
}

// leaseMiss is the error of a lease-ending update that matched nothing:
// ErrNotFound when the item does not exist (in the view's tenant),
// ErrLockLost otherwise.
func (sq *sessionQueue) leaseMiss(ctx context.Context, op string, l repo.Lease) error {
	tc, targs := sq.inTenantCond()
	var n int64
	if err := sq.db(ctx).Raw("SELECT COUNT(*) FROM "+sq.s.quoted(models.TableQueue)+" WHERE id = ?"+tc,
		append([]any{l.ItemID}, targs...)...).Scan(&n).Error; err != nil {
		return fmt.Errorf("%s queue item %s: %w", op, l.ItemID, dbErr(err))
	}
	if n == 0 {
		return fmt.Errorf("%s queue item %s: %w", op, l.ItemID, ErrNotFound)
	}
	return fmt.Errorf("%s queue item %s: %w", op, l.ItemID, ErrLockLost)
}

// Complete implements repo.SessionQueue. It returns after the completion is
// committed synchronously (durable on PostgreSQL; on SQLite as durable as
// the synchronous setting makes any commit). With CapGroupCommit, concurrent
// Completes of the Store are coalesced into one statement (see
// groupcommit.go): a call that finds no flush running completes at once on
// its own (after yielding the processor once, which lets calls arriving at
// the same moment join it); calls that arrive while one runs are completed
// together in the next, each checked against its own lease and told its own
// outcome. A call whose ctx ends before its item is taken into a flush
// returns the context's error without completing it; once taken, it waits
// for that flush's outcome.
func (sq *sessionQueue) Complete(ctx context.Context, l repo.Lease) error {
	if sq.scopeErr != nil {
		return sq.scopeErr
	}
	if !sq.s.groupCommit() || sq.tx != nil {
		return sq.completeOne(ctx, l)
	}
	err := sq.s.gc.complete.do(ctx, sq.s.gcFlushes(), l.ItemID, completeReq{sq: sq, l: l, now: sq.s.now(), nowMS: sq.s.nowMS()},
		func(ctx context.Context, r completeReq) error { return r.sq.completeOne(ctx, r.l) },
		sq.s.completeBatch)
	if err != nil && err == ctx.Err() {
		return fmt.Errorf("complete queue item %s: %w", l.ItemID, err)
	}
	return err
}

// completeOne completes one lease in its own statement.
func (sq *sessionQueue) completeOne(ctx context.Context, l repo.Lease) error {
	return sq.endLease(ctx, "complete", l, "status = 'completed', processed_at = ?, lease_token = NULL", sq.s.now())
}

// Fail implements repo.SessionQueue.
func (sq *sessionQueue) Fail(ctx context.Context, l repo.Lease, reason string) error {
	if err := checkText("failure reason", reason, 0); err != nil {
		return fmt.Errorf("fail queue item %s: %w", l.ItemID, err)
	}
	return sq.endLease(ctx, "fail", l, "status = 'failed', processed_at = ?, last_error = ?, lease_token = NULL",
		sq.s.now(), reason)
}

// Release implements repo.SessionQueue.
func (sq *sessionQueue) Release(ctx context.Context, l repo.Lease) error {
	return sq.endLease(ctx, "release", l, "status = 'pending', lease_token = NULL, lease_owner = NULL, leased_until = NULL")
}

// CancelQueued implements repo.SessionQueue.
func (sq *sessionQueue) CancelQueued(ctx context.Context, itemID uuid.UUID) (bool, error) {
	if sq.scopeErr != nil {
		return false, sq.scopeErr
	}
	tc, targs := sq.inTenantCond()
	defer sq.writeLock(ctx)()
	res := sq.db(ctx).Exec("UPDATE "+sq.s.quoted(models.TableQueue)+
		" SET status = 'cancelled', processed_at = ? WHERE id = ? AND status = 'pending'"+tc,
		append([]any{sq.s.now(), itemID}, targs...)...)
	if res.Error != nil {
		return false, fmt.Errorf("cancel queue item %s: %w", itemID, dbErr(res.Error))
	}
	return res.RowsAffected > 0, nil
}

// PendingQueue implements repo.SessionQueue.
func (sq *sessionQueue) PendingQueue(ctx context.Context, sessionID uuid.UUID) ([]repo.QueueItem, error) {
	if sq.scopeErr != nil {
		return nil, sq.scopeErr
	}
	tc, targs := sq.inTenantCond()
	db := sq.db(ctx)
	rows, err := db.Raw("SELECT "+queueCols+" FROM "+sq.s.quoted(models.TableQueue)+
		" WHERE session_id = ?"+liveQueue+" AND status = 'pending'"+tc+" ORDER BY priority DESC, seq",
		append([]any{sessionID}, targs...)...).Rows()
	if err != nil {
		return nil, fmt.Errorf("pending queue of %s: %w", sessionID, dbErr(err))
	}
	items, err := scanQueueItems(rows)
	err = translateVia(sq.s.db, err)
	if err != nil {
		return nil, fmt.Errorf("pending queue of %s: %w", sessionID, err)
	}
	if len(items) == 0 {
		if ok, err := sq.sessionExists(db, sessionID); err != nil || !ok {
			return nil, sq.missing("pending queue of", sessionID, err)
		}
	}
	return items, nil
}

// PendingQueuePage implements repo.SessionQueue. After a cursor (priority
// p, seq n) the page is the union of two ranges of the live-items index
// (session_id, priority DESC, seq): the rest of priority p after seq n,
// and the priorities below p from the top, each cut at the page size.
func (sq *sessionQueue) PendingQueuePage(ctx context.Context, sessionID uuid.UUID, p repo.PageParams) ([]repo.QueueItem, string, error) {
	if sq.scopeErr != nil {
		return nil, "", sq.scopeErr
	}
	limit, err := pageLimit(p)
	if err != nil {
		return nil, "", fmt.Errorf("pending queue of %s: %w", sessionID, err)
	}
	c, err := decodeCursor(p, curPending)
	if err != nil {
		return nil, "", fmt.Errorf("pending queue of %s: %w", sessionID, err)
	}
	tc, targs := sq.inTenantCond()
	qt := sq.s.quoted(models.TableQueue)
	base := "SELECT " + queueCols + " FROM " + qt + " WHERE session_id = ?" + liveQueue + " AND status = 'pending'" + tc
	lim := fmt.Sprintf(" LIMIT %d", limit+1)
	var (
		q    string
		args []any
	)
	if c == nil {
		q = base + " ORDER BY priority DESC, seq" + lim
		args = append([]any{sessionID}, targs...)
	} else {
		q = "SELECT " + queueCols + " FROM (SELECT * FROM (" + base + " AND priority = ? AND seq > ? ORDER BY seq" + lim +
			") AS same_priority UNION ALL SELECT * FROM (" + base + " AND priority < ? ORDER BY priority DESC, seq" + lim +
			") AS lower_priority) AS page ORDER BY priority DESC, seq" + lim
		args = append(append([]any{sessionID}, targs...), c.P, c.N)
		args = append(append(append(args, sessionID), targs...), c.P)
	}
	db := sq.db(ctx)
	rows, err := db.Raw(q, args...).Rows()
	if err != nil {
		return nil, "", fmt.Errorf("pending queue of %s: %w", sessionID, dbErr(err))
	}
	items, err := scanQueueItems(rows)
	err = translateVia(sq.s.db, err)
	if err != nil {
		return nil, "", fmt.Errorf("pending queue of %s: %w", sessionID, err)
	}
	if len(items) == 0 {
		if ok, err := sq.sessionExists(db, sessionID); err != nil || !ok {
			return nil, "", sq.missing("pending queue of", sessionID, err)
		}
	}
	next := ""
	if len(items) > limit {
		items = items[:limit]
		last := items[limit-1]
		next = encodeCursor(pageCursor{Kind: curPending, P: last.Priority, N: last.Seq})
	}
	return items, next, nil
}

// PurgeFinished implements repo.SessionQueue. Each batch is one DELETE
// (its own transaction) of the oldest finished items, picked by a walk of
// the partial index of finished items (processed_at) WHERE processed_at
// IS NOT NULL; only pending and processing items have no processed_at.
func (sq *sessionQueue) PurgeFinished(ctx context.Context, olderThan time.Duration, batch int) (int, error) {
	if sq.scopeErr != nil {
		return 0, sq.scopeErr
	}
	switch {
	case olderThan < 0:
		return 0, invalidf("purge finished queue items: negative age %v", olderThan)
	case olderThan == 0:
		olderThan = repo.DefaultQueueRetention
	}
	switch {
	case batch < 0 || batch > repo.MaxPurgeBatch:
		return 0, invalidf("purge finished queue items: batch %d outside 0..%d", batch, repo.MaxPurgeBatch)
	case batch == 0:
		batch = repo.DefaultPurgeBatch
	}
	cutoff := sq.s.now().Add(-olderThan)
	tc, targs := sq.inTenantCond()
	qt := sq.s.quoted(models.TableQueue)
	stmt := "DELETE FROM " + qt + " WHERE seq IN (SELECT seq FROM " + qt +
		" WHERE processed_at IS NOT NULL AND processed_at < ?" + tc +
		fmt.Sprintf(" ORDER BY processed_at LIMIT %d)", batch)
	args := append([]any{cutoff}, targs...)
	total := 0
	for {
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("purge finished queue items: %w", err)
		}
		unlock := sq.writeLock(ctx)
		res := sq.db(ctx).Exec(stmt, args...)
		unlock()
		if res.Error != nil {
			return total, fmt.Errorf("purge finished queue items (%d deleted before the failure): %w", total, dbErr(res.Error))
		}
		total += int(res.RowsAffected)
		if res.RowsAffected < int64(batch) {
			return total, nil
		}
	}
}
