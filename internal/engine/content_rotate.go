package engine

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/agentstore/agentstore/models"
)

// Limits of RotateParams.BatchSize.
const (
	// DefaultRotateBatch is the batch of RotateContentKeys when
	// RotateParams.BatchSize is 0.
	DefaultRotateBatch = 500
	// MaxRotateBatch is the largest batch RotateContentKeys accepts.
	MaxRotateBatch = 10000
)

// RotateParams configures Store.RotateContentKeys.
type RotateParams struct {
	// BatchSize is the number of rows read, and rewritten in one
	// transaction, at a time: 0 means DefaultRotateBatch; a negative size
	// or one above MaxRotateBatch is ErrInvalidInput.
	BatchSize int
}

// RotateCounts are RotateContentKeys's counts for one table.
type RotateCounts struct {
	// Rows is the number of rows read.
	Rows int64
	// Reencrypted is the number of values that were encrypted under
	// another key id and now are under the active one.
	Reencrypted int64
	// Encrypted is the number of values that were stored in the clear
	// (written before the Store had a codec) and now are encrypted.
	Encrypted int64
}

// RotateReport is what RotateContentKeys did.
type RotateReport struct {
	// KeyID is the active key id every value was moved to.
	KeyID string
	// Tables holds the counts per table, by unprefixed table name
	// (models.TableMessages, TableSessions, TableSummaries,
	// TableCompacts, TableQueue).
	Tables map[string]RotateCounts
}

// rotTarget is one table RotateContentKeys walks: its key, the session
// column, the row key of the additional data and the encrypted columns.
type rotTarget struct {
	table string
	// keyCols are the primary key's columns in walk order; sel is the
	// SELECT list before the encrypted columns (key, session, row key).
	keyCols []string
	sel     string
	cols    []rotCol
	// newRow returns a row whose dest holds sel's columns (the key's
	// holders among them) in order, before the encrypted columns.
	newRow func() *rotRow
}

// rotCol is an encrypted column; guarded columns can be rewritten by the
// API (the session row's summary), so the UPDATE checks the stored value.
type rotCol struct {
	name    string
	guarded bool
}

// rotRow is one row read by a rotation walk.
type rotRow struct {
	key     []any
	session uuid.UUID
	rowKey  string
	vals    []sql.NullString
	dest    []any
}

func rotTargets() []rotTarget {
	uuidKey := func(withSession bool) func() *rotRow {
		return func() *rotRow {
			r := &rotRow{key: make([]any, 1)}
			var id uuid.UUID
			r.key[0] = &id
			if withSession {
				r.dest = []any{&id, &r.session}
			} else {
				r.dest = []any{&id}
			}
			return r
		}
	}
	return []rotTarget{
		{table: models.TableMessages, keyCols: []string{"session_id", "seq"}, sel: "session_id, seq, id",
			cols: []rotCol{{name: encMsgContent}, {name: encMsgMetadata}},
			newRow: func() *rotRow {
				r := &rotRow{key: make([]any, 2)}
				var seq int64
				r.key[0], r.key[1] = &r.session, &seq
				r.dest = []any{&r.session, &seq, &r.rowKey}
				return r
			}},
		{table: models.TableSessions, keyCols: []string{"id"}, sel: "id", cols: []rotCol{{name: encSummary, guarded: true}},
			newRow: uuidKey(false)},
		{table: models.TableSummaries, keyCols: []string{"id"}, sel: "id, session_id", cols: []rotCol{{name: encSummary}},
			newRow: uuidKey(true)},
		{table: models.TableCompacts, keyCols: []string{"id"}, sel: "id, session_id", cols: []rotCol{{name: encSummary}},
			newRow: uuidKey(true)},
		{table: models.TableQueue, keyCols: []string{"seq"}, sel: "seq, session_id, id", cols: []rotCol{{name: encQueue}},
			newRow: func() *rotRow {
				r := &rotRow{key: make([]any, 1)}
				var seq int64
				var id uuid.UUID
				r.key[0] = &seq
				r.dest = []any{&seq, &r.session, &id}
				return r
			}},
	}
}

// RotateContentKeys moves every encrypted value the Store's codec can read
// to its active key, and encrypts the values stored in the clear (before
// the Store had a codec): message content and metadata, the session rows'
// summaries, summary snapshots, compaction records and session-queue item
// content. Each table is walked in primary-key order, p.BatchSize rows at a
// time: the rows are read, the values not under the active key are
// re-encrypted in memory, and the batch's UPDATEs commit in one short
// transaction of their own. Nothing is locked between batches, so writers
// go on (their new values are under the active key already; a session
// summary rewritten meanwhile is left as the writer stored it). Once it
// returns without error, no stored value needs a key other than the active
// one: old keys can be dropped from the codec. Running it again changes
// nothing (all values are under the active key). It returns the counts per
// table; on an error (a value no key of the codec decrypts: a *KeyError
// naming the key and row; ctx's end; a database error) the batches before
// it stay committed and their counts are returned with the error. A Store
// without a codec is ErrInvalidConfig; a batch size out of range
// ErrInvalidInput.
func (s *Store) RotateContentKeys(ctx context.Context, p RotateParams) (RotateReport, error) {
	rep := RotateReport{Tables: map[string]RotateCounts{}}
	if s.cfg.codec == nil {
		return rep, fmt.Errorf("rotate content keys: %w", configf("%v", errNoCodec))
	}
	if p.BatchSize < 0 || p.BatchSize > MaxRotateBatch {
		return rep, invalidf("rotate content keys: batch size %d must be between 0 and %d", p.BatchSize, MaxRotateBatch)
	}
	if p.BatchSize == 0 {
		p.BatchSize = DefaultRotateBatch
	}
	rep.KeyID = s.cfg.codec.ActiveKeyID()
	for _, t := range rotTargets() {
		c, err := s.rotateTable(ctx, t, p.BatchSize, rep.KeyID)
		rep.Tables[t.table] = c
		if err != nil {
			return rep, fmt.Errorf("rotate content keys: %s: %w", t.table, dbErr(err))
		}
	}
	return rep, nil
}

// rotUpdate is one value a batch rewrites.
type rotUpdate struct {
	col      rotCol
	row      *rotRow
	old, new string
}

// rotateTable walks one table (see RotateContentKeys).
func (s *Store) rotateTable(ctx context.Context, t rotTarget, batch int, active string) (RotateCounts, error) {
	var counts RotateCounts
	qt := s.quoted(t.table)
	colList := make([]string, len(t.cols))
	for i, c := range t.cols {
		colList[i] = c.name
	}
	order := strings.Join(t.keyCols, ", ")
	var after []any
	ss := &sessionStore{s: s}
	for {
		if err := ctx.Err(); err != nil {
			return counts, err
		}
		cond, args := "", []any{}
		if after != nil {
			if len(t.keyCols) == 1 {
				cond = " WHERE " + t.keyCols[0] + " > ?"
				args = append(args, after[0])
			} else {
				cond = " WHERE (" + t.keyCols[0] + " > ? OR (" + t.keyCols[0] + " = ? AND " + t.keyCols[1] + " > ?))"
				args = append(args, after[0], after[0], after[1])
			}
		}
		q := "SELECT " + t.sel + ", " + strings.Join(colList, ", ") + " FROM " + qt + cond + " ORDER BY " + order +
			" LIMIT " + fmt.Sprint(batch)
		var rows []*rotRow
		_, err := newDirectTx(s.db.WithContext(ctx)).each(q, args, func(r *sql.Rows, _ int64) error {
			row := t.newRow()
			row.vals = make([]sql.NullString, len(t.cols))
			dest := append([]any(nil), row.dest...)
			for i := range row.vals {
				dest = append(dest, &row.vals[i])
			}
			if err := r.Scan(dest...); err != nil {
				return err
			}
			if t.table == models.TableSessions {
				row.session = *row.key[0].(*uuid.UUID)
			}
			if t.table != models.TableMessages && t.table != models.TableSessions {
				// the row key is the row's own uuid id
				row.rowKey = idOf(t.table, row).String()
			}
			rows = append(rows, row)
			return nil
		})
		if err != nil {
			return counts, err
		}
		if len(rows) == 0 {
			return counts, nil
		}
		counts.Rows += int64(len(rows))
		last := rows[len(rows)-1]
		after = make([]any, len(last.key))
		for i, k := range last.key {
			after[i] = keyValue(k)
		}
		var ups []rotUpdate
		var reenc, enc int64
		for _, row := range rows {
			for i, c := range t.cols {
				v := row.vals[i]
				if !v.Valid || v.String == "" {
					continue
				}
				kid, ok := envelopeKeyID([]byte(v.String))
				if ok && kid == active {
					continue
				}
				plain, err := s.openValue(t.table, c.name, row.session, row.rowKey, []byte(v.String))
				if err != nil {
					return counts, err
				}
				sealed, err := s.sealValue(t.table, c.name, row.session, row.rowKey, plain)
				if err != nil {
					return counts, err
				}
				ups = append(ups, rotUpdate{col: c, row: row, old: v.String, new: string(sealed)})
				if kid == "" {
					enc++
				} else {
					reenc++
				}
			}
		}
		if len(ups) > 0 {
			err := func() error {
				defer ss.writeLock(ctx)()
				return ss.inTx(ctx, func(tx *gorm.DB) error {
					d := newDirectTx(tx)
					for _, u := range ups {
						where := make([]string, len(t.keyCols))
						args := []any{u.new}
						for i, k := range t.keyCols {
							where[i] = k + " = ?"
							args = append(args, keyValue(u.row.key[i]))
						}
						q := "UPDATE " + qt + " SET " + u.col.name + " = ? WHERE " + strings.Join(where, " AND ")
						if u.col.guarded {
							q += " AND " + u.col.name + " = ?"
							args = append(args, u.old)
						}
						if _, err := d.exec(q, args...); err != nil {
							return err
						}
					}
					return nil
				})
			}()
			if err != nil {
				return counts, err
			}
			counts.Reencrypted += reenc
			counts.Encrypted += enc
		}
		if len(rows) < batch {
			return counts, nil
		}
	}
}

// idOf returns the uuid id of a row of a table keyed or identified by one.
func idOf(table string, r *rotRow) uuid.UUID {
	if table == models.TableQueue {
		return *r.dest[2].(*uuid.UUID)
	}
	return *r.key[0].(*uuid.UUID)
}

// keyValue dereferences a key holder.
func keyValue(k any) any {
	switch v := k.(type) {
	case *uuid.UUID:
		return *v
	case *int64:
		return *v
	}
	return k
}
