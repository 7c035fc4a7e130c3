package engine

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// execUpsert holds the values and the ON CONFLICT action of an ack's
// execution-row upsert (status, output, completed_at for every terminal
// status, ContinuedAsNew included, and the pinned runtime version), shared
// by the portable transaction and the dialect's one statement.
type execUpsert struct {
	status                         string
	output                         *string
	completed, major, minor, patch *int64
	conflict                       string
}

func newExecUpsert(md duroxide.ExecutionMetadata, now int64) execUpsert {
	eu := execUpsert{status: duroxide.StatusRunning, conflict: ` DO NOTHING`}
	var set []string
	if md.Status != nil {
		eu.status, eu.output = *md.Status, md.Output
		if duroxide.IsTerminalStatus(eu.status) {
			eu.completed = &now
		}
		set = append(set, `status = excluded.status`, `output = excluded.output`, `completed_at = excluded.completed_at`)
	}
	if v := md.PinnedDuroxideVersion; v != nil {
		eu.major, eu.minor, eu.patch = ptr(int64(v.Major())), ptr(int64(v.Minor())), ptr(int64(v.Patch()))
		set = append(set, `duroxide_version_major = excluded.duroxide_version_major`,
			`duroxide_version_minor = excluded.duroxide_version_minor`, `duroxide_version_patch = excluded.duroxide_version_patch`)
	}
	if len(set) > 0 {
		eu.conflict = ` DO UPDATE SET ` + strings.Join(set, ", ")
	}
	return eu
}

// AckOrchestrationItem implements duroxide.Provider.
func (p *gormProvider) AckOrchestrationItem(ctx context.Context, lockToken string, ack duroxide.OrchestrationAck) error {
	const op = "ack_orchestration_item"
	md := ack.Metadata
	if md.Status != nil {
		switch *md.Status {
		case duroxide.StatusRunning, duroxide.StatusCompleted, duroxide.StatusFailed, duroxide.StatusContinuedAsNew:
		default:
			return perr(op, invalidf("unknown status %q", *md.Status))
		}
	}
	if ack.ExecutionID == 0 {
		return perr(op, invalidf("execution id must be > 0"))
	}
	if err := checkUTF8("metadata", md); err != nil {
		return perr(op, err)
	}
	if err := checkUTF8("cancelled activities", ack.CancelledActivities); err != nil {
		return perr(op, err)
	}
	// Encode everything before the transaction.
	a := &orchAck{lease: parseOrchToken(lockToken), ack: ack, exec: int64(ack.ExecutionID), hist: make([]models.HistoryEvent, 0, len(ack.HistoryDelta)),
		terminal: md.Status != nil && duroxide.IsTerminalStatus(*md.Status)}
	for _, ev := range ack.HistoryDelta {
		if ev.EventID == 0 {
			return perr(op, invalidf("event_id must be set by runtime"))
		}
		if ev.Kind == nil {
			return perr(op, invalidf("event %d has no kind", ev.EventID))
		}
		if err := checkUTF8("event", ev); err != nil {
			return perr(op, err)
		}
		data, err := json.Marshal(ev)
		if err != nil {
			return perr(op, invalidf("encode event %d: %v", ev.EventID, err))
		}
		if cs, ok := ev.Kind.(*duroxide.CustomStatusUpdatedEvent); ok {
			a.customStatus = cs
		}
		a.hist = append(a.hist, models.HistoryEvent{ExecutionID: a.exec, EventID: int64(ev.EventID),
			EventType: ev.Kind.EventType(), EventData: string(data)})
	}
	var err error
	if a.kv, err = planKV(ack.HistoryDelta); err != nil {
		return perr(op, err)
	}
	if !issuedToken(a.lease.stored) {
		return perrLock(op, lockToken, pfail(op, ErrInvalidLockToken, "Invalid lock token"))
	}
	// worker items enqueued leased to parked worker fetches (preLease)
	a.leaseLT, a.leaseN = p.work.reserveTakers(plainWorkItems(ack.WorkerItems))
	err = p.withRetry(ctx, op, time.Time{}, func() error {
		a.now = p.s.nowMS()
		wrows, err := workerRows(ack.WorkerItems, a.now)
		if err != nil {
			return err
		}
		if a.orows, err = orchRows(ack.OrchestratorItems, a.now); err != nil {
			return err
		}
		a.wrows = dropCancelled(wrows, ack.CancelledActivities)
		p.preLease(a)
		return p.ackOrchOnce(ctx, a)
	})
	if err != nil && a.leaseN > 0 {
		p.work.unreserve(a.leaseN)
	}
	var dup *dupEventError
	if errors.As(err, &dup) {
		return p.duplicateEventError(ctx, lockToken, dup, a.hist)
	}
	if err != nil {
		return perrLock(op, lockToken, err)
	}
	if len(ack.OrchestratorItems) > 0 {
		p.notifyOrch(a.orows, a.now)
	}
	if len(ack.WorkerItems) > 0 {
		p.handOverWork(a) // worker items are enqueued visible at once
	}
	return nil
}

// plainWorkItems counts the activities of an ack that any plain worker
// fetch can take (no tag, no session: plainWorkItem). An activity also
// cancelled in the same ack (dropCancelled) is counted too: it only holds
// a reservation until the ack ends.
func plainWorkItems(items []duroxide.WorkItem) int {
	n := 0
	for _, it := range items {
		if ae, ok := it.(*duroxide.ActivityExecute); ok && ae.Tag == nil && ae.SessionID == nil {
			n++
		}
	}
	return n
}

// preLease enqueues the first a.leaseN plain worker items of a (no tag,
// no session: plainWorkItem) already leased to the parked worker fetches
// the ack reserved (signal.reserveTakers): a fresh lock token,
// locked_until a.leaseLT after the ack's clock, one attempt, as their
// claim would have written. After the ack commits, handOverWork hands
// each lease to a parked fetch, which returns it without a claim
// statement of its own (one round trip less per activity); a lease
// whose fetch left meanwhile is released.
func (p *gormProvider) preLease(a *orchAck) {
	a.leasedIDs = nil
	if a.leaseN == 0 {
		return
	}
	a.leasedIDs = map[string]int64{}
	until, n := a.now+durMS(a.leaseLT), a.leaseN
	for i := range a.wrows {
		if n == 0 {
			break
		}
		r := &a.wrows[i]
		if !plainWorkItem(r) || r.VisibleAt > a.now || r.InstanceID == nil {
			continue
		}
		tok := newLockToken()
		r.LockToken, r.LockedUntil, r.AttemptCount = &tok, ptr(until), 1
		n--
	}
}

// handOverWork wakes the worker fetchers for a's worker items, just
// enqueued by the committed ack: each item enqueued leased (preLease) is
// handed to a parked fetch (released when none is left), the others are
// announced as any enqueue (notifyWork).
func (p *gormProvider) handOverWork(a *orchAck) {
	rest := a.wrows
	if a.leaseN > 0 {
		rest = make([]models.WorkerQueueItem, 0, len(a.wrows))
		var hls []*handedLease
		var lost []string // leased rows that cannot be handed over (cannot happen): unlocked by token
		for _, r := range a.wrows {
			if r.LockToken == nil {
				rest = append(rest, r)
				continue
			}
			id := a.leasedIDs[*r.LockToken]
			l, err := workItemLease(id, *r.InstanceID, *r.LockToken, r.WorkItem, r.AttemptCount)
			if id <= 0 || err != nil {
				lost = append(lost, *r.LockToken)
				continue
			}
			wl, _ := parseWorkToken(l.LockToken)
			hls = append(hls, &handedLease{lease: l, wl: wl, start: a.now})
		}
		p.releaseClaimTokens(lost)
		if p.beforeHandOver != nil {
			p.beforeHandOver()
		}
		for _, hl := range p.work.deliver(hls, a.leaseLT, a.leaseN) {
			p.giveBackWork(hl.wl, nil)
		}
	}
	if len(rest) > 0 {
		p.notifyWork(rest)
	}
}

// orchAck is an ack, validated and encoded: what one attempt writes.
type orchAck struct {
	lease        orchLease
	ack          duroxide.OrchestrationAck
	now, exec    int64
	hist         []models.HistoryEvent
	customStatus *duroxide.CustomStatusUpdatedEvent
	kv           *kvPlan
	terminal     bool // the ack ends the execution
	wrows        []models.WorkerQueueItem
	orows        []models.OrchestratorQueueItem
	// leaseN: how many worker rows are enqueued leased (preLease) to
	// parked fetches whose lock timeout is leaseLT (reserved before the
	// first attempt); leasedIDs maps their stored tokens to their row ids,
	// as the attempt that committed reported them.
	leaseLT   time.Duration
	leaseN    int
	leasedIDs map[string]int64
}

// dropCancelled returns the worker rows of rows that are not among the
// cancelled activities: an activity scheduled and cancelled in one turn
// is never enqueued.
func dropCancelled(rows []models.WorkerQueueItem, cancelled []duroxide.ScheduledActivityIdentifier) []models.WorkerQueueItem {
	if len(cancelled) == 0 || len(rows) == 0 {
		return rows
	}
	kept := make([]models.WorkerQueueItem, 0, len(rows))
	for _, r := range rows {
		if r.InstanceID == nil || r.ExecutionID == nil || r.ActivityID == nil || !slices.ContainsFunc(cancelled, func(c duroxide.ScheduledActivityIdentifier) bool {
			return c.Instance == *r.InstanceID && int64(c.ExecutionID) == *r.ExecutionID && int64(c.ActivityID) == *r.ActivityID
		}) {
			kept = append(kept, r)
		}
	}
	return kept
}

// ackOrchOnce applies one attempt of ack a: in the dialect's one
// autocommit statement (dialect.OrchAckStatement, CapFastPaths) when the
// ack fits in it, else in the portable transaction (ackOrchSteps). Either
// way the lock row is consumed first (strict single ack, expiry checked)
// and nothing is written for an invalid, expired or used token
// (ErrInvalidLockToken); a history event id already stored is a
// *dupEventError (history is the only table an ack writes without ON
// CONFLICT that can raise a unique violation: the queues have generated
// keys).
func (p *gormProvider) ackOrchOnce(ctx context.Context, a *orchAck) error {
	const op = "ack_orchestration_item"
	var instance string // the consumed lock's instance; "" when none (or the statement failed)
	var err error
	ran := false
	if st, ok := p.s.d.(dialect.OrchAckStatement); ok && p.s.has(CapFastPaths) {
		var q string
		var args []any
		if q, args, ran = st.OrchAckSQL(p.orchAckSpec(a)); ran {
			scan := func(r *sql.Rows) error { return r.Scan(&instance) }
			if slices.ContainsFunc(a.wrows, func(r models.WorkerQueueItem) bool { return r.LockToken != nil }) {
				scan = func(r *sql.Rows) error {
					var k int
					var inst, tok sql.NullString
					var id sql.NullInt64
					if err := r.Scan(&k, &inst, &id, &tok); err != nil {
						return err
					}
					if k == 0 {
						instance = inst.String
					} else if tok.Valid {
						a.leasedIDs[tok.String] = id.Int64
					}
					return nil
				}
			}
			err = queryDirect(p.s.db.WithContext(ctx), q, args, scan)
		}
	}
	if !ran {
		err = p.tx(ctx, func(tx *gorm.DB) error {
			var err error
			instance, err = p.ackOrchSteps(tx, a)
			return err
		})
	}
	if err != nil {
		if len(a.hist) > 0 && errors.Is(translateError(err), ErrConflict) {
			return &dupEventError{instance: instance, exec: a.exec, cause: translateError(err)}
		}
		return fmt.Errorf("ack orchestration item: %w", err)
	}
	if instance == "" {
		return pfail(op, ErrInvalidLockToken, "Invalid lock token")
	}
	return nil
}

// orchAckSpec describes a for the dialect's statement.
func (p *gormProvider) orchAckSpec(a *orchAck) *dialect.OrchAck {
	md := a.ack.Metadata
	eu := newExecUpsert(md, a.now)
	d := &dialect.OrchAck{Quote: p.q, LockToken: a.lease.stored, Instance: a.lease.instance, Now: a.now, Exec: a.exec,
		Name: md.OrchestrationName, Version: md.OrchestrationVersion, Parent: md.ParentInstanceID,
		ExecStatus: eu.status, ExecOutput: eu.output, ExecCompleted: eu.completed, VerMajor: eu.major, VerMinor: eu.minor, VerPatch: eu.patch,
		ExecConflict: eu.conflict, Started: p.orchStartedSQL, History: a.hist, KVTerminal: a.terminal, Worker: a.wrows, Orch: a.orows}
	if cs := a.customStatus; cs != nil {
		d.CustomStatus, d.SetCustomStatus = cs.Status, true
	}
	if a.kv != nil {
		d.KVClearAll = a.kv.clearAll
		for _, r := range a.kv.rows {
			d.KVRows = append(d.KVRows, dialect.KVRow{Key: r.key, Value: r.value, TS: kvTS(r.ts, a.now)})
		}
	}
	for _, c := range a.ack.CancelledActivities {
		d.Cancelled = append(d.Cancelled, dialect.ActivityRef{Instance: c.Instance, Execution: int64(c.ExecutionID), Activity: int64(c.ActivityID)})
	}
	return d
}

// ackOrchSteps is the portable ack, in transaction tx. It returns the
// instance of the consumed lock, "" (and writes nothing) when the token is
// invalid, expired or used.
func (p *gormProvider) ackOrchSteps(tx *gorm.DB, a *orchAck) (string, error) {
	md, exec, now := a.ack.Metadata, a.exec, a.now
	// 1. validate and consume the lock (strict single ack)
	var ids []string
	ic, iargs := a.lease.cond()
	if err := tx.Raw(`DELETE FROM `+p.q(models.TableInstanceLocks)+` WHERE lock_token = ? AND locked_until > ?`+ic+` RETURNING instance_id`,
		append([]any{a.lease.stored, now}, iargs...)...).Scan(&ids).Error; err != nil {
		return "", fmt.Errorf("claim lock: %w", err)
	}
	if len(ids) == 0 {
		return "", nil
	}
	instance := ids[0]
	// 2. instance row only with name and version (upsert); current_execution_id only grows
	var instanceExists bool
	if md.OrchestrationName != nil && md.OrchestrationVersion != nil {
		if err := tx.Exec(p.s.upsert(`INSERT INTO `+p.q(models.TableInstances)+` AS i`+
			` (instance_id, orchestration_name, orchestration_version, current_execution_id, created_at, updated_at, parent_instance_id, custom_status_version)`+
			` VALUES (?, ?, ?, ?, ?, ?, ?, 0) ON CONFLICT (instance_id) DO UPDATE SET orchestration_name = excluded.orchestration_name,`+
			` orchestration_version = excluded.orchestration_version, parent_instance_id = COALESCE(i.parent_instance_id, excluded.parent_instance_id),`+
			` updated_at = excluded.updated_at, current_execution_id = CASE WHEN i.current_execution_id < excluded.current_execution_id`+
			` THEN excluded.current_execution_id ELSE i.current_execution_id END`),
			instance, *md.OrchestrationName, *md.OrchestrationVersion, exec, now, now, md.ParentInstanceID).Error; err != nil {
			return instance, fmt.Errorf("upsert instance %s: %w", instance, err)
		}
		instanceExists = true
	} else {
		res := tx.Exec(`UPDATE `+p.q(models.TableInstances)+` SET current_execution_id = CASE WHEN current_execution_id < ? THEN ? ELSE current_execution_id END,`+
			` updated_at = ? WHERE instance_id = ?`, exec, exec, now, instance)
		if res.Error != nil {
			return instance, fmt.Errorf("bump execution of %s: %w", instance, res.Error)
		}
		instanceExists = res.RowsAffected > 0
	}
	// 3. execution row (unless the batch is a true orphan: no instance row,
	// no history stored or in this ack, no Start/ContinueAsNew in the batch)
	// with status, output, completed_at (every terminal status,
	// ContinuedAsNew included) and the pinned runtime version, in one upsert
	needExec := instanceExists || len(a.hist) > 0
	if !needExec {
		var hits []int
		if err := tx.Raw(p.orchStartedSQL("?"), a.lease.stored, instance, instance).Scan(&hits).Error; err != nil {
			return instance, fmt.Errorf("check batch of %s: %w", instance, err)
		}
		needExec = len(hits) > 0
	}
	if needExec {
		eu := newExecUpsert(md, now)
		if err := tx.Exec(p.s.upsert(`INSERT INTO `+p.q(models.TableExecutions)+` (instance_id, execution_id, status, output, started_at, completed_at,`+
			` duroxide_version_major, duroxide_version_minor, duroxide_version_patch) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`+
			` ON CONFLICT (instance_id, execution_id)`+eu.conflict),
			instance, exec, eu.status, eu.output, now, eu.completed, eu.major, eu.minor, eu.patch).Error; err != nil {
			return instance, fmt.Errorf("upsert execution %s/%d: %w", instance, exec, err)
		}
	}
	// 4. history (append-only: a duplicate event id fails the ack)
	if len(a.hist) > 0 {
		for i := range a.hist {
			a.hist[i].InstanceID = instance
			a.hist[i].CreatedAt = now
		}
		if err := tx.CreateInBatches(a.hist, 500).Error; err != nil {
			return instance, fmt.Errorf("append history %s/%d: %w", instance, exec, err)
		}
	}
	// 5. custom status: one version bump per ack
	if a.customStatus != nil {
		if err := tx.Exec(`UPDATE `+p.q(models.TableInstances)+` SET custom_status = ?, custom_status_version = custom_status_version + 1 WHERE instance_id = ?`,
			a.customStatus.Status, instance).Error; err != nil {
			return instance, fmt.Errorf("custom status of %s: %w", instance, err)
		}
	}
	// 5b. key-value events into the delta, merged into the store when the
	// execution ends
	if a.terminal || !a.kv.empty() {
		if err := p.applyKV(tx, instance, exec, now, a.kv, a.terminal); err != nil {
			return instance, err
		}
	}
	return instance, p.ackOrchQueues(tx, a, instance)
}

// ackOrchQueues is the queue part of the portable ack: worker items
// enqueued, cancelled activities deleted, orchestrator items enqueued, and
// the fetched batch (exactly) deleted.
func (p *gormProvider) ackOrchQueues(tx *gorm.DB, a *orchAck, instance string) error {
	perKey := p.s.citusRoute()
	for _, g := range byInstance(a.wrows, perKey, func(r models.WorkerQueueItem) string {
		if r.InstanceID == nil {
			return ""
		}
		return *r.InstanceID
	}) {
		if err := tx.CreateInBatches(g, 500).Error; err != nil {
			return fmt.Errorf("enqueue worker items: %w", err)
		}
		for _, r := range g {
			if r.LockToken != nil && a.leasedIDs != nil {
				a.leasedIDs[*r.LockToken] = r.ID
			}
		}
	}
	for _, g := range byInstance(a.ack.CancelledActivities, perKey, func(c duroxide.ScheduledActivityIdentifier) string { return c.Instance }) {
		conds := make([]string, 0, len(g))
		args := make([]any, 0, 3*len(g))
		for _, c := range g {
			conds = append(conds, `(instance_id = ? AND execution_id = ? AND activity_id = ?)`)
			args = append(args, c.Instance, int64(c.ExecutionID), int64(c.ActivityID))
		}
		if err := tx.Exec(`DELETE FROM `+p.q(models.TableWorkerQueue)+` WHERE `+strings.Join(conds, " OR "), args...).Error; err != nil {
			return fmt.Errorf("cancel activities: %w", err)
		}
	}
	for _, g := range byInstance(a.orows, perKey, func(r models.OrchestratorQueueItem) string { return r.InstanceID }) {
		if err := tx.CreateInBatches(g, 500).Error; err != nil {
			return fmt.Errorf("enqueue orchestrator items: %w", err)
		}
	}
	if err := tx.Exec(`DELETE FROM `+p.q(models.TableOrchestratorQueue)+` WHERE lock_token = ? AND instance_id = ?`, a.lease.stored, instance).Error; err != nil {
		return fmt.Errorf("delete batch: %w", err)
	}
	return nil
}

// orchStartedSQL returns the query (args: the lock token, then instance
// twice if it is "?") that has a
// row when the locked batch holds a StartOrchestration or ContinueAsNew or
// the instance has stored history: such an ack writes its execution row
// even when the metadata names no orchestration (as duroxide does). Work
// items are stored as externally tagged JSON written by this package, so
// the variant is the text's first key.
func (p *gormProvider) orchStartedSQL(instance string) string {
	return `SELECT 1 FROM ` + p.q(models.TableOrchestratorQueue) + ` WHERE lock_token = ? AND instance_id = ` + instance +
		` AND (work_item LIKE '{"StartOrchestration":%' OR work_item LIKE '{"ContinueAsNew":%')` +
		` UNION ALL SELECT 1 WHERE EXISTS (SELECT 1 FROM ` + p.q(models.TableHistory) + ` WHERE instance_id = ` + instance + `)`
}

// dupEventError is an ack's unique violation on history, raised inside the
// ack's transaction or statement; AckOrchestrationItem turns it into the
// ErrDuplicateEvent error after the rollback. instance is empty when the
// statement did not know it (the dialect's one-statement ack).
type dupEventError struct {
	instance string
	exec     int64
	cause    error
}

func (e *dupEventError) Error() string { return "duplicate history event" }

// duplicateEventError names the instance, execution and (when it can find
// them) the already stored event ids of a rolled-back ack whose history
// delta collided. The lookups are best effort: their failure only makes the
// message less specific.
func (p *gormProvider) duplicateEventError(ctx context.Context, lockToken string, dup *dupEventError, hist []models.HistoryEvent) error {
	db := p.s.db.WithContext(ctx)
	instance := dup.instance
	if instance == "" { // the ack rolled back, so the lock row is still there
		var ids []string
		l := parseOrchToken(lockToken)
		ic, _ := l.cond()
		if db.Raw(`SELECT instance_id FROM `+p.q(models.TableInstanceLocks)+` WHERE lock_token = ?`+ic, l.args()...).Scan(&ids).Error == nil && len(ids) > 0 {
			instance = ids[0]
		}
	}
	where := fmt.Sprintf("execution %d", dup.exec)
	if instance != "" {
		where = fmt.Sprintf("%s/%d", instance, dup.exec)
		ids := make([]any, 0, len(hist))
		for _, h := range hist {
			ids = append(ids, h.EventID)
		}
		var found []int64
		if len(ids) > 0 && len(ids) < 10000 && db.Raw(`SELECT event_id FROM `+p.q(models.TableHistory)+` WHERE instance_id = ? AND execution_id = ?`+
			` AND event_id IN (`+placeholders(len(ids))+`) ORDER BY event_id LIMIT 5`, append([]any{instance, dup.exec}, ids...)...).Scan(&found).Error == nil && len(found) > 0 {
			where = fmt.Sprintf("%s (event id %v already stored)", where, found)
		}
	}
	return &duroxide.ProviderError{Op: "ack_orchestration_item", Message: "duplicate history event in " + where,
		Err: fmt.Errorf("%w: %w", ErrDuplicateEvent, dup.cause)}
}

// AbandonOrchestrationItem implements duroxide.Provider.
func (p *gormProvider) AbandonOrchestrationItem(ctx context.Context, lockToken string, delay time.Duration, ignoreAttempt bool) error {
	const op = "abandon_orchestration_item"
	if delay < 0 {
		return perr(op, invalidf("negative delay"))
	}
	l := parseOrchToken(lockToken)
	if !issuedToken(l.stored) {
		return perrLock(op, lockToken, pfail(op, ErrInvalidLockToken, "Invalid lock token"))
	}
	ic, _ := l.cond()
	err := p.tx(ctx, func(tx *gorm.DB) error {
		now := p.s.nowMS()
		var ids []string
		if err := tx.Raw(`DELETE FROM `+p.q(models.TableInstanceLocks)+` WHERE lock_token = ?`+ic+` RETURNING instance_id`, l.args()...).Scan(&ids).Error; err != nil {
			return fmt.Errorf("release lock: %w", err)
		}
		if len(ids) == 0 {
			return pfail(op, ErrInvalidLockToken, "Invalid lock token")
		}
		set := `lock_token = NULL, locked_until = NULL`
		args := []any{}
		if delay > 0 {
			set += `, visible_at = ?`
			args = append(args, now+durMS(delay))
		}
		if ignoreAttempt {
			set += `, attempt_count = CASE WHEN attempt_count > 0 THEN attempt_count - 1 ELSE 0 END`
		}
		// the lock row named the instance: pin the messages to it
		return tx.Exec(`UPDATE `+p.q(models.TableOrchestratorQueue)+` SET `+set+` WHERE lock_token = ? AND instance_id = ?`, append(args, l.stored, ids[0])...).Error
	})
	if err != nil {
		return perrLock(op, lockToken, err)
	}
	p.orch.notify()
	return nil
}

// RenewOrchestrationItemLock implements duroxide.Provider.
func (p *gormProvider) RenewOrchestrationItemLock(ctx context.Context, lockToken string, extendFor time.Duration) error {
	const op = "renew_orchestration_item_lock"
	if extendFor <= 0 {
		return perr(op, invalidf("extension must be positive"))
	}
	l := parseOrchToken(lockToken)
	if !issuedToken(l.stored) {
		return perrLock(op, lockToken, pfail(op, ErrInvalidLockToken, "Lock token invalid, expired, or already released"))
	}
	ic, _ := l.cond()
	err := p.tx(ctx, func(tx *gorm.DB) error {
		now := p.s.nowMS()
		until := now + durMS(extendFor)
		res := tx.Exec(`UPDATE `+p.q(models.TableInstanceLocks)+` SET locked_until = ? WHERE lock_token = ?`+ic+` AND locked_until > ?`, append(l.args(until), now)...)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return pfail(op, ErrInvalidLockToken, "Lock token invalid, expired, or already released")
		}
		return tx.Exec(`UPDATE `+p.q(models.TableOrchestratorQueue)+` SET locked_until = ? WHERE lock_token = ?`+ic, l.args(until)...).Error
	})
	return perrLock(op, lockToken, err)
}

// byInstance splits rows into the groups one statement writes: all of
// them in one group, or with perKey (the Citus route: a statement pinned
// to one shard key, docs/distributed.md) one group per instance, in the
// order the instances first appear and each group in the rows' order. No
// rows, no group.
func byInstance[T any](rows []T, perKey bool, instance func(T) string) [][]T {
	if len(rows) == 0 {
		return nil
	}
	if !perKey {
		return [][]T{rows}
	}
	var groups [][]T
	at := map[string]int{}
	for _, r := range rows {
		k := instance(r)
		i, ok := at[k]
		if !ok {
			i = len(groups)
			at[k] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], r)
	}
	return groups
}
