package postgres

import (
	"strconv"
	"strings"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/models"
)

// PostgreSQL's one-statement provider steps: data-modifying CTEs,
// advisory locks, ctid. Each does in one autocommit statement (one round
// trip) what the engine's portable sequence does in a transaction of
// several.

// The provider statements PostgreSQL implements.
var (
	_ dialect.OrchFetchStatement = pgDialect{}
	_ dialect.OrchAckStatement   = pgDialect{}
	_ dialect.WorkerAckStatement = pgDialect{}
)

// writeTuples writes n copies of tuple, comma-separated (a VALUES list).
func writeTuples(b *strings.Builder, n int, tuple string) {
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(tuple)
	}
}

// OrchClaimSQL: in data-modifying CTEs, one statement makes its own commit
// asynchronous and bounds its lock waits (ClaimSettingsSQL), picks the
// candidate and tries its advisory lock (busy: the next candidate, never
// waits), takes the instance lock row unless a live one exists, claims
// every visible, unlocked message of the instance (rows row-locked by a
// concurrent ack are skipped), and reads the instance row and the current
// execution's history.
//
// The reads see the statement's snapshot, taken before the lock: an ack
// of the same instance that committed in between would be missing from
// them. Every ack of an existing instance writes its instance row, so the
// statement also re-reads that row with FOR SHARE after taking the lock (a
// row lock that conflicts with updates returns the newest committed
// version; FOR KEY SHARE would not, a non-key update does not conflict
// with it) and reports the snapshot fresh only if it is the same row
// version (ctid). An instance without an instance row in the snapshot
// (a new one) cannot be checked that way: a row inserted after the
// snapshot is invisible to FOR SHARE. Its snapshot is fresh when the
// snapshot shows no lock row, history or key-value row of it and the
// claim took every message of it the snapshot shows as visible (at least
// one): an ack that committed after the snapshot held the lock, so its
// claim came after the snapshot too and took (and its ack deleted) every
// message visible then, which the claim here would then miss. (The one
// gap is a message visible at this fetch's clock and not yet at the
// other fetcher's, where Stores' clocks disagree; the cost of being wrong
// there is an ack that fails on its duplicate history, not lost data.)
// Otherwise the engine reads metadata and history after the lock.
func (pgDialect) OrchClaimSQL(c *dialect.OrchClaim) (string, []any) {
	locks, queue, inst := c.Quote(models.TableInstanceLocks), c.Quote(models.TableOrchestratorQueue), c.Quote(models.TableInstances)
	stmt := `WITH async AS MATERIALIZED (SELECT ` + pgDialect{}.ClaimSettingsSQL(c.Async, c.WaitMS) + `),` +
		// per-instance serialisation: a 64-bit advisory lock keyed by a
		// hash of schema (the one the tables resolve to when the Store
		// names none), prefix and instance, held to the statement's end
		` c AS MATERIALIZED (SELECT x.instance_id, pg_try_advisory_xact_lock(hashtextextended(CAST(? AS text) ||` +
		` COALESCE(NULLIF(CAST(? AS text), ''), current_schema(), '') || '.' || CAST(? AS text) || ':' || x.instance_id, 0)) AS got` +
		` FROM (` + c.Candidate + `) x WHERE (SELECT w FROM async) IS NOT NULL),` +
		` l AS (INSERT INTO ` + locks + ` AS il (instance_id, lock_token, locked_until, locked_at) SELECT c.instance_id, ?, ?, ? FROM c WHERE c.got` +
		` ON CONFLICT (instance_id) DO UPDATE SET lock_token = excluded.lock_token, locked_until = excluded.locked_until, locked_at = excluded.locked_at` +
		` WHERE il.locked_until <= ? RETURNING il.instance_id),` +
		// the instance's visible, unclaimed messages. instance_id as a
		// range: a plain instance_id = (SELECT ...) is estimated at
		// rows/n_distinct, which for a queue of few instances (one with
		// a big backlog) makes the planner seq-scan the queue for a
		// batch of one; the range keeps it on the (instance_id,
		// visible_at, id) index. The clock too comes from a subquery
		// (unknown to the planner, as in a generic plan): with a literal
		// the custom plan's estimate (no row visible) is far below the
		// generic one's (a third of the queue), so beside a large future
		// backlog PostgreSQL re-planned this statement on every call
		// instead of keeping the cached generic plan (about 0.8 ms of
		// planning per fetch at 1e5 queued rows)
		` m AS (UPDATE ` + queue + ` SET lock_token = ?, locked_until = ?, attempt_count = attempt_count + 1` +
		` WHERE id IN (SELECT q.id FROM ` + queue + ` q WHERE q.instance_id >= (SELECT instance_id FROM l) AND q.instance_id <= (SELECT instance_id FROM l)` +
		` AND q.visible_at <= (SELECT CAST(? AS bigint) FROM async) AND (q.lock_token IS NULL OR q.locked_until <= (SELECT CAST(? AS bigint) FROM async)) FOR UPDATE OF q SKIP LOCKED)` +
		` RETURNING id, work_item, attempt_count),` +
		` i AS (SELECT orchestration_name, orchestration_version, current_execution_id, ctid AS t FROM ` + inst +
		` WHERE instance_id = (SELECT instance_id FROM l)),` +
		` f AS MATERIALIZED (SELECT CASE WHEN EXISTS (SELECT 1 FROM i) THEN COALESCE((SELECT t FROM i) = (SELECT ctid FROM ` + inst +
		` WHERE instance_id = (SELECT instance_id FROM l) FOR SHARE), false)` +
		` ELSE EXISTS (SELECT 1 FROM m) AND NOT EXISTS (SELECT 1 FROM ` + locks + ` lk WHERE lk.instance_id = (SELECT instance_id FROM l))` +
		` AND NOT EXISTS (SELECT 1 FROM ` + c.Quote(models.TableHistory) + ` h WHERE h.instance_id = (SELECT instance_id FROM l))` +
		` AND NOT EXISTS (SELECT 1 FROM ` + c.Quote(models.TableKVStore) + ` kv WHERE kv.instance_id = (SELECT instance_id FROM l))` +
		` AND NOT EXISTS (SELECT 1 FROM ` + queue + ` sq WHERE sq.instance_id = (SELECT instance_id FROM l)` +
		` AND sq.visible_at <= (SELECT CAST(? AS bigint) FROM async) AND sq.id NOT IN (SELECT id FROM m)) END AS ok)` +
		` SELECT 0 AS kind, c.instance_id, c.got, EXISTS (SELECT 1 FROM l) AS locked, (SELECT ok FROM f) AS fresh,` +
		` i.orchestration_name, i.orchestration_version, i.current_execution_id, CAST(NULL AS bigint) AS id, CAST(NULL AS text) AS data,` +
		` CAST(NULL AS integer) AS attempt_count, CAST(NULL AS text) AS kv_key FROM c LEFT JOIN i ON true` +
		` UNION ALL SELECT 1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, m.id, m.work_item, m.attempt_count, NULL FROM m` +
		` UNION ALL SELECT 2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, h.event_id, h.event_data, NULL, NULL FROM ` + c.Quote(models.TableHistory) + ` h, i` +
		` WHERE h.instance_id = (SELECT instance_id FROM l) AND h.execution_id = i.current_execution_id AND (SELECT ok FROM f)` +
		` UNION ALL SELECT 3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, kv.last_updated_at_ms, kv.value, NULL, kv.key FROM ` + c.Quote(models.TableKVStore) + ` kv` +
		` WHERE kv.instance_id = (SELECT instance_id FROM l) AND (SELECT ok FROM f)` +
		` ORDER BY kind, id`
	args := make([]any, 0, 12+len(c.CandidateArgs))
	args = append(append(args, "agentstore:orch:", c.Schema, c.Prefix), c.CandidateArgs...)
	args = append(args, c.Token, c.Until, c.Now, c.Now, c.Token, c.Until, c.Now, c.Now, c.Now)
	return stmt, args
}

// maxAckParams bounds the parameters of the one-statement ack (the
// protocol allows 65,535); a larger ack runs as the engine's transaction.
const maxAckParams = 30000

// OrchAckSQL: the lock row is deleted (strict single ack, expiry checked)
// and every write is a data-modifying CTE fed by that DELETE's RETURNING,
// so nothing is written for an invalid token, and the statement is its
// own transaction. The CTEs see one snapshot and must not touch a row
// twice, so the custom status rides in the instance upsert (the engine
// already left activities scheduled and cancelled in the same turn out of
// a.Worker).
func (pgDialect) OrchAckSQL(a *dialect.OrchAck) (string, []any, bool) {
	if 40+4*len(a.History)+11*len(a.Worker)+3*len(a.Cancelled)+4*len(a.Orch)+3*len(a.KVRows) > maxAckParams {
		return "", nil, false
	}
	q := a.Quote
	var b strings.Builder
	var args []any
	pin := "" // the instance the token names: every statement on the token is routed by it
	if a.Instance != "" {
		pin = ` AND instance_id = ?`
	}
	b.WriteString(`WITH d AS (DELETE FROM ` + q(models.TableInstanceLocks) + ` WHERE lock_token = ? AND locked_until > ?` + pin + ` RETURNING instance_id)`)
	args = append(args, a.LockToken, a.Now)
	if pin != "" {
		args = append(args, a.Instance)
	}
	args = ackInstanceCTE(&b, args, a)
	// execution row (unless the batch is a true orphan: no instance row, no
	// history stored or in this ack, no Start/ContinueAsNew in the batch)
	b.WriteString(`, ex AS (INSERT INTO ` + q(models.TableExecutions) + ` (instance_id, execution_id, status, output, started_at, completed_at,` +
		` duroxide_version_major, duroxide_version_minor, duroxide_version_patch) SELECT d.instance_id, ?, ?, ?, ?, ?, ?, ?, ? FROM d`)
	args = append(args, a.Exec, a.ExecStatus, a.ExecOutput, a.Now, a.ExecCompleted, a.VerMajor, a.VerMinor, a.VerPatch)
	if len(a.History) == 0 {
		if pin != "" {
			b.WriteString(` WHERE EXISTS (SELECT 1 FROM inst) OR EXISTS (` + a.Started("?") + `)`)
			args = append(args, a.LockToken, a.Instance, a.Instance)
		} else {
			b.WriteString(` WHERE EXISTS (SELECT 1 FROM inst) OR EXISTS (` + a.Started("d.instance_id") + `)`)
			args = append(args, a.LockToken)
		}
	}
	b.WriteString(` ON CONFLICT (instance_id, execution_id)` + a.ExecConflict + `)`)
	// history (append-only: a duplicate event id fails the statement)
	if len(a.History) > 0 {
		b.WriteString(`, h AS (INSERT INTO ` + q(models.TableHistory) + ` (instance_id, execution_id, event_id, event_type, event_data, created_at)` +
			` SELECT d.instance_id, v.e, v.n, v.t, v.x, ? FROM d, (VALUES `)
		args = append(args, a.Now)
		writeTuples(&b, len(a.History), `(CAST(? AS bigint), CAST(? AS bigint), CAST(? AS text), CAST(? AS text))`)
		for _, h := range a.History {
			args = append(args, h.ExecutionID, h.EventID, h.EventType, h.EventData)
		}
		b.WriteString(`) v(e, n, t, x))`)
	}
	args = ackKVCTEs(&b, args, a)
	args = ackQueueCTEs(&b, args, a)
	// delete exactly the fetched batch
	b.WriteString(`, q AS (DELETE FROM ` + q(models.TableOrchestratorQueue) + ` WHERE lock_token = ?` + pin + ` AND EXISTS (SELECT 1 FROM d))`)
	if workerLeased(a) {
		// the instance first, then the leased worker rows' ids
		b.WriteString(` SELECT 0 AS k, instance_id, CAST(NULL AS bigint) AS id, CAST(NULL AS text) AS tok FROM d` +
			` UNION ALL SELECT 1, NULL, w.id, w.lock_token FROM w WHERE w.lock_token IS NOT NULL ORDER BY k`)
	} else {
		b.WriteString(` SELECT instance_id FROM d`)
	}
	args = append(args, a.LockToken)
	if pin != "" {
		args = append(args, a.Instance)
	}
	return b.String(), args, true
}

// workerLeased reports whether a enqueues a worker item leased
// (dialect.OrchAck.Worker).
func workerLeased(a *dialect.OrchAck) bool {
	for i := range a.Worker {
		if a.Worker[i].LockToken != nil {
			return true
		}
	}
	return false
}

// ackInstanceCTE writes the ack's instance CTE inst: the upsert (name and
// version known) or the execution bump, with the custom status.
func ackInstanceCTE(b *strings.Builder, args []any, a *dialect.OrchAck) []any {
	var csSet string
	var csArgs []any
	if a.SetCustomStatus {
		csSet = `, custom_status = ?, custom_status_version = i.custom_status_version + 1`
		csArgs = []any{a.CustomStatus}
	}
	if a.Name == nil || a.Version == nil {
		b.WriteString(`, inst AS (UPDATE ` + a.Quote(models.TableInstances) + ` AS i SET current_execution_id = CASE WHEN i.current_execution_id < ?` +
			` THEN ? ELSE i.current_execution_id END, updated_at = ?` + csSet + ` WHERE i.instance_id = (SELECT instance_id FROM d) RETURNING i.instance_id)`)
		args = append(args, a.Exec, a.Exec, a.Now)
		return append(args, csArgs...)
	}
	csCols, csVals := `, custom_status_version`, `, 0`
	var csValArgs []any
	if a.SetCustomStatus {
		csCols, csVals, csValArgs = `, custom_status, custom_status_version`, `, ?, 1`, []any{a.CustomStatus}
		csSet = `, custom_status = excluded.custom_status, custom_status_version = i.custom_status_version + 1`
		csArgs = nil
	}
	b.WriteString(`, inst AS (INSERT INTO ` + a.Quote(models.TableInstances) + ` AS i` +
		` (instance_id, orchestration_name, orchestration_version, current_execution_id, created_at, updated_at, parent_instance_id` + csCols + `)` +
		` SELECT d.instance_id, ?, ?, ?, ?, ?, ?` + csVals + ` FROM d ON CONFLICT (instance_id) DO UPDATE SET orchestration_name = excluded.orchestration_name,` +
		` orchestration_version = excluded.orchestration_version, parent_instance_id = COALESCE(i.parent_instance_id, excluded.parent_instance_id),` +
		` updated_at = excluded.updated_at, current_execution_id = CASE WHEN i.current_execution_id < excluded.current_execution_id` +
		` THEN excluded.current_execution_id ELSE i.current_execution_id END` + csSet + ` RETURNING i.instance_id)`)
	args = append(args, *a.Name, *a.Version, a.Exec, a.Now, a.Now, a.Parent)
	args = append(args, csValArgs...)
	return append(args, csArgs...)
}

// ackQueueCTEs writes the ack's queue CTEs: worker items enqueued,
// cancelled activities deleted, orchestrator items enqueued.
func ackQueueCTEs(b *strings.Builder, args []any, a *dialect.OrchAck) []any {
	if len(a.Worker) > 0 {
		b.WriteString(`, w AS (INSERT INTO ` + a.Quote(models.TableWorkerQueue) + ` (work_item, visible_at, created_at, attempt_count, instance_id, execution_id,` +
			` activity_id, session_id, tag`)
		leased := workerLeased(a)
		if leased {
			b.WriteString(`, lock_token, locked_until`)
		}
		b.WriteString(`) SELECT v.wi, v.va, v.ca, v.ac, v.ii, v.ei, v.ai, v.si, v.tg`)
		tuple := `(CAST(? AS text), CAST(? AS bigint), CAST(? AS bigint), CAST(? AS integer), CAST(? AS text), CAST(? AS bigint), CAST(? AS bigint), CAST(? AS text), CAST(? AS text)`
		if leased {
			b.WriteString(`, v.lt, v.lu`)
			tuple += `, CAST(? AS text), CAST(? AS bigint)`
		}
		b.WriteString(` FROM d, (VALUES `)
		writeTuples(b, len(a.Worker), tuple+`)`)
		for _, r := range a.Worker {
			args = append(args, r.WorkItem, r.VisibleAt, r.CreatedAt, r.AttemptCount, r.InstanceID, r.ExecutionID, r.ActivityID, r.SessionID, r.Tag)
			if leased {
				args = append(args, r.LockToken, r.LockedUntil)
			}
		}
		b.WriteString(`) v(wi, va, ca, ac, ii, ei, ai, si, tg`)
		if leased {
			b.WriteString(`, lt, lu) RETURNING id, lock_token)`)
		} else {
			b.WriteString(`))`)
		}
	}
	if n := len(a.Cancelled); n > 0 {
		conds := make([]string, 0, n)
		for _, c := range a.Cancelled {
			conds = append(conds, `(instance_id = ? AND execution_id = ? AND activity_id = ?)`)
			args = append(args, c.Instance, c.Execution, c.Activity)
		}
		b.WriteString(`, x AS (DELETE FROM ` + a.Quote(models.TableWorkerQueue) + ` WHERE (` + strings.Join(conds, " OR ") + `) AND EXISTS (SELECT 1 FROM d))`)
	}
	if len(a.Orch) > 0 {
		b.WriteString(`, o AS (INSERT INTO ` + a.Quote(models.TableOrchestratorQueue) + ` (instance_id, work_item, visible_at, created_at, attempt_count)` +
			` SELECT v.ii, v.wi, v.va, v.ca, 0 FROM d, (VALUES `)
		writeTuples(b, len(a.Orch), `(CAST(? AS text), CAST(? AS text), CAST(? AS bigint), CAST(? AS bigint))`)
		for _, r := range a.Orch {
			args = append(args, r.InstanceID, r.WorkItem, r.VisibleAt, r.CreatedAt)
		}
		b.WriteString(`) v(ii, wi, va, ca))`)
	}
	return args
}

// ackKVCTEs writes the key-value part of the ack (the engine's applyKV in
// CTEs fed by d, the consumed lock's instance). Every row is written once
// (the CTEs share one snapshot): the rows are the ack's (plus, with
// KVClearAll, a tombstone for every other key stored or in the delta); a
// terminal ack writes kv_store from them over the old delta and never
// writes kv_delta, which it empties.
func ackKVCTEs(b *strings.Builder, args []any, a *dialect.OrchAck) []any {
	if !a.KVTerminal && !a.KVClearAll && len(a.KVRows) == 0 {
		return args
	}
	delta, store := a.Quote(models.TableKVDelta), a.Quote(models.TableKVStore)
	inst := `(SELECT instance_id FROM d)`
	b.WriteString(`, kvn AS (SELECT CAST(NULL AS text) AS k, CAST(NULL AS text) AS val, CAST(NULL AS bigint) AS ts WHERE false`)
	for _, r := range a.KVRows {
		b.WriteString(` UNION ALL SELECT CAST(? AS text), CAST(? AS text), CAST(? AS bigint)`)
		args = append(args, r.Key, r.Value, r.TS)
	}
	b.WriteString(`)`)
	if a.KVClearAll {
		b.WriteString(`, kvr AS (SELECT k, val, ts FROM kvn UNION ALL SELECT a.k, NULL, CAST(? AS bigint) FROM (SELECT key AS k FROM ` + delta +
			` WHERE instance_id = ` + inst + ` UNION SELECT key FROM ` + store + ` WHERE instance_id = ` + inst + `) a WHERE a.k NOT IN (SELECT k FROM kvn))`)
		args = append(args, a.Now)
	} else {
		b.WriteString(`, kvr AS (SELECT k, val, ts FROM kvn)`)
	}
	if !a.KVTerminal {
		b.WriteString(`, kvw AS (INSERT INTO ` + delta + ` (instance_id, key, value, last_updated_at_ms) SELECT d.instance_id, r.k, r.val, r.ts FROM d, kvr r` +
			` ON CONFLICT (instance_id, key) DO UPDATE SET value = excluded.value, last_updated_at_ms = excluded.last_updated_at_ms)`)
		return args
	}
	b.WriteString(`, kve AS (SELECT k, val, ts FROM kvr UNION ALL SELECT key, value, last_updated_at_ms FROM ` + delta +
		` WHERE instance_id = ` + inst + ` AND key NOT IN (SELECT k FROM kvr)),` +
		` kvs AS (INSERT INTO ` + store + ` (instance_id, key, value, execution_id, last_updated_at_ms) SELECT d.instance_id, e.k, e.val, ?, e.ts FROM d, kve e` +
		` WHERE e.val IS NOT NULL ON CONFLICT (instance_id, key) DO UPDATE SET value = excluded.value, execution_id = excluded.execution_id,` +
		` last_updated_at_ms = excluded.last_updated_at_ms),` +
		` kvd AS (DELETE FROM ` + store + ` WHERE instance_id = ` + inst + ` AND key IN (SELECT k FROM kve WHERE val IS NULL)),` +
		` kvx AS (DELETE FROM ` + delta + ` WHERE instance_id = ` + inst + `)`)
	return append(args, a.Exec)
}

// WorkerAckSQL: the VALUES list carries each ack's index, row id, stored
// token, clock and completion; one DELETE per ack (its row's key read from
// the list) removes exactly the rows whose own token and lock still hold
// and returns their indexes, and
// data-modifying CTEs fed by that RETURNING touch their activity sessions
// and enqueue their completions (in index order), so for each item either
// all of its writes happen or none (the statement is its own transaction).
func (pgDialect) WorkerAckSQL(n int, quote func(base string) string) string {
	var b strings.Builder
	b.WriteString(`WITH v (k, id, tok, now, ii, wi, ri) AS (VALUES `)
	writeTuples(&b, n, `(CAST(? AS integer), CAST(? AS bigint), CAST(? AS text), CAST(? AS bigint), CAST(? AS text), CAST(? AS text), CAST(? AS text))`)
	b.WriteString(`)`)
	// one DELETE per ack, its row named by values of v read as scalar
	// subqueries (parameters of its plan): a probe of the primary key
	// whatever the table's statistics say. A DELETE joined to v was a hash
	// join over the whole queue while the table had none (2 ms per flush
	// beside 20,000 rows; BENCHMARKS.md 2026-12-04).
	for i := range n {
		k := strconv.Itoa(i)
		col := func(c string) string { return `(SELECT ` + c + ` FROM v WHERE k = ` + k + `)` }
		b.WriteString(`, d` + k + ` AS (DELETE FROM ` + quote(models.TableWorkerQueue) + ` w WHERE w.id = ` + col("id") +
			` AND w.lock_token = ` + col("tok") + ` AND (` + col("ri") + ` IS NULL OR w.instance_id = ` + col("ri") + `)` +
			` AND w.locked_until > ` + col("now") + ` RETURNING ` + k + ` AS k, w.session_id, ` + col("now") + ` AS now)`)
	}
	b.WriteString(`, d AS (`)
	for i := range n {
		if i > 0 {
			b.WriteString(` UNION ALL `)
		}
		b.WriteString(`SELECT k, session_id, now FROM d` + strconv.Itoa(i))
	}
	b.WriteString(`),` +
		` t AS (UPDATE ` + quote(models.TableActivitySessions) + ` s SET last_activity_at = d.now FROM d` +
		` WHERE s.session_id = d.session_id AND s.locked_until > d.now),` +
		` i AS (INSERT INTO ` + quote(models.TableOrchestratorQueue) + ` (instance_id, work_item, visible_at, created_at, attempt_count)` +
		` SELECT v.ii, v.wi, d.now, d.now, 0 FROM d JOIN v ON v.k = d.k WHERE v.wi IS NOT NULL ORDER BY d.k)` +
		` SELECT k FROM d`)
	return b.String()
}

// VisibleOrdSQL implements dialect.ChangeFeedVisibility: the xmin of the
// reading statement's snapshot. Every transaction with a smaller id has
// ended (and is in the snapshot when it committed); a running or later
// transaction writes changes with ord at least its own id (migration V10),
// so nothing can still appear below the bound.
func (pgDialect) VisibleOrdSQL() string {
	return `CAST(CAST(pg_snapshot_xmin(pg_current_snapshot()) AS text) AS bigint)`
}

// NowMillisSQL implements dialect.ChangeFeedClock: the database's clock in
// Unix milliseconds, as V10's trigger writes a change's at.
func (pgDialect) NowMillisSQL() string {
	return `CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS bigint)`
}

// BinaryOrder implements dialect.BinaryOrderer: col in the "C" collation
// (byte order), whatever the database's default collation is.
func (pgDialect) BinaryOrder(col string) string { return col + ` COLLATE "C"` }

// AdvanceSerialSQL implements dialect.SerialAdvancer: setval of the
// column's sequence to the larger of the column's maximum and the
// sequence's last value (so a concurrent nextval is never handed out
// twice).
func (pgDialect) AdvanceSerialSQL(table, col string) string {
	return `SELECT setval(s.seq, GREATEST(COALESCE((SELECT MAX("` + col + `") FROM ` + table + `), 1), COALESCE(pg_sequence_last_value(s.seq), 1))) ` +
		`FROM (SELECT CAST(pg_get_serial_sequence(?, '` + col + `') AS regclass) AS seq) s`
}
