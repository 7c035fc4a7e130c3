package engine

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// decodeHistory decodes stored events in order, each once (Event's
// decoder validates and parses the text in one pass over it, so it is
// called directly rather than through json.Unmarshal, which would scan the
// text once more first); the first failure is returned as a
// *CorruptRowError.
func decodeHistory(instance string, execution int64, rows []historyRow) ([]duroxide.Event, error) {
	out := make([]duroxide.Event, 0, len(rows))
	for _, r := range rows {
		var e duroxide.Event
		if err := e.UnmarshalJSON([]byte(r.EventData)); err != nil {
			return nil, &CorruptRowError{Table: models.TableHistory,
				RowID: fmt.Sprintf("%s/%d/%d", instance, execution, r.EventID), Column: "event_data", Err: err}
		}
		out = append(out, e)
	}
	return out, nil
}

type historyRow struct {
	EventID   int64
	EventData string
}

// readHistory runs query, a query of (event_id, event_data) rows in event
// id order, and decodes at most max events (max < 0: all) straight from
// the driver's buffer: the stored text is neither copied into a string
// nor scanned through GORM's reflection, and each event is decoded once.
// It returns the events, the event_id of the last decoded row (the cursor
// of a page) and the number of rows; the first undecodable row is a
// *CorruptRowError.
func readHistory(db *gorm.DB, instance string, execution int64, max int, query string, args ...any) ([]duroxide.Event, int64, int, error) {
	tx := db.Raw(query, args...)
	rows, err := tx.Rows()
	if err != nil {
		return nil, 0, 0, err
	}
	defer rows.Close()
	var (
		out  []duroxide.Event
		id   int64
		last int64
		data sql.RawBytes
		n    int
	)
	for rows.Next() {
		n++
		if max >= 0 && len(out) == max {
			continue // counted only: the caller asked for one row more than it returns
		}
		if err := rows.Scan(&id, &data); err != nil {
			return nil, 0, 0, tx.AddError(err)
		}
		var e duroxide.Event
		if err := e.UnmarshalJSON(data); err != nil {
			return nil, 0, 0, &CorruptRowError{Table: models.TableHistory,
				RowID: fmt.Sprintf("%s/%d/%d", instance, execution, id), Column: "event_data", Err: err}
		}
		out, last = append(out, e), id
	}
	if err := translateVia(tx, rows.Err()); err != nil {
		return nil, 0, 0, tx.AddError(err)
	}
	if out == nil {
		out = []duroxide.Event{}
	}
	return out, last, n, nil
}

// loadHistory returns the whole history of one execution, each event
// decoded once (readHistory).
func (p *gormProvider) loadHistory(tx *gorm.DB, instance string, execution int64) ([]duroxide.Event, error) {
	evs, _, _, err := readHistory(tx, instance, execution, -1, `SELECT event_id, event_data FROM `+p.q(models.TableHistory)+
		` WHERE instance_id = ? AND execution_id = ? ORDER BY event_id`, instance, execution)
	return evs, err
}

// historyDecoder decodes the history rows of one execution as they are
// scanned, each once; the first undecodable row is kept as a
// *CorruptRowError and later rows are skipped.
type historyDecoder struct {
	instance string
	exec     int64
	events   []duroxide.Event
	err      error
}

func (d *historyDecoder) add(id int64, data []byte) {
	if d.err != nil {
		return
	}
	var e duroxide.Event
	if err := e.UnmarshalJSON(data); err != nil {
		d.err = &CorruptRowError{Table: models.TableHistory, RowID: fmt.Sprintf("%s/%d/%d", d.instance, d.exec, id), Column: "event_data", Err: err}
		return
	}
	d.events = append(d.events, e)
}

// Read implements duroxide.Provider.
func (p *gormProvider) Read(ctx context.Context, instance string) ([]duroxide.Event, error) {
	const op = "read"
	db := p.s.db.WithContext(ctx)
	var exec *int64
	if err := db.Raw(`SELECT MAX(execution_id) FROM `+p.q(models.TableExecutions)+` WHERE instance_id = ?`, instance).Scan(&exec).Error; err != nil {
		return nil, perrAt(op, instance, err)
	}
	if exec == nil { // acked without metadata: no execution rows, only history
		if err := db.Raw(`SELECT MAX(execution_id) FROM `+p.q(models.TableHistory)+` WHERE instance_id = ?`, instance).Scan(&exec).Error; err != nil {
			return nil, perrAt(op, instance, err)
		}
	}
	if exec == nil {
		return []duroxide.Event{}, nil
	}
	return p.readExec(ctx, op, instance, *exec)
}

// ReadWithExecution implements duroxide.Provider.
func (p *gormProvider) ReadWithExecution(ctx context.Context, instance string, executionID uint64) ([]duroxide.Event, error) {
	return p.readExec(ctx, "read_with_execution", instance, int64(executionID))
}

func (p *gormProvider) readExec(ctx context.Context, op, instance string, exec int64) ([]duroxide.Event, error) {
	evs, err := p.loadHistory(p.s.db.WithContext(ctx), instance, exec)
	if err != nil {
		return nil, perrAt(op, instance, err)
	}
	return evs, nil
}

// AppendWithExecution implements duroxide.Provider.
func (p *gormProvider) AppendWithExecution(ctx context.Context, instance string, executionID uint64, events []duroxide.Event) error {
	const op = "append_with_execution"
	if instance == "" || !utf8.ValidString(instance) {
		return perr(op, invalidf("instance id must be non-empty valid UTF-8"))
	}
	now := p.s.nowMS()
	rows := make([]models.HistoryEvent, 0, len(events))
	for _, ev := range events {
		if ev.EventID == 0 || ev.Kind == nil {
			return perr(op, invalidf("event id must be > 0 and kind set"))
		}
		if err := checkUTF8("event", ev); err != nil {
			return perr(op, err)
		}
		data, err := json.Marshal(ev)
		if err != nil {
			return perr(op, invalidf("encode event %d: %v", ev.EventID, err))
		}
		rows = append(rows, models.HistoryEvent{InstanceID: instance, ExecutionID: int64(executionID), EventID: int64(ev.EventID),
			EventType: ev.Kind.EventType(), EventData: string(data), CreatedAt: now})
	}
	if len(rows) == 0 {
		return nil
	}
	// One batched INSERT ... ON CONFLICT DO NOTHING (duplicates ignored),
	// not a statement per event.
	err := p.s.db.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).CreateInBatches(rows, 500).Error
	return perrAt(op, instance, err)
}
