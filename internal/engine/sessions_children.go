package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

// AddSummary implements repo.Sessions.
func (ss *sessionStore) AddSummary(ctx context.Context, snap repo.SummarySnapshot) (repo.SummarySnapshot, error) {
	if ss.scopeErr != nil {
		return snap, ss.scopeErr
	}
	if err := checkText("summary", snap.Summary, 0); err != nil {
		return snap, fmt.Errorf("add summary to %s: %w", snap.SessionID, err)
	}
	if err := refuseEnvelope("summary", []byte(snap.Summary)); err != nil {
		return snap, fmt.Errorf("add summary to %s: %w", snap.SessionID, err)
	}
	if snap.LeafMessageID != nil {
		if err := checkID("leaf message id", *snap.LeafMessageID); err != nil {
			return snap, fmt.Errorf("add summary to %s: %w", snap.SessionID, err)
		}
	}
	now := ss.s.now()
	if snap.ID == uuid.Nil {
		id, err := uuid.NewV7()
		if err != nil {
			return snap, err
		}
		snap.ID = id
	}
	if snap.CreatedAt.IsZero() {
		snap.CreatedAt = now
	}
	snap.CreatedAt = snap.CreatedAt.UTC().Truncate(time.Microsecond)
	onSession, err := ss.s.sealString(models.TableSessions, encSummary, snap.SessionID, "", snap.Summary)
	if err != nil {
		return snap, fmt.Errorf("add summary to %s: %w", snap.SessionID, err)
	}
	onRow, err := ss.s.sealString(models.TableSummaries, encSummary, snap.SessionID, snap.ID.String(), snap.Summary)
	if err != nil {
		return snap, fmt.Errorf("add summary to %s: %w", snap.SessionID, err)
	}
	defer ss.writeLock(ctx)()
	err = ss.inTx(ctx, func(tx *gorm.DB) error {
		tc, targs := ss.tenantCond("tenant_id")
		res := tx.Exec("UPDATE "+ss.s.quoted(models.TableSessions)+
			" SET summary = ?, "+monotonicUpdatedAt("updated_at")+", version = version + 1 WHERE id = ?"+tc,
			append([]any{onSession, now, now, snap.SessionID}, targs...)...)
		if res.Error != nil {
			return dbErr(res.Error)
		}
		if res.RowsAffected == 0 {
			return ss.notFound("session", snap.SessionID)
		}
		if err := tx.Omit(clause.Associations).Create(&models.Summary{ID: snap.ID, SessionID: snap.SessionID,
			Summary: onRow, LeafMessageID: snap.LeafMessageID, CreatedAt: snap.CreatedAt}).Error; err != nil {
			return dbErr(err)
		}
		return ss.tagChange(tx, snap.SessionID, false, repo.ChangeSummary)
	})
	if err != nil {
		return snap, fmt.Errorf("add summary to %s: %w", snap.SessionID, dbErr(err))
	}
	return snap, nil
}

// GetSummaries implements repo.Sessions.
func (ss *sessionStore) GetSummaries(ctx context.Context, sessionID uuid.UUID) ([]repo.SummarySnapshot, error) {
	if ss.scopeErr != nil {
		return nil, ss.scopeErr
	}
	tc, targs := ss.inTenantCond()
	var rows []models.Summary
	db := ss.db(ctx)
	if err := db.Where("session_id = ?"+tc, append([]any{sessionID}, targs...)...).
		Order("created_at, id").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("get summaries of %s: %w", sessionID, dbErr(err))
	}
	if len(rows) == 0 {
		if ok, err := ss.sessionExists(db, sessionID); err != nil || !ok {
			return nil, ss.missing("get summaries of", sessionID, err)
		}
	}
	out, err := ss.s.summarySnapshots(rows)
	if err != nil {
		return nil, fmt.Errorf("get summaries of %s: %w", sessionID, err)
	}
	return out, nil
}

// GetSummariesPage implements repo.Sessions.
func (ss *sessionStore) GetSummariesPage(ctx context.Context, sessionID uuid.UUID, p repo.PageParams) ([]repo.SummarySnapshot, string, error) {
	if ss.scopeErr != nil {
		return nil, "", ss.scopeErr
	}
	limit, err := pageLimit(p)
	if err != nil {
		return nil, "", fmt.Errorf("get summaries of %s: %w", sessionID, err)
	}
	c, err := decodeCursor(p, curSummaries)
	if err != nil {
		return nil, "", fmt.Errorf("get summaries of %s: %w", sessionID, err)
	}
	tc, targs := ss.inTenantCond()
	db := ss.db(ctx)
	var rows []models.Summary
	if err := ss.s.childPage(db.Where("session_id = ?"+tc, append([]any{sessionID}, targs...)...), c, limit, &rows); err != nil {
		return nil, "", fmt.Errorf("get summaries of %s: %w", sessionID, dbErr(err))
	}
	if len(rows) == 0 {
		if ok, err := ss.sessionExists(db, sessionID); err != nil || !ok {
			return nil, "", ss.missing("get summaries of", sessionID, err)
		}
	}
	next := ""
	if len(rows) > limit {
		rows = rows[:limit]
		last := rows[limit-1]
		next = encodeCursor(pageCursor{Kind: curSummaries, T: last.CreatedAt.UTC(), ID: last.ID.String()})
	}
	out, err := ss.s.summarySnapshots(rows)
	if err != nil {
		return nil, "", fmt.Errorf("get summaries of %s: %w", sessionID, err)
	}
	return out, next, nil
}

// SetTodos implements repo.Sessions.
func (ss *sessionStore) SetTodos(ctx context.Context, sessionID uuid.UUID, todos []repo.TodoItem) ([]repo.TodoItem, error) {
	if ss.scopeErr != nil {
		return nil, ss.scopeErr
	}
	if err := checkTodos(todos); err != nil {
		return nil, fmt.Errorf("set todos of %s: %w", sessionID, err)
	}
	now := ss.s.now()
	var out []repo.TodoItem
	defer ss.writeLock(ctx)()
	err := ss.inTx(ctx, func(tx *gorm.DB) error {
		tc, targs := ss.tenantCond("tenant_id")
		res := tx.Exec("UPDATE "+ss.s.quoted(models.TableSessions)+" SET "+monotonicUpdatedAt("updated_at")+", version = version + 1 WHERE id = ?"+tc,
			append([]any{now, now, sessionID}, targs...)...)
		if res.Error != nil {
			return dbErr(res.Error)
		}
		if res.RowsAffected == 0 {
			return ss.notFound("session", sessionID)
		}
		var err error
		if out, err = ss.replaceTodos(tx, sessionID, todos, now); err != nil {
			return err
		}
		return ss.tagChange(tx, sessionID, false, repo.ChangeTodos)
	})
	if err != nil {
		return nil, fmt.Errorf("set todos of %s: %w", sessionID, dbErr(err))
	}
	return out, nil
}

// replaceTodos makes the session's todos equal to todos, by id: stored
// items are updated, new ones inserted, the others removed — except rows
// whose status this version cannot decode, which are kept. It fills in ids,
// defaults and positions of todos in place and returns a copy.
func (ss *sessionStore) replaceTodos(tx *gorm.DB, sessionID uuid.UUID, todos []repo.TodoItem, now time.Time) ([]repo.TodoItem, error) {
	rows := make([]models.Todo, len(todos))
	ids := make([]uuid.UUID, len(todos))
	for i := range todos {
		t := &todos[i]
		if t.ID == uuid.Nil {
			t.ID = uuid.New()
		}
		if t.Status == "" {
			t.Status = repo.TodoPending
		} else {
			t.Status, _ = repo.ParseTodoStatus(string(t.Status))
		}
		if t.CreatedAt.IsZero() {
			t.CreatedAt = now
		}
		t.SessionID = sessionID
		ids[i] = t.ID
		rows[i] = models.Todo{ID: t.ID, SessionID: sessionID, Position: int64(i), Content: t.Content, ActiveForm: t.ActiveForm,
			Status: string(t.Status), PlanID: t.PlanID, CreatedAt: t.CreatedAt.UTC().Truncate(time.Microsecond),
			StartedAt: utcPtr(t.StartedAt), CompletedAt: utcPtr(t.CompletedAt)}
	}
	tt := ss.s.quoted(models.TableTodos)
	del := "DELETE FROM " + tt + " WHERE session_id = ? AND status IN ?"
	args := []any{sessionID, knownTodoStatuses()}
	if len(ids) > 0 {
		del += " AND id NOT IN ?"
		args = append(args, ids)
	}
	if err := tx.Exec(del, args...).Error; err != nil {
		return nil, dbErr(err)
	}
	if len(rows) > 0 {
		if err := ss.refuseForeignIDs(tx, tt, sessionID, ids); err != nil {
			return nil, fmt.Errorf("a todo id of the list is stored under another session: %w", err)
		}
		res := tx.Omit(clause.Associations).Clauses(ss.s.guardedUpsert([]string{"position", "content", "active_form", "status", "plan_id",
			"created_at", "started_at", "completed_at"})).Create(&rows)
		if res.Error != nil {
			return nil, dbErr(res.Error)
		}
		if ss.s.isUpserter() {
			// the guard left a row a concurrent writer stored under another
			// session alone: refuse as the check above would have
			if err := ss.refuseForeignIDs(tx, tt, sessionID, ids); err != nil {
				return nil, fmt.Errorf("a todo id of the list is stored under another session: %w", err)
			}
		}
	}
	return append([]repo.TodoItem(nil), todos...), nil
}

// guardedUpsert is the ON CONFLICT clause of the todo and plan upserts: a
// row whose (id, session_id) exists gets the columns of set (the key since
// V13; refuseForeignIDs has refused an id stored under another session).
// On a dialect.Upserter (its keys are the id alone) the same through its
// GuardedAssign, which leaves a row stored under another session alone;
// the caller then checks again with refuseForeignIDs (a concurrent writer
// may have stored it after the first check).
func (s *Store) guardedUpsert(set []string) clause.OnConflict {
	if u, ok := s.d.(dialect.Upserter); ok {
		var as clause.Set
		for _, c := range set {
			as = append(as, clause.Assignment{Column: clause.Column{Name: c}, Value: clause.Expr{SQL: u.GuardedAssign(c, "session_id")}})
		}
		return clause.OnConflict{Columns: []clause.Column{{Name: "id"}}, DoUpdates: as}
	}
	return clause.OnConflict{
		Columns:   []clause.Column{{Name: "id"}, {Name: "session_id"}},
		DoUpdates: clause.AssignmentColumns(set),
	}
}

// isUpserter reports whether the dialect spells guarded upserts itself.
func (s *Store) isUpserter() bool {
	_, ok := s.d.(dialect.Upserter)
	return ok
}

// writePlan makes plan the session's only active plan: any other active
// plan is recorded as cancelled, then plan is inserted or updated by id.
func (ss *sessionStore) writePlan(tx *gorm.DB, sessionID uuid.UUID, plan *repo.Plan, now time.Time) error {
	pt := ss.s.quoted(models.TablePlans)
	q := "UPDATE " + pt + " SET status = ?, completed_at = ? WHERE session_id = ? AND status IN ?"
	args := []any{string(repo.PlanCancelled), now, sessionID, activePlanStatuses()}
	if plan != nil {
		if plan.ID == uuid.Nil {
			plan.ID = uuid.New()
		}
		q += " AND id <> ?"
		args = append(args, plan.ID)
	}
	if err := tx.Exec(q, args...).Error; err != nil {
		return dbErr(err)
	}
	if plan == nil {
		return nil
	}
	if plan.Status == "" {
		plan.Status = repo.PlanDraft
	} else {
		plan.Status, _ = repo.ParsePlanStatus(string(plan.Status))
	}
	if plan.CreatedAt.IsZero() {
		plan.CreatedAt = now
	}
	plan.SessionID = sessionID
	row := models.Plan{ID: plan.ID, SessionID: sessionID, Name: plan.Name, Content: plan.Content, Status: string(plan.Status),
		Error: plan.Error, CreatedAt: plan.CreatedAt.UTC().Truncate(time.Microsecond), ApprovedAt: utcPtr(plan.ApprovedAt),
		StartedAt: utcPtr(plan.StartedAt), CompletedAt: utcPtr(plan.CompletedAt)}
	if err := ss.refuseForeignIDs(tx, pt, sessionID, []uuid.UUID{plan.ID}); err != nil {
		return fmt.Errorf("plan %s is stored under another session: %w", plan.ID, err)
	}
	res := tx.Omit(clause.Associations).Clauses(ss.s.guardedUpsert([]string{"name", "content", "status", "error", "approved_at",
		"started_at", "completed_at"})).Create(&row)
	if res.Error != nil {
		return dbErr(res.Error)
	}
	if ss.s.isUpserter() {
		if err := ss.refuseForeignIDs(tx, pt, sessionID, []uuid.UUID{plan.ID}); err != nil {
			return fmt.Errorf("plan %s is stored under another session: %w", plan.ID, err)
		}
	}
	return nil
}

// refuseForeignIDs returns ErrDuplicate when one of ids is stored in table
// (todos or plans, quoted) under another session than sessionID. Since V13
// the key is (id, session_id) (the distribution column in every key), so
// the database no longer refuses such a row itself: this check keeps an id
// from naming rows of two sessions. It is a read of every session's rows
// by id (on Citus a statement to every shard), run only when todos or a
// plan are written; two concurrent writes of one new id into two sessions
// can both pass it.
func (ss *sessionStore) refuseForeignIDs(tx *gorm.DB, table string, sessionID uuid.UUID, ids []uuid.UUID) error {
	var n int64
	if err := tx.Raw("SELECT COUNT(*) FROM "+table+" WHERE id IN ? AND session_id <> ?", ids, sessionID).Scan(&n).Error; err != nil {
		return dbErr(err)
	}
	if n > 0 {
		return ErrDuplicate
	}
	return nil
}

// Plans implements repo.Sessions.
func (ss *sessionStore) Plans(ctx context.Context, sessionID uuid.UUID) ([]repo.Plan, error) {
	if ss.scopeErr != nil {
		return nil, ss.scopeErr
	}
	tc, targs := ss.inTenantCond()
	db := ss.db(ctx)
	var rows []models.Plan
	if err := db.Where("session_id = ?"+tc, append([]any{sessionID}, targs...)...).
		Order("created_at, id").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("plans of %s: %w", sessionID, dbErr(err))
	}
	if len(rows) == 0 {
		if ok, err := ss.sessionExists(db, sessionID); err != nil || !ok {
			return nil, ss.missing("plans of", sessionID, err)
		}
	}
	out := make([]repo.Plan, 0, len(rows))
	for i := range rows {
		p, err := planFromRow(&rows[i])
		if err != nil {
			return nil, fmt.Errorf("plans of %s: %w", sessionID, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// PlansPage implements repo.Sessions.
func (ss *sessionStore) PlansPage(ctx context.Context, sessionID uuid.UUID, p repo.PageParams) ([]repo.Plan, string, error) {
	if ss.scopeErr != nil {
		return nil, "", ss.scopeErr
	}
	limit, err := pageLimit(p)
	if err != nil {
		return nil, "", fmt.Errorf("plans of %s: %w", sessionID, err)
	}
	c, err := decodeCursor(p, curPlans)
	if err != nil {
		return nil, "", fmt.Errorf("plans of %s: %w", sessionID, err)
	}
	tc, targs := ss.inTenantCond()
	db := ss.db(ctx)
	var rows []models.Plan
	if err := ss.s.childPage(db.Where("session_id = ?"+tc, append([]any{sessionID}, targs...)...), c, limit, &rows); err != nil {
		return nil, "", fmt.Errorf("plans of %s: %w", sessionID, dbErr(err))
	}
	if len(rows) == 0 {
		if ok, err := ss.sessionExists(db, sessionID); err != nil || !ok {
			return nil, "", ss.missing("plans of", sessionID, err)
		}
	}
	next := ""
	if len(rows) > limit {
		rows = rows[:limit]
		last := rows[limit-1]
		next = encodeCursor(pageCursor{Kind: curPlans, T: last.CreatedAt.UTC(), ID: last.ID.String()})
	}
	out := make([]repo.Plan, 0, len(rows))
	for i := range rows {
		pl, err := planFromRow(&rows[i])
		if err != nil {
			return nil, "", fmt.Errorf("plans of %s: %w", sessionID, err)
		}
		out = append(out, pl)
	}
	return out, next, nil
}
