package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"gorm.io/gorm"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// The routed worker fetch: the general path (a dialect's fast paths
// switched off, routedWork), the one a row-distributed deployment uses (docs/distributed.md: the worker
// queue distributed by instance_id, activity_sessions by session_id in a
// co-location group of its own). No statement of it holds a row lock on
// more than one shard key or joins the two tables:
//
//   - the candidates are a plain read of the worker queue (no row locks,
//     no join): a global read, like the orchestration fetch's window;
//   - with a session config, the activity-session row of a candidate's
//     session is read by its session_id (once per session and fetch), and
//     the choice is made here;
//   - the claim of a candidate is one UPDATE pinned by its instance_id and
//     id that re-checks it is still visible and unlocked (optimistic: a
//     claim another fetcher made first matches no row, and the next
//     candidate is tried); the activity-session claim is pinned by its
//     session_id (claimActivitySession).
//
// The fast path (CapFastPaths: PostgreSQL) and the dialects without fast
// paths (SQLite, MariaDB) keep the single-node claim, FOR UPDATE SKIP
// LOCKED over the queue where the database has it (claimWork,
// fetchWorkSession).

// routedWork reports whether the worker fetch claims by shard key: the
// dialect has fast paths and they are switched off (the Citus route,
// docs/distributed.md). SQLite and MariaDB, which cannot be distributed,
// keep the single-node claim (claimWork, fetchWorkSession): per-key
// claims cost one statement per item where a batch took one for all
// (MariaDB's worker queue measured about 40% slower with them).
func (p *gormProvider) routedWork() bool { return p.s.citusRoute() }

const (
	// workCandExtra is how many candidates a routed plain claim reads
	// beyond one per attempt (claims other fetchers win first).
	workCandExtra = 4
	// workCandRounds bounds the candidate reads of one routed plain claim:
	// another read only when the previous one's candidates were lost to
	// other fetchers.
	workCandRounds = 3
	// workSessionPage is how many candidates a routed fetch with a
	// session config reads at a time.
	workSessionPage = 16
)

// workCand is a candidate of the routed worker fetch.
type workCand struct {
	ID         int64
	InstanceID string
	SessionID  *string
}

// claimedWorkRow is what a routed claim reads back from the item it locked.
type claimedWorkRow struct {
	WorkItem     string
	AttemptCount int32
}

// claimSettingsCTE returns the WITH clause and condition that make an
// autocommit claim statement commit asynchronously (CapAsyncCommit) and,
// where the dialect can bound them (dialect.ClaimLockWait), bound its lock
// waits by claimWait; "", "" when there is nothing to set.
func (p *gormProvider) claimSettingsCTE() (with, cond string) {
	if lw, ok := p.s.d.(dialect.ClaimLockWait); ok && p.s.has(CapMaterializedCTE) {
		return "WITH async AS MATERIALIZED (SELECT " + lw.ClaimSettingsSQL(p.s.has(CapAsyncCommit), durMS(p.claimWait())) + ") ",
			" AND (SELECT w FROM async) IS NOT NULL"
	}
	return p.s.asyncCommitCTE()
}

// claimWorkRow claims candidate c with token until until if it is still
// visible and unlocked at now: one UPDATE pinned by the row's instance_id
// and id, the row read back (RETURNING, or a SELECT by the same key in
// the transaction). inTx: db is a fetch transaction (fetchTx) and the
// claim is a boundedStep of it; else db is the pool and the claim its own
// autocommit statement (with CapUpdateReturning and claimSettingsCTE; without,
// the UPDATE and a SELECT by key and token). It returns
// nil when the row was no longer claimable (another fetcher's), busy when
// a lock wait on it exceeded claimWait (nothing claimed).
func (p *gormProvider) claimWorkRow(db *gorm.DB, inTx bool, c workCand, token string, until, now int64) (row *claimedWorkRow, busy bool, err error) {
	wq := p.q(models.TableWorkerQueue)
	update := `UPDATE ` + wq + ` SET lock_token = ?, locked_until = ?, attempt_count = attempt_count + 1` +
		` WHERE instance_id = ? AND id = ? AND visible_at <= ? AND (lock_token IS NULL OR locked_until <= ?)`
	args := []any{token, until, c.InstanceID, c.ID, now, now}
	var rows []claimedWorkRow
	if inTx {
		busy, err = p.boundedStep(db, func() error {
			return p.s.updateReturning(db, &rows, update, `work_item, attempt_count`, args,
				`FROM `+wq+` WHERE instance_id = ? AND id = ?`, c.InstanceID, c.ID)
		})
	} else {
		if p.s.has(CapUpdateReturning) {
			with, cond := p.claimSettingsCTE()
			err = db.Raw(with+update+cond+` RETURNING work_item, attempt_count`, args...).Scan(&rows).Error
		} else {
			// two autocommit statements: the claim, then the row read back
			// by its key and the new token (gone: deleted meanwhile, lost)
			res := db.Exec(update, args...)
			if err = res.Error; err == nil && res.RowsAffected > 0 {
				err = db.Raw(`SELECT work_item, attempt_count FROM `+wq+` WHERE instance_id = ? AND id = ? AND lock_token = ?`,
					c.InstanceID, c.ID, token).Scan(&rows).Error
			}
		}
		if err != nil && p.skipsBusy() && errors.Is(translateError(err), ErrLockTimeout) {
			busy, err = true, nil
		}
	}
	if err != nil || busy || len(rows) == 0 {
		return nil, busy, err
	}
	return &rows[0], false, nil
}

// claimWorkRouted is claimWork's routed form (routedWork): it reads the
// first len(g)+workCandExtra visible, unlocked items outside activity
// sessions of the filter, in the order and by the index claimWork's pick
// uses, and claims them for the attempts one by one (claimWorkRow), each
// attempt its own token and lock end; candidates other fetchers claimed
// first are passed over, and while attempts are left after such losses
// the candidates are read again (at most workCandRounds reads). Every
// statement is its own autocommit transaction (no BEGIN/COMMIT round
// trips); a claim's lock wait is bounded by claimWait where the dialect
// bounds it in the statement (dialect.ClaimLockWait), else by the
// database's (the rows a read found unlocked are held, if at all, by
// another claim's or ack's short transaction). The reply is claimWork's:
// the attempts that got no item, or an error (then none has one; items
// already claimed, and the one whose claim failed, are released in the
// background, unlocked with their attempt uncounted, and this Store's
// waiting fetchers woken: the fetch returns at once).
func (p *gormProvider) claimWorkRouted(ctx context.Context, g []*gcReq[uint64, workFetchReq]) ([]*gcReq[uint64, workFetchReq], error) {
	tp, targs := tagSQL(g[0].in.tags)
	wq := p.q(models.TableWorkerQueue)
	vis, order := `+q.visible_at`, `q.id`
	if g[0].in.tags.Mode == duroxide.TagDefaultOnly {
		vis, order = `q.visible_at`, `q.visible_at, q.id`
	}
	limit := len(g) + workCandExtra
	read := `SELECT q.id, q.instance_id FROM ` + wq + ` q` +
		` WHERE ` + vis + ` <= ? AND (q.lock_token IS NULL OR q.locked_until <= ?) AND q.session_id IS NULL AND ` + tp +
		` ORDER BY ` + order + ` LIMIT ` + strconv.Itoa(limit)
	var held []workLease // claims made, for a release when a later statement fails
	next := 0            // the next attempt without an item
	run := func(db *gorm.DB, inTx bool) error {
		busy := 0
		for round := 0; round < workCandRounds && next < len(g); round++ {
			now := p.s.nowMS()
			var cands []workCand
			if err := db.Raw(read, append([]any{now, now}, targs...)...).Scan(&cands).Error; err != nil {
				return err
			}
			lost := false
			for _, c := range cands {
				if next == len(g) {
					break
				}
				r := g[next]
				tok := newLockToken()
				row, isBusy, err := p.claimWorkRow(db, inTx, c, tok, now+durMS(r.in.lockTimeout), now)
				switch {
				case err != nil:
					// the claim may have committed although its reply
					// broke off: released with the others below
					held = append(held, workLease{stored: tok, id: c.ID, instance: c.InstanceID, routed: true})
					return err
				case isBusy:
					if busy++; busy > maxBusySkips {
						return nil
					}
					continue
				case row == nil:
					lost = true
					continue
				}
				next++
				held = append(held, workLease{stored: tok, id: c.ID, instance: c.InstanceID, routed: true})
				*r.in.out, r.err = workItemLease(c.ID, c.InstanceID, tok, row.WorkItem, row.AttemptCount)
				if p.afterRoutedClaim != nil {
					p.afterRoutedClaim()
				}
			}
			if !lost {
				break // the queue's end, or every attempt served
			}
		}
		return nil
	}
	err := run(p.s.db.WithContext(ctx), false)
	if err != nil {
		if len(held) > 0 {
			// in the background, as releaseClaimTokens: the database that
			// failed the claim may keep each release waiting too (up to
			// releaseWorkLease's 5 s), and the fetch returns at once
			go func() {
				for _, l := range held {
					p.releaseWorkLease(p.s.bg, l)
				}
				p.work.wake() // this Store's waiting fetchers (others re-check)
			}()
		}
		for _, r := range g {
			*r.in.out, r.err = nil, nil
		}
		return nil, fmt.Errorf("claim work items: %w", err)
	}
	return g[next:], nil
}

// fetchWorkSessionRouted is fetchWorkSession's routed form (routedWork):
// in one fetch transaction it reads the visible, unlocked items of the
// filter in id order, workSessionPage at a time, and takes the first item
// outside activity sessions or of a session the owner holds or nobody
// holds. The first time a candidate names a session, that session's row is
// read by its key (single-shard: one read per distinct session passed
// over, where one IN-list read per page would be multi-key); a candidate
// the choice allows is claimed (claimWorkRow: pinned, re-checked; lost to
// another fetcher, the next one), then its session lease is claimed or
// extended (claimActivitySession, pinned by session_id). A session another owner
// won meanwhile (or whose row another transaction holds longer than
// claimWait) gives the item back in the transaction and passes it over;
// the items of sessions found held by another owner are left out of the
// following reads. The choice is the one fetchWorkSession makes.
func (p *gormProvider) fetchWorkSessionRouted(ctx context.Context, lockTimeout time.Duration, session *duroxide.SessionFetchConfig, tags duroxide.TagFilter) (*duroxide.WorkItemLease, *sessionClaim, error) {
	wq, as := p.q(models.TableWorkerQueue), p.q(models.TableActivitySessions)
	tp, targs := tagSQL(tags)
	leaseMS := sessionLeaseMS(session, lockTimeout)
	var lease *duroxide.WorkItemLease
	var sc *sessionClaim
	var corrupt error
	err := p.fetchTx(ctx, func(tx *gorm.DB) error {
		lease, sc, corrupt = nil, nil, nil
		now := p.s.nowMS()
		free := map[string]bool{} // session id -> the owner may claim it (false: another owner holds it)
		held := map[string]bool{} // session id -> the owner's lease of it was live at now
		var blocked []any
		var after int64
		busySkips := 0
		for {
			sql := `SELECT q.id, q.instance_id, q.session_id FROM ` + wq + ` q` +
				` WHERE q.visible_at <= ? AND (q.lock_token IS NULL OR q.locked_until <= ?) AND ` + tp + ` AND q.id > ?`
			args := append(append([]any{now, now}, targs...), after)
			if len(blocked) > 0 {
				sql += ` AND (q.session_id IS NULL OR q.session_id NOT IN (` + placeholders(len(blocked)) + `))`
				args = append(args, blocked...)
			}
			sql += ` ORDER BY q.id LIMIT ` + strconv.Itoa(workSessionPage)
			var cands []workCand
			if err := tx.Raw(sql, args...).Scan(&cands).Error; err != nil {
				return fmt.Errorf("select work items: %w", err)
			}
			for _, c := range cands {
				after = c.ID
				if c.SessionID != nil {
					ok, seen := free[*c.SessionID]
					if !seen {
						// the session's row, read by its key (single-shard)
						// the first time a candidate names it
						var ss []struct {
							WorkerID    string
							LockedUntil int64
						}
						if err := tx.Raw(`SELECT worker_id, locked_until FROM `+as+` WHERE session_id = ?`, *c.SessionID).
							Scan(&ss).Error; err != nil {
							return fmt.Errorf("read activity session %s: %w", *c.SessionID, err)
						}
						ok = len(ss) == 0 || ss[0].LockedUntil <= now || ss[0].WorkerID == session.OwnerID
						free[*c.SessionID] = ok
						held[*c.SessionID] = len(ss) > 0 && ss[0].LockedUntil > now && ss[0].WorkerID == session.OwnerID
						if !ok {
							blocked = append(blocked, *c.SessionID)
						}
					}
					if !ok {
						continue
					}
				}
				token := newLockToken()
				row, busy, err := p.claimWorkRow(tx, true, c, token, now+durMS(lockTimeout), now)
				if err != nil {
					return fmt.Errorf("lock work item %d: %w", c.ID, err)
				}
				if busy {
					if busySkips++; busySkips > maxBusySkips {
						return nil
					}
					continue
				}
				if row == nil {
					continue // another fetcher's
				}
				if c.SessionID != nil {
					// claim or extend the session lease; another live owner:
					// the item back, the next one (a lock wait over claimWait
					// on the session row too)
					won, busy, err := p.claimSessionStep(tx, *c.SessionID, session.OwnerID, now+leaseMS, now)
					if err != nil {
						return err
					}
					if !won {
						if err := tx.Exec(`UPDATE `+wq+` SET lock_token = NULL, locked_until = NULL, attempt_count = attempt_count - 1`+
							` WHERE instance_id = ? AND id = ? AND lock_token = ?`, c.InstanceID, c.ID, token).Error; err != nil {
							return fmt.Errorf("give back work item %d: %w", c.ID, err)
						}
						if busy {
							if busySkips++; busySkips > maxBusySkips {
								return nil
							}
						} else {
							free[*c.SessionID] = false
							blocked = append(blocked, *c.SessionID)
						}
						continue
					}
				}
				lease, corrupt = workItemLease(c.ID, c.InstanceID, token, row.WorkItem, row.AttemptCount)
				if c.SessionID != nil && !held[*c.SessionID] {
					sc = &sessionClaim{sid: *c.SessionID, owner: session.OwnerID, at: now}
				}
				return nil
			}
			if len(cands) < workSessionPage {
				return nil
			}
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
