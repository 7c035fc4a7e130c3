package engine

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

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
	if p.Wait < 0 || p.Wait > repo.MaxDequeueWait {
		return nil, invalidf("dequeue from %s: wait %v must be between 0 and %v", sessionID, p.Wait, repo.MaxDequeueWait)
	}
	var (
		it  *repo.QueueItem
		err error
	)
	switch {
	case p.Wait == 0:
		it, err = sq.dequeueNow(ctx, sessionID, p, false)
	case sq.tx != nil:
		return nil, invalidf("dequeue from %s: a Dequeue inside a transaction cannot wait (it would not see other commits)", sessionID)
	default:
		it, err = sq.dequeueWait(ctx, sessionID, p)
	}
	if err != nil || it == nil {
		return it, err
	}
	// The item is leased: when its content cannot be decrypted the lease
	// runs out and the item is claimable again (by a Store with the key).
	if it.Content, err = sq.s.openString(models.TableQueue, encQueue, it.SessionID, it.ID.String(), it.Content); err != nil {
		return nil, fmt.Errorf("dequeue from %s: item %s: %w", sessionID, it.ID, err)
	}
	return it, nil
}

// dequeueWait is a Dequeue that waits up to p.Wait for a claimable item:
// the provider's long poll (longPoll) on the Store's session-queue signal,
// which this Store's enqueues and releases wake at once and other Stores'
// through the dialect's wake-up mechanism (CapWakeup: NOTIFY on
// PostgreSQL, the data_version watcher on SQLite). While that mechanism is
// healthy a waiting call re-runs its claim after each wake-up, at the
// session's next lease expiry, or after max(WithPollInterval, 1 s);
// otherwise every WithPollInterval.
func (sq *sessionQueue) dequeueWait(ctx context.Context, sessionID uuid.UUID, p repo.DequeueParams) (*repo.QueueItem, error) {
	prov := sq.s.provider()
	prov.listenIfPossible(p.Wait)
	// the session's next lease expiry: a claim takes an item whose
	// leased_until is before its clock reading, so from leased_until + 1
	due := func(ctx context.Context, since int64) (int64, bool, error) {
		return prov.minDue(ctx, `SELECT MIN(leased_until) + 1 AS t FROM `+sq.s.quoted(models.TableQueue)+
			` WHERE session_id = ?`+liveQueue+` AND status = 'processing' AND leased_until >= ?`, sessionID, since)
	}
	// The first claim also checks that the session exists; the later
	// ones only claim (one statement per re-check).
	known := false
	it, err := longPoll(ctx, prov.queue, due, false, p.Wait, sq.s.cfg.PollInterval, func(time.Time) (*repo.QueueItem, error) {
		it, err := sq.dequeueNow(ctx, sessionID, p, known)
		known = err == nil
		return it, err
	})
	if err != nil && err == ctx.Err() {
		return nil, fmt.Errorf("dequeue from %s: %w", sessionID, err)
	}
	return it, err
}

// dequeueNow claims the session's next claimable item now, or returns nil
// (known: the session was seen to exist by an earlier claim of the same
// call, so finding nothing is not checked for ErrNotFound).
func (sq *sessionQueue) dequeueNow(ctx context.Context, sessionID uuid.UUID, p repo.DequeueParams, known bool) (*repo.QueueItem, error) {
	r := dequeueReq{sq: sq, session: sessionID, owner: p.Owner, lease: p.Lease, token: uuid.New(), nowMS: sq.s.nowMS(), known: known}
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
	// known: the session exists (a waiting Dequeue's later claims); no
	// ErrNotFound check when nothing is claimable.
	known bool
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

// dequeueOne claims one item for r and stores it in *r.out (nil when
// nothing is claimable, ErrNotFound when the session does not exist in
// the view): the claim of a group of one (a batch of one is a batch).
func (sq *sessionQueue) dequeueOne(ctx context.Context, r dequeueReq) error {
	left, err := sq.s.claimGroup(ctx, []*gcReq[uint64, dequeueReq]{{ctx: ctx, in: r}})
	if err != nil {
		return fmt.Errorf("dequeue from %s: %w", r.session, err)
	}
	if len(left) == 0 || r.known {
		return nil
	}
	if ok, err := sq.sessionExists(sq.db(ctx), r.session); err != nil || !ok {
		return sq.missing("dequeue from", r.session, err)
	}
	*r.out = nil
	return nil
}

// dequeueBatch claims items for several Dequeue calls: for the calls of
// one session (and tenant view), one claim statement (claimGroup) that
// leases the i-th claimable item to the i-th call. A call for which no
// item was left — the session's queue had fewer claimable items — then
// runs dequeueOne under its own context, which reports nil, or
// ErrNotFound when the session does not exist (in its view). A statement
// that fails runs each call of its session alone (nothing was claimed:
// the statement is atomic).
func (s *Store) dequeueBatch(ctx context.Context, reqs []*gcReq[uint64, dequeueReq]) error {
	type viewKey struct {
		session uuid.UUID
		tenant  string
		scoped  bool
	}
	claimByGroup(reqs, func(r dequeueReq) viewKey {
		k := viewKey{session: r.session}
		if t := r.sq.tenant; t != nil {
			k.tenant, k.scoped = *t, true
		}
		return k
	}, func(g []*gcReq[uint64, dequeueReq]) ([]*gcReq[uint64, dequeueReq], error) {
		return s.claimGroup(ctx, g)
	},
		func(r *gcReq[uint64, dequeueReq]) { r.err = r.in.sq.dequeueOne(r.ctx, r.in) })
	return nil
}

// claimGroup is the claim statement of Dequeue, for the calls g of one
// session and view (one call, or a flush of several): it takes the first
// k claimable items in dequeue order (k = len(g)) and leases the i-th of
// them to the i-th call, with that call's own token, owner and lease end.
// It sets the claimed calls' items and returns the calls that got none,
// or the statement's error (then no call has an item).
//
// The pick is one ordered walk of the partial index (session_id,
// priority DESC, seq) WHERE processed_at IS NULL: the first rows that are
// pending or whose lease expired. Rows leased to live workers (at most one
// per worker) are stepped over; finished rows are not in the index. The
// literal predicate lets SQLite prove the index usable. Where the database
// has row locks the pick is FOR UPDATE SKIP LOCKED, so concurrent claims
// never wait on or share an item.
//
// On PostgreSQL the claim commits asynchronously (set_config with
// is_local = this statement's own transaction, same round trip): a claim
// only hands out a lease, so if a server crash loses its commit the item
// is simply pending again and its Complete reports ErrLockLost — the
// at-least-once delivery a lease expiry gives anyway. Complete, Fail,
// Release and Enqueue commit synchronously, and each synchronous commit
// also flushes every earlier asynchronous one.
//
// Where the database runs in this process (dialect.InProcess: SQLite)
// several calls are one transaction of each call's own single-call claim,
// in order, instead of claimSQL's joined form.
func (s *Store) claimGroup(ctx context.Context, g []*gcReq[uint64, dequeueReq]) ([]*gcReq[uint64, dequeueReq], error) {
	sq := g[0].in.sq
	byToken := make(map[uuid.UUID]*gcReq[uint64, dequeueReq], len(g))
	for _, r := range g {
		byToken[r.in.token] = r
	}
	var c claimedRow
	var tok uuid.UUID
	dest := append([]any{&tok}, c.dest()...)
	claimed := make(map[*gcReq[uint64, dequeueReq]]bool, len(g))
	unlock := sq.writeLock(ctx)
	put := func(tok uuid.UUID, c *claimedRow) error {
		r, ok := byToken[tok]
		if !ok {
			return fmt.Errorf("claim returned an unknown lease token")
		}
		*r.in.out = c.item(r.in)
		s.rememberLease(*r.in.out, r.in.nowMS)
		claimed[r] = true
		return nil
	}
	// scan reads one returned row of a claim statement into its call
	scan := func(rows *sql.Rows, _ int64) error {
		c = claimedRow{}
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		return put(tok, &c)
	}
	var err error
	if len(g) > 1 && s.inProcess() && s.has(CapUpdateReturning) {
		// one transaction of each call's own claim (dialect.InProcess),
		// in order: the i-th claim takes the first item the earlier ones
		// left; once one finds nothing, so would the rest
		err = sq.db(ctx).Transaction(func(tx *gorm.DB) error {
			clear(claimed)
			for _, r := range g {
				stmt, args := s.claimSQL([]*gcReq[uint64, dequeueReq]{r})
				n, err := newDirectTx(tx).each(stmt, args, scan)
				if err != nil || n == 0 {
					return err
				}
			}
			return nil
		})
	} else if s.has(CapUpdateReturning) {
		stmt, args := s.claimSQL(g)
		_, err = newDirectTx(sq.db(ctx)).each(stmt, args, scan)
	} else {
		err = s.claimGeneral(sq.db(ctx), g, put)
	}
	unlock()
	if err != nil {
		// when rows were claimed before the reply broke off, those leases
		// run out and the items are dequeued again (as after a lost reply)
		for r := range claimed {
			*r.in.out = nil
		}
		return nil, dbErr(err)
	}
	var left []*gcReq[uint64, dequeueReq]
	for _, r := range g {
		if !claimed[r] {
			left = append(left, r)
		}
	}
	return left, nil
}

// claimSQL returns the claim statement of the calls g and its arguments.
// One call sets its own lease in the row the pick finds (WHERE seq =
// (pick), a primary-key update). Several take the pick's rows numbered in
// dequeue order (row_number) joined to a VALUES list of the calls' leases
// (1, token, owner, lease end), ...: on SQLite that form costs a single
// call several times the direct one (measured 30 vs 70-700 µs per
// Dequeue, growing with the live items), so a call alone does not pay it,
// and on SQLite a group does not either (claimGroup's in-process form).
func (s *Store) claimSQL(g []*gcReq[uint64, dequeueReq]) (string, []any) {
	sq := g[0].in.sq
	qt := s.quoted(models.TableQueue)
	pick, pickArgs := s.claimPick(g)
	with, async := s.asyncCommitCTE()
	if sq.tx != nil { // the application's transaction (TxView) keeps its synchronous commit
		with, async = "", ""
	}
	if len(g) == 1 {
		r := g[0].in
		// session_id = ? repeated outside the pick: the UPDATE is routed by
		// the distribution column (one shard on Citus), not only its subquery
		return with + "UPDATE " + qt + " SET status = 'processing', lease_token = ?, lease_owner = ?, leased_until = ?," +
				" attempts = attempts + 1 WHERE session_id = ? AND seq = (" + pick("seq") + ")" + async + " RETURNING lease_token, " + claimCols,
			append([]any{r.token, nilIfEmpty(r.owner), r.nowMS + r.lease.Milliseconds(), r.session}, pickArgs...)
	}
	var b strings.Builder
	b.WriteString(with + "UPDATE " + qt + " SET status = 'processing', lease_token = w.column2, lease_owner = w.column3," +
		" leased_until = w.column4, attempts = attempts + 1 FROM (SELECT cseq, row_number() OVER (ORDER BY cprio DESC, cseq) AS rn" +
		" FROM (" + pick("seq AS cseq, priority AS cprio") + ") AS c0) AS c, (VALUES ")
	writeTuples(&b, len(g), "("+s.castParam("bigint")+", "+s.castParam("uuid")+", "+s.castParam("text")+", "+s.castParam("bigint")+")")
	b.WriteString(") AS w WHERE session_id = ? AND seq = c.cseq AND w.column1 = c.rn" + async + " RETURNING lease_token, " + claimCols)
	args := pickArgs
	for i, r := range g {
		args = append(args, int64(i+1), r.in.token, nilIfEmpty(r.in.owner), r.in.nowMS+r.in.lease.Milliseconds())
	}
	return b.String(), append(args, g[0].in.session)
}

// claimPick returns the pick of the calls g (the SELECT of the first
// len(g) claimable items of their session, in dequeue order, FOR UPDATE
// SKIP LOCKED where the database has it) for a select list, and its
// arguments. Its ORDER BY is the index (session_id, priority DESC, seq)
// exactly, so a claimer locks only the rows it returns: with an ORDER BY
// the index does not serve, InnoDB locks every candidate it reads and a
// concurrent SKIP LOCKED claimer finds nothing (issue 26).
func (s *Store) claimPick(g []*gcReq[uint64, dequeueReq]) (func(cols string) string, []any) {
	sq := g[0].in.sq
	qt := s.quoted(models.TableQueue)
	tc, targs := sq.inTenantCond()
	var nowMS int64
	for _, r := range g {
		nowMS = max(nowMS, r.in.nowMS)
	}
	pick := func(cols string) string {
		return "SELECT " + cols + " FROM " + qt + " WHERE session_id = ?" + liveQueue + claimable + tc +
			" ORDER BY priority DESC, seq LIMIT " + strconv.Itoa(len(g)) + s.forUpdateSkip("")
	}
	return pick, append([]any{g[0].in.session, nowMS}, targs...)
}

// claimGeneral is claimSQL's statement in the general form, for a
// database without UPDATE ... RETURNING: in one transaction (a savepoint
// inside the application's), the pick, which reads the picked items'
// claimCols (the rows are locked FOR UPDATE from then on, so what it read
// is what they hold when the transaction ends), and one UPDATE giving each
// picked item its call's lease (a primary-key UPDATE for one, CASE by seq
// for several). The i-th picked item goes to the i-th call, through put
// with that call's token and the item as the UPDATE left it (attempts
// one more than read). On MariaDB that is BEGIN, the pick, the UPDATE and
// COMMIT: the raw SKIP LOCKED claim's four round trips (a SELECT of the
// leased rows after the UPDATE, the fifth, is not needed).
func (s *Store) claimGeneral(db *gorm.DB, g []*gcReq[uint64, dequeueReq], put func(tok uuid.UUID, c *claimedRow) error) error {
	qt := s.quoted(models.TableQueue)
	pick, pickArgs := s.claimPick(g)
	session := g[0].in.session
	return db.Transaction(func(tx *gorm.DB) error {
		var picked []claimedRow
		_, err := newDirectTx(tx).each(pick(claimCols), pickArgs, func(rows *sql.Rows, _ int64) error {
			var c claimedRow
			if err := rows.Scan(c.dest()...); err != nil {
				return err
			}
			picked = append(picked, c)
			return nil
		})
		if err != nil || len(picked) == 0 {
			return err
		}
		if len(picked) == 1 {
			r := g[0].in
			if err := tx.Exec("UPDATE "+qt+" SET status = 'processing', lease_token = ?, lease_owner = ?, leased_until = ?,"+
				" attempts = attempts + 1 WHERE session_id = ? AND seq = ?",
				r.token, nilIfEmpty(r.owner), r.nowMS+r.lease.Milliseconds(), session, picked[0].it.Seq).Error; err != nil {
				return err
			}
		} else {
			// one UPDATE giving each picked item its call's lease (CASE by
			// seq: the same round trips whatever the batch's size)
			var tokCase, ownerCase, untilCase strings.Builder
			var tokArgs, ownerArgs, untilArgs []any
			seqs := make([]int64, len(picked))
			for i, c := range picked {
				r := g[i].in
				seqs[i] = c.it.Seq
				tokCase.WriteString(" WHEN ? THEN ?")
				ownerCase.WriteString(" WHEN ? THEN ?")
				untilCase.WriteString(" WHEN ? THEN ?")
				tokArgs = append(tokArgs, c.it.Seq, r.token)
				ownerArgs = append(ownerArgs, c.it.Seq, nilIfEmpty(r.owner))
				untilArgs = append(untilArgs, c.it.Seq, r.nowMS+r.lease.Milliseconds())
			}
			args := append(append(append(tokArgs, ownerArgs...), untilArgs...), session, seqs)
			if err := tx.Exec("UPDATE "+qt+" SET status = 'processing', lease_token = CASE seq"+tokCase.String()+" END,"+
				" lease_owner = CASE seq"+ownerCase.String()+" END, leased_until = CASE seq"+untilCase.String()+" END,"+
				" attempts = attempts + 1 WHERE session_id = ? AND seq IN ?", args...).Error; err != nil {
				return err
			}
		}
		for i := range picked {
			picked[i].it.Attempts++
			if err := put(g[i].in.token, &picked[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// completeReq is one lease-ending call (Complete, Fail, Release): its
// view (tenant scope), lease and the clock readings of the call.
type completeReq struct {
	sq    *sessionQueue
	l     repo.Lease
	now   time.Time
	nowMS int64
}

// leaseCall is the lease-ending call of l through sq, at the clock's time
// (l's session filled in where this Store remembers it: routeLease).
func (sq *sessionQueue) leaseCall(l repo.Lease) completeReq {
	return completeReq{sq: sq, l: sq.s.routeLease(l), now: sq.s.now(), nowMS: sq.s.nowMS()}
}

// leaseSet is the SET list of a lease-ending statement given the SQL of
// the call's time (at; a list that does not read the time ignores it).
type leaseSet func(at string) string

// completeSet is Complete's SET list.
func completeSet(at string) string {
	return "status = 'completed', processed_at = " + at + ", lease_token = NULL"
}

// endLeases is the one lease-ending statement (Complete, Fail and Release
// of one call, or a flush of several Completes): one commit on every
// dialect, each item's lease (token, status, lease end at the call's time,
// tenant) checked on its own; it returns the ids it ended. set is the SET
// list, setArgs its parameters. One call is a plain UPDATE of its row
// (autocommit). Several are, where the dialect chains data-modifying CTEs
// (dialect.UpdateChain: PostgreSQL), each call's plain UPDATE in one
// statement; where the database runs in this process (dialect.InProcess:
// SQLite), one transaction of each call's plain UPDATE; elsewhere an
// UPDATE joined to a VALUES list of (item id, lease token, time of the
// call, the same in ms, tenant). In every form the items are sorted by id
// so that two flushes over the same rows take their row locks in the same
// order. On SQLite the joined form cost a single call about twice the
// plain one; on PostgreSQL it was a hash join over the whole queue table
// while the table had no statistics (2.3 ms per flush beside 20,000 rows,
// a plain UPDATE 0.17 ms).
func (s *Store) endLeases(ctx context.Context, set leaseSet, setArgs []any, calls []completeReq) ([]uuid.UUID, error) {
	sq := calls[0].sq
	unlock := sq.writeLock(ctx)
	defer unlock()
	if len(calls) == 1 {
		stmt, args := s.endLeaseSQL(set, setArgs, calls[0])
		// the rows affected say it: no RETURNING row to read
		n, err := newDirectTx(sq.db(ctx)).exec(stmt, args...)
		if err != nil || n != 1 {
			return nil, err
		}
		return []uuid.UUID{calls[0].l.ItemID}, nil
	}
	if s.inProcess() {
		// one transaction of each call's own statement (dialect.InProcess)
		var done []uuid.UUID
		err := sq.db(ctx).Transaction(func(tx *gorm.DB) error {
			done = done[:0]
			for _, r := range sortedByItem(calls) {
				stmt, args := s.endLeaseSQL(set, setArgs, r)
				n, err := newDirectTx(tx).exec(stmt, args...)
				if err != nil {
					return err
				}
				if n == 1 {
					done = append(done, r.l.ItemID)
				}
			}
			return nil
		})
		if err != nil {
			return nil, dbErr(err)
		}
		return done, nil
	}
	stmt, args := s.endLeasesSQL(set, setArgs, calls)
	var done []uuid.UUID
	_, err := newDirectTx(sq.db(ctx)).each(stmt, args, func(rows *sql.Rows, _ int64) error {
		var id uuid.UUID
		if err := rows.Scan(&id); err != nil {
			return err
		}
		done = append(done, id)
		return nil
	})
	if err != nil {
		return nil, dbErr(err)
	}
	return done, nil
}

// endLeaseSQL returns the lease-ending statement of one call r: a plain
// UPDATE of its row that checks its lease (token, status, lease end at
// the call's time, tenant).
func (s *Store) endLeaseSQL(set leaseSet, setArgs []any, r completeReq) (string, []any) {
	tc, targs := r.sq.inTenantCond()
	var args []any
	if set("?") != set("") { // the SET list reads the call's time
		args = append(args, r.now)
	}
	args = append(args, setArgs...)
	where := " WHERE "
	if r.l.SessionID != uuid.Nil { // routed by the distribution column (docs/distributed.md)
		where += "session_id = ? AND "
		args = append(args, r.l.SessionID)
	}
	args = append(args, r.l.ItemID, r.l.Token, r.nowMS)
	return "UPDATE " + s.quoted(models.TableQueue) + " SET " + set("?") + where + "id = ? AND lease_token = ? AND status = 'processing'" +
		" AND leased_until >= ?" + tc, append(args, targs...)
}

// sortedByItem returns calls sorted by item id (the order in which a
// flush takes its rows' locks).
func sortedByItem(calls []completeReq) []completeReq {
	sorted := slices.Clone(calls)
	slices.SortFunc(sorted, func(a, b completeReq) int { return bytes.Compare(a.l.ItemID[:], b.l.ItemID[:]) })
	return sorted
}

// endLeasesSQL returns endLeases' statement and its arguments (the
// statement of several calls where the dialect is not InProcess).
func (s *Store) endLeasesSQL(set leaseSet, setArgs []any, calls []completeReq) (string, []any) {
	qt := s.quoted(models.TableQueue)
	if len(calls) == 1 {
		return s.endLeaseSQL(set, setArgs, calls[0])
	}
	sorted := sortedByItem(calls)
	if c, ok := s.d.(dialect.UpdateChain); ok && c.ChainsUpdates() {
		// each item its own UPDATE (a probe of its key), chained in one
		// statement: WITH u0 AS (UPDATE ... RETURNING id), u1 AS (...)
		// SELECT id FROM u0 UNION ALL SELECT id FROM u1 ...
		var with, sel strings.Builder
		var args []any
		for i, r := range sorted {
			stmt, a := s.endLeaseSQL(set, setArgs, r)
			u := "u" + strconv.Itoa(i)
			if i > 0 {
				with.WriteString(", ")
				sel.WriteString(" UNION ALL ")
			}
			with.WriteString(u + " AS (" + stmt + " RETURNING id)")
			sel.WriteString("SELECT id FROM " + u)
			args = append(args, a...)
		}
		return "WITH " + with.String() + " " + sel.String(), args
	}
	var b strings.Builder
	b.WriteString("UPDATE " + qt + " AS q SET " + set("v.column3") + " FROM (VALUES ")
	writeTuples(&b, len(sorted), "("+s.castParam("uuid")+", "+s.castParam("uuid")+", "+s.castParam("timestamptz")+", "+
		s.castParam("bigint")+", "+s.castParam("text")+")")
	b.WriteString(") AS v WHERE q.id = v.column1 AND q.lease_token = v.column2 AND q.status = 'processing'" +
		" AND q.leased_until >= v.column4 AND (v.column5 IS NULL OR q.session_id IN (SELECT id FROM " +
		s.quoted(models.TableSessions) + " WHERE tenant_id = v.column5)) RETURNING id")
	args := make([]any, 0, len(setArgs)+5*len(sorted))
	args = append(args, setArgs...)
	for _, r := range sorted {
		var tenant any
		if t := r.sq.tenant; t != nil {
			tenant = *t
		}
		args = append(args, r.l.ItemID, r.l.Token, r.now, r.nowMS, tenant)
	}
	return b.String(), args
}

// endLease ends the lease of one call (endLeases of one); an item it did
// not end gets leaseMiss's error.
func (sq *sessionQueue) endLease(ctx context.Context, op string, r completeReq, set leaseSet, setArgs ...any) error {
	if sq.scopeErr != nil {
		return sq.scopeErr
	}
	done, err := sq.s.endLeases(ctx, set, setArgs, []completeReq{r})
	if err != nil {
		return fmt.Errorf("%s queue item %s: %w", op, r.l.ItemID, err)
	}
	if len(done) == 1 {
		sq.s.forgetLease(r.l)
		return nil
	}
	return sq.leaseMiss(ctx, op, r.l)
}

// leaseMiss is the error of a lease-ending update that matched nothing:
// ErrNotFound when the item does not exist (in the view's tenant),
// ErrLockLost otherwise.
func (sq *sessionQueue) leaseMiss(ctx context.Context, op string, l repo.Lease) error {
	tc, targs := sq.inTenantCond()
	where, args := " WHERE id = ?", []any{l.ItemID}
	if l.SessionID != uuid.Nil {
		where, args = " WHERE session_id = ? AND id = ?", []any{l.SessionID, l.ItemID}
	}
	var n int64
	if err := sq.db(ctx).Raw("SELECT COUNT(*) FROM "+sq.s.quoted(models.TableQueue)+where+tc,
		append(args, targs...)...).Scan(&n).Error; err != nil {
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
// Completes of the Store are coalesced into one statement (completeBatch,
// through the Store's committer; see groupcommit.go): a call that finds no
// flush running completes at once on its own (after yielding the processor
// once, which lets calls arriving at the same moment join it); calls that
// arrive while one runs are completed together in the next, each checked
// against its own lease and told its own outcome. Without
// CapUpdateReturning (MariaDB) there is no statement that ends several
// leases and says which it ended, so every Complete is its own autocommit
// UPDATE, as the raw baseline's acknowledgement (concurrent commits share
// the database's own log flushes); so is it without CapFastPaths. A call whose ctx ends
// before its item is taken into a flush returns the context's error
// without completing it; once taken, it waits for that flush's outcome.
func (sq *sessionQueue) Complete(ctx context.Context, l repo.Lease) error {
	if sq.scopeErr != nil {
		return sq.scopeErr
	}
	r := sq.leaseCall(l)
	// On the Citus route (the dialect's fast paths switched off) a
	// Complete is never coalesced with other sessions' (the coalesced
	// statement joins a list of items, which Citus cannot route): its own
	// statement, pinned to its session when the lease names it, as the
	// append flush keeps one session per statement there.
	if !sq.s.groupCommit() || sq.tx != nil || !sq.s.has(CapUpdateReturning) || sq.s.citusRoute() {
		return sq.endLease(ctx, "complete", r, completeSet)
	}
	err := sq.s.gc.complete.do(ctx, sq.s.gcFlushes(), l.ItemID, r,
		func(ctx context.Context, r completeReq) error { return r.sq.endLease(ctx, "complete", r, completeSet) },
		sq.s.completeBatch)
	if err != nil && err == ctx.Err() {
		return fmt.Errorf("complete queue item %s: %w", l.ItemID, err)
	}
	return err
}

// completeBatch completes the leases of several Complete calls in one
// statement (endLeases). An item it did not complete gets what the
// single-item path reports: ErrLockLost, or ErrNotFound when the item does
// not exist (in its caller's tenant).
func (s *Store) completeBatch(ctx context.Context, reqs []*gcReq[uuid.UUID, completeReq]) error {
	calls := make([]completeReq, len(reqs))
	for i, r := range reqs {
		calls[i] = r.in
	}
	done, err := s.endLeases(ctx, completeSet, nil, calls)
	if err != nil {
		return err
	}
	for _, r := range reqs {
		if slices.Contains(done, r.key) {
			r.err = nil
			continue
		}
		r.err = r.in.sq.leaseMiss(ctx, "complete", r.in.l)
	}
	return nil
}

// Fail implements repo.SessionQueue.
func (sq *sessionQueue) Fail(ctx context.Context, l repo.Lease, reason string) error {
	if err := checkText("failure reason", reason, 0); err != nil {
		return fmt.Errorf("fail queue item %s: %w", l.ItemID, err)
	}
	return sq.endLease(ctx, "fail", sq.leaseCall(l), func(at string) string {
		return "status = 'failed', processed_at = " + at + ", last_error = ?, lease_token = NULL"
	}, reason)
}

// Release implements repo.SessionQueue.
func (sq *sessionQueue) Release(ctx context.Context, l repo.Lease) error {
	err := sq.endLease(ctx, "release", sq.leaseCall(l), func(string) string {
		return "status = 'pending', lease_token = NULL, lease_owner = NULL, leased_until = NULL"
	})
	if err == nil {
		sq.notifyClaimable()
	}
	return err
}

// notifyClaimable wakes the Dequeues waiting on this Store and, through
// the dialect's wake-up mechanism, on other Stores: an item became
// claimable. Inside a transaction it does nothing (the commit is not this
// call's); the waiting Dequeues find the item at their next re-check.
func (sq *sessionQueue) notifyClaimable() {
	if sq.tx == nil {
		sq.s.provider().queue.notify()
	}
}
