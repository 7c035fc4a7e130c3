package engine

import (
	"database/sql"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

// sealMessageRow encrypts a message row's content and metadata (no-op
// without a codec). The row's session and message id must be set: they
// bind the values to it.
func (s *Store) sealMessageRow(row *models.Message) error {
	if s.cfg.codec == nil {
		return nil
	}
	c, err := s.sealValue(models.TableMessages, encMsgContent, row.SessionID, row.ID, row.Content)
	if err != nil {
		return fmt.Errorf("message %q: %w", clip(row.ID), err)
	}
	row.Content = c
	if len(row.Metadata) > 0 {
		m, err := s.sealValue(models.TableMessages, encMsgMetadata, row.SessionID, row.ID, row.Metadata)
		if err != nil {
			return fmt.Errorf("message %q: %w", clip(row.ID), err)
		}
		row.Metadata = m
	}
	return nil
}

// summarySnapshots decodes summary rows (decrypting their text).
func (s *Store) summarySnapshots(rows []models.Summary) ([]repo.SummarySnapshot, error) {
	out := make([]repo.SummarySnapshot, 0, len(rows))
	for _, r := range rows {
		text, err := s.openString(models.TableSummaries, encSummary, r.SessionID, r.ID.String(), r.Summary)
		if err != nil {
			return nil, err
		}
		out = append(out, repo.SummarySnapshot{ID: r.ID, SessionID: r.SessionID, Summary: text,
			LeafMessageID: r.LeafMessageID, CreatedAt: r.CreatedAt.UTC()})
	}
	return out, nil
}

// resealValue moves a stored value of one session's row to the same row
// key of another session (Fork's copies): decrypted with the origin's
// binding, encrypted with the copy's. A plain value is encrypted; without
// a codec it is returned as it is (an envelope then fails when read).
func (s *Store) resealValue(table, column string, from, to uuid.UUID, rowKey string, stored []byte) ([]byte, error) {
	if s.cfg.codec == nil {
		return stored, nil
	}
	plain, err := s.openValue(table, column, from, rowKey, stored)
	if err != nil {
		return nil, err
	}
	return s.sealValue(table, column, to, rowKey, plain)
}

// resealForkedMessages re-encrypts the messages Fork copied from origin
// into fork (their content and metadata were bound to origin's rows), one
// UPDATE per message in Fork's transaction. Without a codec it does
// nothing.
func (ss *sessionStore) resealForkedMessages(tx *gorm.DB, origin, fork uuid.UUID) error {
	s := ss.s
	if s.cfg.codec == nil {
		return nil
	}
	mt := s.quoted(models.TableMessages)
	type copied struct {
		seq           int64
		id            string
		content, meta []byte
	}
	var rows []copied
	_, err := newDirectTx(tx).each("SELECT seq, id, content, metadata FROM "+mt+" WHERE session_id = ? ORDER BY seq", []any{fork},
		func(r *sql.Rows, _ int64) error {
			var c copied
			if err := r.Scan(&c.seq, &c.id, &c.content, &c.meta); err != nil {
				return err
			}
			rows = append(rows, c)
			return nil
		})
	if err != nil {
		return dbErr(err)
	}
	for _, c := range rows {
		content, err := s.resealValue(models.TableMessages, encMsgContent, origin, fork, c.id, c.content)
		if err != nil {
			return err
		}
		var meta any
		if len(c.meta) > 0 {
			m, err := s.resealValue(models.TableMessages, encMsgMetadata, origin, fork, c.id, c.meta)
			if err != nil {
				return err
			}
			meta = jsonArg(models.JSON(m))
		}
		if _, err := newDirectTx(tx).exec("UPDATE "+mt+" SET content = ?, metadata = ? WHERE session_id = ? AND seq = ?",
			jsonArg(models.JSON(content)), meta, fork, c.seq); err != nil {
			return dbErr(err)
		}
	}
	return nil
}

// errNoCodec is RotateContentKeys on a Store without a codec.
var errNoCodec = errors.New("the Store has no content codec (WithContentCodec)")
