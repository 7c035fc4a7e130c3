package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// FetchOrchestrationItem implements duroxide.Provider.
func (p *gormProvider) FetchOrchestrationItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, filter *duroxide.DispatcherCapabilityFilter) (*duroxide.OrchestrationItem, error) {
	const op = "fetch_orchestration_item"
	if lockTimeout <= 0 {
		return nil, perr(op, invalidf("lock timeout must be positive"))
	}
	if filter != nil && len(filter.SupportedDuroxideVersions) == 0 {
		return nil, nil // supports nothing
	}
	p.listenIfPossible(pollTimeout)
	// a fetch without a capability filter can take any instance's
	// messages: a hand-off of a new message wakes one such fetch
	// (and is quiet: all such claim the same messages)
	item, err := longPollAs(ctx, p.orch, nil, false, filter == nil, filter == nil, nil, pollTimeout, p.s.cfg.PollInterval, func(deadline time.Time, _ bool) (*duroxide.OrchestrationItem, error) {
		if err := ctx.Err(); err != nil {
			return nil, err // no claim for a call that already ended (claimContext would run it)
		}
		var it *duroxide.OrchestrationItem
		err := p.withRetry(ctx, "fetch_orchestration_item", deadline, func() error {
			var e error
			start := p.s.nowMS()
			// the claim runs to its end (claimContext): its outcome known
			cctx, cancel := p.claimContext(ctx)
			it, e = p.fetchOrchOnce(cctx, lockTimeout, filter)
			cancel()
			if e != nil || it == nil {
				return p.claimWaitExpired(e)
			}
			it, e = p.keepOrchLease(ctx, it, start, lockTimeout)
			return e
		})
		if ctx.Err() != nil {
			// the caller gave up meanwhile: a claimed instance is given back
			// (unlocked, its messages' attempts uncounted), not left locked
			// until the lock timeout; the error is the caller's, not the
			// claim context's (claimContext)
			if it != nil {
				p.releaseOrchLease(ctx, parseOrchToken(it.LockToken))
				p.orch.handOff(1, false)
			}
			return nil, ctx.Err()
		}
		return it, err
	})
	return item, perr(op, err)
}

// keepOrchLease re-stamps the lease of it, claimed by a fetch that read
// its clock at start, when the claim took longer than the slack (see
// "Lease validity"). A lease another fetcher took over meanwhile (it had
// expired during the claim) or whose instance was deleted is not handed
// out: nil, nil; nor is one whose maxRestamps re-stamps were each slower
// than the slack and which has less than half its time left (see
// maxRestamps; it is released). A failed re-stamp releases the claim.
func (p *gormProvider) keepOrchLease(ctx context.Context, it *duroxide.OrchestrationItem, start int64, lockTimeout time.Duration) (*duroxide.OrchestrationItem, error) {
	slack, lt := leaseSlackMS(lockTimeout), durMS(lockTimeout)
	for i := 0; ; i++ {
		now := p.s.nowMS()
		if now-start <= slack {
			return it, nil
		}
		l := parseOrchToken(it.LockToken)
		if i == maxRestamps { // every re-stamp was slow too
			if restampedEnough(now, start, lt) {
				return it, nil
			}
			p.releaseOrchLease(ctx, l) // the lease would end soon after the call returns: give the item back
			return nil, nil
		}
		var held bool
		ic, _ := l.cond()
		err := p.tx(ctx, func(tx *gorm.DB) error {
			res := tx.Exec(`UPDATE `+p.q(models.TableInstanceLocks)+` SET locked_until = ? WHERE lock_token = ?`+ic, l.args(now+lt)...)
			if res.Error != nil || res.RowsAffected == 0 {
				return res.Error
			}
			held = true
			return tx.Exec(`UPDATE `+p.q(models.TableOrchestratorQueue)+` SET locked_until = ? WHERE lock_token = ?`+ic, l.args(now+lt)...).Error
		})
		if err != nil {
			p.releaseOrchLease(ctx, l)
			return nil, fmt.Errorf("renew the lease of %s after a slow claim: %w", it.Instance, err)
		}
		if !held {
			return nil, nil
		}
		start = now
	}
}

// releaseOrchLease undoes a claim whose fetch then failed: the lock row
// goes, the messages are unlocked and their attempt uncounted. Best
// effort: if it fails too, the lock expires.
func (p *gormProvider) releaseOrchLease(ctx context.Context, l orchLease) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	ic, _ := l.cond()
	_ = p.tx(ctx, func(tx *gorm.DB) error {
		if err := tx.Exec(`DELETE FROM `+p.q(models.TableInstanceLocks)+` WHERE lock_token = ?`+ic, l.args()...).Error; err != nil {
			return err
		}
		return tx.Exec(`UPDATE `+p.q(models.TableOrchestratorQueue)+` SET lock_token = NULL, locked_until = NULL,`+
			` attempt_count = CASE WHEN attempt_count > 0 THEN attempt_count - 1 ELSE 0 END WHERE lock_token = ?`+ic, l.args()...).Error
	})
}

type orchMsgRow struct {
	ID           int64
	WorkItem     string
	AttemptCount int32
}

// capabilitySQL returns the predicate matching executions e compatible with
// filter: unpinned, or inside any range (row-value comparison, no packing).
func capabilitySQL(filter *duroxide.DispatcherCapabilityFilter) (string, []any) {
	var b strings.Builder
	var args []any
	b.WriteString("(e.duroxide_version_major IS NULL")
	for _, r := range filter.SupportedDuroxideVersions {
		b.WriteString(" OR ((e.duroxide_version_major, COALESCE(e.duroxide_version_minor, 0), COALESCE(e.duroxide_version_patch, 0)) >= (?, ?, ?)" +
			" AND (e.duroxide_version_major, COALESCE(e.duroxide_version_minor, 0), COALESCE(e.duroxide_version_patch, 0)) <= (?, ?, ?))")
		args = append(args, int64(r.Min.Major()), int64(r.Min.Minor()), int64(r.Min.Patch()),
			int64(r.Max.Major()), int64(r.Max.Minor()), int64(r.Max.Patch()))
	}
	b.WriteString(")")
	return b.String(), args
}

// The orchestration candidate comes from four levels; each of the first
// three answers "undecided" when it cannot decide, and the fetch asks the
// next level. No level's statement is recursive, and none has a
// correlated subquery but the scan's lock check, pinned by instance_id to
// the queue row of its outer query (Citus refuses recursive CTEs and
// other correlated subqueries on row-distributed tables, and pushes that
// one down to each shard; docs/distributed.md): the window and the walk
// read the excluded instances by uncorrelated subqueries restricted to
// the instances at hand. TestOrchFetchStatementsCitusShapes checks it.
const (
	// orchCandWindow looks at the first orchCandidateWindow visible
	// messages of the visible index (visible_at, id) only.
	orchCandWindow = iota
	// orchCandWalkOne is the walk's first read (orchCandWalk) as a
	// candidate query: it decides when the read holds the whole queue
	// (fewer than orchWalkSlice entries), so that the claim statement
	// that embeds it needs no round trip of its own.
	orchCandWalkOne
	// orchCandWalk reads the (instance_id, visible_at, id) index in
	// bounded slices from the client (walkOrchCandidate): each slice
	// ends with an instance whose remaining messages the next slice
	// skips by its seek, so an excluded instance's backlog costs at most
	// one slice; the fetch then claims the instance the walk named.
	orchCandWalk
	// orchCandScan reads the visible index until the first eligible
	// message (what the window does, without its bound).
	orchCandScan
)

const (
	// orchCandidateWindow is how many visible messages the window level
	// inspects.
	orchCandidateWindow = 8
	// maxOrchSkip bounds the instances a claim passes over for the
	// Store's other claims in flight (orchCandidateSQL's skip)
	maxOrchSkip = 3
	// orchWalkSlice is how many index entries one walk read takes.
	orchWalkSlice = 256
	// orchWalkReads is how many slices the walk reads before it gives up
	// (the queue then holds many instances or several long backlogs, and
	// a scan past the excluded messages is the cheaper way).
	orchWalkReads = 4
)

// orchExcluded returns the conditions that drop the rows of src (a CTE of
// queue rows with an instance_id column) whose instance is excluded: a
// live instance lock, incompatible with filter, or tried. Uncorrelated
// subqueries, each restricted to src's instances (a probe of the locks'
// and instances' keys per instance of src).
func (p *gormProvider) orchExcluded(src string, now int64, filter *duroxide.DispatcherCapabilityFilter, tried []string) (string, []any) {
	w := ` AND ` + src + `.instance_id NOT IN (SELECT il.instance_id FROM ` + p.q(models.TableInstanceLocks) + ` il` +
		` WHERE il.instance_id IN (SELECT instance_id FROM ` + src + `) AND il.locked_until > ?)`
	args := []any{now}
	if filter != nil {
		c, cargs := capabilitySQL(filter)
		w += ` AND ` + src + `.instance_id NOT IN (SELECT i.instance_id FROM ` + p.q(models.TableInstances) + ` i JOIN ` + p.q(models.TableExecutions) + ` e` +
			` ON e.instance_id = i.instance_id AND e.execution_id = i.current_execution_id WHERE i.instance_id IN (SELECT instance_id FROM ` + src + `) AND NOT ` + c + `)`
		args = append(args, cargs...)
	}
	if len(tried) > 0 {
		w += ` AND ` + src + `.instance_id NOT IN (` + placeholders(len(tried)) + `)`
		args = append(args, strArgs(tried)...)
	}
	return w, args
}

// orchCandidateSQL returns the query, at level orchCandWindow,
// orchCandWalkOne or orchCandScan, for the oldest visible, unclaimed
// message of an unlocked, compatible instance not in tried (one
// instance_id column, at most one row), taken without row locks so a
// failed candidate blocks nobody. The window returns a row with a NULL
// instance_id when it cannot decide (the window is full of excluded
// instances' messages), the walk's first read when the queue is longer
// than the read: walk on (walkOrchCandidate), and scan when the walk gives
// up. Every level picks the message the plain ORDER BY visible_at, id
// over every eligible message would; except that at the window level with
// skip > 0 (other fetches of the Store are claiming right now: see
// orchClaiming) it picks the instance skip places further down the
// window's eligible instances (each ranked by its oldest message), or the
// last one there is when there are fewer: the instances before it are
// likely the ones those fetches are taking, and a claim of the same
// instance would lose to them (a wasted statement).
func (p *gormProvider) orchCandidateSQL(now int64, filter *duroxide.DispatcherCapabilityFilter, tried []string, level, skip int) (string, []any) {
	oq, il := p.q(models.TableOrchestratorQueue), p.q(models.TableInstanceLocks)
	if level == orchCandWalkOne {
		b, best, args := p.orchWalkParts(now, filter, tried, nil)
		n := strconv.Itoa(orchWalkSlice)
		return b + ` SELECT u.instance_id FROM (SELECT 0 AS ph, c.instance_id FROM ` + best + ` c WHERE (SELECT COUNT(*) FROM b) < ` + n +
			// the read-full row
			` UNION ALL SELECT 1, NULL WHERE (SELECT COUNT(*) FROM b) >= ` + n + `) u ORDER BY u.ph LIMIT 1`, args
	}
	if level == orchCandWindow {
		w, args := p.orchExcluded("w", now, filter, tried)
		args = append([]any{now, now}, args...)
		n := strconv.Itoa(orchCandidateWindow)
		win := `WITH w AS (SELECT q.id, q.instance_id, q.visible_at, q.lock_token, q.locked_until FROM ` + oq + ` q` +
			` WHERE q.visible_at <= ? ORDER BY q.visible_at, q.id LIMIT ` + n + `)`
		eligible := ` WHERE (w.lock_token IS NULL OR w.locked_until <= ?)` + w
		// the window-full row: sorts after every candidate
		full := ` UNION ALL SELECT 1, NULL, NULL, NULL WHERE (SELECT COUNT(*) FROM w) >= ` + n + `) u`
		if skip == 0 {
			return win + ` SELECT u.instance_id FROM (SELECT 0 AS ph, w.instance_id, w.visible_at, w.id FROM w` + eligible + full +
				` ORDER BY u.ph, u.visible_at, u.id LIMIT 1`, args
		}
		// the first skip+1 eligible instances, each ranked by its oldest
		// message (the window-full row after them), and of those the last
		// eligible one
		return win + ` SELECT t.instance_id FROM (SELECT u.ph, u.instance_id, u.va, u.mid FROM` +
			` (SELECT 0 AS ph, w.instance_id, MIN(w.visible_at) AS va, MIN(w.id) AS mid FROM w` + eligible + ` GROUP BY w.instance_id` + full +
			` ORDER BY u.ph, u.va, u.mid LIMIT ` + strconv.Itoa(skip+1) + `) t ORDER BY t.ph, t.va DESC, t.mid DESC LIMIT 1`, args
	}
	// the scan: the queue table itself is the outer query, so the lock
	// check may be a subquery correlated by instance_id alone (co-located
	// with the queue: Citus pushes it down to each shard; MariaDB then
	// keeps the visible index's order, where an anti-join sorts)
	joins, where := ``, ` WHERE q.visible_at <= ? AND (q.lock_token IS NULL OR q.locked_until <= ?)`+
		` AND NOT EXISTS (SELECT 1 FROM `+il+` il WHERE il.instance_id = q.instance_id AND il.locked_until > ?)`
	args := []any{now, now, now}
	if filter != nil {
		joins = ` LEFT JOIN ` + p.q(models.TableInstances) + ` i ON i.instance_id = q.instance_id` +
			` LEFT JOIN ` + p.q(models.TableExecutions) + ` e ON e.instance_id = i.instance_id AND e.execution_id = i.current_execution_id`
		c, cargs := capabilitySQL(filter)
		where += ` AND ` + c
		args = append(args, cargs...)
	}
	if len(tried) > 0 {
		where += ` AND q.instance_id NOT IN (` + placeholders(len(tried)) + `)`
		args = append(args, strArgs(tried)...)
	}
	return `SELECT q.instance_id FROM ` + oq + ` q` + joins + where + ` ORDER BY q.visible_at, q.id LIMIT 1`, args
}

// orchNamedCandidateSQL is the candidate query naming instance (the walk's
// choice).
func (p *gormProvider) orchNamedCandidateSQL(instance string) (string, []any) {
	return `SELECT ` + p.s.castParam("text") + ` AS instance_id`, []any{instance}
}

// orchWalkParts returns the parts of a walk read after instance after
// (from the start when nil): the WITH clause of CTE b, the next
// orchWalkSlice entries of the (instance_id, visible_at, id) index, and a
// derived table (instance_id, visible_at, id) with the oldest visible,
// unclaimed message of an eligible instance among them (none if there is
// none), with the arguments of both.
func (p *gormProvider) orchWalkParts(now int64, filter *duroxide.DispatcherCapabilityFilter, tried []string, after *string) (with, best string, args []any) {
	from := ``
	if after != nil {
		from, args = ` WHERE q.instance_id > ?`, []any{*after}
	}
	w, wargs := p.orchExcluded("b", now, filter, tried)
	args = append(append(args, now, now), wargs...)
	// (forceIndex: MariaDB without statistics may read the whole queue
	// and sort it for this LIMIT instead of reading the index in order)
	return `WITH b AS (SELECT q.instance_id, q.visible_at, q.id, q.lock_token, q.locked_until FROM ` + p.q(models.TableOrchestratorQueue) + ` q` +
			p.s.forceIndex("orchestrator_queue_instance_visible") + from +
			` ORDER BY q.instance_id, q.visible_at, q.id LIMIT ` + strconv.Itoa(orchWalkSlice) + `)`,
		`(SELECT b.instance_id, b.visible_at, b.id FROM b WHERE b.visible_at <= ? AND (b.lock_token IS NULL OR b.locked_until <= ?)` + w +
			` ORDER BY b.visible_at, b.id LIMIT 1)`, args
}

// orchWalkSQL returns one walk read (orchWalkParts): a row (k 0:
// instance_id, visible_at, id) with the oldest visible, unclaimed message
// of an eligible instance, if any, and a row (k 1) with the last instance
// id read and how many entries were read (in visible_at).
func (p *gormProvider) orchWalkSQL(now int64, filter *duroxide.DispatcherCapabilityFilter, tried []string, after *string) (string, []any) {
	with, best, args := p.orchWalkParts(now, filter, tried, after)
	return with + ` SELECT 0 AS k, c.instance_id, c.visible_at, c.id FROM ` + best + ` c` +
		` UNION ALL SELECT 1, MAX(b.instance_id), COUNT(*), NULL FROM b`, args
}

// walkOrchCandidate is the walk level (after orchCandWalkOne found the
// queue longer than one read): it reads the queue in instance
// order, orchWalkSlice index entries at a time (orchWalkSQL), each read
// after the last instance of the one before (the rest of that instance's
// messages is skipped: its oldest ones, which decide its candidate, were
// in the read, visible ones first), and names the oldest visible,
// unclaimed message's instance among the eligible ones ("" when there is
// none). Within an instance a claimed message (a live lease) implies a
// live instance lock, so an instance cut off by a read is decided by what
// the read saw. decided is false when the queue holds more than
// orchWalkReads reads: scan.
func (p *gormProvider) walkOrchCandidate(db *gorm.DB, now int64, filter *duroxide.DispatcherCapabilityFilter, tried []string) (instance string, decided bool, err error) {
	var (
		after       *string
		bestVA, bID int64
	)
	for range orchWalkReads {
		q, args := p.orchWalkSQL(now, filter, tried, after)
		var rows []struct {
			K          int
			InstanceID *string
			VisibleAt  *int64
			ID         *int64
		}
		if err := scanAll(db, &rows, q, args...); err != nil {
			return "", false, fmt.Errorf("walk the orchestrator queue: %w", err)
		}
		var read int64
		after = nil
		for _, r := range rows {
			switch {
			case r.K == 0 && r.InstanceID != nil && r.VisibleAt != nil && r.ID != nil:
				if instance == "" || *r.VisibleAt < bestVA || (*r.VisibleAt == bestVA && *r.ID < bID) {
					instance, bestVA, bID = *r.InstanceID, *r.VisibleAt, *r.ID
				}
			case r.K == 1 && r.VisibleAt != nil:
				read, after = *r.VisibleAt, r.InstanceID
			}
		}
		if read < orchWalkSlice || after == nil {
			return instance, true, nil // the queue's end
		}
	}
	return "", false, nil
}

// fetchOrchOnce is one fetch attempt (fetchOrchLoop). Where the dialect
// claims a candidate in one statement (dialect.OrchFetchStatement, with
// CapFastPaths and CapAdvisoryLocks) each claim is its own autocommit
// statement (no BEGIN/COMMIT: one round trip per candidate, two when the
// claim cannot vouch for the metadata it read and the engine reads it
// after the lock); otherwise the loop runs
// the portable sequence in one fetch transaction (fetchTx).
func (p *gormProvider) fetchOrchOnce(ctx context.Context, lockTimeout time.Duration, filter *duroxide.DispatcherCapabilityFilter) (*duroxide.OrchestrationItem, error) {
	var item *duroxide.OrchestrationItem
	var corrupt error
	st, one := p.s.d.(dialect.OrchFetchStatement)
	if one && p.s.has(CapFastPaths) && p.s.has(CapAdvisoryLocks) {
		var err error
		if item, corrupt, err = p.fetchOrchLoop(ctx, p.s.db.WithContext(ctx), st, lockTimeout, filter, ""); err != nil {
			return nil, err
		}
	} else {
		seq0 := p.orch.seqNow()
		first, found, err := p.orchCandidateBeforeTx(ctx, filter, seq0)
		if err != nil || !found {
			return nil, err
		}
		if err := p.fetchTx(ctx, func(tx *gorm.DB) error {
			var err error
			item, corrupt, err = p.fetchOrchLoop(ctx, tx, nil, lockTimeout, filter, first)
			return err
		}); err != nil {
			return nil, err
		}
		if item == nil { // see orchIdle
			p.orchIdle.Store(seq0 + 1)
		} else {
			p.orchIdle.Store(0)
		}
	}
	if corrupt != nil {
		return nil, corrupt // the lock and the counted attempt are kept; the row is reported
	}
	return item, nil
}

// orchCandidateBeforeTx is, on a dialect whose database runs in-process
// (SQLite: one writer at a time), for a fetch of a queue found empty with
// no wake-up since (orchIdle; seq0 the signal's count now), the window's
// candidate read before the fetch takes the write lock, on the Store's
// read connections: found is false when no message is claimable (the
// fetch then returns nothing without taking the write lock, so idle polls
// do not take it), first the window's candidate ("": the window could not
// decide). Claiming it in the write transaction rechecks everything (the
// instance lock and each message's, as for the walk's candidate), so a
// stale read costs one lost candidate, not a wrong claim. Otherwise found
// is true and first "": the candidate is read in the transaction (a read
// before it was one more step on a busy orchestrator loop's path:
// BENCHMARKS.md).
func (p *gormProvider) orchCandidateBeforeTx(ctx context.Context, filter *duroxide.DispatcherCapabilityFilter, seq0 uint64) (first string, found bool, err error) {
	if !p.s.inProcess() || p.orchIdle.Load() != seq0+1 {
		return "", true, nil
	}
	cand, cargs := p.orchCandidateSQL(p.s.nowMS(), filter, nil, orchCandWindow, 0)
	inst, none, _, err := readOrchCandidate(p.s.db.WithContext(ctx), cand, cargs)
	return inst, !none, err
}

// readOrchCandidate runs candidate query cand (orchCandidateSQL,
// orchNamedCandidateSQL) on db, without row locks: none when it returns no
// row, undecided when its row names no instance (the level cannot
// decide), else the instance.
func readOrchCandidate(db *gorm.DB, cand string, cargs []any) (instance string, none, undecided bool, err error) {
	var cands []struct{ InstanceID *string }
	if err := scanAll(db, &cands, cand, cargs...); err != nil {
		return "", false, false, fmt.Errorf("select candidate: %w", err)
	}
	switch {
	case len(cands) == 0:
		return "", true, false, nil
	case cands[0].InstanceID == nil:
		return "", false, true, nil
	}
	return *cands[0].InstanceID, false, false, nil
}

// maxOrchLostCandidates bounds the candidates one fetch attempt loses to
// other fetchers (their lock taken first).
const maxOrchLostCandidates = 50

// orchClaimed is the outcome of claiming one candidate.
type orchClaimed struct {
	none      bool   // there is no candidate
	undecided bool   // this candidate level cannot decide: ask the next
	busy      bool   // a lock wait exceeded claimWait; nothing was claimed
	instance  string // the candidate ("" when busy and the claim does not know it)
	won       bool   // the instance lock was taken
	msgs      []orchMsgRow
	// meta is the metadata the claim read after taking the lock; nil:
	// fillOrchMetadata reads it
	meta *orchMeta
}

// orchMeta is an instance's metadata as a claim read it: the instance
// row, its current execution's history and its key-value snapshot.
type orchMeta struct {
	found   bool // the instance row exists (else name, version and exec are unset)
	name    string
	version *string
	exec    int64
	hist    []historyRow
	kv      map[string]duroxide.KvEntry
}

// fetchOrchLoop claims candidates on db (the fetch transaction, or with st
// the pool: each claim the dialect's statement) until one yields an item:
// it picks the oldest candidate (orchCandidateSQL, level by level), takes
// its instance lock unless a live one exists and claims every visible,
// unlocked message of the instance (one attempt counted on each), then
// reads the instance's metadata and history. A candidate whose lock
// another fetcher took first is passed over (at most
// maxOrchLostCandidates), one whose rows another transaction holds longer
// than claimWait too (at most maxBusySkips): the attempt then returns
// nothing and the poll goes on. A batch whose messages were consumed
// meanwhile is released, one of queue messages only for an instance never
// started is dropped. A message that does not decode is corrupt (its lock
// kept). With st, a claim is committed when its statement returns, so a
// failure after it releases the claim; in the transaction the rollback
// does. A non-empty first is the first candidate, read before the
// transaction (orchCandidateBeforeTx).
func (p *gormProvider) fetchOrchLoop(ctx context.Context, db *gorm.DB, st dialect.OrchFetchStatement, lockTimeout time.Duration,
	filter *duroxide.DispatcherCapabilityFilter, first string) (item *duroxide.OrchestrationItem, corrupt, err error) {
	release := func(token, instance string) {
		if st != nil {
			p.releaseOrchLease(ctx, orchLease{stored: token, instance: instance})
		}
	}
	var tried []string
	level := orchCandWindow
	busy, lost := 0, 0
	for {
		// the clock is read for each candidate: the lease starts when its
		// claim is sent, not when the attempt began
		now := p.s.nowMS()
		var cand, named string // named: the candidate is known (cand names it)
		var cargs []any
		if first != "" {
			named, first = first, ""
			cand, cargs = p.orchNamedCandidateSQL(named)
		} else if level == orchCandWalk {
			inst, decided, err := p.walkOrchCandidate(db, now, filter, tried)
			switch {
			case err != nil:
				return nil, nil, err
			case !decided:
				level++
				continue
			case inst == "":
				return nil, nil, nil
			}
			named = inst
			cand, cargs = p.orchNamedCandidateSQL(inst)
		} else {
			// a first try in one statement (fetches claim concurrently)
			// passes over the instances the Store's other claims in
			// flight are likely taking (orchClaiming)
			skip := 0
			if st != nil && level == orchCandWindow && len(tried) == 0 {
				skip = int(min(p.orchClaiming.Load(), maxOrchSkip))
			}
			cand, cargs = p.orchCandidateSQL(now, filter, tried, level, skip)
		}
		token := newLockToken()
		var c orchClaimed
		if st != nil {
			p.orchClaiming.Add(1)
			c, err = p.claimOrchStatement(db, st, cand, cargs, token, now, now+durMS(lockTimeout))
			p.orchClaiming.Add(-1)
		} else {
			c, err = p.claimOrchSteps(db, named, cand, cargs, token, now, now+durMS(lockTimeout))
		}
		switch {
		case err != nil:
			return nil, nil, err
		case c.none:
			return nil, nil, nil
		case c.undecided:
			if level == orchCandScan {
				return nil, nil, nil
			}
			level++
			continue
		case c.busy:
			if busy++; busy > maxBusySkips {
				return nil, nil, nil
			}
			if c.instance == "" { // the same query, without locks, names the candidate the claim picked
				inst, none, undecided, err := readOrchCandidate(db, cand, cargs)
				if err != nil || none || undecided {
					return nil, nil, err
				}
				c.instance = inst
			}
			tried = append(tried, c.instance)
			continue // its rows are held by another transaction: next candidate
		}
		tried = append(tried, c.instance)
		if !c.won {
			if lost++; lost > maxOrchLostCandidates {
				return nil, nil, nil
			}
			continue // another fetcher is on it: next candidate
		}
		if len(c.msgs) == 0 { // the messages were consumed meanwhile: release and move on
			if err := db.Exec(`DELETE FROM `+p.q(models.TableInstanceLocks)+` WHERE lock_token = ? AND instance_id = ?`, token, c.instance).Error; err != nil {
				release(token, c.instance)
				return nil, nil, fmt.Errorf("release lock of %s: %w", c.instance, err)
			}
			continue
		}
		it, bad := orchItem(c.instance, orchToken(token, c.instance), c.msgs)
		if bad != nil {
			return nil, bad, nil
		}
		if m := c.meta; m != nil {
			setOrchMetadata(it, m.found, m.name, m.version, m.exec, m.hist)
			it.KVSnapshot = m.kv
		} else if err := p.fillOrchMetadata(db, it); err != nil {
			release(token, c.instance)
			return nil, nil, err
		}
		if isOrphanBatch(it) { // queue messages of a never-started instance: drop them and move on
			if err := db.Exec(`DELETE FROM `+p.q(models.TableOrchestratorQueue)+` WHERE lock_token = ? AND instance_id = ?`, token, c.instance).Error; err != nil {
				release(token, c.instance)
				return nil, nil, fmt.Errorf("drop orphan messages of %s: %w", c.instance, err)
			}
			if err := db.Exec(`DELETE FROM `+p.q(models.TableInstanceLocks)+` WHERE lock_token = ? AND instance_id = ?`, token, c.instance).Error; err != nil {
				release(token, c.instance)
				return nil, nil, fmt.Errorf("release lock of %s: %w", c.instance, err)
			}
			continue
		}
		return it, nil, nil
	}
}

// claimOrchSteps is the portable claim of one candidate, in the fetch
// transaction tx: the candidate query (on SQLite BEGIN IMMEDIATE already
// serialises fetchers; none when the candidate is named: the walk's or the
// read before the transaction), then, bounded by claimWait (boundedStep), the
// instance lock row unless a live one exists and the claim of the
// instance's visible, unclaimed messages.
func (p *gormProvider) claimOrchSteps(tx *gorm.DB, named, cand string, cargs []any, token string, now, until int64) (orchClaimed, error) {
	c := orchClaimed{instance: named}
	if named == "" {
		inst, none, undecided, err := readOrchCandidate(tx, cand, cargs)
		if err != nil || none || undecided {
			return orchClaimed{none: none, undecided: undecided}, err
		}
		c.instance = inst
	}
	busy, err := p.boundedStep(tx, func() error {
		var err error
		if c.won, err = p.lockInstance(tx, c.instance, token, until, now); err != nil {
			return fmt.Errorf("lock instance %s: %w", c.instance, err)
		}
		if !c.won {
			return nil
		}
		oq := p.q(models.TableOrchestratorQueue)
		if err := p.s.updateReturning(tx, &c.msgs, `UPDATE `+oq+` SET lock_token = ?, locked_until = ?, attempt_count = attempt_count + 1`+
			` WHERE instance_id = ? AND visible_at <= ? AND (lock_token IS NULL OR locked_until <= ?)`, `id, work_item, attempt_count`,
			[]any{token, until, c.instance, now, now}, `FROM `+oq+` WHERE instance_id = ? AND lock_token = ? ORDER BY id`, c.instance, token); err != nil {
			return fmt.Errorf("lock messages of %s: %w", c.instance, err)
		}
		return nil
	})
	if busy {
		return orchClaimed{busy: true, instance: c.instance}, nil
	}
	return c, err
}

// lockInstance takes the instance lock row of instance for token until
// until unless a live one (locked_until > now) exists, and reports whether
// it did. One guarded upsert; on a dialect.Upserter (no ON CONFLICT ...
// WHERE) the general form: the row read FOR UPDATE SKIP LOCKED (a row
// another transaction holds is not waited for: not won), then an INSERT (a
// concurrent fetcher's insert of the same instance makes it a duplicate:
// not won) or an UPDATE guarded by the expiry.
func (p *gormProvider) lockInstance(tx *gorm.DB, instance, token string, until, now int64) (bool, error) {
	il := p.q(models.TableInstanceLocks)
	if !p.s.isUpserter() {
		res := tx.Exec(`INSERT INTO `+il+` AS il (instance_id, lock_token, locked_until, locked_at) VALUES (?, ?, ?, ?)`+
			` ON CONFLICT (instance_id) DO UPDATE SET lock_token = excluded.lock_token, locked_until = excluded.locked_until, locked_at = excluded.locked_at`+
			` WHERE il.locked_until <= ?`, instance, token, until, now, now)
		return res.RowsAffected > 0, res.Error
	}
	var held []int64
	if err := tx.Raw(`SELECT locked_until FROM `+il+` WHERE instance_id = ?`+p.s.forUpdateSkip(""), instance).Scan(&held).Error; err != nil {
		return false, err
	}
	if len(held) == 0 && p.s.has(CapSkipLocked) {
		// absent, or held by another transaction (an ack in flight): a
		// plain read tells them apart without waiting
		var n int64
		if err := tx.Raw(`SELECT COUNT(*) FROM `+il+` WHERE instance_id = ?`, instance).Scan(&n).Error; err != nil || n > 0 {
			return false, err
		}
	}
	if len(held) == 0 {
		err := tx.Exec(`INSERT INTO `+il+` (instance_id, lock_token, locked_until, locked_at) VALUES (?, ?, ?, ?)`, instance, token, until, now).Error
		if errors.Is(translateError(err), ErrConflict) {
			return false, nil // a concurrent fetcher inserted it first
		}
		return err == nil, err
	}
	res := tx.Exec(`UPDATE `+il+` SET lock_token = ?, locked_until = ?, locked_at = ? WHERE instance_id = ? AND locked_until <= ?`,
		token, until, now, instance, now)
	return res.RowsAffected > 0, res.Error
}

// orchFetchRow is one row of a dialect's claim statement (see
// dialect.OrchFetchStatement and dialect.OrchRow*).
type orchFetchRow struct {
	Kind                 int
	InstanceID           *string
	Got                  *bool
	Locked               *bool
	Fresh                *bool
	OrchestrationName    *string
	OrchestrationVersion *string
	CurrentExecutionID   *int64
	ID                   *int64
	Data                 *string
	AttemptCount         *int32
	KVKey                *string
}

// claimOrchStatement claims one candidate with the dialect's statement,
// its own autocommit transaction (asynchronous commit, lock waits bounded
// by claimWait: a longer wait is busy, its candidate unknown). Its
// metadata comes with it when the statement read it after the lock.
func (p *gormProvider) claimOrchStatement(db *gorm.DB, st dialect.OrchFetchStatement, cand string, cargs []any,
	token string, now, until int64) (orchClaimed, error) {
	q, args := st.OrchClaimSQL(&dialect.OrchClaim{Quote: p.q, Candidate: cand, CandidateArgs: cargs, Schema: p.s.cfg.Schema, Prefix: p.s.cfg.Prefix,
		Token: token, Until: until, Now: now, WaitMS: durMS(p.claimWait()), Async: p.s.has(CapAsyncCommit)})
	// through gorm (not queryDirect): a fetch's statements are where gorm
	// callbacks registered on the Store see a failing poll
	rows, err := scanOrchFetchRows(db, q, args)
	if err != nil {
		if p.skipsBusy() && errors.Is(translateError(err), ErrLockTimeout) {
			return orchClaimed{busy: true}, nil
		}
		return orchClaimed{}, fmt.Errorf("fetch orchestration item: %w", err)
	}
	if len(rows) == 0 || rows[0].Kind != dialect.OrchRowHead {
		return orchClaimed{none: true}, nil
	}
	head := rows[0]
	if head.InstanceID == nil {
		return orchClaimed{undecided: true}, nil
	}
	c := orchClaimed{instance: *head.InstanceID, won: head.Got != nil && *head.Got && head.Locked != nil && *head.Locked}
	if !c.won {
		return c, nil
	}
	m := orchMeta{kv: map[string]duroxide.KvEntry{}}
	for _, r := range rows[1:] {
		if r.ID == nil || r.Data == nil {
			continue
		}
		switch r.Kind {
		case dialect.OrchRowMessage:
			msg := orchMsgRow{ID: *r.ID, WorkItem: *r.Data}
			if r.AttemptCount != nil {
				msg.AttemptCount = *r.AttemptCount
			}
			c.msgs = append(c.msgs, msg)
		case dialect.OrchRowHistory:
			m.hist = append(m.hist, historyRow{EventID: *r.ID, EventData: *r.Data})
		case dialect.OrchRowKV:
			if r.KVKey != nil {
				m.kv[*r.KVKey] = duroxide.KvEntry{Value: *r.Data, LastUpdatedAtMS: uint64(*r.ID)}
			}
		}
	}
	if head.Fresh != nil && *head.Fresh {
		switch {
		case head.OrchestrationName != nil && head.CurrentExecutionID != nil:
			m.found, m.name, m.version, m.exec = true, *head.OrchestrationName, head.OrchestrationVersion, *head.CurrentExecutionID
			c.meta = &m
		case head.OrchestrationName == nil && head.CurrentExecutionID == nil:
			// a new instance: no instance row, history or key-value rows
			c.meta = &m
		}
	}
	return c, nil
}

// scanOrchFetchRows runs a claim statement (through GORM's callbacks and
// logger, as scanAll) and scans its rows by position, in the column
// order dialect.OrchFetchStatement fixes (no reflective mapping by
// column name per row).
func scanOrchFetchRows(db *gorm.DB, q string, args []any) ([]orchFetchRow, error) {
	tx := rawStmt(db, q, args)
	rows, err := tx.Rows()
	if err != nil {
		return nil, err
	}
	var out []orchFetchRow
	for rows.Next() {
		var r orchFetchRow
		if err = rows.Scan(&r.Kind, &r.InstanceID, &r.Got, &r.Locked, &r.Fresh, &r.OrchestrationName, &r.OrchestrationVersion,
			&r.CurrentExecutionID, &r.ID, &r.Data, &r.AttemptCount, &r.KVKey); err != nil {
			err = tx.AddError(err)
			break
		}
		out = append(out, r)
	}
	if err == nil {
		if rerr := translateVia(tx, rows.Err()); rerr != nil {
			err = tx.AddError(rerr)
		}
	}
	if cerr := rows.Close(); err == nil && cerr != nil {
		err = tx.AddError(cerr)
	}
	return out, err
}

// orchItem builds the fetched item from the locked messages in id order; a
// message that does not decode is returned as a *CorruptRowError.
func orchItem(instance, token string, msgs []orchMsgRow) (*duroxide.OrchestrationItem, error) {
	sort.Slice(msgs, func(i, j int) bool { return msgs[i].ID < msgs[j].ID })
	it := &duroxide.OrchestrationItem{Instance: instance, LockToken: token}
	for _, m := range msgs {
		it.AttemptCount = max(it.AttemptCount, uint32(m.AttemptCount))
		w, err := duroxide.UnmarshalWorkItem([]byte(m.WorkItem))
		if err != nil {
			return nil, &CorruptRowError{Table: models.TableOrchestratorQueue, RowID: fmt.Sprint(m.ID), Column: "work_item", Err: err}
		}
		it.Messages = append(it.Messages, w)
	}
	return it, nil
}

// isOrphanBatch reports a batch of queue messages only, for an instance
// that was never started (no instance row, no history).
func isOrphanBatch(it *duroxide.OrchestrationItem) bool {
	return it.OrchestrationName == "Unknown" && len(it.History) == 0 && it.HistoryError == "" && allQueueMessages(it.Messages)
}

func allQueueMessages(ms []duroxide.WorkItem) bool {
	for _, m := range ms {
		if _, ok := m.(*duroxide.QueueMessage); !ok {
			return false
		}
	}
	return len(ms) > 0
}

// fillOrchMetadata sets name, version, execution, history and key-value
// snapshot of it in one query: the instance row, the history of its
// current execution (without an instance row, of the newest execution
// acks without metadata wrote) and kv_store. The rows are scanned without
// GORM's reflection and each history event is decoded once, straight from
// the driver's buffer.
func (p *gormProvider) fillOrchMetadata(db *gorm.DB, it *duroxide.OrchestrationItem) error {
	inst, hist := p.q(models.TableInstances), p.q(models.TableHistory)
	q := rawStmt(db, `WITH i AS (SELECT orchestration_name, orchestration_version, current_execution_id FROM `+inst+` WHERE instance_id = ?),`+
		` x AS (SELECT COALESCE((SELECT current_execution_id FROM i), (SELECT MAX(execution_id) FROM `+hist+` WHERE instance_id = ?)) AS e)`+
		` SELECT 0 AS kind, i.orchestration_name, i.orchestration_version, i.current_execution_id AS execution_id,`+
		` `+p.s.castNull("bigint")+` AS event_id, `+p.s.castNull("text")+` AS event_data, `+p.s.castNull("text")+` AS kv_key FROM i`+
		` UNION ALL SELECT 1, NULL, NULL, h.execution_id, h.event_id, h.event_data, NULL FROM `+hist+` h, x WHERE h.instance_id = ? AND h.execution_id = x.e`+
		` UNION ALL SELECT 2, NULL, NULL, 0, kv.last_updated_at_ms, kv.value, kv."key" FROM `+p.q(models.TableKVStore)+` kv WHERE kv.instance_id = ?`+
		` ORDER BY kind, event_id`, []any{it.Instance, it.Instance, it.Instance, it.Instance})
	rows, err := q.Rows()
	if err != nil {
		return fmt.Errorf("load instance %s: %w", it.Instance, err)
	}
	defer rows.Close()
	it.KVSnapshot = map[string]duroxide.KvEntry{}
	var (
		kind          int
		name, version sql.NullString
		exec          int64
		eventID       sql.NullInt64
		data          sql.RawBytes
		kvKey         sql.NullString
		found, inHist bool
		fname         string
		fversion      *string
		h             = historyDecoder{instance: it.Instance}
	)
	for rows.Next() {
		if err := rows.Scan(&kind, &name, &version, &exec, &eventID, &data, &kvKey); err != nil {
			return fmt.Errorf("load instance %s: %w", it.Instance, q.AddError(err))
		}
		switch {
		case kind == 0:
			found, fname, h.exec = true, name.String, exec
			if version.Valid {
				fversion = ptr(version.String)
			}
		case kind == 1 && eventID.Valid && data != nil:
			if !inHist {
				inHist, h.exec = true, exec
			}
			h.add(eventID.Int64, data)
		case kind == 2 && kvKey.Valid && data != nil && eventID.Valid:
			it.KVSnapshot[kvKey.String] = duroxide.KvEntry{Value: string(data), LastUpdatedAtMS: uint64(eventID.Int64)}
		}
	}
	if err := translateVia(q, rows.Err()); err != nil {
		return fmt.Errorf("load instance %s: %w", it.Instance, q.AddError(err))
	}
	setOrchMetadataDecoded(it, found, fname, fversion, h.exec, h.events, h.err)
	return nil
}

// setOrchMetadata sets name, version, execution and decoded history of it.
// found: the instance row exists (name, version and execution come from
// it); otherwise they come from the batch (any Start or ContinueAsNew in
// it) and exec is the execution of history written by acks without
// metadata (0: none).
func setOrchMetadata(it *duroxide.OrchestrationItem, found bool, name string, version *string, exec int64, hist []historyRow) {
	h, err := decodeHistory(it.Instance, exec, hist)
	setOrchMetadataDecoded(it, found, name, version, exec, h, err)
}

// setOrchMetadataDecoded is setOrchMetadata with the history already
// decoded: hist holds the events decoded before the first failure
// decodeErr (reported in HistoryError, with an empty History).
func setOrchMetadataDecoded(it *duroxide.OrchestrationItem, found bool, name string, version *string, exec int64, hist []duroxide.Event, decodeErr error) {
	if found {
		it.OrchestrationName = name
		it.Version = "unknown"
		if version != nil {
			it.Version = *version
		}
	} else {
		it.OrchestrationName, it.Version = "Unknown", "unknown"
		batchExec := int64(1)
		for _, m := range it.Messages {
			if so, ok := m.(*duroxide.StartOrchestration); ok {
				it.OrchestrationName = so.Orchestration
				if so.Version != nil {
					it.Version = *so.Version
				}
				if so.ExecutionID > 0 {
					batchExec = int64(so.ExecutionID)
				}
				break
			}
			if can, ok := m.(*duroxide.ContinueAsNew); ok {
				it.OrchestrationName = can.Orchestration
				if can.Version != nil {
					it.Version = *can.Version
				}
				break
			}
		}
		if len(hist) == 0 && decodeErr == nil { // no history rows
			exec = batchExec
		}
	}
	it.ExecutionID = uint64(exec)
	if decodeErr != nil {
		it.History = []duroxide.Event{}
		it.HistoryError = "Failed to deserialize history: " + decodeErr.Error()
		return
	}
	if hist == nil {
		hist = []duroxide.Event{}
	}
	it.History = hist
}
