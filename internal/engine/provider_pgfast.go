package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// PostgreSQL's optional one-statement provider steps (CapFastPaths). Each
// does in one autocommit statement (one round trip, data-modifying CTEs,
// advisory locks, ctid) what the general transaction path in provider.go
// and provider_worker.go does in several; both must behave the same, and
// the conformance suite runs on PostgreSQL with and without them.

// providerFastPaths is implemented by a dialect with one-statement forms of
// provider steps. Each method gets the provider whose state it uses.
type providerFastPaths interface {
	// fetchOrchestration is one fetch attempt (needs CapAdvisoryLocks).
	fetchOrchestration(p *gormProvider, ctx context.Context, lockTimeout time.Duration, filter *duroxide.DispatcherCapabilityFilter) (*duroxide.OrchestrationItem, error)
	// ackOrchestration acks in one statement; ok is false when the ack
	// does not fit one statement and the general path must run.
	ackOrchestration(p *gormProvider, db *gorm.DB, now int64, lockToken string, ack duroxide.OrchestrationAck, hist []models.HistoryEvent,
		customStatus *duroxide.CustomStatusUpdatedEvent, kv *kvPlan, wrows []models.WorkerQueueItem, orows []models.OrchestratorQueueItem) (ok bool, err error)
	// ackWork acks worker item id (stored token), enqueueing row when set.
	ackWork(p *gormProvider, ctx context.Context, stored string, id int64, row *models.OrchestratorQueueItem) error
}

// cteFastPaths are the one-statement steps written with data-modifying
// CTEs (PostgreSQL's SQL). A dialect turns them on with CapFastPaths.
type cteFastPaths struct{}

var _ providerFastPaths = cteFastPaths{}

func (cteFastPaths) fetchOrchestration(p *gormProvider, ctx context.Context, lockTimeout time.Duration, filter *duroxide.DispatcherCapabilityFilter) (*duroxide.OrchestrationItem, error) {
	return p.fetchOrchPG(ctx, lockTimeout, filter)
}

func (cteFastPaths) ackOrchestration(p *gormProvider, db *gorm.DB, now int64, lockToken string, ack duroxide.OrchestrationAck, hist []models.HistoryEvent,
	customStatus *duroxide.CustomStatusUpdatedEvent, kv *kvPlan, wrows []models.WorkerQueueItem, orows []models.OrchestratorQueueItem) (bool, error) {
	return p.ackOrchPG(db, now, lockToken, ack, hist, customStatus, kv, wrows, orows)
}

func (cteFastPaths) ackWork(p *gormProvider, ctx context.Context, stored string, id int64, row *models.OrchestratorQueueItem) error {
	return p.ackWorkPG(ctx, stored, id, row)
}

// orchFetchRow is one row of the PostgreSQL fetch statement: kind 0 is the
// candidate (with the instance row as the statement's snapshot saw it),
// kind 1 a claimed message (id, data = work_item), kind 2 a history event
// of the current execution (id = event_id, data = event_data), kind 3 a
// kv_store entry (kv_key, data = value, id = last_updated_at_ms).
type orchFetchRow struct {
	Kind                 int
	InstanceID           *string
	Got                  *bool
	Locked               *bool
	Fresh                *bool
	OrchestrationName    *string
	OrchestrationVersion *string
	CurrentExecutionID   *int64
	ID                   *int64
	Data                 *string
	AttemptCount         *int32
	KVKey                *string
}

// fetchOrchPG fetches on PostgreSQL in one autocommit statement per
// candidate (no BEGIN/COMMIT), which in data-modifying CTEs: makes its own
// commit asynchronous (see fetchTx), picks the oldest candidate and tries
// its advisory lock (busy -> next candidate, never waits), takes the
// instance lock row unless a live one exists, claims every visible,
// unlocked message of the instance (rows row-locked by a concurrent ack
// are skipped), and reads the instance row and the current execution's
// history.
//
// The reads see the statement's snapshot, taken before the lock: an ack
// of the same instance that committed in between would be missing from
// them. Every ack of an existing instance writes its instance row, so the
// statement also re-reads that row with FOR SHARE after taking the lock (a
// row lock that conflicts with updates returns the newest committed
// version; FOR KEY SHARE would not, a non-key update does not conflict
// with it) and reports the snapshot fresh only if it is the same row
// version (ctid). Otherwise (and for an
// instance not created yet, whose first ack could not be seen this way) a
// second statement reads metadata and history after the lock.
//
// The statement never waits for another fetcher (the advisory lock is a
// try-lock, message rows are taken SKIP LOCKED), and its other lock waits
// (an instance lock row or instance row another transaction holds) are
// bounded by claimWait: a candidate whose locks were not granted in time
// is skipped, like one another fetcher holds. At most maxBusySkips
// candidates are skipped that way per attempt (a table lock would make
// every candidate wait), and at most maxOrchLostCandidates lost to other
// fetchers, after which the attempt returns nothing and the poll goes on.
func (p *gormProvider) fetchOrchPG(ctx context.Context, lockTimeout time.Duration, filter *duroxide.DispatcherCapabilityFilter) (*duroxide.OrchestrationItem, error) {
	db := p.s.db.WithContext(ctx)
	var tried []string
	level := orchCandWindow
	busy, lost := 0, 0
	for {
		// the clock is read for each candidate: the lease starts when its
		// statement is sent, not when the attempt began
		now := p.s.nowMS()
		until := now + durMS(lockTimeout)
		cand, cargs := p.orchCandidateSQL(now, filter, tried, level)
		token := newLockToken()
		locks, queue, inst := p.q(models.TableInstanceLocks), p.q(models.TableOrchestratorQueue), p.q(models.TableInstances)
		stmt := `WITH RECURSIVE async AS MATERIALIZED (SELECT ` + p.claimSettingsSQL() + `),` +
			// per-instance serialisation: a 64-bit advisory lock keyed by a
			// hash of schema (the one the tables resolve to when the Store
			// names none), prefix and instance, held to the statement's end
			` c AS MATERIALIZED (SELECT x.instance_id, pg_try_advisory_xact_lock(hashtextextended(CAST(? AS text) ||` +
			` COALESCE(NULLIF(CAST(? AS text), ''), current_schema(), '') || '.' || CAST(? AS text) || ':' || x.instance_id, 0)) AS got` +
			` FROM (` + cand + `) x WHERE (SELECT w FROM async) IS NOT NULL),` +
			` l AS (INSERT INTO ` + locks + ` AS il (instance_id, lock_token, locked_until, locked_at) SELECT c.instance_id, ?, ?, ? FROM c WHERE c.got` +
			` ON CONFLICT (instance_id) DO UPDATE SET lock_token = excluded.lock_token, locked_until = excluded.locked_until, locked_at = excluded.locked_at` +
			` WHERE il.locked_until <= ? RETURNING il.instance_id),` +
			// the instance's visible, unclaimed messages. instance_id as a
			// range: a plain instance_id = (SELECT ...) is estimated at
			// rows/n_distinct, which for a queue of few instances (one with
			// a big backlog) makes the planner seq-scan the queue for a
			// batch of one; the range keeps it on the (instance_id,
			// visible_at, id) index
			` m AS (UPDATE ` + queue + ` SET lock_token = ?, locked_until = ?, attempt_count = attempt_count + 1` +
			` WHERE id IN (SELECT q.id FROM ` + queue + ` q WHERE q.instance_id >= (SELECT instance_id FROM l) AND q.instance_id <= (SELECT instance_id FROM l)` +
			` AND q.visible_at <= ? AND (q.lock_token IS NULL OR q.locked_until <= ?) FOR UPDATE OF q SKIP LOCKED)` +
			` RETURNING id, work_item, attempt_count),` +
			` i AS (SELECT orchestration_name, orchestration_version, current_execution_id, ctid AS t FROM ` + inst +
			` WHERE instance_id = (SELECT instance_id FROM l)),` +
			` f AS MATERIALIZED (SELECT COALESCE((SELECT t FROM i) = (SELECT ctid FROM ` + inst +
			` WHERE instance_id = (SELECT instance_id FROM l) FOR SHARE), false) AS ok)` +
			` SELECT 0 AS kind, c.instance_id, c.got, EXISTS (SELECT 1 FROM l) AS locked, (SELECT ok FROM f) AS fresh,` +
			` i.orchestration_name, i.orchestration_version, i.current_execution_id, CAST(NULL AS bigint) AS id, CAST(NULL AS text) AS data,` +
			` CAST(NULL AS integer) AS attempt_count, CAST(NULL AS text) AS kv_key FROM c LEFT JOIN i ON true` +
			` UNION ALL SELECT 1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, m.id, m.work_item, m.attempt_count, NULL FROM m` +
			` UNION ALL SELECT 2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, h.event_id, h.event_data, NULL, NULL FROM ` + p.q(models.TableHistory) + ` h, i` +
			` WHERE h.instance_id = (SELECT instance_id FROM l) AND h.execution_id = i.current_execution_id AND (SELECT ok FROM f)` +
			` UNION ALL SELECT 3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, kv.last_updated_at_ms, kv.value, NULL, kv.key FROM ` + p.q(models.TableKVStore) + ` kv` +
			` WHERE kv.instance_id = (SELECT instance_id FROM l) AND (SELECT ok FROM f)` +
			` ORDER BY kind, id`
		args := append([]any{"agentstore:orch:", p.s.cfg.Schema, p.s.cfg.Prefix}, cargs...)
		args = append(args, token, until, now, now, token, until, now, now)
		var rows []orchFetchRow
		// through gorm (not queryDirect): a fetch's statements are where
		// gorm callbacks registered on the Store see a failing poll
		if err := scanAll(db, &rows, stmt, args...); err != nil {
			if !errors.Is(translateError(err), ErrLockTimeout) {
				return nil, fmt.Errorf("fetch orchestration item: %w", err)
			}
			// a lock another transaction holds: skip the candidate the
			// statement picked (the same query, without locks, names it)
			var cands []struct{ InstanceID *string }
			if busy++; busy > maxBusySkips {
				return nil, nil
			}
			if err := scanAll(db, &cands, cand, cargs...); err != nil {
				return nil, fmt.Errorf("select candidate: %w", err)
			}
			if len(cands) == 0 || cands[0].InstanceID == nil {
				return nil, nil
			}
			tried = append(tried, *cands[0].InstanceID)
			continue
		}
		if len(rows) == 0 || rows[0].Kind != 0 {
			return nil, nil // no candidate
		}
		if rows[0].InstanceID == nil { // this level cannot decide: the next one
			if level == orchCandScan {
				return nil, nil
			}
			level++
			continue
		}
		head := rows[0]
		instance := *head.InstanceID
		tried = append(tried, instance)
		if head.Got == nil || !*head.Got || head.Locked == nil || !*head.Locked {
			if lost++; lost > maxOrchLostCandidates {
				return nil, nil
			}
			continue // another fetcher is on it, or holds its lock: next candidate
		}
		var msgs []orchMsgRow
		var hist []historyRow
		kv := map[string]duroxide.KvEntry{}
		for _, r := range rows[1:] {
			if r.ID == nil || r.Data == nil {
				continue
			}
			switch r.Kind {
			case 3:
				if r.KVKey != nil {
					kv[*r.KVKey] = duroxide.KvEntry{Value: *r.Data, LastUpdatedAtMS: uint64(*r.ID)}
				}
			case 1:
				m := orchMsgRow{ID: *r.ID, WorkItem: *r.Data}
				if r.AttemptCount != nil {
					m.AttemptCount = *r.AttemptCount
				}
				msgs = append(msgs, m)
			case 2:
				hist = append(hist, historyRow{EventID: *r.ID, EventData: *r.Data})
			}
		}
		if len(msgs) == 0 { // the messages were consumed meanwhile: release and move on
			if err := db.Exec(`DELETE FROM `+locks+` WHERE lock_token = ?`, token).Error; err != nil {
				p.releaseOrchLease(ctx, token)
				return nil, fmt.Errorf("release lock of %s: %w", instance, err)
			}
			continue
		}
		it, corrupt := orchItem(instance, token, msgs)
		if corrupt != nil {
			return nil, corrupt // keep the lock and the counted attempt; report the row
		}
		if head.Fresh != nil && *head.Fresh && head.OrchestrationName != nil && head.CurrentExecutionID != nil {
			setOrchMetadata(it, true, *head.OrchestrationName, head.OrchestrationVersion, *head.CurrentExecutionID, hist)
			it.KVSnapshot = kv
		} else if err := p.fillOrchMetadataPG(db, it); err != nil {
			p.releaseOrchLease(ctx, token)
			return nil, err
		}
		if isOrphanBatch(it) {
			if err := db.Exec(`WITH d AS (DELETE FROM `+queue+` WHERE lock_token = ?) DELETE FROM `+locks+` WHERE lock_token = ?`,
				token, token).Error; err != nil {
				p.releaseOrchLease(ctx, token)
				return nil, fmt.Errorf("drop orphan messages of %s: %w", instance, err)
			}
			continue
		}
		return it, nil
	}
}

// maxOrchLostCandidates bounds the candidates one PostgreSQL fetch
// attempt loses to other fetchers (see fetchOrchPG).
const maxOrchLostCandidates = 50

// fillOrchMetadataPG is fillOrchMetadata (with the key-value snapshot) in
// one PostgreSQL statement for both cases (instance row or not).
func (p *gormProvider) fillOrchMetadataPG(db *gorm.DB, it *duroxide.OrchestrationItem) error {
	var rows []struct {
		Kind                 int
		OrchestrationName    *string
		OrchestrationVersion *string
		ExecutionID          int64
		EventID              *int64
		EventData            *string
		KVKey                *string
	}
	inst, hist := p.q(models.TableInstances), p.q(models.TableHistory)
	if err := scanAll(db, &rows, `WITH i AS (SELECT orchestration_name, orchestration_version, current_execution_id FROM `+inst+` WHERE instance_id = ?),`+
		` x AS (SELECT COALESCE((SELECT current_execution_id FROM i), (SELECT MAX(execution_id) FROM `+hist+` WHERE instance_id = ?)) AS e)`+
		` SELECT 0 AS kind, i.orchestration_name, i.orchestration_version, i.current_execution_id AS execution_id,`+
		` CAST(NULL AS bigint) AS event_id, CAST(NULL AS text) AS event_data, CAST(NULL AS text) AS kv_key FROM i`+
		` UNION ALL SELECT 1, NULL, NULL, h.execution_id, h.event_id, h.event_data, NULL FROM `+hist+` h, x WHERE h.instance_id = ? AND h.execution_id = x.e`+
		` UNION ALL SELECT 2, NULL, NULL, 0, kv.last_updated_at_ms, kv.value, kv.key FROM `+p.q(models.TableKVStore)+` kv WHERE kv.instance_id = ?`+
		` ORDER BY kind, event_id`, it.Instance, it.Instance, it.Instance, it.Instance); err != nil {
		return fmt.Errorf("load instance %s: %w", it.Instance, err)
	}
	found := len(rows) > 0 && rows[0].Kind == 0
	var name string
	var version *string
	var exec int64
	var h []historyRow
	kv := map[string]duroxide.KvEntry{}
	for _, r := range rows {
		switch {
		case r.Kind == 2:
			if r.KVKey != nil && r.EventData != nil && r.EventID != nil {
				kv[*r.KVKey] = duroxide.KvEntry{Value: *r.EventData, LastUpdatedAtMS: uint64(*r.EventID)}
			}
		case r.Kind == 0:
			if r.OrchestrationName != nil {
				name = *r.OrchestrationName
			}
			version, exec = r.OrchestrationVersion, r.ExecutionID
		case r.EventID != nil && r.EventData != nil:
			exec = r.ExecutionID
			h = append(h, historyRow{EventID: *r.EventID, EventData: *r.EventData})
		}
	}
	setOrchMetadata(it, found, name, version, exec, h)
	it.KVSnapshot = kv
	return nil
}

// ackOrchPG acks on PostgreSQL in one autocommit statement (one round
// trip, no BEGIN/COMMIT): the lock row is deleted (strict single ack,
// expiry checked) and every write is a data-modifying CTE fed by that
// DELETE's RETURNING, so nothing is written for an invalid token, and the
// statement is its own transaction. The CTEs see the same snapshot and
// must not touch a row twice, so the custom status rides in the instance
// upsert and activities scheduled and cancelled in the same turn are left
// out of the insert instead of being deleted after it. ok=false: too many
// parameters for one statement, nothing was done.
func (p *gormProvider) ackOrchPG(db *gorm.DB, now int64, lockToken string, ack duroxide.OrchestrationAck, hist []models.HistoryEvent,
	customStatus *duroxide.CustomStatusUpdatedEvent, kv *kvPlan, wrows []models.WorkerQueueItem, orows []models.OrchestratorQueueItem) (ok bool, err error) {
	const op = "ack_orchestration_item"
	md := ack.Metadata
	exec := int64(ack.ExecutionID)
	// schedule+cancel in one turn is a no-op: drop those rows here
	if len(ack.CancelledActivities) > 0 && len(wrows) > 0 {
		kept := make([]models.WorkerQueueItem, 0, len(wrows))
		for _, r := range wrows {
			cancelled := false
			if r.InstanceID != nil && r.ExecutionID != nil && r.ActivityID != nil {
				for _, c := range ack.CancelledActivities {
					if c.Instance == *r.InstanceID && int64(c.ExecutionID) == *r.ExecutionID && int64(c.ActivityID) == *r.ActivityID {
						cancelled = true
						break
					}
				}
			}
			if !cancelled {
				kept = append(kept, r)
			}
		}
		wrows = kept
	}
	nkv := 0
	if kv != nil {
		nkv = len(kv.rows)
	}
	if 36+4*len(hist)+9*len(wrows)+3*len(ack.CancelledActivities)+4*len(orows)+3*nkv > maxAckParams {
		return false, nil
	}
	var b strings.Builder
	var args []any
	b.WriteString(`WITH d AS (DELETE FROM ` + p.q(models.TableInstanceLocks) + ` WHERE lock_token = ? AND locked_until > ? RETURNING instance_id)`)
	args = append(args, lockToken, now)
	// instance row only with name and version (upsert); current_execution_id only grows
	var csSet string
	var csArgs []any
	if customStatus != nil {
		csSet = `, custom_status = ?, custom_status_version = i.custom_status_version + 1`
		csArgs = []any{customStatus.Status}
	}
	if md.OrchestrationName != nil && md.OrchestrationVersion != nil {
		csCols, csVals := `, custom_status_version`, `, 0`
		var csValArgs []any
		if customStatus != nil {
			csCols, csVals, csValArgs = `, custom_status, custom_status_version`, `, ?, 1`, []any{customStatus.Status}
			csSet = `, custom_status = excluded.custom_status, custom_status_version = i.custom_status_version + 1`
			csArgs = nil
		}
		b.WriteString(`, inst AS (INSERT INTO ` + p.q(models.TableInstances) + ` AS i` +
			` (instance_id, orchestration_name, orchestration_version, current_execution_id, created_at, updated_at, parent_instance_id` + csCols + `)` +
			` SELECT d.instance_id, ?, ?, ?, ?, ?, ?` + csVals + ` FROM d ON CONFLICT (instance_id) DO UPDATE SET orchestration_name = excluded.orchestration_name,` +
			` orchestration_version = excluded.orchestration_version, parent_instance_id = COALESCE(i.parent_instance_id, excluded.parent_instance_id),` +
			` updated_at = excluded.updated_at, current_execution_id = CASE WHEN i.current_execution_id < excluded.current_execution_id` +
			` THEN excluded.current_execution_id ELSE i.current_execution_id END` + csSet + ` RETURNING i.instance_id)`)
		args = append(args, *md.OrchestrationName, *md.OrchestrationVersion, exec, now, now, md.ParentInstanceID)
		args = append(args, csValArgs...)
		args = append(args, csArgs...)
	} else {
		b.WriteString(`, inst AS (UPDATE ` + p.q(models.TableInstances) + ` AS i SET current_execution_id = CASE WHEN i.current_execution_id < ?` +
			` THEN ? ELSE i.current_execution_id END, updated_at = ?` + csSet + ` WHERE i.instance_id = (SELECT instance_id FROM d) RETURNING i.instance_id)`)
		args = append(args, exec, exec, now)
		args = append(args, csArgs...)
	}
	// execution row (unless the batch is a true orphan: no instance row, no
	// history stored or in this ack, no Start/ContinueAsNew in the batch)
	// with status, output, completed_at and the pinned version
	eu := newExecUpsert(md, now)
	b.WriteString(`, ex AS (INSERT INTO ` + p.q(models.TableExecutions) + ` (instance_id, execution_id, status, output, started_at, completed_at,` +
		` duroxide_version_major, duroxide_version_minor, duroxide_version_patch) SELECT d.instance_id, ?, ?, ?, ?, ?, ?, ?, ? FROM d`)
	args = append(args, exec, eu.status, eu.output, now, eu.completed, eu.major, eu.minor, eu.patch)
	if len(hist) == 0 {
		b.WriteString(` WHERE EXISTS (SELECT 1 FROM inst) OR EXISTS (` + p.orchStartedSQL("d.instance_id") + `)`)
		args = append(args, lockToken)
	}
	b.WriteString(` ON CONFLICT (instance_id, execution_id)` + eu.conflict + `)`)
	// history (append-only: a duplicate event id fails the statement)
	if len(hist) > 0 {
		b.WriteString(`, h AS (INSERT INTO ` + p.q(models.TableHistory) + ` (instance_id, execution_id, event_id, event_type, event_data, created_at)` +
			` SELECT d.instance_id, v.e, v.n, v.t, v.x, ? FROM d, (VALUES `)
		args = append(args, now)
		writeTuples(&b, len(hist), `(CAST(? AS bigint), CAST(? AS bigint), CAST(? AS text), CAST(? AS text))`)
		for _, h := range hist {
			args = append(args, h.ExecutionID, h.EventID, h.EventType, h.EventData)
		}
		b.WriteString(`) v(e, n, t, x))`)
	}
	// key-value events into the delta, merged into the store when the
	// execution ends
	args = p.kvCTEsPG(&b, args, kv, md.Status != nil && duroxide.IsTerminalStatus(*md.Status), exec, now)
	if len(wrows) > 0 {
		b.WriteString(`, w AS (INSERT INTO ` + p.q(models.TableWorkerQueue) + ` (work_item, visible_at, created_at, attempt_count, instance_id, execution_id,` +
			` activity_id, session_id, tag) SELECT v.wi, v.va, v.ca, 0, v.ii, v.ei, v.ai, v.si, v.tg FROM d, (VALUES `)
		writeTuples(&b, len(wrows), `(CAST(? AS text), CAST(? AS bigint), CAST(? AS bigint), CAST(? AS text), CAST(? AS bigint), CAST(? AS bigint), CAST(? AS text), CAST(? AS text))`)
		for _, r := range wrows {
			args = append(args, r.WorkItem, r.VisibleAt, r.CreatedAt, r.InstanceID, r.ExecutionID, r.ActivityID, r.SessionID, r.Tag)
		}
		b.WriteString(`) v(wi, va, ca, ii, ei, ai, si, tg))`)
	}
	if n := len(ack.CancelledActivities); n > 0 {
		conds := make([]string, 0, n)
		for _, c := range ack.CancelledActivities {
			conds = append(conds, `(instance_id = ? AND execution_id = ? AND activity_id = ?)`)
			args = append(args, c.Instance, int64(c.ExecutionID), int64(c.ActivityID))
		}
		b.WriteString(`, x AS (DELETE FROM ` + p.q(models.TableWorkerQueue) + ` WHERE (` + strings.Join(conds, " OR ") + `) AND EXISTS (SELECT 1 FROM d))`)
	}
	if len(orows) > 0 {
		b.WriteString(`, o AS (INSERT INTO ` + p.q(models.TableOrchestratorQueue) + ` (instance_id, work_item, visible_at, created_at, attempt_count)` +
			` SELECT v.ii, v.wi, v.va, v.ca, 0 FROM d, (VALUES `)
		writeTuples(&b, len(orows), `(CAST(? AS text), CAST(? AS text), CAST(? AS bigint), CAST(? AS bigint))`)
		for _, r := range orows {
			args = append(args, r.InstanceID, r.WorkItem, r.VisibleAt, r.CreatedAt)
		}
		b.WriteString(`) v(ii, wi, va, ca))`)
	}
	// delete exactly the fetched batch
	b.WriteString(`, q AS (DELETE FROM ` + p.q(models.TableOrchestratorQueue) + ` WHERE lock_token = ? AND EXISTS (SELECT 1 FROM d))` +
		` SELECT instance_id FROM d`)
	args = append(args, lockToken)
	var ids []string
	if err := queryDirect(db, b.String(), args, func(r *sql.Rows) error {
		var id string
		if err := r.Scan(&id); err != nil {
			return err
		}
		ids = append(ids, id)
		return nil
	}); err != nil {
		// history is the only table here without ON CONFLICT that can
		// raise a unique violation (the queues have generated keys)
		if len(hist) > 0 && errors.Is(translateError(err), ErrConflict) {
			return true, &dupEventError{exec: exec, cause: translateError(err)}
		}
		return true, fmt.Errorf("ack orchestration item: %w", err)
	}
	if len(ids) == 0 {
		return true, pfail(op, ErrInvalidLockToken, "Invalid lock token")
	}
	return true, nil
}

// ackWorkPG acks row id (stored token) in one autocommit statement (one round trip): the item is
// deleted, the completion inserted for the orchestrator and the activity
// session touched by data-modifying CTEs that see the same snapshot, so
// either all happen or none (the statement is its own transaction).
func (p *gormProvider) ackWorkPG(ctx context.Context, stored string, id int64, row *models.OrchestratorQueueItem) error {
	const op = "ack_work_item"
	now := p.s.nowMS()
	stmt := `WITH d AS (DELETE FROM ` + p.q(models.TableWorkerQueue) + ` WHERE id = ? AND lock_token = ? AND locked_until > ? RETURNING session_id),` +
		` t AS (UPDATE ` + p.q(models.TableActivitySessions) + ` s SET last_activity_at = ? FROM d` +
		` WHERE s.session_id = d.session_id AND s.locked_until > ?)`
	args := []any{id, stored, now, now, now}
	if row != nil {
		stmt += `, i AS (INSERT INTO ` + p.q(models.TableOrchestratorQueue) + ` (instance_id, work_item, visible_at, created_at, attempt_count)` +
			` SELECT ?, ?, ?, ?, 0 FROM d)`
		args = append(args, row.InstanceID, row.WorkItem, now, now)
	}
	stmt += ` SELECT COUNT(*) FROM d`
	var n int64
	if err := queryDirect(p.s.db.WithContext(ctx), stmt, args, func(r *sql.Rows) error { return r.Scan(&n) }); err != nil {
		return fmt.Errorf("ack work item: %w", err)
	}
	if n == 0 {
		return pfail(op, ErrInvalidLockToken, "Worker queue item not found or already processed")
	}
	return nil
}
