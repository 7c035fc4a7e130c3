package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// The instance key-value store (duroxide's two-table KV). kv_delta holds
// the writes of the current execution (a NULL value is a tombstone);
// kv_store what completed executions merged. An ack applies the KeyValue*
// events of its history delta to kv_delta in history order and, when it
// ends the execution (Completed, Failed, ContinuedAsNew), merges kv_delta
// into kv_store (tombstoned keys deleted) and empties it. A fetch returns
// kv_store only; GetKVValue and GetKVAllValues read the merged view.

// kvRow is the net effect of an ack's KeyValue* events on one key: a value
// (set) or nil (tombstone), and the set event's timestamp (0: the ack's
// clock).
type kvRow struct {
	key   string
	value *string
	ts    int64
}

// kvPlan is the net effect of an ack's KeyValue* events on kv_delta:
// clearAll tombstones every key of the instance (stored or in the delta)
// first, then rows are written. Applying it is the same as applying the
// events one by one in history order: an event before the last
// KeyValuesCleared only matters through the tombstone it leaves.
type kvPlan struct {
	clearAll bool
	rows     []kvRow
}

func (k *kvPlan) empty() bool { return k == nil || (!k.clearAll && len(k.rows) == 0) }

// planKV builds the plan of events and checks the limits before any SQL:
// at most MaxKVKeys distinct keys set, values of at most MaxKVValueBytes,
// keys and values valid UTF-8 without NUL (PostgreSQL text cannot store
// it), so both dialects refuse the same input with ErrInvalidInput.
func planKV(events []duroxide.Event) (*kvPlan, error) {
	var plan *kvPlan
	idx := map[string]int{}
	set := map[string]bool{}
	put := func(r kvRow) {
		if i, ok := idx[r.key]; ok {
			plan.rows[i] = r
			return
		}
		idx[r.key] = len(plan.rows)
		plan.rows = append(plan.rows, r)
	}
	checkText := func(what, s string, id uint64) error {
		if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
			return invalidf("event %d: key-value %s must be valid UTF-8 without NUL", id, what)
		}
		return nil
	}
	for _, ev := range events {
		switch k := ev.Kind.(type) {
		case *duroxide.KeyValueSetEvent:
			if plan == nil {
				plan = &kvPlan{}
			}
			if err := checkText("key", k.Key, ev.EventID); err != nil {
				return nil, err
			}
			if err := checkText("value", k.Value, ev.EventID); err != nil {
				return nil, err
			}
			if len(k.Value) > duroxide.MaxKVValueBytes {
				return nil, invalidf("event %d: value of key %q is %d bytes, the limit is %d", ev.EventID, k.Key, len(k.Value), duroxide.MaxKVValueBytes)
			}
			if set[k.Key] = true; len(set) > duroxide.MaxKVKeys {
				return nil, invalidf("event %d: the ack sets more than %d keys", ev.EventID, duroxide.MaxKVKeys)
			}
			v := k.Value
			put(kvRow{key: k.Key, value: &v, ts: int64(k.LastUpdatedAtMS)})
		case *duroxide.KeyValueClearedEvent:
			if plan == nil {
				plan = &kvPlan{}
			}
			if err := checkText("key", k.Key, ev.EventID); err != nil {
				return nil, err
			}
			put(kvRow{key: k.Key})
		case *duroxide.KeyValuesClearedEvent:
			if plan == nil {
				plan = &kvPlan{}
			}
			// everything so far becomes a tombstone: keys written earlier in
			// this ack are covered by clearAll unless written again later
			plan.clearAll = true
			plan.rows = plan.rows[:0]
			clear(idx)
		}
	}
	if len(set) > duroxide.MaxKVKeys {
		return nil, invalidf("the ack sets more than %d keys", duroxide.MaxKVKeys)
	}
	return plan, nil
}

// applyKV is the key-value step of the portable ack (in its transaction;
// the dialect's one-statement ack does the same, see dialect.OrchAck). An ack
// that does not end the execution writes plan into kv_delta. One that ends
// it never writes kv_delta: it empties it (DELETE ... RETURNING, the only
// statement when the execution wrote no key-values), lays plan over the
// returned rows in Go and writes the result to kv_store (values upserted,
// tombstoned keys deleted).
func (p *gormProvider) applyKV(tx *gorm.DB, instance string, exec, now int64, plan *kvPlan, terminal bool) error {
	delta, store := p.q(models.TableKVDelta), p.q(models.TableKVStore)
	if !terminal {
		if plan.clearAll {
			if err := tx.Exec(`UPDATE `+delta+` SET value = NULL, last_updated_at_ms = ? WHERE instance_id = ?`, now, instance).Error; err != nil {
				return fmt.Errorf("clear key-values of %s: %w", instance, err)
			}
			if err := tx.Exec(p.s.upsert(`INSERT INTO `+delta+` (instance_id, "key", value, last_updated_at_ms) SELECT instance_id, "key", NULL, ? FROM `+store+
				` WHERE instance_id = ? ON CONFLICT (instance_id, "key") DO NOTHING`), now, instance).Error; err != nil {
				return fmt.Errorf("clear stored key-values of %s: %w", instance, err)
			}
		}
		return p.upsertKV(tx, delta, `value = excluded.value, last_updated_at_ms = excluded.last_updated_at_ms`, instance, nil, plan.rows, now)
	}
	var old []struct {
		Key             string
		Value           *string
		LastUpdatedAtMS int64 `gorm:"column:last_updated_at_ms"`
	}
	if err := scanAll(tx, &old, `DELETE FROM `+delta+` WHERE instance_id = ? RETURNING "key", value, last_updated_at_ms`, instance); err != nil {
		return fmt.Errorf("take key-value delta of %s: %w", instance, err)
	}
	if len(old) == 0 && plan.empty() {
		return nil
	}
	eff := make(map[string]kvRow, len(old))
	var order []string
	put := func(r kvRow) {
		if _, ok := eff[r.key]; !ok {
			order = append(order, r.key)
		}
		eff[r.key] = r
	}
	if plan != nil && plan.clearAll {
		var keys []string
		if err := tx.Raw(`SELECT "key" FROM `+store+` WHERE instance_id = ?`, instance).Scan(&keys).Error; err != nil {
			return fmt.Errorf("read stored keys of %s: %w", instance, err)
		}
		for _, k := range keys {
			put(kvRow{key: k})
		}
		for _, o := range old {
			put(kvRow{key: o.Key})
		}
	} else {
		for _, o := range old {
			put(kvRow{key: o.Key, value: o.Value, ts: o.LastUpdatedAtMS})
		}
	}
	if plan != nil {
		for _, r := range plan.rows {
			r.ts = kvTS(r.ts, now)
			put(r)
		}
	}
	var sets []kvRow
	var gone []any
	for _, k := range order {
		if r := eff[k]; r.value != nil {
			sets = append(sets, r)
		} else {
			gone = append(gone, k)
		}
	}
	if err := p.upsertKV(tx, store, `value = excluded.value, execution_id = excluded.execution_id, last_updated_at_ms = excluded.last_updated_at_ms`,
		instance, &exec, sets, now); err != nil {
		return err
	}
	for start := 0; start < len(gone); start += 500 {
		part := gone[start:min(start+500, len(gone))]
		if err := tx.Exec(`DELETE FROM `+store+` WHERE instance_id = ? AND "key" IN (`+placeholders(len(part))+`)`,
			append([]any{instance}, part...)...).Error; err != nil {
			return fmt.Errorf("delete cleared key-values of %s: %w", instance, err)
		}
	}
	return nil
}

// upsertKV writes rows of instance into table (kv_delta, or kv_store with
// exec set) in batches of 200, updating set on conflict.
func (p *gormProvider) upsertKV(tx *gorm.DB, table, set, instance string, exec *int64, rows []kvRow, now int64) error {
	cols, tuple, per := `(instance_id, "key", value, last_updated_at_ms)`, `(?, ?, ?, ?)`, 4
	if exec != nil {
		cols, tuple, per = `(instance_id, "key", value, last_updated_at_ms, execution_id)`, `(?, ?, ?, ?, ?)`, 5
	}
	for start := 0; start < len(rows); start += 200 {
		part := rows[start:min(start+200, len(rows))]
		args := make([]any, 0, per*len(part))
		for _, r := range part {
			args = append(args, instance, r.key, r.value, kvTS(r.ts, now))
			if exec != nil {
				args = append(args, *exec)
			}
		}
		var b strings.Builder
		b.WriteString(`INSERT INTO ` + table + ` ` + cols + ` VALUES `)
		writeTuples(&b, len(part), tuple)
		b.WriteString(` ON CONFLICT (instance_id, "key") DO UPDATE SET ` + set)
		if err := tx.Exec(p.s.upsert(b.String()), args...).Error; err != nil {
			return fmt.Errorf("write key-values of %s: %w", instance, err)
		}
	}
	return nil
}

func kvTS(ts, now int64) int64 {
	if ts == 0 {
		return now
	}
	return ts
}

// GetKVValue implements duroxide.Provider: the delta row (a tombstone
// hides the key) wins over the stored one; one query.
func (p *gormProvider) GetKVValue(ctx context.Context, instance, key string) (*string, error) {
	const op = "get_kv_value"
	var rows []struct {
		Src   int
		Value *string
	}
	if err := p.s.db.WithContext(ctx).Raw(`SELECT 0 AS src, value FROM `+p.q(models.TableKVDelta)+` WHERE instance_id = ? AND "key" = ?`+
		` UNION ALL SELECT 1, value FROM `+p.q(models.TableKVStore)+` WHERE instance_id = ? AND "key" = ? ORDER BY src`,
		instance, key, instance, key).Scan(&rows).Error; err != nil {
		return nil, perr(op, fmt.Errorf("read key %q of %s: %w", key, instance, err))
	}
	if len(rows) == 0 {
		return nil, nil
	}
	return rows[0].Value, nil
}

// GetKVAllValues implements duroxide.Provider: kv_store overlaid with
// kv_delta (delta wins, tombstones excluded); one query.
func (p *gormProvider) GetKVAllValues(ctx context.Context, instance string) (map[string]string, error) {
	const op = "get_kv_all_values"
	var rows []struct {
		Src   int
		Key   string
		Value *string
	}
	if err := p.s.db.WithContext(ctx).Raw(`SELECT 0 AS src, "key", value FROM `+p.q(models.TableKVDelta)+` WHERE instance_id = ?`+
		` UNION ALL SELECT 1, "key", value FROM `+p.q(models.TableKVStore)+` WHERE instance_id = ? ORDER BY src`,
		instance, instance).Scan(&rows).Error; err != nil {
		return nil, perr(op, fmt.Errorf("read key-values of %s: %w", instance, err))
	}
	out := make(map[string]string, len(rows))
	seen := make(map[string]bool, len(rows))
	for _, r := range rows {
		if seen[r.Key] {
			continue
		}
		seen[r.Key] = true
		if r.Value != nil {
			out[r.Key] = *r.Value
		}
	}
	return out, nil
}

// GetInstanceStats implements duroxide.Provider in one query (plus the
// decoding of the current execution's first event in Go).
func (p *gormProvider) GetInstanceStats(ctx context.Context, instance string) (*duroxide.SystemStats, error) {
	const op = "get_instance_stats"
	hist, delta, store := p.q(models.TableHistory), p.q(models.TableKVDelta), p.q(models.TableKVStore)
	var rows []struct {
		CurrentExecutionID int64
		Events             int64
		HistoryBytes       int64
		Keys               int64
		ValueBytes         int64
		FirstEvent         *string
	}
	if err := p.s.db.WithContext(ctx).Raw(`SELECT i.current_execution_id,`+
		` (SELECT COUNT(*) FROM `+hist+` h WHERE h.instance_id = i.instance_id AND h.execution_id = i.current_execution_id) AS events,`+
		` (SELECT COALESCE(SUM(octet_length(h.event_data)), 0) FROM `+hist+` h WHERE h.instance_id = i.instance_id AND h.execution_id = i.current_execution_id) AS history_bytes,`+
		// the keys of store and delta (a set value), without a derived
		// table (MariaDB's cannot read the outer row)
		` (SELECT COUNT(*) FROM `+store+` s WHERE s.instance_id = i.instance_id) + (SELECT COUNT(*) FROM `+delta+` d`+
		` WHERE d.instance_id = i.instance_id AND d.value IS NOT NULL AND NOT EXISTS (SELECT 1 FROM `+store+` s`+
		` WHERE s.instance_id = d.instance_id AND s."key" = d."key")) AS "keys",`+
		` (SELECT COALESCE(SUM(octet_length(value)), 0) FROM `+store+` WHERE instance_id = i.instance_id)`+
		` + (SELECT COALESCE(SUM(octet_length(value)), 0) FROM `+delta+` WHERE instance_id = i.instance_id) AS value_bytes,`+
		` (SELECT h.event_data FROM `+hist+` h WHERE h.instance_id = i.instance_id AND h.execution_id = i.current_execution_id AND h.event_id = 1) AS first_event`+
		` FROM `+p.q(models.TableInstances)+` i WHERE i.instance_id = ?`, instance).Scan(&rows).Error; err != nil {
		return nil, perr(op, fmt.Errorf("stats of %s: %w", instance, err))
	}
	if len(rows) == 0 {
		return nil, nil
	}
	r := rows[0]
	st := &duroxide.SystemStats{HistoryEventCount: uint64(r.Events), HistorySizeBytes: uint64(r.HistoryBytes),
		KVUserKeyCount: uint64(r.Keys), KVTotalValueBytes: uint64(r.ValueBytes)}
	if r.FirstEvent != nil {
		var e duroxide.Event
		if err := json.Unmarshal([]byte(*r.FirstEvent), &e); err != nil {
			return nil, perr(op, &CorruptRowError{Table: models.TableHistory,
				RowID: fmt.Sprintf("%s/%d/1", instance, r.CurrentExecutionID), Column: "event_data", Err: err})
		}
		if s, ok := e.Kind.(*duroxide.OrchestrationStartedEvent); ok {
			st.QueuePendingCount = uint64(len(s.CarryForwardEvents))
		}
	}
	return st, nil
}
