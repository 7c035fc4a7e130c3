package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

// sessionQueue implements repo.SessionQueue on the {prefix}queue table.
//
// Dequeue is one atomic statement on both dialects, built by one function
// (claimSQL, sessions_queue_lease.go) for one call and for k concurrent
// calls of one session coalesced by group commit:
//
//	UPDATE queue SET status = 'processing', lease..., attempts = attempts + 1
//	WHERE seq = (SELECT seq FROM queue WHERE session_id = ? AND processed_at IS NULL
//	             AND (status = 'pending' OR (status = 'processing' AND leased_until < now))
//	             ORDER BY priority DESC, seq LIMIT 1 [FOR UPDATE SKIP LOCKED])
//	RETURNING ...
//
// (for k calls the same pick with LIMIT k, numbered by row_number and
// joined to a VALUES list of the calls' leases): an ordered walk of the
// partial index of live (pending or processing) items that stops at the
// first claimable ones, so a dequeue costs O(log n + workers) however long
// the queue and its history are.
//
// On PostgreSQL the pick takes the rows with FOR UPDATE SKIP LOCKED, so
// concurrent workers never wait on or share an item. On SQLite the single
// UPDATE holds the database write lock for its whole run, which makes the
// claim atomic. Complete, Fail and Release are likewise one statement
// (endLeases), for one call or a flush of several Completes.
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

// EnqueueWith implements repo.SessionQueue. The insert selects the
// session row (in the view's tenant) without a row lock: the foreign key's
// own check locks the session row against a concurrent Delete (KEY SHARE,
// which does not wait for appends or saves), and an Enqueue that loses
// that race gets the foreign-key violation, reported as ErrNotFound like
// a missing session. One statement routed by session id, so Citus runs it
// on one shard (it refuses INSERT ... SELECT ... FOR UPDATE on a
// distributed table). With an idempotency key it is an INSERT ... ON
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
	if err := refuseEnvelope("queue content", []byte(p.Content)); err != nil {
		return nil, fmt.Errorf("enqueue to %s: %w", sessionID, err)
	}
	if err := checkText("idempotency key", p.IdempotencyKey, repo.MaxIdempotencyKeyLen); err != nil {
		return nil, fmt.Errorf("enqueue to %s: %w", sessionID, err)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	stored, err := sq.s.sealString(models.TableQueue, encQueue, sessionID, id.String(), p.Content)
	if err != nil {
		return nil, fmt.Errorf("enqueue to %s: %w", sessionID, err)
	}
	now := sq.s.now()
	tc, targs := sq.tenantCond("tenant_id")
	key := nilIfEmpty(p.IdempotencyKey)
	args := append([]any{id, stored, p.Priority, now, key, sessionID}, targs...)
	onConflict := ""
	if key != nil {
		onConflict = " ON CONFLICT (session_id, idempotency_key) DO NOTHING"
		if u, ok := sq.s.d.(dialect.Upserter); ok {
			onConflict = u.KeepExisting("idempotency_key")
		}
	}
	qt := sq.s.quoted(models.TableQueue)
	var ret []struct {
		Seq int64
		ID  uuid.UUID
	}
	defer sq.writeLock(ctx)()
	res := sq.db(ctx).Raw("INSERT INTO "+qt+
		" (id, session_id, operation, content, priority, status, attempts, created_at, idempotency_key) SELECT "+
		sq.param("uuid")+", id, 'enqueue', "+sq.param("text")+", "+sq.param("integer")+", 'pending', 0, "+
		sq.param("timestamptz")+", "+sq.param("text")+" FROM "+sq.s.quoted(models.TableSessions)+" WHERE id = ?"+tc+
		onConflict+" RETURNING seq, id", args...).Scan(&ret)
	var seqs []int64
	for _, r := range ret {
		if r.ID == id { // not the existing row a dialect.Upserter returns
			seqs = append(seqs, r.Seq)
		}
	}
	if res.Error != nil {
		err := dbErr(res.Error)
		if errors.Is(err, ErrNotFound) { // the session was deleted after the select saw it
			return nil, sq.notFound("enqueue to", sessionID)
		}
		return nil, fmt.Errorf("enqueue to %s: %w", sessionID, err)
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
		items, err := sq.s.scanQueueItems(rows)
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
	sq.notifyClaimable()
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
	items, err := sq.s.scanQueueItems(rows)
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
	items, err := sq.s.scanQueueItems(rows)
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
func (s *Store) scanQueueItems(rows *sql.Rows) ([]repo.QueueItem, error) {
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
		if it.Content, err = s.openString(models.TableQueue, encQueue, it.SessionID, it.ID.String(), it.Content); err != nil {
			return nil, err
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
	items, err := sq.s.scanQueueItems(rows)
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
	items, err := sq.s.scanQueueItems(rows)
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
	olderThan, batch, err := purgeArgs("purge finished queue items", olderThan, repo.DefaultQueueRetention, batch)
	if err != nil {
		return 0, err
	}
	cutoff := sq.s.now().Add(-olderThan)
	tc, targs := sq.inTenantCond()
	qt := sq.s.quoted(models.TableQueue)
	// the LIMIT inside a derived table: MariaDB refuses LIMIT in an IN
	// subquery (ERROR 1235) and a subquery reading the table it deletes
	// from (1093), and materialises a derived table first
	stmt := "DELETE FROM " + qt + " WHERE seq IN (SELECT seq FROM (SELECT seq FROM " + qt +
		" WHERE processed_at IS NOT NULL AND processed_at < ?" + tc +
		fmt.Sprintf(" ORDER BY processed_at LIMIT %d) AS p)", batch)
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

// purgeArgs checks and defaults the arguments of a retention purge (what
// names it in the error): a negative age or a batch outside
// 0..repo.MaxPurgeBatch is ErrInvalidInput; age 0 means def, batch 0
// repo.DefaultPurgeBatch.
func purgeArgs(what string, olderThan, def time.Duration, batch int) (time.Duration, int, error) {
	switch {
	case olderThan < 0:
		return 0, 0, invalidf("%s: negative age %v", what, olderThan)
	case olderThan == 0:
		olderThan = def
	}
	switch {
	case batch < 0 || batch > repo.MaxPurgeBatch:
		return 0, 0, invalidf("%s: batch %d outside 0..%d", what, batch, repo.MaxPurgeBatch)
	case batch == 0:
		batch = repo.DefaultPurgeBatch
	}
	return olderThan, batch, nil
}
