package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

// Fork implements repo.Sessions.
//
// Every statement of a Fork touches one session (the origin's reads, the
// fork's writes), so on Citus each is routed to one shard whatever the
// distribution (docs/distributed.md): the origin's row is read and locked,
// the branch is found by a walk in memory over the parent links of the
// origin's messages (no recursive query), its rows are read by seq and
// inserted into the fork (content re-encrypted on the way when the Store
// has a codec), and the fork is read back, all in one transaction. It is
// the one implementation on every dialect.
func (ss *sessionStore) Fork(ctx context.Context, sessionID uuid.UUID, atMessageID string) (*repo.Session, error) {
	if ss.scopeErr != nil {
		return nil, ss.scopeErr
	}
	if atMessageID != "" {
		if err := checkID("fork message id", atMessageID); err != nil {
			return nil, fmt.Errorf("fork session %s: %w", sessionID, err)
		}
	}
	newID, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("fork session %s: new id: %w", sessionID, err)
	}
	now := ss.s.now()
	var out *repo.Session
	unlock := ss.writeLock(ctx)
	err = ss.inTx(ctx, func(tx *gorm.DB) error {
		// Lock the origin: a concurrent Delete of it waits for the fork
		// or makes it ErrNotFound, never a foreign-key error; appends
		// to it wait, so the branch read below is the one forked.
		tc, targs := ss.tenantCond("tenant_id")
		var srcs []models.Session
		if err := tx.Raw("SELECT * FROM "+ss.s.quoted(models.TableSessions)+" WHERE id = ?"+tc+ss.lockSuffix(),
			append([]any{sessionID}, targs...)...).Scan(&srcs).Error; err != nil {
			return dbErr(err)
		}
		if len(srcs) == 0 {
			return ss.notFound("session", sessionID)
		}
		src := &srcs[0]
		at := atMessageID
		if at == "" && src.CurrentLeafID != nil {
			at = *src.CurrentLeafID
		}
		var (
			atSeq  *int64
			branch []int64
		)
		if at != "" {
			var err error
			if branch, err = ss.forkBranch(tx, sessionID, at, src.MessageCount+1); err != nil {
				return err
			}
			forkedAt := branch[0]
			atSeq = &forkedAt
			slices.Sort(branch)
		}
		child := models.Session{
			ID: newID, ParentID: &src.ID, SessionType: string(repo.KindMain), TenantID: src.TenantID,
			State: string(repo.StateCreated), Config: src.Config, Permissions: src.Permissions, Summary: src.Summary,
			StaticContextHash: src.StaticContextHash, ForkedFromSessionID: &src.ID, ForkedFromSeq: atSeq,
			TotalCostUSD: models.Decimal{}, CreatedAt: now, UpdatedAt: now, ExpiresAt: src.ExpiresAt, Version: 1,
		}
		if at != "" {
			child.CurrentLeafID = &at
		}
		if src.Summary != nil {
			v, err := ss.s.resealValue(models.TableSessions, encSummary, src.ID, newID, "", []byte(*src.Summary))
			if err != nil {
				return err
			}
			sv := string(v)
			child.Summary = &sv
		}
		if err := tx.Omit(clause.Associations).Create(&child).Error; err != nil {
			return dbErr(err)
		}
		if len(branch) > 0 {
			if err := ss.copyBranch(tx, sessionID, newID, branch); err != nil {
				return err
			}
			// The counters after the copies, as a write of its own: the
			// change feed records the fork as created empty, then updated
			// with messages (0, n], like a session appended to.
			n := int64(len(branch))
			if _, err := newDirectTx(tx).exec("UPDATE "+ss.s.quoted(models.TableSessions)+" SET last_seq = ?, message_count = ? WHERE id = ?",
				n, n, newID); err != nil {
				return err
			}
		}
		// Read the fork back in the same transaction: if it cannot be
		// read (a corrupt row on the branch), no fork is left behind.
		var err error
		out, err = ss.loadTx(tx, newID, repo.LoadOptions{})
		return err
	})
	unlock()
	if err != nil {
		return nil, fmt.Errorf("fork session %s: %w", sessionID, dbErr(err))
	}
	out.MarkClean()
	return out, nil
}

// forkCopyBatch bounds the messages of one read and one insert of
// copyBranch.
const forkCopyBatch = appendRowsPer

// forkBranch returns the seqs of the branch of session ending at message
// at: at's seq first, then its parent's, and so on up the parent links
// (at most depth+1 steps, as Load's CurrentBranch walk; a message already
// on the walk ends it, so a cycle of parent ids written by hand ends
// too). ErrNotFound when the session holds no message at.
//
// The links are read in one statement pinned to the session: those of the
// messages up to at's seq (a message's parent is stored before it, except
// in a batch or rows written by hand that name a later one), and, only if
// the walk meets a parent that is not among them, those of every message
// of the session. No recursive query: Citus routes a recursive CTE only
// when it is router-plannable, and refuses one in an INSERT ... SELECT
// under schema-based sharding.
func (ss *sessionStore) forkBranch(tx *gorm.DB, sessionID uuid.UUID, at string, depth int64) ([]int64, error) {
	mt := ss.s.quoted(models.TableMessages)
	d := newDirectTx(tx)
	var atSeq int64
	found, err := d.queryRow("SELECT seq FROM "+mt+" WHERE session_id = ? AND id = ?", []any{sessionID, at}, &atSeq)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("message %q: %w", clip(at), ErrNotFound)
	}
	type link struct {
		seq    int64
		parent sql.NullString
	}
	read := func(bounded bool) (map[string]link, error) {
		q := "SELECT seq, id, parent_id FROM " + mt + " WHERE session_id = ?"
		args := []any{sessionID}
		if bounded {
			q += " AND seq <= ?"
			args = append(args, atSeq)
		}
		links := make(map[string]link, min(atSeq, 100000))
		_, err := d.each(q, args, func(rows *sql.Rows, _ int64) error {
			var (
				l  link
				id string
			)
			if err := rows.Scan(&l.seq, &id, &l.parent); err != nil {
				return err
			}
			links[id] = l
			return nil
		})
		if err != nil {
			return nil, dbErr(err)
		}
		return links, nil
	}
	links, err := read(true)
	if err != nil {
		return nil, err
	}
	// walk follows the parent links from at; missing is true when it
	// stopped at a parent id the links do not hold.
	walk := func() (seqs []int64, missing bool) {
		seen := make(map[int64]bool, len(links))
		id := at
		for steps := int64(0); steps <= depth; steps++ {
			l, ok := links[id]
			if !ok {
				return seqs, true
			}
			if seen[l.seq] {
				break
			}
			seen[l.seq] = true
			seqs = append(seqs, l.seq)
			if !l.parent.Valid {
				break
			}
			id = l.parent.String
		}
		return seqs, false
	}
	seqs, missing := walk()
	if missing {
		// a parent stored after at, or none of that id (a dangling
		// link ends the branch, as the join of a recursive walk would)
		if links, err = read(false); err != nil {
			return nil, err
		}
		seqs, _ = walk()
	}
	return seqs, nil
}

// copyBranch copies the messages seqs (ascending) of session from into
// session to as its messages 1..len(seqs), marked sidechain: a read of
// the rows by seq from the origin and a multi-row insert into the fork per
// forkCopyBatch messages, each statement on one session. With a content
// codec the content and metadata are re-encrypted for the fork's rows
// (they are bound to the origin's).
func (ss *sessionStore) copyBranch(tx *gorm.DB, from, to uuid.UUID, seqs []int64) error {
	if len(seqs) == 0 {
		return nil
	}
	s := ss.s
	d := newDirectTx(tx)
	q := "SELECT " + messageCols + " FROM " + s.quoted(models.TableMessages) + " WHERE session_id = ? AND seq >= ? AND seq <= ? ORDER BY seq"
	rows := make([]models.Message, 0, min(len(seqs), forkCopyBatch))
	for start := 0; start < len(seqs); start += forkCopyBatch {
		batch := seqs[start:min(start+forkCopyBatch, len(seqs))]
		rows = rows[:0]
		// The batch's seq range: its messages and those of other branches
		// between them, skipped (the batches' ranges do not overlap, so
		// the reads take each message of the range at most once).
		next := 0
		_, err := d.each(q, []any{from, batch[0], batch[len(batch)-1]}, func(r *sql.Rows, _ int64) error {
			var (
				m                         models.Message
				parent, model, reqID      sql.NullString
				created                   dbTime
				content, usage, meta, env []byte
			)
			if err := r.Scan(&m.Seq, &m.ID, &parent, &m.Role, &content, &m.IsSidechain, &m.IsCompactSummary, &usage, &meta,
				&model, &reqID, &env, &created); err != nil {
				return err
			}
			if next >= len(batch) || m.Seq != batch[next] {
				return nil
			}
			next++
			m.ParentID, m.Model, m.RequestID = nullString(parent), nullString(model), nullString(reqID)
			m.Content, m.Usage, m.Metadata, m.Environment = models.VerbatimJSON(content), models.JSON(usage), models.JSON(meta), models.JSON(env)
			m.CreatedAt = created.T
			rows = append(rows, m)
			return nil
		})
		if err != nil {
			return dbErr(err)
		}
		if len(rows) != len(batch) {
			// the origin is locked: its messages cannot change under the fork
			return fmt.Errorf("fork: %d of %d branch messages read: %w", len(rows), len(batch), ErrConflict)
		}
		for i := range rows {
			m := &rows[i]
			if s.cfg.codec != nil {
				c, err := s.resealValue(models.TableMessages, encMsgContent, from, to, m.ID, m.Content)
				if err != nil {
					return err
				}
				m.Content = models.VerbatimJSON(c)
				if len(m.Metadata) > 0 {
					md, err := s.resealValue(models.TableMessages, encMsgMetadata, from, to, m.ID, m.Metadata)
					if err != nil {
						return err
					}
					m.Metadata = models.JSON(md)
				}
			}
			m.SessionID, m.Seq, m.IsSidechain = to, int64(start+i+1), true
		}
		if err := ss.appendRows(tx, rows); err != nil {
			return err
		}
	}
	return nil
}

// WithSessionLock implements repo.Sessions.
func (ss *sessionStore) WithSessionLock(ctx context.Context, id uuid.UUID, fn func(ctx context.Context, tx repo.Sessions) error) error {
	if ss.scopeErr != nil {
		return ss.scopeErr
	}
	if fn == nil {
		return invalidf("lock session %s: nil function", id)
	}
	defer ss.writeLock(ctx)()
	err := ss.inTx(ctx, func(tx *gorm.DB) error {
		if _, err := ss.lockHead(tx, id); err != nil {
			return err
		}
		inner := &sessionStore{s: ss.s, tenant: ss.tenant, tx: tx}
		if err := fn(ctx, sessionsAPI{inner}); err != nil {
			return &fnError{err}
		}
		return nil
	})
	var fe *fnError
	if err != nil && !errors.As(err, &fe) {
		return fmt.Errorf("lock session %s: %w", id, dbErr(err))
	}
	return err
}

// CleanupExpired implements repo.Sessions.
func (ss *sessionStore) CleanupExpired(ctx context.Context, batchSize int) (int, error) {
	if ss.scopeErr != nil {
		return 0, ss.scopeErr
	}
	if batchSize < 0 {
		return 0, invalidf("cleanup expired: negative batch size")
	}
	if batchSize == 0 {
		batchSize = defaultCleanupBatch
	}
	st := ss.s.quoted(models.TableSessions)
	tc, targs := ss.tenantCond("tenant_id")
	lock := ss.s.forUpdateSkip("")
	now := ss.s.now()
	total := 0
	for {
		// One transaction per batch: pick (and on PostgreSQL lock, skipping
		// rows another sweeper holds) up to batchSize expired ids, then
		// delete them. The count is the ids picked, so a child that is
		// expired itself counts once on every dialect, whether the DELETE
		// of the batch or the one of the sessions below reached it first.
		args := append([]any{now}, targs...)
		args = append(args, batchSize)
		var ids, expired []uuid.UUID
		unlock := ss.writeLock(ctx)
		batch := func(tx *gorm.DB) error {
			ids, expired = nil, nil
			if err := tx.Raw("SELECT id FROM "+st+" WHERE expires_at IS NOT NULL AND expires_at < ?"+tc+
				" ORDER BY expires_at, id LIMIT ?"+lock, args...).Scan(&ids).Error; err != nil {
				return err
			}
			if len(ids) == 0 {
				return nil
			}
			// The expired sessions this batch deletes: the picked ones and
			// their expired descendants (deleteSessionsBelow reaches them), locked
			// so that a concurrent sweeper that deleted one of them first
			// makes it drop out here instead of being counted twice.
			// d first in the step: the (parent_id, ...) index read once per
			// row of d (MariaDB otherwise scans the sessions table there)
			if err := tx.Raw(`WITH RECURSIVE d(id) AS (SELECT id FROM `+st+` WHERE id IN ?
 UNION SELECT c.id FROM d `+ss.s.joinInOrder()+` `+st+` c ON c.parent_id = d.id)
SELECT id FROM `+st+` WHERE id IN (SELECT id FROM d) AND expires_at IS NOT NULL AND expires_at < ?`+ss.lockSuffix(),
				ids, now).Scan(&expired).Error; err != nil {
				return err
			}
			if err := tx.Exec("DELETE FROM "+st+" WHERE id IN ?", ids).Error; err != nil {
				return err
			}
			_, err := ss.s.deleteSessionsBelow(tx, ids)
			return err
		}
		err := ss.inTx(ctx, batch)
		// A batch that lost a deadlock to a concurrent sweeper (InnoDB's
		// cascading deletes can) rolled back whole: run it again, so the
		// deletions already committed stay counted in this call.
		// (A lock timeout is not retried here: it would multiply the wait.)
		for i := 0; i < 8 && err != nil && errors.Is(dbErr(err), ErrRetryable) && !errors.Is(dbErr(err), ErrLockTimeout) && ctx.Err() == nil; i++ {
			// a short, growing, jittered pause lets the other sweeper's
			// batch commit first
			t := time.NewTimer(time.Duration(i+1)*2*time.Millisecond + time.Duration(rand.IntN(2000))*time.Microsecond)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
			if ctx.Err() != nil {
				break
			}
			err = ss.inTx(ctx, batch)
		}
		unlock()
		if err != nil {
			return total, fmt.Errorf("cleanup expired sessions: %w", dbErr(err))
		}
		total += len(expired)
		if len(ids) < batchSize {
			return total, nil
		}
	}
}

// defaultCleanupBatch is CleanupExpired's batch size when none is given.
const defaultCleanupBatch = 500

// Delete implements repo.Sessions.
func (ss *sessionStore) Delete(ctx context.Context, id uuid.UUID) (bool, error) {
	if ss.scopeErr != nil {
		return false, ss.scopeErr
	}
	defer ss.writeLock(ctx)()
	var deleted bool
	err := ss.inTx(ctx, func(tx *gorm.DB) error {
		q := tx.Where("id = ?", id)
		if ss.tenant != nil {
			q = q.Where("tenant_id = ?", *ss.tenant)
		}
		res := q.Delete(&models.Session{})
		if res.Error != nil || res.RowsAffected == 0 {
			return res.Error
		}
		deleted = true
		_, err := ss.s.deleteSessionsBelow(tx, []uuid.UUID{id})
		return err
	})
	if err != nil {
		return false, fmt.Errorf("delete session %s: %w", id, dbErr(err))
	}
	return deleted, nil
}

// deleteBelowBatch bounds the parent ids of one DELETE of
// deleteSessionsBelow.
const deleteBelowBatch = 500

// deleteSessionsBelow deletes, in tx, every session below the (deleted)
// sessions ids by parent_id, level by level, and returns how many it
// deleted. Since V13 sessions.parent_id is no foreign key (a fork is on
// another shard than its parent on Citus), so this is the cascade the key
// did: each level is a read of the children and, when there are any, one
// DELETE ... WHERE parent_id IN ... RETURNING id per batch of parents: new
// statements, which see a child committed by a Save or Fork that held the
// parent's row while the previous level's DELETE waited for it.
func (s *Store) deleteSessionsBelow(tx *gorm.DB, ids []uuid.UUID) (int64, error) {
	st := s.quoted(models.TableSessions)
	var total int64
	seen := map[uuid.UUID]bool{}
	for _, id := range ids {
		seen[id] = true
	}
	for len(ids) > 0 {
		var next []uuid.UUID
		for start := 0; start < len(ids); start += deleteBelowBatch {
			batch := ids[start:min(start+deleteBelowBatch, len(ids))]
			var got []uuid.UUID
			if err := tx.Raw("SELECT id FROM "+st+" WHERE parent_id IN ?", batch).Scan(&got).Error; err != nil {
				return total, err
			}
			if len(got) == 0 {
				continue
			}
			got = nil
			if err := tx.Raw("DELETE FROM "+st+" WHERE parent_id IN ? RETURNING id", batch).Scan(&got).Error; err != nil {
				return total, err
			}
			total += int64(len(got))
			for _, c := range got {
				if !seen[c] { // a cycle of parent ids (written by hand) ends here
					seen[c] = true
					next = append(next, c)
				}
			}
		}
		ids = next
	}
	return total, nil
}

// nullString returns the string of a non-NULL column, else nil.
func nullString(v sql.NullString) *string {
	if !v.Valid {
		return nil
	}
	return &v.String
}
