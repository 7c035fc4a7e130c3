package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/schema"

	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

func jsonOr(v json.RawMessage, def string) models.JSON {
	if len(v) == 0 {
		return models.JSON(def)
	}
	return models.JSON(v)
}

// sessionRow maps the aggregate's row fields onto the model.
func sessionRow(s *repo.Session) models.Session {
	kind := string(s.Type.Kind)
	if kind == "" {
		kind = string(repo.KindMain)
	} else {
		k, _ := repo.ParseSessionKind(kind)
		kind = string(k)
	}
	state := string(repo.StateCreated)
	if s.State != "" {
		st, _ := repo.ParseSessionState(string(s.State))
		state = string(st)
	}
	row := models.Session{
		ID: s.ID, ParentID: s.ParentID, SessionType: kind, TenantID: nilIfEmpty(s.TenantID), State: state,
		Config: jsonOr(s.Config, "{}"), Permissions: jsonOr(s.Permissions, "{}"), CurrentLeafID: s.CurrentLeafID,
		Summary: s.Summary, TotalInputTokens: s.TotalUsage.InputTokens, TotalOutputTokens: s.TotalUsage.OutputTokens,
		TotalCacheReadTokens: s.TotalUsage.CacheReadInputTokens, TotalCacheCreationTokens: s.TotalUsage.CacheCreationInputTokens,
		CurrentInputTokens: s.CurrentInputTokens, TotalCostUSD: models.NewDecimal(s.TotalCostUSD),
		StaticContextHash: s.StaticContextHash, Error: s.Error, ForkedFromSessionID: s.ForkedFromSessionID,
		ForkedFromSeq: s.ForkedFromSeq, CreatedAt: s.CreatedAt.UTC().Truncate(time.Microsecond), ExpiresAt: utcPtr(s.ExpiresAt),
	}
	if kind == string(repo.KindSubagent) {
		row.AgentType = &s.Type.AgentType
		row.AgentDescription = &s.Type.Description
	}
	return row
}

// Save implements repo.Sessions.
func (ss *sessionStore) Save(ctx context.Context, sess *repo.Session) error {
	if ss.scopeErr != nil {
		return ss.scopeErr
	}
	if sess == nil {
		return invalidf("save session: nil session")
	}
	if ss.tenant != nil {
		if sess.TenantID != "" && sess.TenantID != *ss.tenant {
			return invalidf("save session %s: tenant %q outside the view's tenant", sess.ID, clip(sess.TenantID))
		}
	}
	fresh, err := ss.checkSave(sess)
	if err != nil {
		return fmt.Errorf("save session %s: %w", sess.ID, err)
	}
	now := ss.s.now()
	if sess.ID == uuid.Nil {
		id, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("save session: new id: %w", err)
		}
		sess.ID = id
	}
	row := ss.saveRow(sess, fresh, now)
	if row.Summary != nil {
		v, err := ss.s.sealString(models.TableSessions, encSummary, sess.ID, "", *row.Summary)
		if err != nil {
			return fmt.Errorf("save session %s: %w", sess.ID, err)
		}
		row.Summary = &v
	}
	k := int64(len(fresh))
	var c savedCounters
	unlock := ss.writeLock(ctx)
	err = ss.inTx(ctx, func(tx *gorm.DB) error {
		if err := ss.lockParent(tx, sess.ParentID); err != nil {
			return err
		}
		var err error
		if sess.Version == 0 {
			c, err = ss.insertSession(tx, &row, k)
		} else {
			c, err = ss.updateSession(tx, sess.Version, &row, k)
		}
		if err != nil {
			return err
		}
		if err := ss.saveChildren(tx, sess, fresh, c.lastSeq, now); err != nil {
			return err
		}
		if sess.Version == 0 {
			return nil
		}
		var kinds []repo.ChangeKind
		ch := sess.Changes()
		if ch.Todos {
			kinds = append(kinds, repo.ChangeTodos)
		}
		if ch.Plan {
			kinds = append(kinds, repo.ChangePlan)
		}
		return ss.tagChange(tx, sess.ID, k > 0, kinds...)
	})
	unlock()
	if err != nil {
		return fmt.Errorf("save session %s: %w", sess.ID, dbErr(err))
	}
	base := c.lastSeq - k
	for j, i := range fresh {
		sess.Messages[i].Seq = base + int64(j) + 1
	}
	if ss.tenant != nil {
		sess.TenantID = *ss.tenant
	}
	sess.CreatedAt, sess.UpdatedAt = row.CreatedAt, row.UpdatedAt
	sess.Version, sess.LastSeq, sess.MessageCount = c.version, c.lastSeq, c.msgCount
	sess.MarkClean()
	return nil
}

// checkSave validates what Save writes of sess (the row, the messages
// not stored yet, and the changed todos, compacts and plan) and returns
// the indexes of the messages to append (those with Seq 0).
func (ss *sessionStore) checkSave(sess *repo.Session) ([]int, error) {
	if err := checkSessionRow(sess); err != nil {
		return nil, err
	}
	ch := sess.Changes()
	var fresh []int
	for i := range sess.Messages {
		if sess.Messages[i].Seq == 0 {
			if err := checkMessage(i, &sess.Messages[i], ss.s.cfg.maxContent); err != nil {
				return nil, err
			}
			fresh = append(fresh, i)
		}
	}
	if ch.Todos {
		if err := checkTodos(sess.Todos); err != nil {
			return nil, err
		}
	}
	if len(fresh) > 1 {
		if err := checkMessageIDs(sess.Messages, fresh); err != nil {
			return nil, err
		}
	}
	for i := range ch.NewCompacts {
		if err := checkCompact(i, &ch.NewCompacts[i]); err != nil {
			return nil, err
		}
	}
	if ch.Plan && sess.CurrentPlan != nil {
		if err := checkPlan(sess.CurrentPlan); err != nil {
			return nil, err
		}
	}
	return fresh, nil
}

// saveRow fills in the ids and creation times of the fresh messages and
// returns the session row Save writes (in the view's tenant, updated now).
func (ss *sessionStore) saveRow(sess *repo.Session, fresh []int, now time.Time) models.Session {
	for _, i := range fresh {
		m := &sess.Messages[i]
		if m.ID == "" {
			m.ID = uuid.NewString()
		}
		if m.CreatedAt.IsZero() {
			m.CreatedAt = now
		}
	}
	row := sessionRow(sess)
	if ss.tenant != nil {
		row.TenantID = ss.tenant
	}
	if row.CreatedAt.IsZero() {
		row.CreatedAt = now
	}
	row.UpdatedAt = now
	return row
}

// savedCounters are the session row's counters after Save's write.
type savedCounters struct{ lastSeq, msgCount, version int64 }

// lockParent checks and locks the parent of a saved session (nil: none).
// The parent must exist (in the view's tenant): a tenant cannot hang
// sessions under another tenant's session. Its row is locked, so a
// concurrent Delete of the parent waits for the save's transaction or
// makes it ErrNotFound.
func (ss *sessionStore) lockParent(tx *gorm.DB, parentID *uuid.UUID) error {
	if parentID == nil {
		return nil
	}
	if _, err := ss.lockHead(tx, *parentID); err != nil {
		if errors.Is(err, ErrNotFound) {
			return fmt.Errorf("parent session %s: %w", *parentID, ErrNotFound)
		}
		return err
	}
	return nil
}

// insertSession inserts the row of a new session (Version 0) holding k
// messages.
func (ss *sessionStore) insertSession(tx *gorm.DB, row *models.Session, k int64) (savedCounters, error) {
	row.Version, row.LastSeq, row.MessageCount = 1, k, k
	if err := tx.Omit(clause.Associations).Create(row).Error; err != nil {
		if err := dbErr(err); errors.Is(err, ErrDuplicate) {
			return savedCounters{}, fmt.Errorf("session %s already exists (Load it; Save inserts only sessions with Version 0): %w", row.ID, ErrDuplicate)
		}
		return savedCounters{}, dbErr(err)
	}
	return savedCounters{lastSeq: k, msgCount: k, version: 1}, nil
}

// updateSession writes the row of a stored session at version expected
// and advances its counters by k messages (a *StaleVersionError, or
// ErrNotFound, when it is at another version or missing). row.UpdatedAt
// becomes the stored one when that is later.
func (ss *sessionStore) updateSession(tx *gorm.DB, expected int64, row *models.Session, k int64) (savedCounters, error) {
	tc, targs := ss.tenantCond("tenant_id")
	set, args, err := ss.s.sessionUpdateSet(row)
	if err != nil {
		return savedCounters{}, err
	}
	args = append(args, k, k, row.ID, expected)
	args = append(args, targs...)
	var ret struct {
		LastSeq, MessageCount, Version int64
		UpdatedAt                      dbTime
	}
	upd := `UPDATE ` + ss.s.quoted(models.TableSessions) + ` SET ` + set + `,
 last_seq = last_seq + ?, message_count = message_count + ?, version = version + 1
 WHERE id = ? AND version = ?` + tc
	var res *gorm.DB
	if ss.s.has(CapUpdateReturning) {
		res = tx.Raw(upd+` RETURNING last_seq, message_count, version, updated_at`, args...).Scan(&ret)
	} else {
		// the general form: the UPDATE, then the row it wrote (locked by it)
		res = tx.Exec(upd, args...)
		if res.Error == nil && res.RowsAffected > 0 {
			if err := tx.Raw(`SELECT last_seq, message_count, version, updated_at FROM `+ss.s.quoted(models.TableSessions)+` WHERE id = ?`,
				row.ID).Scan(&ret).Error; err != nil {
				return savedCounters{}, dbErr(err)
			}
		}
	}
	if res.Error != nil {
		return savedCounters{}, dbErr(res.Error)
	}
	if res.RowsAffected == 0 {
		return savedCounters{}, ss.staleOrMissing(tx, row.ID, expected)
	}
	if ret.UpdatedAt.Valid && ret.UpdatedAt.T.After(row.UpdatedAt) {
		row.UpdatedAt = ret.UpdatedAt.T
	}
	return savedCounters{lastSeq: ret.LastSeq, msgCount: ret.MessageCount, version: ret.Version}, nil
}

// saveChildren writes Save's child rows: the fresh messages (seqs up to
// lastSeq), the new compacts, and the todos and plan when changed (of a
// new session only when it has any).
func (ss *sessionStore) saveChildren(tx *gorm.DB, sess *repo.Session, fresh []int, lastSeq int64, now time.Time) error {
	ch := sess.Changes()
	if k := int64(len(fresh)); k > 0 {
		rows := make([]models.Message, 0, k)
		base := lastSeq - k
		for j, i := range fresh {
			rows = append(rows, messageRow(sess.ID, base+int64(j)+1, &sess.Messages[i]))
			if err := ss.s.sealMessageRow(&rows[len(rows)-1]); err != nil {
				return err
			}
		}
		if err := insertMessages(tx, rows); err != nil {
			return err
		}
	}
	if len(ch.NewCompacts) > 0 {
		if err := ss.insertCompacts(tx, sess, now); err != nil {
			return err
		}
	}
	isNew := sess.Version == 0
	if ch.Todos && !(isNew && len(sess.Todos) == 0) {
		if _, err := ss.replaceTodos(tx, sess.ID, sess.Todos, now); err != nil {
			return err
		}
	}
	if ch.Plan && !(isNew && sess.CurrentPlan == nil) {
		if err := ss.writePlan(tx, sess.ID, sess.CurrentPlan, now); err != nil {
			return err
		}
	}
	return nil
}

// messageRow maps a message onto its row.
func messageRow(sessionID uuid.UUID, seq int64, m *repo.Message) models.Message {
	row := models.Message{
		SessionID: sessionID, Seq: seq, ID: m.ID, ParentID: m.ParentID, Role: string(m.Role),
		Content: models.VerbatimJSON(m.Content), IsSidechain: m.IsSidechain, IsCompactSummary: m.IsCompactSummary,
		Metadata: models.JSON(m.Metadata), Model: m.Model, RequestID: m.RequestID,
		Environment: models.JSON(m.Environment), CreatedAt: m.CreatedAt.UTC().Truncate(time.Microsecond),
	}
	if r, err := repo.ParseRole(string(m.Role)); err == nil {
		row.Role = string(r)
	}
	if m.Usage != nil {
		b, _ := json.Marshal(m.Usage)
		row.Usage = models.JSON(b)
	}
	return row
}

// insertMessages writes rows in batches (one statement per 500 rows).
func insertMessages(tx *gorm.DB, rows []models.Message) error {
	if err := tx.Omit(clause.Associations).CreateInBatches(rows, 500).Error; err != nil {
		return dbErr(err)
	}
	return nil
}

func (ss *sessionStore) insertCompacts(tx *gorm.DB, sess *repo.Session, now time.Time) error {
	ch := sess.Changes()
	rows := make([]models.Compact, 0, len(ch.NewCompacts))
	for i := range sess.CompactHistory {
		c := &sess.CompactHistory[i]
		if c.ID == uuid.Nil {
			c.ID = uuid.New()
		}
		if c.CreatedAt.IsZero() {
			c.CreatedAt = now
		}
		c.SessionID = sess.ID
	}
	for _, c := range sess.Changes().NewCompacts {
		trig := repo.TriggerManual
		if c.Trigger != "" {
			trig, _ = repo.ParseCompactTrigger(string(c.Trigger))
		}
		summary, err := ss.s.sealString(models.TableCompacts, encSummary, sess.ID, c.ID.String(), c.Summary)
		if err != nil {
			return err
		}
		rows = append(rows, models.Compact{ID: c.ID, SessionID: sess.ID, Trigger: string(trig), PreTokens: c.PreTokens,
			PostTokens: c.PostTokens, SavedTokens: c.SavedTokens, Summary: summary, OriginalCount: c.OriginalCount,
			NewCount: c.NewCount, LogicalParentID: c.LogicalParentID, CreatedAt: c.CreatedAt.UTC().Truncate(time.Microsecond)})
	}
	if len(rows) == 0 {
		return nil
	}
	err := tx.Omit(clause.Associations).Clauses(clause.OnConflict{Columns: []clause.Column{{Name: "id"}, {Name: "session_id"}}, DoNothing: true}).
		CreateInBatches(rows, 200).Error
	return dbErr(err)
}

// sessionUpdateFields are the columns Save's UPDATE writes from the row:
// every column of models.Session except the key, created_at and the
// counters Save advances itself (last_seq, message_count, version),
// derived from the model so that a column added to it is written too.
func parseSessionUpdateFields() ([]*schema.Field, error) {
	sch, err := schema.Parse(&models.Session{}, &sync.Map{}, models.NewNamer("", ""))
	if err != nil {
		return nil, fmt.Errorf("parse session model: %w", err)
	}
	skip := map[string]bool{"id": true, "created_at": true, "last_seq": true, "message_count": true, "version": true}
	var out []*schema.Field
	for _, name := range sch.DBNames {
		if f := sch.FieldsByDBName[name]; !skip[name] && !f.IgnoreMigration {
			out = append(out, f)
		}
	}
	return out, nil
}

// sessionUpdateSet returns Save's SET list ("col = ?, ...") and its values from row.
func (s *Store) sessionUpdateSet(row *models.Session) (string, []any, error) {
	s.updFieldsOnce.Do(func() { s.updFields, s.updFieldsErr = parseSessionUpdateFields() })
	fields, err := s.updFields, s.updFieldsErr
	if err != nil {
		return "", nil, err
	}
	rv := reflect.ValueOf(row).Elem()
	var b strings.Builder
	args := make([]any, 0, len(fields)+4)
	for i, f := range fields {
		if i > 0 {
			b.WriteString(", ")
		}
		v, _ := f.ValueOf(context.Background(), rv)
		if f.DBName == "updated_at" {
			b.WriteString(monotonicUpdatedAt("updated_at"))
			args = append(args, v, v)
			continue
		}
		b.WriteString(`"` + f.DBName + `" = ?`)
		args = append(args, v)
	}
	return b.String(), args, nil
}
