package engine

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// EnqueueForWorker implements duroxide.Provider.
func (p *gormProvider) EnqueueForWorker(ctx context.Context, item duroxide.WorkItem) error {
	const op = "enqueue_for_worker"
	rows, err := workerRows([]duroxide.WorkItem{item}, p.s.nowMS())
	if err != nil {
		return perr(op, err)
	}
	if err := p.s.db.WithContext(ctx).Create(&rows[0]).Error; err != nil {
		return perr(op, fmt.Errorf("enqueue %s: %w", item.WorkItemType(), err))
	}
	p.notifyWork(rows)
	return nil
}

// plainWorkItem reports whether any plain worker fetch (no session
// config, untagged items taken) can take row: it has no tag and no
// session.
func plainWorkItem(row *models.WorkerQueueItem) bool {
	return row.Tag == nil && row.SessionID == nil
}

// notifyWork wakes the worker fetchers for rows, just enqueued visible at
// once: one waiting plain fetcher per row when every row is plain
// (signal.handOff), else every waiting fetcher.
func (p *gormProvider) notifyWork(rows []models.WorkerQueueItem) {
	for i := range rows {
		if !plainWorkItem(&rows[i]) {
			p.work.notifyReady()
			return
		}
	}
	if len(rows) > 0 {
		p.work.handOff(len(rows), true)
	}
}

// tagSQL returns the tag predicate of f on worker rows q.
func tagSQL(f duroxide.TagFilter) (string, []any) {
	switch f.Mode {
	case duroxide.TagTags:
		return `q.tag IN (` + placeholders(len(f.Tags)) + `)`, strArgs(f.Tags)
	case duroxide.TagDefaultAnd:
		return `(q.tag IS NULL OR q.tag IN (` + placeholders(len(f.Tags)) + `))`, strArgs(f.Tags)
	case duroxide.TagAny:
		return `1 = 1`, nil
	}
	return `q.tag IS NULL`, nil
}

// FetchWorkItem implements duroxide.Provider.
func (p *gormProvider) FetchWorkItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, session *duroxide.SessionFetchConfig, tags duroxide.TagFilter) (*duroxide.WorkItemLease, error) {
	const op = "fetch_work_item"
	if lockTimeout <= 0 {
		return nil, perr(op, invalidf("lock timeout must be positive"))
	}
	if err := tags.Validate(); err != nil {
		return nil, perr(op, invalidf("%v", err))
	}
	if session != nil && (session.OwnerID == "" || !utf8.ValidString(session.OwnerID) || session.LockTimeout < 0) {
		return nil, perr(op, invalidf("session config needs a non-empty UTF-8 owner id and a non-negative lock timeout"))
	}
	if tags.Mode == duroxide.TagNone {
		return nil, nil
	}
	p.listenIfPossible(pollTimeout)
	// a fetch without a session config keeps its next-due answer across
	// ready wake-ups: with one, the next due may be another owner's session
	// lease, which a new item of that session brings
	// a fetch without a session config that takes untagged items can
	// take any item a hand-off announces (plainWorkItem)
	plain := session == nil && (tags.Mode == duroxide.TagDefaultOnly || tags.Mode == duroxide.TagDefaultAnd || tags.Mode == duroxide.TagAny)
	// and one taking untagged items only is quiet (all such claim the same items)
	quiet := session == nil && tags.Mode == duroxide.TagDefaultOnly
	// and one taking untagged items is handed the leases of worker items an
	// orchestration ack of this Store enqueues while it waits (handedLease)
	var lt *leaseTake[duroxide.WorkItemLease]
	if plain {
		lt = &leaseTake[duroxide.WorkItemLease]{lockTimeout: lockTimeout,
			take: func(hl *handedLease) (*duroxide.WorkItemLease, error) {
				if ctx.Err() != nil {
					p.giveBackWork(hl.wl, nil)
					return nil, ctx.Err()
				}
				l, err := p.keepWorkLease(ctx, hl.lease, hl.start, lockTimeout, nil, nil)
				return p.unlessCancelled(ctx, l, err, nil)
			},
			drop: func(hl *handedLease) { p.giveBackWork(hl.wl, nil) }}
	}
	lease, err := longPollAs(ctx, p.work, nil, session == nil, plain, quiet, lt, pollTimeout, p.s.cfg.PollInterval, func(deadline time.Time, idle bool) (*duroxide.WorkItemLease, error) {
		if idle && session == nil && !p.workClaimableBeforeTx(ctx, tags) {
			return nil, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err // no claim for a call that already ended (claimContext would run it)
		}
		var l *duroxide.WorkItemLease
		var sc *sessionClaim
		err := p.withRetry(ctx, "fetch_work_item", deadline, func() error {
			var e error
			start := p.s.nowMS()
			if l, sc, e = p.fetchWorkOnce(ctx, lockTimeout, session, tags); e != nil || l == nil {
				return p.claimWaitExpired(e)
			}
			if p.afterWorkClaim != nil {
				p.afterWorkClaim()
			}
			l, e = p.keepWorkLease(ctx, l, start, lockTimeout, session, sc)
			return e
		})
		return p.unlessCancelled(ctx, l, err, sc)
	})
	return lease, perr(op, err)
}

// keepWorkLease re-stamps the lease of l, claimed by a fetch that read its
// clock at start, when the claim took longer than the slack (see "Lease
// validity" in provider_poll.go): the item's lock, and for a session item the
// session lease it claimed or extended for session's owner (never
// shortened). A lease another fetcher took over meanwhile, or whose item
// is gone (a cancelled activity), is not handed out: nil, nil; nor is one
// whose maxRestamps re-stamps were each slower than the slack and which
// has less than half its time left (see maxRestamps; it is released). A
// failed re-stamp releases the item, and the session lease sc when the
// claim took it anew (releaseSessionClaim).
func (p *gormProvider) keepWorkLease(ctx context.Context, l *duroxide.WorkItemLease, start int64, lockTimeout time.Duration,
	session *duroxide.SessionFetchConfig, sc *sessionClaim) (*duroxide.WorkItemLease, error) {
	wl, ok := parseWorkToken(l.LockToken)
	if !ok {
		return l, nil
	}
	ic, iargs := wl.cond()
	var sid *string
	if ae, isAct := l.Item.(*duroxide.ActivityExecute); isAct && session != nil {
		sid = ae.SessionID
	}
	slack, lt := leaseSlackMS(lockTimeout), durMS(lockTimeout)
	for i := 0; ; i++ {
		now := p.s.nowMS()
		if now-start <= slack {
			return l, nil
		}
		if i == maxRestamps { // every re-stamp was slow too
			if restampedEnough(now, start, lt) {
				return l, nil
			}
			p.releaseWorkClaim(ctx, wl, sc) // the lease would end soon after the call returns: give the item back
			return nil, nil
		}
		var held bool
		restamp := func(db *gorm.DB) error {
			res := db.Exec(`UPDATE `+p.q(models.TableWorkerQueue)+` SET locked_until = ? WHERE id = ? AND lock_token = ?`+ic, append([]any{now + lt, wl.id, wl.stored}, iargs...)...)
			if res.Error != nil || res.RowsAffected == 0 {
				return res.Error
			}
			held = true
			if sid == nil {
				return nil
			}
			until := now + sessionLeaseMS(session, lockTimeout)
			return db.Exec(`UPDATE `+p.q(models.TableActivitySessions)+` SET locked_until = ? WHERE session_id = ? AND worker_id = ? AND locked_until < ?`,
				until, *sid, session.OwnerID, until).Error
		}
		var err error
		if sid == nil {
			err = restamp(p.s.db.WithContext(ctx))
		} else {
			err = p.tx(ctx, restamp)
		}
		if err != nil {
			p.releaseWorkClaim(ctx, wl, sc)
			return nil, fmt.Errorf("renew the lease of work item %d after a slow claim: %w", wl.id, err)
		}
		if !held {
			return nil, nil
		}
		start = now
	}
}

// unlessCancelled returns lease l and err, unless ctx ended meanwhile: a
// lease is then given back with the session lease sc its claim took anew
// (giveBackWork), and the call returns ctx's error,
// so a cancelled fetch never leaves an item locked nor a session held; a
// failure or an empty claim is then reported as ctx's error too (the
// claim's own context, claimContext, ends after the caller's).
func (p *gormProvider) unlessCancelled(ctx context.Context, l *duroxide.WorkItemLease, err error, sc *sessionClaim) (*duroxide.WorkItemLease, error) {
	if ctx.Err() == nil {
		return l, err
	}
	if l == nil { // the caller's own error, not the claim context's (claimContext)
		return nil, ctx.Err()
	}
	if wl, ok := parseWorkToken(l.LockToken); ok {
		p.giveBackWork(wl, sc)
	}
	return nil, ctx.Err()
}

// sessionClaim is an activity-session lease a session fetch took anew:
// session sid had no live lease of owner before the claim, which wrote
// last_activity_at = at.
type sessionClaim struct {
	sid, owner string
	at         int64
}

// releaseSessionClaim ends the session lease sc (nil: nothing) that a
// fetch claimed with an item it then gave back, so that the session is
// free at once for any owner, as it was before the claim, instead of held
// for the owner until its lease ends. It does so only while the lease is
// as the claim left it (the owner's, last_activity_at unchanged: no ack
// or later claim of the owner touched it) and no item of the session is
// locked (the item given back first). Best effort, like releaseWorkLease:
// if it fails, the lease runs out.
func (p *gormProvider) releaseSessionClaim(ctx context.Context, sc *sessionClaim) {
	if sc == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	now := p.s.nowMS()
	_ = p.s.db.WithContext(ctx).Exec(`UPDATE `+p.q(models.TableActivitySessions)+` SET locked_until = ?`+
		` WHERE session_id = ? AND worker_id = ? AND last_activity_at = ? AND locked_until > ?`+
		` AND NOT EXISTS (SELECT 1 FROM `+p.q(models.TableWorkerQueue)+` w WHERE w.session_id = ? AND w.lock_token IS NOT NULL AND w.locked_until > ?)`,
		min(sc.at, now), sc.sid, sc.owner, sc.at, now, sc.sid, now).Error
}

// giveBackWork releases the lease wl that no caller will use (a lease
// handed over in-process that its fetch left, a claim whose fetch was
// cancelled: releaseWorkClaim, unlocked and its attempt uncounted, with
// the session lease sc its claim took anew) and hands the item's wake-up
// to another plain fetcher.
func (p *gormProvider) giveBackWork(wl workLease, sc *sessionClaim) {
	p.releaseWorkClaim(context.Background(), wl, sc)
	p.work.handOff(1, true)
}

// releaseWorkClaim undoes a claim no caller will get: the item's lease wl
// (releaseWorkLease), then the session lease sc the claim took anew (nil:
// none; releaseSessionClaim, which needs the item unlocked first).
func (p *gormProvider) releaseWorkClaim(ctx context.Context, wl workLease, sc *sessionClaim) {
	p.releaseWorkLease(ctx, wl)
	p.releaseSessionClaim(ctx, sc)
}

// workItemLease is the lease of the claimed worker item id of instance
// under the stored token tok, or, when its work_item does not decode, a
// CorruptRowError naming the row (and a nil lease).
func workItemLease(id int64, instance, tok, workItem string, attempts int32) (*duroxide.WorkItemLease, error) {
	w, err := duroxide.UnmarshalWorkItem([]byte(workItem))
	if err != nil {
		return nil, &CorruptRowError{Table: models.TableWorkerQueue, RowID: fmt.Sprint(id), Column: "work_item", Err: err}
	}
	return &duroxide.WorkItemLease{Item: w, LockToken: workToken(tok, instance, id), AttemptCount: uint32(attempts)}, nil
}

// sessionLeaseMS is the session lease a session fetch claims: the
// session's lock timeout, or the item's when that is 0.
func sessionLeaseMS(session *duroxide.SessionFetchConfig, lockTimeout time.Duration) int64 {
	if ms := durMS(session.LockTimeout); ms > 0 {
		return ms
	}
	return durMS(lockTimeout)
}

// releaseWorkLease undoes the claim of worker item id (stored token) whose
// fetch then failed: unlocked, its attempt uncounted. Best effort: if it
// fails too, the lock expires.
func (p *gormProvider) releaseWorkLease(ctx context.Context, wl workLease) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	ic, iargs := wl.cond()
	_ = p.s.db.WithContext(ctx).Exec(`UPDATE `+p.q(models.TableWorkerQueue)+` SET lock_token = NULL, locked_until = NULL,`+
		` attempt_count = CASE WHEN attempt_count > 0 THEN attempt_count - 1 ELSE 0 END WHERE id = ? AND lock_token = ?`+ic,
		append([]any{wl.id, wl.stored}, iargs...)...).Error
}

// workClaimableBeforeTx reports, on a dialect whose database runs
// in-process (SQLite: one writer at a time), whether an item is claimable
// for a fetch without a session config and with filter tags, read on the
// Store's read connections before the claim takes the write lock. A
// FetchWorkItem call asks it for an idle re-check of its long poll (after
// an empty or skipped claim, no wake-up since: a re-check at a due time,
// after idleRecheck or at the poll interval): such a re-check then finds
// nothing without taking the lock, so idle workers neither queue behind
// another connection's or process's write nor fail with ErrLockTimeout
// while it lasts. A call's first try and a woken one claim at once, with
// no read first (a busy loop's claims find work). true on other dialects,
// and when the read fails (the claim then decides).
func (p *gormProvider) workClaimableBeforeTx(ctx context.Context, tags duroxide.TagFilter) bool {
	if !p.s.inProcess() || p.routedWork() {
		return true
	}
	now := p.s.nowMS()
	q, args := p.workPickSQL(tags, 1, now)
	var ids []int64
	if err := scanAll(p.s.db.WithContext(ctx), &ids, `SELECT cid FROM (`+q+`) AS c0`, args...); err != nil {
		return true
	}
	return len(ids) > 0
}

// workPickSQL returns the statement that picks the first n items a fetch
// without a session config and with filter tags can claim at now, and its
// arguments: visible, unlocked (or the lock expired), outside activity
// sessions, tags matching; columns cid (the row id) and cvis (visible_at).
// Untagged fetches (the default filter) take items in visibility order on
// the partial index "ready" (visible_at, id) of plain rows, so a pick reads
// only visible rows however many are queued for later (TestPlanTraps);
// other filters walk id order and stop at the first eligible rows, with a
// unary plus on visible_at that keeps the planners from sorting every
// visible row by it. The rows are locked (FOR UPDATE SKIP LOCKED) where
// the database has row locks.
func (p *gormProvider) workPickSQL(tags duroxide.TagFilter, n int, now int64) (string, []any) {
	tp, targs := tagSQL(tags)
	vis, order := `+q.visible_at`, `q.id`
	if tags.Mode == duroxide.TagDefaultOnly {
		vis, order = `q.visible_at`, `q.visible_at, q.id`
	}
	return `SELECT q.id AS cid, q.visible_at AS cvis FROM ` + p.q(models.TableWorkerQueue) + ` q` +
		` WHERE ` + vis + ` <= ? AND (q.lock_token IS NULL OR q.locked_until <= ?) AND q.session_id IS NULL AND ` + tp +
		` ORDER BY ` + order + ` LIMIT ` + strconv.Itoa(n) + p.s.forUpdateSkip("q"), append([]any{now, now}, targs...)
}

// fetchWorkPlain claims the oldest eligible item outside activity
// sessions for one attempt: a batch of one (claimWork).
func (p *gormProvider) fetchWorkPlain(ctx context.Context, lockTimeout time.Duration, tags duroxide.TagFilter) (*duroxide.WorkItemLease, error) {
	var lease *duroxide.WorkItemLease
	r := &gcReq[uint64, workFetchReq]{ctx: ctx, in: workFetchReq{lockTimeout: lockTimeout, tags: tags, out: &lease}}
	if _, err := p.claimWork(ctx, []*gcReq[uint64, workFetchReq]{r}); err != nil {
		return nil, err
	}
	return lease, r.err
}

// claimWork claims items for attempts g of one tag filter (one FetchWorkItem
// call, or a group-commit flush) in one atomic statement, its own
// transaction: it locks the first len(g) visible, unlocked items outside
// activity sessions in id order (FOR UPDATE SKIP LOCKED where the database
// has row locks: it never waits for a row another transaction holds) and
// gives the i-th of them to the i-th attempt, with its own token and lock
// end. With CapAsyncCommit the statement also switches its own commit to
// asynchronous (see fetchTx for why a fetch may), in the same round trip.
// It sets the claimed attempts' leases (or errors: an item whose stored
// work item does not decode is its attempt's CorruptRowError) and returns
// the attempts that got no item, or the statement's error (then none has
// one).
//
// The pick is workPickSQL's: untagged attempts (the default filter) take
// the items in visibility order on the partial index "ready", so a claim
// reads only visible rows however many are queued for later, tagged or
// bound to an activity session (TestPlanTraps); other filters in id order.
//
// One attempt (a FetchWorkItem call alone) updates the row the claim
// picks by primary key; several pair the picked rows with their tokens by
// row number, or, where the database runs in this process
// (dialect.InProcess: SQLite), are one transaction of each attempt's own
// single claim, in order (the joined form cost SQLite several times
// more). The pick, the arguments' meaning, the reply and its errors are
// the same. With the fast paths switched off (routedWork) the claim is
// claimWorkRouted's, per shard key.
func (p *gormProvider) claimWork(ctx context.Context, g []*gcReq[uint64, workFetchReq]) ([]*gcReq[uint64, workFetchReq], error) {
	ctx, cancel := p.claimContext(ctx)
	defer cancel()
	if p.routedWork() {
		return p.claimWorkRouted(ctx, g)
	}
	now := p.s.nowMS()
	wq := p.q(models.TableWorkerQueue)
	// every attempt of g has g[0]'s tag filter (claimByGroup): pick1 is
	// each attempt's own pick, pick the batch's
	pick1, args1 := p.workPickSQL(g[0].in.tags, 1, now)
	pick, pickArgs := pick1, args1
	if len(g) > 1 {
		pick, pickArgs = p.workPickSQL(g[0].in.tags, len(g), now)
	}
	with, async := p.s.asyncCommitCTE()
	byToken := make(map[string]*gcReq[uint64, workFetchReq], len(g))
	var b strings.Builder
	var args []any
	// single is the claim of one call r: the row the pick finds first
	single := func(r *gcReq[uint64, workFetchReq]) (string, []any) {
		tok := newLockToken()
		byToken[tok] = r
		return with + `UPDATE ` + wq + ` SET lock_token = ?, locked_until = ?, attempt_count = attempt_count + 1` +
				` WHERE id = (SELECT cid FROM (` + pick1 + `) AS c0)` + async + ` RETURNING lock_token, id, work_item, attempt_count, instance_id`,
			append([]any{tok, now + durMS(r.in.lockTimeout)}, args1...)
	}
	inProcess := len(g) > 1 && p.s.inProcess() && p.s.has(CapUpdateReturning)
	if len(g) == 1 {
		q, a := single(g[0])
		b.WriteString(q)
		args = a
	} else if !inProcess {
		rowOrder := `cid`
		if g[0].in.tags.Mode == duroxide.TagDefaultOnly { // the pick's visibility order (workPickSQL)
			rowOrder = `cvis, cid`
		}
		b.WriteString(with + `UPDATE ` + wq + ` SET lock_token = w.column2, locked_until = w.column3, attempt_count = attempt_count + 1` +
			` FROM (SELECT cid, row_number() OVER (ORDER BY ` + rowOrder + `) AS rn FROM (` + pick + `) AS c0) AS c, (VALUES `)
		writeTuples(&b, len(g), "("+p.s.castParam("bigint")+", "+p.s.castParam("text")+", "+p.s.castParam("bigint")+")")
		b.WriteString(`) AS w WHERE id = c.cid AND w.column1 = c.rn` + async + ` RETURNING lock_token, id, work_item, attempt_count, instance_id`)
		args = append([]any(nil), pickArgs...)
		for i, r := range g {
			tok := newLockToken()
			byToken[tok] = r
			args = append(args, int64(i+1), tok, now+durMS(r.in.lockTimeout))
		}
	}
	claimed := make(map[*gcReq[uint64, workFetchReq]]bool, len(g))
	handle := func(tok string, id int64, workItem string, attempts int32, instance string) error {
		r, ok := byToken[tok]
		if !ok {
			return fmt.Errorf("claim returned an unknown lock token")
		}
		claimed[r] = true
		*r.in.out, r.err = workItemLease(id, instance, tok, workItem, attempts)
		return nil
	}
	// claimRows runs a claim statement on db (through GORM, as every
	// claim) and hands each returned row to handle; n is the rows read
	claimRows := func(db *gorm.DB, q string, a []any) (n int, err error) {
		rows, err := db.Raw(q, a...).Rows()
		if err != nil {
			return 0, err
		}
		for rows.Next() {
			var (
				tok, workItem, instance string
				id                      int64
				attempts                int32
			)
			if err = rows.Scan(&tok, &id, &workItem, &attempts, &instance); err != nil {
				break
			}
			if err = handle(tok, id, workItem, attempts, instance); err != nil {
				break
			}
			n++
		}
		if err == nil {
			err = translateVia(db, rows.Err())
		}
		if cerr := rows.Close(); err == nil {
			err = cerr
		}
		return n, err
	}
	var err error
	if inProcess {
		// one transaction of each call's own claim (dialect.InProcess), in
		// order; once one finds nothing, so would the rest
		err = p.s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			clear(claimed)
			for _, r := range g {
				q, a := single(r)
				if n, err := claimRows(tx, q, a); err != nil || n == 0 {
					return err
				}
			}
			return nil
		})
	} else if !p.s.has(CapUpdateReturning) {
		// the general form: in one transaction the pick (FOR UPDATE SKIP
		// LOCKED on the index its ORDER BY matches), one UPDATE giving each
		// picked row its call's token (CASE by id: three statements
		// whatever the batch's size), and the rows read back
		clear(byToken)
		var got []struct {
			LockToken    string
			ID           int64
			WorkItem     string
			AttemptCount int32
			InstanceID   string
		}
		err = p.s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			var picks []struct{ Cid, Cvis int64 }
			if err := tx.Raw(pick, pickArgs...).Scan(&picks).Error; err != nil {
				return err
			}
			if len(picks) == 0 {
				return nil
			}
			ids := make([]int64, len(picks))
			var tokCase, untilCase strings.Builder
			var tokArgs, untilArgs []any
			for i, pk := range picks {
				tok := newLockToken()
				byToken[tok] = g[i]
				ids[i] = pk.Cid
				tokCase.WriteString(" WHEN ? THEN ?")
				untilCase.WriteString(" WHEN ? THEN ?")
				tokArgs = append(tokArgs, pk.Cid, tok)
				untilArgs = append(untilArgs, pk.Cid, now+durMS(g[i].in.lockTimeout))
			}
			args := append(append(tokArgs, untilArgs...), ids)
			if err := tx.Exec(`UPDATE `+wq+` SET lock_token = CASE id`+tokCase.String()+` END, locked_until = CASE id`+untilCase.String()+
				` END, attempt_count = attempt_count + 1 WHERE id IN ?`, args...).Error; err != nil {
				return err
			}
			return tx.Raw(`SELECT lock_token, id, work_item, attempt_count, instance_id FROM `+wq+` WHERE id IN ?`, ids).Scan(&got).Error
		})
		for _, r := range got {
			if err != nil {
				break
			}
			err = handle(r.LockToken, r.ID, r.WorkItem, r.AttemptCount, r.InstanceID)
		}
	} else {
		_, err = claimRows(p.s.db.WithContext(ctx), b.String(), args)
	}
	if err != nil {
		// the claim may have committed although its reply broke off (a
		// context that ended during the statement, a lost connection):
		// its items are given back, not left locked until their lock
		// timeout with an attempt counted
		for r := range claimed {
			*r.in.out, r.err = nil, nil
		}
		p.releaseClaimTokens(slices.Collect(maps.Keys(byToken)))
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

// claimGrace is how long a claim may run on after its caller's context
// ended (claimContext).
const claimGrace = time.Second

// claimContext is the context a claim's statements run under (a worker
// claim, an orchestration fetch's claim and reads): the caller's values,
// cancelled claimGrace after the caller's context ends. A claim cancelled
// in flight would leave its outcome unknown (the statement may commit after
// the client gave up on it, and its items stay locked until their lock
// timeout, an attempt counted); run to its end, its outcome is known, and a
// fetch whose context ended meanwhile gives the items back (FetchWorkItem,
// FetchOrchestrationItem). A claim is one short statement or transaction
// with bounded lock waits, so it ends well within the grace; a database that
// does not answer still releases the caller after it.
// On an in-process database (SQLite) an interrupted statement rolls back,
// so the outcome is always known and the caller's context stays in force.
func (p *gormProvider) claimContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if p.s.inProcess() {
		return ctx, func() {}
	}
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(claimGrace, cancel) })
	return cctx, func() { stop(); cancel() }
}

// releaseClaimTokens gives back the items a failed claim may have locked
// under stored tokens toks (fresh tokens of that claim only, so no other
// fetcher's lease can match): unlocked, their attempt uncounted, and a
// plain fetcher woken per item. In the background, so that the failed
// fetch returns at once (the database that failed its claim may keep the
// release waiting too); best effort, bounded by 5 s and by the Store's
// life: if it fails too, the locks expire.
func (p *gormProvider) releaseClaimTokens(toks []string) {
	if len(toks) == 0 {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(p.s.bg, 5*time.Second)
		defer cancel()
		res := p.s.db.WithContext(ctx).Exec(`UPDATE `+p.q(models.TableWorkerQueue)+` SET lock_token = NULL, locked_until = NULL,`+
			` attempt_count = CASE WHEN attempt_count > 0 THEN attempt_count - 1 ELSE 0 END WHERE lock_token IN ?`, toks)
		if res.Error == nil && res.RowsAffected > 0 {
			p.work.handOff(int(res.RowsAffected), true)
		}
	}()
}

// claimSessionStep is claimActivitySession as a claim step of the fetch
// transaction tx (boundedStep): busy when a lock wait on the session row
// exceeded claimWait.
func (p *gormProvider) claimSessionStep(tx *gorm.DB, sid, owner string, until, now int64) (won, busy bool, err error) {
	busy, err = p.boundedStep(tx, func() error {
		var err error
		if won, err = p.claimActivitySession(tx, sid, owner, until, now); err != nil {
			return fmt.Errorf("claim session %s: %w", sid, err)
		}
		return nil
	})
	return won, busy, err
}

// claimActivitySession claims or extends activity session sid for owner
// (lease end until) unless another owner's lease is live at now, and
// reports whether it did. One guarded upsert; on a dialect.Upserter the
// general form (the row FOR UPDATE SKIP LOCKED, a held row not waited for,
// then an INSERT or a guarded UPDATE).
func (p *gormProvider) claimActivitySession(tx *gorm.DB, sid, owner string, until, now int64) (bool, error) {
	as := p.q(models.TableActivitySessions)
	if !p.s.isUpserter() {
		res := tx.Exec(`INSERT INTO `+as+` AS s (session_id, worker_id, locked_until, last_activity_at) VALUES (?, ?, ?, ?)`+
			` ON CONFLICT (session_id) DO UPDATE SET worker_id = excluded.worker_id, locked_until = excluded.locked_until, last_activity_at = excluded.last_activity_at`+
			` WHERE s.locked_until <= ? OR s.worker_id = ?`, sid, owner, until, now, now, owner)
		return res.RowsAffected > 0, res.Error
	}
	var held []int64
	if err := tx.Raw(`SELECT locked_until FROM `+as+` WHERE session_id = ?`+p.s.forUpdateSkip(""), sid).Scan(&held).Error; err != nil {
		return false, err
	}
	if len(held) == 0 && p.s.has(CapSkipLocked) {
		// absent, or held by another transaction: a plain read tells them
		// apart without waiting (a held row: not won, the next item)
		var n int64
		if err := tx.Raw(`SELECT COUNT(*) FROM `+as+` WHERE session_id = ?`, sid).Scan(&n).Error; err != nil || n > 0 {
			return false, err
		}
	}
	if len(held) == 0 {
		err := tx.Exec(`INSERT INTO `+as+` (session_id, worker_id, locked_until, last_activity_at) VALUES (?, ?, ?, ?)`, sid, owner, until, now).Error
		if errors.Is(translateError(err), ErrConflict) {
			return false, nil // another worker inserted it first
		}
		return err == nil, err
	}
	res := tx.Exec(`UPDATE `+as+` SET worker_id = ?, locked_until = ?, last_activity_at = ? WHERE session_id = ? AND (locked_until <= ? OR worker_id = ?)`,
		owner, until, now, sid, now, owner)
	return res.RowsAffected > 0, res.Error
}

// Worker-queue lease tokens carry the row id: the token handed out is the
// random token stored in lock_token, a dot and the row id. Ack, renew and
// abandon then find the row by primary key and check the stored token, so
// the worker queue needs no lock_token index — a claim writes no index
// entry (on PostgreSQL it can be a HOT update) and an ack deletes from one
// index fewer. A token that does not parse matches nothing
// (ErrInvalidLockToken), like any unknown token.
//
// The token also names the row's instance_id (the worker queue's
// distribution column, docs/distributed.md): stored, "~", the instance id
// in unpadded base64url, ".", the row id; ack, renew and abandon pin it
// too, so each is routed to one shard. A token without the "~" part
// (handed out before this build) is checked by row id and stored token
// alone, as before.

// workToken returns the lease token of worker-queue row id of instance
// locked with stored.
func workToken(stored, instance string, id int64) string {
	return stored + "~" + base64.RawURLEncoding.EncodeToString([]byte(instance)) + "." + strconv.FormatInt(id, 10)
}

// workLease is a parsed worker lease token.
type workLease struct {
	stored   string // the token in lock_token
	id       int64  // the row id
	instance string // the row's instance_id, when routed
	routed   bool   // the token names the instance
}

// cond returns " AND instance_id = ?" and its argument for a routed
// lease, "" and none otherwise.
func (l workLease) cond() (string, []any) {
	if !l.routed {
		return "", nil
	}
	return " AND instance_id = ?", []any{l.instance}
}

// parseWorkToken splits a worker lease token (see workToken).
func parseWorkToken(tok string) (workLease, bool) {
	i := strings.LastIndexByte(tok, '.')
	if i <= 0 {
		return workLease{}, false
	}
	id, err := strconv.ParseInt(tok[i+1:], 10, 64)
	if err != nil || id <= 0 {
		return workLease{}, false
	}
	l := workLease{stored: tok[:i], id: id}
	if j := strings.LastIndexByte(l.stored, '~'); j > 0 {
		if b, err := base64.RawURLEncoding.DecodeString(l.stored[j+1:]); err == nil {
			l.stored, l.instance, l.routed = l.stored[:j], string(b), true
		}
	}
	return l, true
}

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
		return p.claimWork(ctx, g)
	},
		func(r *gcReq[uint64, workFetchReq]) { r.err = p.fetchWorkOne(r.ctx, r.in) })
	return nil
}

// fetchWorkOne runs one attempt alone: a claim of one.
func (p *gormProvider) fetchWorkOne(ctx context.Context, in workFetchReq) error {
	l, err := p.fetchWorkPlain(ctx, in.lockTimeout, in.tags)
	*in.out = l
	return err
}

// fetchWorkOnce is one fetch attempt: without a session config a claim of
// one item (alone, or coalesced with concurrent attempts under
// CapGroupCommit: the same claimWork), with one fetchWorkSession.
func (p *gormProvider) fetchWorkOnce(ctx context.Context, lockTimeout time.Duration, session *duroxide.SessionFetchConfig, tags duroxide.TagFilter) (*duroxide.WorkItemLease, *sessionClaim, error) {
	if session != nil {
		if p.routedWork() {
			return p.fetchWorkSessionRouted(ctx, lockTimeout, session, tags)
		}
		return p.fetchWorkSession(ctx, lockTimeout, session, tags)
	}
	if !p.s.groupCommit() {
		l, err := p.fetchWorkPlain(ctx, lockTimeout, tags)
		return l, nil, err
	}
	var lease *duroxide.WorkItemLease
	r := workFetchReq{lockTimeout: lockTimeout, tags: tags, out: &lease}
	err := p.s.gc.fetchWork.do(ctx, p.s.gcFlushes(), p.s.gc.fetchWorkSeq.Add(1), r, p.fetchWorkOne, p.fetchWorkBatch)
	return lease, nil, err
}

// fetchWorkSession claims, in one fetch transaction, the oldest eligible
// item for a worker with a session config: an item outside activity
// sessions, or of a session the owner holds or nobody holds (whose lease
// it then claims or extends; a lock wait on the session row over
// claimWait passes the item over). It also returns the session lease it
// took anew, if it did (sessionClaim).
func (p *gormProvider) fetchWorkSession(ctx context.Context, lockTimeout time.Duration, session *duroxide.SessionFetchConfig, tags duroxide.TagFilter) (*duroxide.WorkItemLease, *sessionClaim, error) {
	var lease *duroxide.WorkItemLease
	var sc *sessionClaim
	var corrupt error
	err := p.fetchTx(ctx, func(tx *gorm.DB) error {
		lease, sc, corrupt = nil, nil, nil
		now := p.s.nowMS()
		var skipped []any
		busySkips := 0
		for {
			tp, targs := tagSQL(tags)
			// held: the owner's live lease of the item's session (the WHERE
			// leaves no other live lease)
			sql := `SELECT q.id, q.session_id, s.worker_id IS NOT NULL AS held FROM ` + p.q(models.TableWorkerQueue) + ` q` +
				` LEFT JOIN ` + p.q(models.TableActivitySessions) + ` s ON s.session_id = q.session_id AND s.locked_until > ?` +
				` WHERE q.visible_at <= ? AND (q.lock_token IS NULL OR q.locked_until <= ?) AND ` + tp +
				` AND (q.session_id IS NULL OR s.worker_id = ? OR s.session_id IS NULL)`
			args := append(append([]any{now, now, now}, targs...), session.OwnerID)
			if !p.s.has(CapLockOf) {
				// without FOR UPDATE OF q a join would lock the session rows
				// too: the same condition with the session table in subqueries
				// (a locking read does not lock a subquery's rows)
				as := p.q(models.TableActivitySessions)
				sql = `SELECT q.id, q.session_id, EXISTS (SELECT 1 FROM ` + as + ` s WHERE s.session_id = q.session_id AND s.locked_until > ? AND s.worker_id = ?) AS held` +
					` FROM ` + p.q(models.TableWorkerQueue) + ` q` +
					` WHERE q.visible_at <= ? AND (q.lock_token IS NULL OR q.locked_until <= ?) AND ` + tp +
					` AND (q.session_id IS NULL OR NOT EXISTS (SELECT 1 FROM ` + as + ` s WHERE s.session_id = q.session_id AND s.locked_until > ?)` +
					` OR EXISTS (SELECT 1 FROM ` + as + ` s WHERE s.session_id = q.session_id AND s.locked_until > ? AND s.worker_id = ?))`
				args = append(append([]any{now, session.OwnerID, now, now}, targs...), now, now, session.OwnerID)
			}
			if len(skipped) > 0 {
				sql += ` AND q.id NOT IN (` + placeholders(len(skipped)) + `)`
				args = append(args, skipped...)
			}
			sql += ` ORDER BY q.id LIMIT 1`
			sql += p.s.forUpdateSkip("q")
			var cands []struct {
				ID        int64
				SessionID *string
				Held      bool
			}
			if err := tx.Raw(sql, args...).Scan(&cands).Error; err != nil {
				return fmt.Errorf("select work item: %w", err)
			}
			if len(cands) == 0 {
				return nil
			}
			c := cands[0]
			if c.SessionID != nil {
				// claim or extend the session lease; another live owner -> next item
				// (a lock wait over claimWait on the session row: next item)
				leaseMS := sessionLeaseMS(session, lockTimeout)
				won, busy, err := p.claimSessionStep(tx, *c.SessionID, session.OwnerID, now+leaseMS, now)
				if err != nil {
					return err
				}
				if busy {
					if busySkips++; busySkips > maxBusySkips {
						return nil
					}
				}
				if !won {
					skipped = append(skipped, c.ID)
					continue
				}
			}
			token := newLockToken()
			var locked []struct {
				WorkItem     string
				AttemptCount int32
				InstanceID   string
			}
			if err := p.s.updateReturning(tx, &locked, `UPDATE `+p.q(models.TableWorkerQueue)+` SET lock_token = ?, locked_until = ?, attempt_count = attempt_count + 1`+
				` WHERE id = ?`, `work_item, attempt_count, instance_id`, []any{token, now + durMS(lockTimeout), c.ID},
				`FROM `+p.q(models.TableWorkerQueue)+` WHERE id = ?`, c.ID); err != nil {
				return fmt.Errorf("lock work item %d: %w", c.ID, err)
			}
			if len(locked) == 0 {
				skipped = append(skipped, c.ID)
				continue
			}
			lease, corrupt = workItemLease(c.ID, locked[0].InstanceID, token, locked[0].WorkItem, locked[0].AttemptCount)
			if c.SessionID != nil && !c.Held {
				sc = &sessionClaim{sid: *c.SessionID, owner: session.OwnerID, at: now}
			}
			return nil
		}
	})
	if err != nil {
		return nil, nil, err
	}
	if corrupt != nil {
		return nil, nil, corrupt
	}
	return lease, sc, nil
}

// GetCustomStatus implements duroxide.Provider.
func (p *gormProvider) GetCustomStatus(ctx context.Context, instance string, lastSeenVersion uint64) (*duroxide.CustomStatus, error) {
	const op = "get_custom_status"
	var rows []struct {
		CustomStatus        *string
		CustomStatusVersion int64
	}
	if err := p.s.db.WithContext(ctx).Raw(`SELECT custom_status, custom_status_version FROM `+p.q(models.TableInstances)+
		` WHERE instance_id = ? AND custom_status_version > ?`, instance, int64(lastSeenVersion)).Scan(&rows).Error; err != nil {
		return nil, perr(op, err)
	}
	if len(rows) == 0 {
		return nil, nil
	}
	return &duroxide.CustomStatus{Status: rows[0].CustomStatus, Version: uint64(rows[0].CustomStatusVersion)}, nil
}
