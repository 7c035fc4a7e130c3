package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

// Fork implements repo.Sessions.
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
	mt := ss.s.quoted(models.TableMessages)
	var out *repo.Session
	unlock := ss.writeLock(ctx)
	err = ss.inTx(ctx, func(tx *gorm.DB) error {
		// Lock the origin: a concurrent Delete of it waits for the fork
		// or makes it ErrNotFound, never a foreign-key error.
		if _, err := ss.lockHead(tx, sessionID); err != nil {
			return err
		}
		var src models.Session
		q := tx.Where("id = ?", sessionID)
		if ss.tenant != nil {
			q = q.Where("tenant_id = ?", *ss.tenant)
		}
		if err := q.Take(&src).Error; err != nil {
			return dbErr(err)
		}
		at := atMessageID
		if at == "" && src.CurrentLeafID != nil {
			at = *src.CurrentLeafID
		}
		var atSeq *int64
		if at != "" {
			var seqs []int64
			if err := tx.Model(&models.Message{}).Where("session_id = ? AND id = ?", sessionID, at).Pluck("seq", &seqs).Error; err != nil {
				return dbErr(err)
			}
			if len(seqs) == 0 {
				return fmt.Errorf("message %q: %w", clip(at), ErrNotFound)
			}
			atSeq = &seqs[0]
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
		if at != "" && !ss.s.has(CapFastPaths) && !ss.s.has(CapSingleWriter) {
			n, err := ss.copyBranch(tx, sessionID, newID, at, src.MessageCount+1)
			if err != nil {
				return err
			}
			if err := tx.Exec("UPDATE "+ss.s.quoted(models.TableSessions)+" SET last_seq = ?, message_count = ? WHERE id = ?",
				n, n, newID).Error; err != nil {
				return dbErr(err)
			}
			if err := ss.resealForkedMessages(tx, src.ID, newID); err != nil {
				return err
			}
		} else if at != "" {
			// INSERT ... WITH RECURSIVE ... SELECT: the form PostgreSQL,
			// SQLite and MariaDB all accept
			res := tx.Exec(`INSERT INTO `+mt+` (`+messageCols+`, session_id)
WITH RECURSIVE branch(seq, parent_id, depth) AS (
 SELECT seq, parent_id, 0 FROM `+mt+` WHERE session_id = ? AND id = ?
 UNION ALL
 SELECT m.seq, m.parent_id, b.depth + 1 FROM `+mt+` m JOIN branch b ON m.session_id = ? AND m.id = b.parent_id
 WHERE b.depth < ?)
SELECT ROW_NUMBER() OVER (ORDER BY seq), id, parent_id, role, content, TRUE, is_compact_summary, "usage", metadata,
 model, request_id, environment, created_at, `+ss.param("uuid")+`
FROM `+mt+` WHERE session_id = ? AND seq IN (SELECT seq FROM branch)`,
				sessionID, at, sessionID, src.MessageCount+1, newID, sessionID)
			if res.Error != nil {
				return dbErr(res.Error)
			}
			n := res.RowsAffected
			if err := tx.Exec("UPDATE "+ss.s.quoted(models.TableSessions)+" SET last_seq = ?, message_count = ? WHERE id = ?",
				n, n, newID).Error; err != nil {
				return dbErr(err)
			}
			if err := ss.resealForkedMessages(tx, src.ID, newID); err != nil {
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

// forkCopyBatch bounds the messages of one read and one insert of copyBranch.
const forkCopyBatch = 500

// copyBranch copies the branch of session from ending at message at (at
// most depth messages up its parent chain) into session to as its
// messages 1..n, sidechain, and returns n. It is Fork's general path:
// statements that each touch one session (the branch's seqs read by a
// recursive query pinned to from, its rows read by seq, the copies
// inserted into to), which Citus routes to one shard each. With
// CapFastPaths, or on a single-writer database (never distributed), Fork
// copies in one INSERT ... SELECT instead.
func (ss *sessionStore) copyBranch(tx *gorm.DB, from, to uuid.UUID, at string, depth int64) (int64, error) {
	mt := ss.s.quoted(models.TableMessages)
	var seqs []int64
	if err := tx.Raw(`WITH RECURSIVE branch(seq, parent_id, depth) AS (
 SELECT seq, parent_id, 0 FROM `+mt+` WHERE session_id = ? AND id = ?
 UNION ALL
 SELECT m.seq, m.parent_id, b.depth + 1 FROM `+mt+` m JOIN branch b ON m.session_id = ? AND m.id = b.parent_id
 WHERE b.depth < ?)
SELECT seq FROM branch ORDER BY seq`, from, at, from, depth).Scan(&seqs).Error; err != nil {
		return 0, dbErr(err)
	}
	var n int64
	for start := 0; start < len(seqs); start += forkCopyBatch {
		var rows []models.Message
		if err := tx.Where("session_id = ? AND seq IN ?", from, seqs[start:min(start+forkCopyBatch, len(seqs))]).
			Order("seq").Find(&rows).Error; err != nil {
			return 0, dbErr(err)
		}
		for i := range rows {
			n++
			rows[i].SessionID, rows[i].Seq, rows[i].IsSidechain = to, n, true
		}
		if err := insertMessages(tx, rows); err != nil {
			return 0, err
		}
	}
	return n, nil
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
