package engine

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"time"

	"gorm.io/gorm"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/models"
)

// defaultPollInterval is how often a long-polling fetch re-checks the
// database when no wake-up arrives (delayed messages becoming visible,
// and on SQLite other processes). See WithPollInterval.
const defaultPollInterval = 20 * time.Millisecond

// listenIfPossible starts the cross-Store wake-up mechanism (CapWakeup)
// before a fetch waits.
func (p *gormProvider) listenIfPossible(pollTimeout time.Duration) {
	if p.waker != nil && pollTimeout > 0 {
		p.waker.Start()
	}
}

// Internal retries of retryable failures in fetch and ack (as duroxide-pg).
const (
	maxRetries = 3
	retryDelay = 50 * time.Millisecond
)

// fetchTx runs a fetch transaction. On PostgreSQL its commit does not wait
// for the WAL flush (synchronous_commit = off for this transaction only): a
// fetch only takes a lock and counts an attempt, so if a crash loses the
// commit the token simply no longer exists (its ack fails with
// ErrInvalidLockToken) and the messages are fetched again; any later
// synchronous commit (every ack) flushes it first. This saves one fsync per
// fetch, the dominant cost of a turn on PostgreSQL.
//
// Its lock waits are bounded by claimWait where the dialect can bound them
// (dialect.ClaimLockWait, whose settings also carry the asynchronous
// commit, in the one statement asyncCommitTx would cost; or
// dialect.ClaimLockWaitSession, a session setting made at the start of the
// transaction and restored at its end): the transaction
// then fails with ErrLockTimeout, and the fetch attempt claims nothing
// (claimWaitExpired).
func (p *gormProvider) fetchTx(ctx context.Context, fn func(tx *gorm.DB) error) error {
	if lw, ok := p.s.d.(dialect.ClaimLockWait); ok {
		return p.tx(ctx, func(tx *gorm.DB) error {
			if err := tx.Exec(`SELECT ` + lw.ClaimSettingsSQL(p.s.has(CapAsyncCommit), durMS(p.claimWait()))).Error; err != nil {
				return err
			}
			return fn(tx)
		})
	}
	if lw, ok := p.s.d.(dialect.ClaimLockWaitSession); ok {
		set, reset := lw.ClaimWaitSQL(durMS(p.claimWait()))
		return p.tx(ctx, func(tx *gorm.DB) (err error) {
			// The bound is set by the first claim step (boundedStep): a
			// fetch that finds no candidate (its candidate query skips
			// locked rows, never waits) costs no statement for it, which
			// keeps an idle waiting fetch at one query per poll.
			cb := &claimBound{set: set}
			p.claimBounds.Store(tx.Statement.ConnPool, cb)
			defer p.claimBounds.Delete(tx.Statement.ConnPool)
			// the session's own bound back before the transaction ends,
			// whether the fetch succeeded or not
			defer func() {
				if !cb.applied {
					return
				}
				if rerr := tx.Exec(reset).Error; err == nil {
					err = rerr
				}
			}()
			if p.s.has(CapAsyncCommit) {
				if err := p.s.asyncCommitTx(tx); err != nil {
					return err
				}
			}
			return fn(tx)
		})
	}
	if !p.s.has(CapAsyncCommit) {
		return p.tx(ctx, fn)
	}
	return p.tx(ctx, func(tx *gorm.DB) error {
		if err := p.s.asyncCommitTx(tx); err != nil {
			return err
		}
		return fn(tx)
	})
}

// claimLockWait bounds how long a claim waits for a row lock another
// transaction holds (an instance lock row or instance row under an ack in
// flight, a force delete, a user's long transaction), where the dialect
// can bound it (dialect.ClaimLockWait). Claims skip queue rows other claims hold
// (SKIP LOCKED, advisory try-locks); this bounds the waits that remain.
// Table locks (DDL, LOCK TABLE) are taken before a statement runs and are
// waited for like any statement's (WithLockTimeout bounds those).
const claimLockWait = time.Second

// claimWait is claimLockWait, or the Store's lock timeout
// (WithLockTimeout) when that is shorter.
func (p *gormProvider) claimWait() time.Duration {
	if lt := p.s.cfg.LockTimeout; lt > 0 && lt < claimLockWait {
		return lt
	}
	return claimLockWait
}

// claimWaitExpired returns nil for a claim that failed because a lock
// wait exceeded claimWait (the dialect bounds claim waits: the rows it
// waited for are held by another transaction, so there is nothing to
// claim now, and the long poll goes on), else err.
func (p *gormProvider) claimWaitExpired(err error) error {
	if err != nil && p.skipsBusy() && errors.Is(translateError(err), ErrLockTimeout) {
		return nil
	}
	return err
}

// skipsBusy reports whether a claim whose lock wait expired skips (the
// bound in force is the provider's own claimLockWait, which the dialect
// applies) rather than failing with ErrLockTimeout: when the Store's own
// WithLockTimeout is the shorter bound, its expiry is the caller's
// ErrLockTimeout, as WithLockTimeout documents.
func (p *gormProvider) skipsBusy() bool {
	if !p.boundsClaimWaits() {
		return false
	}
	lt := p.s.cfg.LockTimeout
	return lt == 0 || lt >= claimLockWait
}

// boundsClaimWaits reports whether the dialect bounds a fetch
// transaction's lock waits (dialect.ClaimLockWait or
// dialect.ClaimLockWaitSession).
func (p *gormProvider) boundsClaimWaits() bool {
	if _, ok := p.s.d.(dialect.ClaimLockWait); ok {
		return true
	}
	_, ok := p.s.d.(dialect.ClaimLockWaitSession)
	return ok
}

// claimBound is a fetch transaction's lock-wait bound on a
// dialect.ClaimLockWaitSession dialect: set by the transaction's first
// claim step (boundedStep), reset at its end when it was set.
type claimBound struct {
	set     string
	applied bool
}

// maxBusySkips bounds the candidates one fetch attempt skips because a
// lock wait on them exceeded claimWait (a table lock would make every
// candidate wait): past it the attempt claims nothing and the poll goes on.
const maxBusySkips = 4

// boundedStep runs fn, a claim step of the fetch transaction tx, so that a
// lock wait over claimWait fails only fn: where the dialect bounds claim
// waits (dialect.ClaimLockWait), fn runs after a savepoint, and on
// ErrLockTimeout the transaction rolls back to it and goes on (busy).
// Elsewhere fn just runs.
func (p *gormProvider) boundedStep(tx *gorm.DB, fn func() error) (busy bool, err error) {
	if v, ok := p.claimBounds.Load(tx.Statement.ConnPool); ok {
		if cb := v.(*claimBound); !cb.applied {
			if err := tx.Exec(cb.set).Error; err != nil {
				return false, err
			}
			cb.applied = true
		}
	}
	if !p.skipsBusy() {
		return false, fn()
	}
	if err := tx.SavePoint("claim").Error; err != nil {
		return false, err
	}
	err = fn()
	if err != nil && errors.Is(translateError(err), ErrLockTimeout) {
		if rerr := tx.RollbackTo("claim").Error; rerr != nil {
			return false, rerr
		}
		return true, nil
	}
	return false, err
}

// withRetry runs fn again (up to maxRetries, after 50, 100 and 150 ms)
// while it fails retryably (as translateError classifies it: deadlock,
// serialization failure, busy SQLite, lost connection). A non-zero deadline bounds the retries: a retry
// whose back-off would end at or after it is not made, and the last error
// is returned (so a long poll never sleeps past its poll timeout). Each
// retry is an Info event "retry" on the WithSlog logger (op, attempt,
// wait, the failure's class and the database's message).
func (p *gormProvider) withRetry(ctx context.Context, op string, deadline time.Time, fn func() error) error {
	var err error
	for attempt := 0; ; attempt++ {
		err = fn()
		// classify through translateError: fn returns driver errors as they
		// came (wrapped), translated only by perr at the end
		if err == nil || attempt >= maxRetries || !errors.Is(translateError(err), ErrRetryable) || ctx.Err() != nil {
			return err
		}
		wait := retryDelay * time.Duration(attempt+1)
		if !deadline.IsZero() && !time.Now().Add(wait).Before(deadline) {
			return err
		}
		noteRetry(ctx)
		p.s.cfg.Slog.LogAttrs(ctx, slog.LevelInfo, "agentstore: retrying after a transient database failure",
			slog.String("component", "agentstore"), slog.String("event", "retry"), slog.String("op", op),
			slog.Int("attempt", attempt+1), slog.Duration("wait", wait),
			slog.String("class", retryClass(err)), slog.String("error", err.Error()))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// retryClass names the class of a retried failure for the retry event.
func retryClass(err error) string {
	if errors.Is(translateError(err), ErrLockTimeout) {
		return "lock_timeout"
	}
	return "retryable"
}

// idleRecheck is how often a fetch waiting on a healthy cross-Store
// wake-up re-checks the database when no wake-up arrives and no message is
// due sooner (the poll interval, if longer, instead): a safety net for a
// lost notification, since every enqueue wakes the waiting fetchers.
const idleRecheck = time.Second

// longPoll calls try until it yields something, fails, or pollTimeout
// passes; between tries it waits for sig or the fallback interval. try gets
// the poll's deadline for its internal retries (zero for a short poll,
// pollTimeout 0, which keeps duroxide's three retries). While sig's
// wake-up is healthy (sig.healthy), an empty try is followed by one
// sig.nextDue query (after a wake-up or once the last answer is due; a
// plain re-check reuses it) and the wait lasts until that time, a
// wake-up, or max(fallback, idleRecheck), whichever comes first: about
// one claim statement per idle second per waiting fetch.
// (nextDue is set only on a Store on the real clock, so due times are
// Unix ms of time.Now.) due, when not nil, is asked in place of
// sig.nextDue (a waiting Dequeue asks about its own session), and only
// where sig.nextDue is set. With keepOnReady, a wake-up by an enqueue of
// this Store whose items were all visible at once (signal.notifyReady)
// keeps the last answer: those items were claimable at once, so an empty
// try after it means another fetcher took them (or this one does not
// take them), and they bring no new due time (their leases end a lock
// timeout later, past idleRecheck). It saves the next-due query of every
// fetcher that loses an item to another.
func longPoll[T any](ctx context.Context, sig *signal, due func(ctx context.Context, since int64) (int64, bool, error), keepOnReady bool,
	pollTimeout, fallback time.Duration, try func(deadline time.Time) (*T, error)) (*T, error) {
	return longPollAs(ctx, sig, due, keepOnReady, false, false, nil, pollTimeout, fallback, func(deadline time.Time, _ bool) (*T, error) {
		return try(deadline)
	})
}

// longPollAs is longPoll for a fetcher that, with plain set, can take any
// item a hand-off announces (signal.handOff): it enlists before each try
// and is woken by a hand-off of its own as well as by the broadcast, so a
// new item wakes one waiting fetcher, not all (the others' claims would
// find nothing). A hand-off it received but will not use (it returns:
// a claim, an error, the end of its poll or of ctx) goes on to the next
// plain fetcher (signal.passOn), so no item waits for a re-check because
// its wake-up went to a fetcher that left.
//
// quiet (the signal's one class of quiet fetchers: they all claim the
// same items) keeps what an empty claim and its next-due answer learnt
// across calls (signal.recordQuiet): a call whose first claim would find
// nothing, as far as the wake-ups since tell (signal.quietSkip), waits at
// once instead, for a wake-up, that due time, or the re-check idleRecheck
// after that empty claim. A loop's fetch right after its previous item
// thus costs no claim while nothing new came.
//
// lt, when not nil (a plain worker fetch), takes leases handed over
// in-process (signal.deliver): a lease handed to this fetcher is returned
// through lt.take (which renews it when it was stamped longer ago than the
// slack) instead of a claim; one it cannot use (its own claim found an
// item, ctx ended) is released through lt.drop. Acks reserve parked
// fetchers (in their wait); a fetcher in its claim is handed a lease only
// when none of those is left (signal.deliver).
//
// try is told idle when the wait before it ended at its timer with no
// wake-up (a re-check at a due time, after idleRecheck or at the poll
// interval, following an empty claim or a skipped one): only the clock can
// have made something claimable since, as far as this Store knows.
func longPollAs[T any](ctx context.Context, sig *signal, due func(ctx context.Context, since int64) (int64, bool, error), keepOnReady, plain, quiet bool,
	lt *leaseTake[T], pollTimeout, fallback time.Duration, try func(deadline time.Time, idle bool) (*T, error)) (*T, error) {
	nextDue := sig.nextDue
	if nextDue != nil && due != nil {
		nextDue = due
	}
	deadline := time.Now().Add(pollTimeout)
	retryBound := deadline
	if pollTimeout <= 0 {
		retryBound = time.Time{}
	}
	// due is the last nextDue answer (dueOK: there is one); fresh means
	// it must be asked again: first round, after a wake-up, once due.
	var dueAt, askedAt int64
	dueOK, fresh, answered := false, true, false
	var prevSeq uint64 // the signal's wake-up count at the last round's start
	// owed: the last round's wait ended with a hand-off (no lease) for
	// this round's try to use; a try that returns without having claimed
	// with it (its context ended first, a failure) passes it on, so the
	// item's wake-up is not lost with this fetcher
	owed := false
	for first := true; ; first = false {
		g := sig.gen()
		var h *handoff
		var hch <-chan struct{}
		if plain {
			var takes time.Duration
			if lt != nil {
				takes = lt.lockTimeout
			}
			h = sig.enlistAs(takes)
			hch = h.ch
		}
		// leave takes this fetcher off the hand-off list when it returns,
		// passing on a hand-off it will not use; it returns a lease handed
		// to it, which the caller must use or drop
		leave := func() *handedLease {
			if h != nil && sig.leave(h) {
				if h.lease != nil {
					return h.lease
				}
				sig.passOn()
			}
			return nil
		}
		seq0 := sig.seqNow()
		idle := !first && seq0 == prevSeq // no wake-up since the last round began: its wait ended at the timer
		prevSeq = seq0
		since := time.Now().UnixMilli()
		healthy := sig.healthy != nil && nextDue != nil && sig.healthy()
		// recheckBy: a skipped claim is made at the latest idleRecheck
		// after the empty one it relies on
		var recheckBy int64
		// (only where other Stores' commits wake this one: publish is set
		// with a cross-Store wake-up)
		if quiet && first && pollTimeout > 0 && healthy && sig.publish != nil {
			if q, ok := sig.quietSkip(since); ok {
				dueAt, dueOK, askedAt, answered, fresh = q.due, q.dueOK, q.at, true, false
				recheckBy = q.at + idleRecheck.Milliseconds()
			}
		}
		if recheckBy == 0 {
			v, err := try(retryBound, idle)
			if err != nil || v != nil {
				if v != nil && quiet {
					sig.tookQuiet()
				}
				if hl := leave(); hl != nil {
					lt.drop(hl)
				}
				if owed && v == nil {
					sig.passOn()
				}
				return v, err
			}
			owed = false // its claim ran and found nothing: the hand-off's item went to another
		}
		remaining := time.Until(deadline)
		if remaining <= 0 {
			if hl := leave(); hl != nil {
				if v, err := lt.take(hl); err != nil || v != nil {
					return v, err
				}
			}
			return nil, nil
		}
		wait := fallback
		if healthy {
			// Anything committed since ch was taken has woken it; what
			// remains is time: the next delay or lock expiry. A re-check
			// after idleRecheck without a wake-up keeps the last answer
			// (a lock taken since by another Store is seen expired by the
			// claim at a re-check).
			// A negative answer (a message waits for a locked instance)
			// keeps the poll interval and is asked again after idleRecheck.
			if fresh || (dueOK && dueAt <= since && (dueAt >= 0 || since-askedAt >= idleRecheck.Milliseconds())) {
				var err error
				dueAt, dueOK, err = nextDue(ctx, since)
				fresh, askedAt = err != nil, since
				answered = answered || err == nil
			}
			if !fresh {
				switch {
				case dueOK && dueAt < 0:
					wait = fallback
				case dueOK:
					wait = min(max(fallback, idleRecheck), max(time.Duration(dueAt-time.Now().UnixMilli())*time.Millisecond, time.Millisecond))
				default:
					wait = max(fallback, idleRecheck)
				}
				if quiet && recheckBy == 0 {
					sig.recordQuiet(seq0, since, dueAt, dueOK)
				}
			}
			if recheckBy != 0 {
				wait = min(wait, max(time.Duration(recheckBy-time.Now().UnixMilli())*time.Millisecond, time.Millisecond))
			}
		}
		t := time.NewTimer(min(remaining, wait))
		if h != nil && lt != nil {
			sig.park(h)
		}
		if sig.waiting != nil {
			sig.waiting(1)
		}
		select {
		case <-ctx.Done():
		case <-g.ch:
			fresh = fresh || !(keepOnReady && g.ready && answered)
			sig.woke(ctx)
		case <-hch:
			// handed off: items visible at once (ready), as notifyReady's
			// when the signal's hand-offs are ready ones
			fresh = fresh || !(keepOnReady && answered)
			sig.woke(ctx)
		case <-t.C:
		}
		t.Stop()
		if sig.waiting != nil {
			sig.waiting(-1)
		}
		if err := ctx.Err(); err != nil {
			if hl := leave(); hl != nil {
				lt.drop(hl)
			}
			return nil, err
		}
		// a hand-off received meanwhile is used by the next try (owed);
		// a lease handed over is the item (unless it was lost meanwhile)
		if h != nil && sig.leave(h) {
			if h.lease == nil {
				owed = true
			} else if v, err := lt.take(h.lease); err != nil || v != nil {
				return v, err
			}
		}
	}
}

// leaseTake is what a plain worker fetch does with leases handed over
// in-process (longPollAs): lockTimeout is its lock timeout (a lease is
// handed over only when it was stamped for the same), take returns the
// lease as the fetch's result (renewed when stamped longer ago than the
// slack; nil, nil when it was lost meanwhile, a cancelled activity: the
// poll goes on), drop releases one the fetch will not use.
type leaseTake[T any] struct {
	lockTimeout time.Duration
	take        func(hl *handedLease) (*T, error)
	drop        func(hl *handedLease)
}

// minDue runs a query of one column t (MIN over UNION ALL branches) and
// returns its value.
func (p *gormProvider) minDue(ctx context.Context, q string, args ...any) (int64, bool, error) {
	var t sql.NullInt64
	if _, err := scanRow(p.s.db.WithContext(ctx), q, args, &t); err != nil {
		return 0, false, err
	}
	return t.Int64, t.Valid, nil
}

// orchNextDue: the earliest future visible_at or lock expiry of an
// orchestrator-queue message, or instance-lock expiry, after since. While
// a visible message waits for a locked instance (a turn in flight, whose
// ack need not wake anyone), it is -1: the fetch keeps re-checking at the
// poll interval, as without a healthy wake-up.
func (p *gormProvider) orchNextDue(ctx context.Context, since int64) (int64, bool, error) {
	oq, il := p.q(models.TableOrchestratorQueue), p.q(models.TableInstanceLocks)
	return p.minDue(ctx, `SELECT MIN(x.t) AS t FROM (SELECT MIN(visible_at) AS t FROM `+oq+` WHERE visible_at > ?`+
		` UNION ALL SELECT MIN(locked_until) AS t FROM `+oq+` WHERE lock_token IS NOT NULL AND locked_until > ?`+
		` UNION ALL SELECT MIN(locked_until) AS t FROM `+il+` WHERE locked_until > ?`+
		` UNION ALL SELECT -1 AS t WHERE EXISTS (SELECT 1 FROM `+oq+` q JOIN `+il+` l ON l.instance_id = q.instance_id`+
		` WHERE l.locked_until > ? AND q.visible_at <= ? AND q.lock_token IS NULL)) x`,
		since, since, since, since, since)
}

// workNextDue: the earliest future visible_at or lock expiry of a
// worker-queue item, or activity-session lease expiry, after since.
func (p *gormProvider) workNextDue(ctx context.Context, since int64) (int64, bool, error) {
	wq, as := p.q(models.TableWorkerQueue), p.q(models.TableActivitySessions)
	vis, args := `SELECT MIN(visible_at) AS t FROM `+wq+` WHERE visible_at > ?`, []any{since}
	if !p.s.has(CapPartialIndexes) {
		// MariaDB's "ready" index leads with (session_id, tag) (V18): the
		// plain rows' first due time is its first entry after since, the
		// others' a walk of the tagged and session-bound rows only
		vis = `SELECT MIN(visible_at) AS t FROM ` + wq + ` WHERE session_id IS NULL AND tag IS NULL AND visible_at > ?` +
			` UNION ALL SELECT MIN(visible_at) AS t FROM ` + wq + ` WHERE session_id IS NOT NULL AND visible_at > ?` +
			` UNION ALL SELECT MIN(visible_at) AS t FROM ` + wq + ` WHERE session_id IS NULL AND tag IS NOT NULL AND visible_at > ?`
		args = []any{since, since, since}
	}
	return p.minDue(ctx, `SELECT MIN(x.t) AS t FROM (`+vis+
		` UNION ALL SELECT MIN(locked_until) AS t FROM `+wq+` WHERE lock_token IS NOT NULL AND locked_until > ?`+
		` UNION ALL SELECT MIN(locked_until) AS t FROM `+as+` WHERE locked_until > ?) x`, append(args, since, since)...)
}

// Lease validity. A claim computes its lease end from a clock read before
// its statements run (the candidate query needs it), so a claim that
// waited (on a lock another transaction holds, a busy database, a
// descheduled process) would hand out a lease already partly or wholly
// spent: every ack with it would fail, and another fetcher could take the
// item at once (duroxide#46/#47, duroxide-pg#21). So every fetch reads the
// clock again when its claim returns and, when more than leaseSlackMS has
// passed since the fetch started, re-stamps the lease (the instance lock
// and its messages, or the worker item and its activity session) to end
// exactly the lock timeout after that second reading. A lease a fetch
// returns therefore ends at least lockTimeout - leaseSlackMS after the
// fetch returns, and exactly start + lockTimeout when the claim was quick.

// maxLeaseSlack bounds leaseSlackMS.
const maxLeaseSlack = 100 * time.Millisecond

// maxRestamps bounds the re-stamps of one fetch (each re-stamp that itself
// took longer than the slack is followed by another); when the last one
// was slow too, the item is handed out if its lease still has more than
// half its time or the fetch spent at most shortLeaseSpent of it (a lease
// of a few milliseconds, whose slack no round trip fits in), else the
// claim is released and not handed out.
const maxRestamps = 3

// shortLeaseSpent: see maxRestamps.
const shortLeaseSpent = 3 * maxLeaseSlack

// restampedEnough reports whether a lease of lt ms last stamped at start
// may still be handed out at now after maxRestamps slow re-stamps: more
// than half its time left, or at most shortLeaseSpent spent (a lease too
// short for any slack).
func restampedEnough(now, start, lt int64) bool {
	return now-start <= max(lt/2, shortLeaseSpent.Milliseconds())
}

// leaseSlackMS is how much of its lease a fetch may have spent when it
// returns: a twentieth of the lock timeout, at most maxLeaseSlack.
func leaseSlackMS(lockTimeout time.Duration) int64 {
	return min(durMS(lockTimeout)/20, maxLeaseSlack.Milliseconds())
}
