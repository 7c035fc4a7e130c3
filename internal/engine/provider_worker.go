package engine

import (
	"context"
	"encoding/json"
	"fmt"
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
	p.work.notify()
	return nil
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
	lease, err := longPoll(ctx, p.work, pollTimeout, p.s.cfg.PollInterval, func(deadline time.Time) (*duroxide.WorkItemLease, error) {
		var l *duroxide.WorkItemLease
		err := p.withRetry(ctx, "fetch_work_item", deadline, func() error {
			var e error
			start := p.s.nowMS()
			if l, e = p.fetchWorkOnce(ctx, lockTimeout, session, tags); e != nil || l == nil {
				return p.claimWaitExpired(e)
			}
			l, e = p.keepWorkLease(ctx, l, start, lockTimeout, session)
			return e
		})
		return l, err
	})
	return lease, perr(op, err)
}

// keepWorkLease re-stamps the lease of l, claimed by a fetch that read its
// clock at start, when the claim took longer than the slack (see "Lease
// validity" in provider_poll.go): the item's lock, and for a session item the
// session lease it claimed or extended for session's owner (never
// shortened). A lease another fetcher took over meanwhile, or whose item
// is gone (a cancelled activity), is not handed out: nil, nil. A failed
// re-stamp releases the item.
func (p *gormProvider) keepWorkLease(ctx context.Context, l *duroxide.WorkItemLease, start int64, lockTimeout time.Duration,
	session *duroxide.SessionFetchConfig) (*duroxide.WorkItemLease, error) {
	stored, id, ok := parseWorkToken(l.LockToken)
	if !ok {
		return l, nil
	}
	var sid *string
	if ae, isAct := l.Item.(*duroxide.ActivityExecute); isAct && session != nil {
		sid = ae.SessionID
	}
	slack, lt := leaseSlackMS(lockTimeout), durMS(lockTimeout)
	for i := 0; ; i++ {
		now := p.s.nowMS()
		if now-start <= slack || i == maxRestamps {
			return l, nil
		}
		var held bool
		restamp := func(db *gorm.DB) error {
			res := db.Exec(`UPDATE `+p.q(models.TableWorkerQueue)+` SET locked_until = ? WHERE id = ? AND lock_token = ?`, now+lt, id, stored)
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
			p.releaseWorkLease(ctx, id, stored)
			return nil, fmt.Errorf("renew the lease of work item %d after a slow claim: %w", id, err)
		}
		if !held {
			return nil, nil
		}
		start = now
	}
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
func (p *gormProvider) releaseWorkLease(ctx context.Context, id int64, stored string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = p.s.db.WithContext(ctx).Exec(`UPDATE `+p.q(models.TableWorkerQueue)+` SET lock_token = NULL, locked_until = NULL,`+
		` attempt_count = CASE WHEN attempt_count > 0 THEN attempt_count - 1 ELSE 0 END WHERE id = ? AND lock_token = ?`, id, stored).Error
}

// fetchWorkPlain claims the oldest eligible non-session item in one atomic
// statement (no explicit transaction): UPDATE ... WHERE id = (SELECT ...
// [FOR UPDATE SKIP LOCKED]) RETURNING.
func (p *gormProvider) fetchWorkPlain(ctx context.Context, lockTimeout time.Duration, tags duroxide.TagFilter) (*duroxide.WorkItemLease, error) {
	now := p.s.nowMS()
	token := newLockToken()
	tp, targs := tagSQL(tags)
	// The claim walks id order (partial index / rowid) and stops at the
	// first eligible row. The worker queue has no visible_at index; the
	// unary plus (+q.visible_at) keeps the planners off one should it be
	// added by hand (every queued row is usually visible, so it would read
	// and sort the whole queue). TestPerfClaimPlansUseIndexes checks it.
	sub := `SELECT q.id FROM ` + p.q(models.TableWorkerQueue) + ` q WHERE +q.visible_at <= ? AND (q.lock_token IS NULL OR q.locked_until <= ?)` +
		` AND q.session_id IS NULL AND ` + tp + ` ORDER BY q.id LIMIT 1`
	sub += p.s.forUpdateSkip("q")
	args := append([]any{token, now + durMS(lockTimeout), now, now}, targs...)
	var (
		id           int64
		workItem     string
		attemptCount int32
	)
	// One atomic statement, its own transaction. On PostgreSQL it also
	// switches its own commit to asynchronous (set_config is_local = the
	// statement's implicit transaction; see fetchTx for why a fetch may
	// commit asynchronously), in the same round trip. It never waits for
	// a row another transaction holds (SKIP LOCKED).
	with, async := p.s.asyncCommitCTE()
	stmt := with + `UPDATE ` + p.q(models.TableWorkerQueue) + ` SET lock_token = ?, locked_until = ?, attempt_count = attempt_count + 1` +
		` WHERE id = (` + sub + `)` + async + ` RETURNING id, work_item, attempt_count`
	found, err := scanRow(p.s.db.WithContext(ctx), stmt, args, &id, &workItem, &attemptCount)
	if err != nil {
		return nil, fmt.Errorf("claim work item: %w", err)
	}
	if !found {
		return nil, nil
	}
	w, err := duroxide.UnmarshalWorkItem([]byte(workItem))
	if err != nil {
		return nil, &CorruptRowError{Table: models.TableWorkerQueue, RowID: fmt.Sprint(id), Column: "work_item", Err: err}
	}
	return &duroxide.WorkItemLease{Item: w, LockToken: workToken(token, id), AttemptCount: uint32(attemptCount)}, nil
}

// Worker-queue lease tokens carry the row id: the token handed out is the
// random token stored in lock_token, a dot and the row id. Ack, renew and
// abandon then find the row by primary key and check the stored token, so
// the worker queue needs no lock_token index — a claim writes no index
// entry (on PostgreSQL it can be a HOT update) and an ack deletes from one
// index fewer. A token that does not parse matches nothing
// (ErrInvalidLockToken), like any unknown token.

// workToken returns the lease token of worker-queue row id locked with stored.
func workToken(stored string, id int64) string { return stored + "." + strconv.FormatInt(id, 10) }

// parseWorkToken splits a worker lease token into the stored token and the row id.
func parseWorkToken(tok string) (stored string, id int64, ok bool) {
	i := strings.LastIndexByte(tok, '.')
	if i <= 0 {
		return "", 0, false
	}
	id, err := strconv.ParseInt(tok[i+1:], 10, 64)
	if err != nil || id <= 0 {
		return "", 0, false
	}
	return tok[:i], id, true
}

func (p *gormProvider) fetchWorkOnce(ctx context.Context, lockTimeout time.Duration, session *duroxide.SessionFetchConfig, tags duroxide.TagFilter) (*duroxide.WorkItemLease, error) {
	if session == nil {
		if !p.s.groupCommit() {
			return p.fetchWorkPlain(ctx, lockTimeout, tags)
		}
		var lease *duroxide.WorkItemLease
		r := workFetchReq{lockTimeout: lockTimeout, tags: tags, out: &lease}
		err := p.s.gc.fetchWork.do(ctx, p.s.gcFlushes(), p.s.gc.fetchWorkSeq.Add(1), r,
			func(ctx context.Context, r workFetchReq) error {
				l, err := p.fetchWorkPlain(ctx, r.lockTimeout, r.tags)
				*r.out = l
				return err
			},
			p.fetchWorkBatch)
		return lease, err
	}
	var lease *duroxide.WorkItemLease
	var corrupt error
	err := p.fetchTx(ctx, func(tx *gorm.DB) error {
		lease, corrupt = nil, nil
		now := p.s.nowMS()
		var skipped []any
		busySkips := 0
		for {
			sql := `SELECT q.id, q.session_id FROM ` + p.q(models.TableWorkerQueue) + ` q`
			var args []any
			if session != nil {
				sql += ` LEFT JOIN ` + p.q(models.TableActivitySessions) + ` s ON s.session_id = q.session_id AND s.locked_until > ?`
				args = append(args, now)
			}
			sql += ` WHERE q.visible_at <= ? AND (q.lock_token IS NULL OR q.locked_until <= ?)`
			args = append(args, now, now)
			tp, targs := tagSQL(tags)
			sql += ` AND ` + tp
			args = append(args, targs...)
			if session == nil {
				sql += ` AND q.session_id IS NULL`
			} else {
				sql += ` AND (q.session_id IS NULL OR s.worker_id = ? OR s.session_id IS NULL)`
				args = append(args, session.OwnerID)
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
			}
			if err := tx.Raw(sql, args...).Scan(&cands).Error; err != nil {
				return fmt.Errorf("select work item: %w", err)
			}
			if len(cands) == 0 {
				return nil
			}
			c := cands[0]
			if c.SessionID != nil && session != nil {
				// claim or extend the session lease; another live owner -> next item
				// (a lock wait over claimWait on the session row: next item)
				leaseMS := sessionLeaseMS(session, lockTimeout)
				won := false
				busy, err := p.boundedStep(tx, func() error {
					res := tx.Exec(`INSERT INTO `+p.q(models.TableActivitySessions)+` AS s (session_id, worker_id, locked_until, last_activity_at) VALUES (?, ?, ?, ?)`+
						` ON CONFLICT (session_id) DO UPDATE SET worker_id = excluded.worker_id, locked_until = excluded.locked_until, last_activity_at = excluded.last_activity_at`+
						` WHERE s.locked_until <= ? OR s.worker_id = ?`, *c.SessionID, session.OwnerID, now+leaseMS, now, now, session.OwnerID)
					if res.Error != nil {
						return fmt.Errorf("claim session %s: %w", *c.SessionID, res.Error)
					}
					won = res.RowsAffected > 0
					return nil
				})
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
			}
			if err := scanAll(tx, &locked, `UPDATE `+p.q(models.TableWorkerQueue)+` SET lock_token = ?, locked_until = ?, attempt_count = attempt_count + 1`+
				` WHERE id = ? RETURNING work_item, attempt_count`, token, now+durMS(lockTimeout), c.ID); err != nil {
				return fmt.Errorf("lock work item %d: %w", c.ID, err)
			}
			if len(locked) == 0 {
				skipped = append(skipped, c.ID)
				continue
			}
			w, err := duroxide.UnmarshalWorkItem([]byte(locked[0].WorkItem))
			if err != nil {
				corrupt = &CorruptRowError{Table: models.TableWorkerQueue, RowID: fmt.Sprint(c.ID), Column: "work_item", Err: err}
				return nil
			}
			lease = &duroxide.WorkItemLease{Item: w, LockToken: workToken(token, c.ID), AttemptCount: uint32(locked[0].AttemptCount)}
			return nil
		}
	})
	if err != nil {
		return nil, err
	}
	if corrupt != nil {
		return nil, corrupt
	}
	return lease, nil
}

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
// applied; once taken, it waits for that flush's outcome.
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
	stored, id, ok := parseWorkToken(lockToken)
	if !ok {
		return pfail(op, ErrInvalidLockToken, "Worker queue item not found or already processed")
	}
	var err error
	if p.s.groupCommit() {
		err = p.s.gc.ackWork.do(ctx, p.s.gcFlushes(), id, ackWorkReq{stored: stored, id: id, row: row, nowMS: p.s.nowMS()},
			func(ctx context.Context, r ackWorkReq) error { return p.ackWorkOne(ctx, r.stored, r.id, r.row) },
			p.ackWorkBatch)
	} else {
		err = p.ackWorkOne(ctx, stored, id, row)
	}
	if err != nil {
		return perr(op, err)
	}
	if row != nil {
		p.orch.notify()
	}
	return nil
}

// ackWorkOne acks one item in its own statement or transaction.
func (p *gormProvider) ackWorkOne(ctx context.Context, stored string, id int64, row *models.OrchestratorQueueItem) error {
	if p.fast != nil {
		return p.fast.ackWork(p, ctx, stored, id, row)
	}
	return p.ackWorkTx(ctx, stored, id, row)
}

// ackWorkTx acks on SQLite, which has no data-modifying CTEs. An ack with
// no completion of an item outside any activity session is one autocommit
// DELETE (the common case); everything else (a completion to enqueue, a
// session to touch, or a token that matched nothing) runs in one
// transaction.
func (p *gormProvider) ackWorkTx(ctx context.Context, stored string, id int64, row *models.OrchestratorQueueItem) error {
	const op = "ack_work_item"
	if row == nil {
		res := p.s.db.WithContext(ctx).Exec(`DELETE FROM `+p.q(models.TableWorkerQueue)+
			` WHERE id = ? AND lock_token = ? AND locked_until > ? AND session_id IS NULL`, id, stored, p.s.nowMS())
		if res.Error != nil {
			return fmt.Errorf("delete work item: %w", res.Error)
		}
		if res.RowsAffected == 1 {
			return nil
		}
	}
	return p.tx(ctx, func(tx *gorm.DB) error {
		now := p.s.nowMS()
		var gone []struct{ SessionID *string }
		if err := scanAll(tx, &gone, `DELETE FROM `+p.q(models.TableWorkerQueue)+` WHERE id = ? AND lock_token = ? AND locked_until > ? RETURNING session_id`,
			id, stored, now); err != nil {
			return fmt.Errorf("delete work item: %w", err)
		}
		if len(gone) == 0 {
			return pfail(op, ErrInvalidLockToken, "Worker queue item not found or already processed")
		}
		if row != nil {
			row.VisibleAt, row.CreatedAt = now, now
			if err := tx.Create(row).Error; err != nil {
				return fmt.Errorf("enqueue completion: %w", err)
			}
		}
		if sid := gone[0].SessionID; sid != nil {
			if err := tx.Exec(`UPDATE `+p.q(models.TableActivitySessions)+` SET last_activity_at = ? WHERE session_id = ? AND locked_until > ?`,
				now, *sid, now).Error; err != nil {
				return fmt.Errorf("touch session %s: %w", *sid, err)
			}
		}
		return nil
	})
}

// RenewWorkItemLock implements duroxide.Provider.
func (p *gormProvider) RenewWorkItemLock(ctx context.Context, lockToken string, extendFor time.Duration) error {
	const op = "renew_work_item_lock"
	if extendFor <= 0 {
		return perr(op, invalidf("extension must be positive"))
	}
	stored, id, ok := parseWorkToken(lockToken)
	if !ok {
		return pfail(op, ErrInvalidLockToken, "Lock token invalid, expired, or already acked")
	}
	err := p.tx(ctx, func(tx *gorm.DB) error {
		now := p.s.nowMS()
		var rows []struct{ SessionID *string }
		if err := tx.Raw(`UPDATE `+p.q(models.TableWorkerQueue)+` SET locked_until = ? WHERE id = ? AND lock_token = ? AND locked_until > ? RETURNING session_id`,
			now+durMS(extendFor), id, stored, now).Scan(&rows).Error; err != nil {
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
	stored, id, ok := parseWorkToken(lockToken)
	if !ok {
		return pfail(op, ErrInvalidLockToken, "Invalid lock token or already acked")
	}
	now := p.s.nowMS()
	set := `lock_token = NULL, locked_until = NULL, visible_at = ?`
	if ignoreAttempt {
		set += `, attempt_count = CASE WHEN attempt_count > 0 THEN attempt_count - 1 ELSE 0 END`
	}
	res := p.s.db.WithContext(ctx).Exec(`UPDATE `+p.q(models.TableWorkerQueue)+` SET `+set+` WHERE id = ? AND lock_token = ?`, now+durMS(delay), id, stored)
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
