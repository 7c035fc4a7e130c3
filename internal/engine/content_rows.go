package engine

import (
	"errors"
	"fmt"

	"github.com/google/uuid"

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

// errNoCodec is RotateContentKeys on a Store without a codec.
var errNoCodec = errors.New("the Store has no content codec (WithContentCodec)")
