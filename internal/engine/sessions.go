package engine

import (
	"context"
	"database/sql"
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

// Sessions returns the agent-session repository of the store (every
// tenant). See repo.Sessions for the contract.
func (s *Store) Sessions() repo.Sessions { return s.tel.sessions(sessionsAPI{&sessionStore{s: s}}) }

// SessionQueue returns the per-session durable queue of the store (every
// tenant). See repo.SessionQueue for the contract.
func (s *Store) SessionQueue() repo.SessionQueue {
	return s.tel.sessionQueue(sessionQueueAPI{&sessionQueue{sessionStore{s: s}}})
}

// TenantView is a tenant-scoped view of a Store: its repositories only see
// sessions whose tenant id is the view's tenant. Loading, listing,
// deleting, forking, enqueuing to or dequeuing from another tenant's session
// (or a session without tenant) behaves exactly as if it did not exist
// (ErrNotFound, false, or an empty page), and sessions saved through the
// view get the view's tenant (saving a session that names another tenant
// is ErrInvalidInput).
type TenantView struct {
	st     *Store
	tenant string
	err    error
}

// ForTenant returns the view of the store scoped to tenant. A tenant that
// is empty, longer than repo.MaxIDLen bytes, not valid UTF-8 or holding a
// NUL byte makes every call of the view fail with ErrInvalidInput.
func (s *Store) ForTenant(tenant string) *TenantView {
	err := checkID("tenant id", tenant)
	return &TenantView{st: s, tenant: tenant, err: err}
}

// Tenant returns the view's tenant id.
func (v *TenantView) Tenant() string { return v.tenant }

// Sessions returns the tenant's session repository.
func (v *TenantView) Sessions() repo.Sessions {
	t := v.tenant
	return v.st.tel.sessions(sessionsAPI{&sessionStore{s: v.st, tenant: &t, scopeErr: v.err}})
}

// SessionQueue returns the tenant's session queue.
func (v *TenantView) SessionQueue() repo.SessionQueue {
	t := v.tenant
	return v.st.tel.sessionQueue(sessionQueueAPI{&sessionQueue{sessionStore{s: v.st, tenant: &t, scopeErr: v.err}}})
}

var (
	_ repo.Sessions     = (*sessionStore)(nil)
	_ repo.SessionQueue = (*sessionQueue)(nil)
)

// sessionStore implements repo.Sessions; tenant != nil scopes every query.
// tx != nil binds it to the transaction of a WithSessionLock.
type sessionStore struct {
	s        *Store
	tenant   *string
	scopeErr error
	tx       *gorm.DB
}

const defaultCleanupBatch = 500

// activePlanStatuses and terminalPlanStatuses partition the known plan statuses.
func activePlanStatuses() []string {
	return []string{string(repo.PlanDraft), string(repo.PlanApproved), string(repo.PlanExecuting)}
}

func terminalPlanStatuses() []string {
	return []string{string(repo.PlanCompleted), string(repo.PlanFailed), string(repo.PlanCancelled)}
}

// knownTodoStatuses are the todo statuses the store knows.
func knownTodoStatuses() []string {
	return []string{string(repo.TodoPending), string(repo.TodoInProgress), string(repo.TodoCompleted)}
}

func (ss *sessionStore) db(ctx context.Context) *gorm.DB {
	if ss.tx != nil {
		return ss.tx.WithContext(ctx)
	}
	return ss.s.db.WithContext(ctx)
}

// tenantCond returns " AND <col> = ?" and its argument when scoped.
func (ss *sessionStore) tenantCond(col string) (string, []any) {
	if ss.tenant == nil {
		return "", nil
	}
	return " AND " + col + " = ?", []any{*ss.tenant}
}

// inTenantCond restricts a child table's session_id to the view's tenant.
func (ss *sessionStore) inTenantCond() (string, []any) {
	if ss.tenant == nil {
		return "", nil
	}
	return " AND session_id IN (SELECT id FROM " + ss.s.quoted(models.TableSessions) + " WHERE tenant_id = ?)", []any{*ss.tenant}
}

// sessionExists reports whether the session exists (in the view's tenant).
func (ss *sessionStore) sessionExists(tx *gorm.DB, id uuid.UUID) (bool, error) {
	tc, targs := ss.tenantCond("tenant_id")
	var n int64
	err := tx.Raw("SELECT COUNT(*) FROM "+ss.s.quoted(models.TableSessions)+" WHERE id = ?"+tc, append([]any{id}, targs...)...).Scan(&n).Error
	return n > 0, err
}

func (ss *sessionStore) notFound(op string, id uuid.UUID) error {
	return fmt.Errorf("%s %s: %w", op, id, ErrNotFound)
}

// writeLock serialises the writes of this Store handle on SQLite, which
// admits one writer at a time: contending connections would otherwise wait
// in SQLite's busy handler, which sleeps up to 100 ms per retry. A store
// made by Open already sends every write to its one write connection (see
// liteConnPool), so only a store made by New over a shared pool needs the
// mutex. Other handles and processes are still coordinated by SQLite's own
// lock and busy_timeout. On PostgreSQL it does nothing. The wait ends
// with ctx: a call whose context ends while another write (say a
// WithSessionLock function) holds the lock goes on without it, and its
// first database call fails with the context's error. Use: defer
// ss.writeLock(ctx)().
func (ss *sessionStore) writeLock(ctx context.Context) func() {
	if !ss.s.has(CapSingleWriter) || ss.s.writeDB != nil || ss.tx != nil {
		return func() {}
	}
	select {
	case ss.s.sessWrite <- struct{}{}:
		return func() { <-ss.s.sessWrite }
	case <-ctx.Done():
		return func() {}
	}
}

// inTx runs fn in one transaction (BEGIN IMMEDIATE on SQLite).
func (ss *sessionStore) inTx(ctx context.Context, fn func(tx *gorm.DB) error) error {
	return ss.db(ctx).Transaction(fn)
}

// nilIfEmpty maps "" to nil.
func nilIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

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

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC().Truncate(time.Microsecond)
	return &u
}

// corrupt returns the *CorruptRowError of a stored value that cannot be
// decoded. A parse error's ErrInvalidInput is dropped (with its text): a
// stored row is corrupt, not refused input.
func corrupt(table, rowID, column string, err error) error {
	if errors.Is(err, ErrInvalidInput) {
		err = errors.New(strings.TrimPrefix(err.Error(), ErrInvalidInput.Error()+": "))
	}
	return &CorruptRowError{Table: table, RowID: rowID, Column: column, Err: err}
}

// monotonicUpdatedAt is the SET item of every session write: updated_at
// becomes the later of the stored value and the parameter, so a writer
// that read the clock before waiting for the row lock never moves it
// backwards (col is "updated_at" or "s.updated_at").
func monotonicUpdatedAt(col string) string {
	return "updated_at = CASE WHEN " + col + " > ? THEN " + col + " ELSE ? END"
}

// staleOrMissing reads the stored version of a session whose versioned
// write matched no row: ErrNotFound when it is missing (in the view's
// tenant), else a *StaleVersionError.
func (ss *sessionStore) staleOrMissing(tx *gorm.DB, id uuid.UUID, expected int64) error {
	tc, targs := ss.tenantCond("tenant_id")
	var vs []int64
	if err := tx.Raw("SELECT version FROM "+ss.s.quoted(models.TableSessions)+" WHERE id = ?"+tc,
		append([]any{id}, targs...)...).Scan(&vs).Error; err != nil {
		return dbErr(err)
	}
	if len(vs) == 0 {
		return ss.notFound("session", id)
	}
	return &repo.StaleVersionError{SessionID: id, Expected: expected, Stored: vs[0]}
}

// sessionFromRow decodes a stored session row; a value it cannot decode is a *CorruptRowError.
func sessionFromRow(m *models.Session) (*repo.Session, error) {
	id := m.ID.String()
	kind, err := repo.ParseSessionKind(m.SessionType)
	if err != nil {
		return nil, corrupt(models.TableSessions, id, "session_type", err)
	}
	state, err := repo.ParseSessionState(m.State)
	if err != nil {
		return nil, corrupt(models.TableSessions, id, "state", err)
	}
	if !json.Valid(m.Config) {
		return nil, corrupt(models.TableSessions, id, "config", errors.New("invalid JSON"))
	}
	if !json.Valid(m.Permissions) {
		return nil, corrupt(models.TableSessions, id, "permissions", errors.New("invalid JSON"))
	}
	s := &repo.Session{
		ID: m.ID, ParentID: m.ParentID, Type: repo.SessionType{Kind: kind}, State: state,
		Config: json.RawMessage(m.Config), Permissions: json.RawMessage(m.Permissions),
		CurrentLeafID: m.CurrentLeafID, Summary: m.Summary,
		TotalUsage: repo.TokenUsage{InputTokens: m.TotalInputTokens, OutputTokens: m.TotalOutputTokens,
			CacheReadInputTokens: m.TotalCacheReadTokens, CacheCreationInputTokens: m.TotalCacheCreationTokens},
		CurrentInputTokens: m.CurrentInputTokens, TotalCostUSD: m.TotalCostUSD.Decimal,
		StaticContextHash: m.StaticContextHash, Error: m.Error, CreatedAt: m.CreatedAt.UTC(), UpdatedAt: m.UpdatedAt.UTC(),
		ExpiresAt: utcPtr(m.ExpiresAt), Version: m.Version, LastSeq: m.LastSeq, MessageCount: m.MessageCount,
		ForkedFromSessionID: m.ForkedFromSessionID, ForkedFromSeq: m.ForkedFromSeq,
	}
	if m.TenantID != nil {
		s.TenantID = *m.TenantID
	}
	if kind == repo.KindSubagent {
		if m.AgentType != nil {
			s.Type.AgentType = *m.AgentType
		}
		if m.AgentDescription != nil {
			s.Type.Description = *m.AgentDescription
		}
	}
	return s, nil
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
	if err := checkSessionRow(sess); err != nil {
		return fmt.Errorf("save session %s: %w", sess.ID, err)
	}
	ch := sess.Changes()
	var fresh []int // indexes of messages to append
	for i := range sess.Messages {
		if sess.Messages[i].Seq == 0 {
			if err := checkMessage(i, &sess.Messages[i], ss.s.cfg.maxContent); err != nil {
				return fmt.Errorf("save session %s: %w", sess.ID, err)
			}
			fresh = append(fresh, i)
		}
	}
	if ch.Todos {
		if err := checkTodos(sess.Todos); err != nil {
			return fmt.Errorf("save session %s: %w", sess.ID, err)
		}
	}
	if len(fresh) > 1 {
		if err := checkMessageIDs(sess.Messages, fresh); err != nil {
			return fmt.Errorf("save session %s: %w", sess.ID, err)
		}
	}
	for i := range ch.NewCompacts {
		if err := checkCompact(i, &ch.NewCompacts[i]); err != nil {
			return fmt.Errorf("save session %s: %w", sess.ID, err)
		}
	}
	if ch.Plan && sess.CurrentPlan != nil {
		if err := checkPlan(sess.CurrentPlan); err != nil {
			return fmt.Errorf("save session %s: %w", sess.ID, err)
		}
	}

	now := ss.s.now()
	if sess.ID == uuid.Nil {
		id, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("save session: new id: %w", err)
		}
		sess.ID = id
	}
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
	k := int64(len(fresh))

	var lastSeq, msgCount, version int64
	unlock := ss.writeLock(ctx)
	err := ss.inTx(ctx, func(tx *gorm.DB) error {
		if sess.ParentID != nil {
			// The parent must exist (in the view's tenant): a tenant cannot
			// hang sessions under another tenant's session. Its row is
			// locked, so a concurrent Delete of the parent waits for this
			// transaction or makes this one ErrNotFound.
			if _, err := ss.lockHead(tx, *sess.ParentID); err != nil {
				if errors.Is(err, ErrNotFound) {
					return fmt.Errorf("parent session %s: %w", *sess.ParentID, ErrNotFound)
				}
				return err
			}
		}
		if sess.Version == 0 {
			row.Version, row.LastSeq, row.MessageCount = 1, k, k
			if err := tx.Omit(clause.Associations).Create(&row).Error; err != nil {
				if err := dbErr(err); errors.Is(err, ErrDuplicate) {
					return fmt.Errorf("session %s already exists (Load it; Save inserts only sessions with Version 0): %w", sess.ID, ErrDuplicate)
				}
				return dbErr(err)
			}
			lastSeq, msgCount, version = k, k, 1
		} else {
			tc, targs := ss.tenantCond("tenant_id")
			set, args, err := ss.s.sessionUpdateSet(&row)
			if err != nil {
				return err
			}
			args = append(args, k, k, row.ID, sess.Version)
			args = append(args, targs...)
			var ret struct {
				LastSeq, MessageCount, Version int64
				UpdatedAt                      dbTime
			}
			res := tx.Raw(`UPDATE `+ss.s.quoted(models.TableSessions)+` SET `+set+`,
 last_seq = last_seq + ?, message_count = message_count + ?, version = version + 1
 WHERE id = ? AND version = ?`+tc+` RETURNING last_seq, message_count, version, updated_at`, args...).Scan(&ret)
			if res.Error != nil {
				return dbErr(res.Error)
			}
			if res.RowsAffected == 0 {
				return ss.staleOrMissing(tx, sess.ID, sess.Version)
			}
			lastSeq, msgCount, version = ret.LastSeq, ret.MessageCount, ret.Version
			if ret.UpdatedAt.Valid && ret.UpdatedAt.T.After(row.UpdatedAt) {
				row.UpdatedAt = ret.UpdatedAt.T
			}
		}
		if k > 0 {
			rows := make([]models.Message, 0, k)
			base := lastSeq - k
			for j, i := range fresh {
				rows = append(rows, messageRow(sess.ID, base+int64(j)+1, &sess.Messages[i]))
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
	})
	unlock()
	if err != nil {
		return fmt.Errorf("save session %s: %w", sess.ID, dbErr(err))
	}
	base := lastSeq - k
	for j, i := range fresh {
		sess.Messages[i].Seq = base + int64(j) + 1
	}
	if ss.tenant != nil {
		sess.TenantID = *ss.tenant
	}
	sess.CreatedAt, sess.UpdatedAt = row.CreatedAt, row.UpdatedAt
	sess.Version, sess.LastSeq, sess.MessageCount = version, lastSeq, msgCount
	sess.MarkClean()
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
		rows = append(rows, models.Compact{ID: c.ID, SessionID: sess.ID, Trigger: string(trig), PreTokens: c.PreTokens,
			PostTokens: c.PostTokens, SavedTokens: c.SavedTokens, Summary: c.Summary, OriginalCount: c.OriginalCount,
			NewCount: c.NewCount, LogicalParentID: c.LogicalParentID, CreatedAt: c.CreatedAt.UTC().Truncate(time.Microsecond)})
	}
	if len(rows) == 0 {
		return nil
	}
	err := tx.Omit(clause.Associations).Clauses(clause.OnConflict{Columns: []clause.Column{{Name: "id"}}, DoNothing: true}).
		CreateInBatches(rows, 200).Error
	return dbErr(err)
}

// Load implements repo.Sessions.
func (ss *sessionStore) Load(ctx context.Context, id uuid.UUID, opts ...repo.LoadOptions) (*repo.Session, error) {
	if ss.scopeErr != nil {
		return nil, ss.scopeErr
	}
	var o repo.LoadOptions
	switch len(opts) {
	case 0:
	case 1:
		o = opts[0]
	default:
		return nil, invalidf("load session %s: at most one LoadOptions", id)
	}
	if o.AfterSeq < 0 || o.BeforeSeq < 0 || o.Limit < 0 || o.LastN < 0 {
		return nil, invalidf("load session %s: negative load option", id)
	}
	if o.Limit > 0 && o.LastN > 0 {
		return nil, invalidf("load session %s: Limit and LastN are mutually exclusive", id)
	}
	var out *repo.Session
	run := func(tx *gorm.DB) error {
		var err error
		out, err = ss.loadTx(tx, id, o)
		return err
	}
	// One snapshot where the database has snapshot reads; without
	// (SQLite: a transaction would take the write lock) the messages are
	// still bounded by the session row's last_seq, so they match it.
	err := ss.s.readTx(ss.db(ctx), run)
	if err != nil {
		return nil, fmt.Errorf("load session %s: %w", id, dbErr(err))
	}
	out.MarkClean()
	return out, nil
}

// loadTx reads the session and its child rows with tx (Load's queries).
func (ss *sessionStore) loadTx(tx *gorm.DB, id uuid.UUID, o repo.LoadOptions) (*repo.Session, error) {
	var row models.Session
	q := tx.Where("id = ?", id)
	if ss.tenant != nil {
		q = q.Where("tenant_id = ?", *ss.tenant)
	}
	if err := q.Take(&row).Error; err != nil {
		return nil, dbErr(err)
	}
	sess, err := sessionFromRow(&row)
	if err != nil {
		return nil, err
	}
	if sess.Messages, err = ss.loadMessages(tx, &row, o); err != nil {
		return nil, err
	}
	if sess.CompactHistory, err = loadCompacts(tx, id); err != nil {
		return nil, err
	}
	if sess.Todos, err = loadTodos(tx, id); err != nil {
		return nil, err
	}
	if sess.CurrentPlan, err = ss.loadCurrentPlan(tx, id); err != nil {
		return nil, err
	}
	return sess, nil
}

// messageCols are the columns of a message read, in scanMessages's order
// ("usage" quoted: it is a reserved word in some SQL dialects).
const messageCols = `seq, id, parent_id, role, content, is_sidechain, is_compact_summary, "usage", metadata, model, request_id, environment, created_at`

// loadMessages reads the messages selected by o in one query, ordered by seq.
func (ss *sessionStore) loadMessages(tx *gorm.DB, row *models.Session, o repo.LoadOptions) ([]repo.Message, error) {
	mt := ss.s.quoted(models.TableMessages)
	var b strings.Builder
	var args []any
	if o.CurrentBranch {
		if row.CurrentLeafID == nil {
			return []repo.Message{}, nil
		}
		b.WriteString(`WITH RECURSIVE branch(seq, parent_id, depth) AS (
 SELECT seq, parent_id, 0 FROM ` + mt + ` WHERE session_id = ? AND id = ?
 UNION ALL
 SELECT m.seq, m.parent_id, b.depth + 1 FROM ` + mt + ` m JOIN branch b ON m.session_id = ? AND m.id = b.parent_id
 WHERE b.depth < ?) `)
		args = append(args, row.ID, *row.CurrentLeafID, row.ID, row.MessageCount+1)
	}
	b.WriteString("SELECT " + messageCols + " FROM " + mt + " WHERE session_id = ? AND seq <= ?")
	args = append(args, row.ID, row.LastSeq)
	if o.CurrentBranch {
		b.WriteString(" AND seq IN (SELECT seq FROM branch)")
	}
	if o.AfterSeq > 0 {
		b.WriteString(" AND seq > ?")
		args = append(args, o.AfterSeq)
	}
	if o.BeforeSeq > 0 {
		b.WriteString(" AND seq < ?")
		args = append(args, o.BeforeSeq)
	}
	switch {
	case o.LastN > 0:
		b.WriteString(" ORDER BY seq DESC LIMIT ?")
		args = append(args, o.LastN)
	case o.Limit > 0:
		b.WriteString(" ORDER BY seq LIMIT ?")
		args = append(args, o.Limit)
	default:
		b.WriteString(" ORDER BY seq")
	}
	capHint := row.MessageCount
	if o.LastN > 0 && int64(o.LastN) < capHint {
		capHint = int64(o.LastN)
	}
	if o.Limit > 0 && int64(o.Limit) < capHint {
		capHint = int64(o.Limit)
	}
	rows, err := tx.Raw(b.String(), args...).Rows()
	if err != nil {
		return nil, dbErr(err)
	}
	defer rows.Close()
	msgs, err := scanMessages(rows, row.ID, capHint, ss.s.has(CapValidatedJSON))
	err = translateVia(ss.s.db, err)
	if err != nil {
		return nil, err
	}
	if o.LastN > 0 {
		for i, j := 0, len(msgs)-1; i < j; i, j = i+1, j-1 {
			msgs[i], msgs[j] = msgs[j], msgs[i]
		}
	}
	return msgs, nil
}

// scanMessages decodes message rows; a row it cannot decode is a
// *CorruptRowError. trusted is true on PostgreSQL, whose json and jsonb
// columns only ever hold valid JSON, so the documents are not re-validated.
func scanMessages(rows *sql.Rows, sessionID uuid.UUID, capHint int64, trusted bool) ([]repo.Message, error) {
	msgs := make([]repo.Message, 0, min(capHint, 100000))
	var (
		parent, model, reqID      sql.NullString
		role                      string
		content, usage, meta, env []byte
		sidechain, compact        bool
		created                   dbTime
	)
	rowID := func(seq int64) string { return fmt.Sprintf("%s/%d", sessionID, seq) }
	for rows.Next() {
		var m repo.Message
		if err := rows.Scan(&m.Seq, &m.ID, &parent, &role, &content, &sidechain, &compact, &usage, &meta,
			&model, &reqID, &env, &created); err != nil {
			return nil, dbErr(err)
		}
		switch role {
		case "user":
			m.Role = repo.RoleUser
		case "assistant":
			m.Role = repo.RoleAssistant
		default:
			r, err := repo.ParseRole(role)
			if err != nil {
				return nil, corrupt(models.TableMessages, rowID(m.Seq), "role", err)
			}
			m.Role = r
		}
		if !trusted && !json.Valid(content) {
			return nil, corrupt(models.TableMessages, rowID(m.Seq), "content", errors.New("invalid JSON"))
		}
		m.Content = json.RawMessage(content)
		if len(usage) > 0 && string(usage) != "null" {
			u, err := decodeUsage(usage)
			if err != nil {
				return nil, corrupt(models.TableMessages, rowID(m.Seq), "usage", err)
			}
			m.Usage = u
		}
		if len(meta) > 0 {
			if !trusted && !json.Valid(meta) {
				return nil, corrupt(models.TableMessages, rowID(m.Seq), "metadata", errors.New("invalid JSON"))
			}
			m.Metadata = json.RawMessage(meta)
		}
		if len(env) > 0 {
			if !trusted && !json.Valid(env) {
				return nil, corrupt(models.TableMessages, rowID(m.Seq), "environment", errors.New("invalid JSON"))
			}
			m.Environment = json.RawMessage(env)
		}
		if parent.Valid {
			p := parent.String
			m.ParentID = &p
		}
		if model.Valid {
			v := model.String
			m.Model = &v
		}
		if reqID.Valid {
			v := reqID.String
			m.RequestID = &v
		}
		m.IsSidechain, m.IsCompactSummary = sidechain, compact
		m.CreatedAt = created.T
		msgs = append(msgs, m)
		content, usage, meta, env = nil, nil, nil, nil
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr(err)
	}
	return msgs, nil
}

// decodeUsage decodes a stored TokenUsage document. The common shape, a
// flat object of the four known keys with non-negative integer values (as
// written by the store, or as reformatted by jsonb), is parsed by hand; any
// other document goes through encoding/json, whose error makes the row
// corrupt.
func decodeUsage(b []byte) (*repo.TokenUsage, error) {
	if u, ok := fastUsage(b); ok {
		return u, nil
	}
	var u repo.TokenUsage
	if err := json.Unmarshal(b, &u); err != nil {
		return nil, err
	}
	return &u, nil
}

func fastUsage(b []byte) (*repo.TokenUsage, bool) {
	u := &repo.TokenUsage{}
	i := 0
	ws := func() {
		for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
			i++
		}
	}
	ws()
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	i++
	for {
		ws()
		if i < len(b) && b[i] == '}' {
			i++
			ws()
			return u, i == len(b)
		}
		if i >= len(b) || b[i] != '"' {
			return nil, false
		}
		j := i + 1
		for j < len(b) && b[j] != '"' && b[j] != '\\' {
			j++
		}
		if j >= len(b) || b[j] != '"' {
			return nil, false
		}
		key := string(b[i+1 : j])
		i = j + 1
		ws()
		if i >= len(b) || b[i] != ':' {
			return nil, false
		}
		i++
		ws()
		start := i
		var v int64
		for i < len(b) && b[i] >= '0' && b[i] <= '9' && i-start < 18 {
			v = v*10 + int64(b[i]-'0')
			i++
		}
		if i == start || (i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E' || (b[i] >= '0' && b[i] <= '9'))) {
			return nil, false
		}
		switch key {
		case "input_tokens":
			u.InputTokens = v
		case "output_tokens":
			u.OutputTokens = v
		case "cache_read_input_tokens":
			u.CacheReadInputTokens = v
		case "cache_creation_input_tokens":
			u.CacheCreationInputTokens = v
		default:
			return nil, false
		}
		ws()
		if i < len(b) && b[i] == ',' {
			i++
			ws()
			if i >= len(b) || b[i] != '"' {
				return nil, false
			}
		}
	}
}

func loadCompacts(tx *gorm.DB, id uuid.UUID) ([]repo.CompactRecord, error) {
	var rows []models.Compact
	if err := tx.Where("session_id = ?", id).Order("created_at, id").Find(&rows).Error; err != nil {
		return nil, dbErr(err)
	}
	out := make([]repo.CompactRecord, 0, len(rows))
	for _, r := range rows {
		trig, err := repo.ParseCompactTrigger(r.Trigger)
		if err != nil {
			return nil, corrupt(models.TableCompacts, r.ID.String(), "trigger", err)
		}
		out = append(out, repo.CompactRecord{ID: r.ID, SessionID: r.SessionID, Trigger: trig, PreTokens: r.PreTokens,
			PostTokens: r.PostTokens, SavedTokens: r.SavedTokens, Summary: r.Summary, OriginalCount: r.OriginalCount,
			NewCount: r.NewCount, LogicalParentID: r.LogicalParentID, CreatedAt: r.CreatedAt.UTC()})
	}
	return out, nil
}

func loadTodos(tx *gorm.DB, id uuid.UUID) ([]repo.TodoItem, error) {
	var rows []models.Todo
	if err := tx.Where("session_id = ?", id).Order("position, created_at, id").Find(&rows).Error; err != nil {
		return nil, dbErr(err)
	}
	out := make([]repo.TodoItem, 0, len(rows))
	for _, r := range rows {
		st, err := repo.ParseTodoStatus(r.Status)
		if err != nil {
			return nil, corrupt(models.TableTodos, r.ID.String(), "status", err)
		}
		out = append(out, repo.TodoItem{ID: r.ID, SessionID: r.SessionID, Content: r.Content, ActiveForm: r.ActiveForm,
			Status: st, PlanID: r.PlanID, CreatedAt: r.CreatedAt.UTC(), StartedAt: utcPtr(r.StartedAt),
			CompletedAt: utcPtr(r.CompletedAt)})
	}
	return out, nil
}

func planFromRow(r *models.Plan) (repo.Plan, error) {
	st, err := repo.ParsePlanStatus(r.Status)
	if err != nil {
		return repo.Plan{}, corrupt(models.TablePlans, r.ID.String(), "status", err)
	}
	return repo.Plan{ID: r.ID, SessionID: r.SessionID, Name: r.Name, Content: r.Content, Status: st, Error: r.Error,
		CreatedAt: r.CreatedAt.UTC(), ApprovedAt: utcPtr(r.ApprovedAt), StartedAt: utcPtr(r.StartedAt),
		CompletedAt: utcPtr(r.CompletedAt)}, nil
}

// loadCurrentPlan returns the active plan. Rows with an unknown status are
// read too, so they surface as corrupt instead of being ignored.
func (ss *sessionStore) loadCurrentPlan(tx *gorm.DB, id uuid.UUID) (*repo.Plan, error) {
	var rows []models.Plan
	if err := tx.Where("session_id = ? AND status NOT IN ?", id, terminalPlanStatuses()).
		Order("created_at DESC, id DESC").Find(&rows).Error; err != nil {
		return nil, dbErr(err)
	}
	var cur *repo.Plan
	for i := range rows {
		p, err := planFromRow(&rows[i])
		if err != nil {
			return nil, err
		}
		if cur == nil {
			cur = &p
		}
	}
	return cur, nil
}

// Delete implements repo.Sessions.
func (ss *sessionStore) Delete(ctx context.Context, id uuid.UUID) (bool, error) {
	if ss.scopeErr != nil {
		return false, ss.scopeErr
	}
	q := ss.db(ctx).Where("id = ?", id)
	if ss.tenant != nil {
		q = q.Where("tenant_id = ?", *ss.tenant)
	}
	defer ss.writeLock(ctx)()
	res := q.Delete(&models.Session{})
	if res.Error != nil {
		return false, fmt.Errorf("delete session %s: %w", id, dbErr(res.Error))
	}
	return res.RowsAffected > 0, nil
}

// List implements repo.Sessions.
func (ss *sessionStore) List(ctx context.Context, p repo.ListParams) (repo.ListPage, error) {
	if ss.scopeErr != nil {
		return repo.ListPage{}, ss.scopeErr
	}
	limit := p.Limit
	switch {
	case limit < 0 || limit > repo.MaxListLimit:
		return repo.ListPage{}, invalidf("list sessions: limit %d outside 0..%d", limit, repo.MaxListLimit)
	case limit == 0:
		limit = repo.DefaultListLimit
	}
	order := p.Order
	switch order {
	case "", repo.OrderUpdated:
		order = repo.OrderUpdated
	case repo.OrderCreated:
	default:
		return repo.ListPage{}, invalidf("list sessions: unknown order %q", clip(string(order)))
	}
	tenant := p.TenantID
	if ss.tenant != nil {
		tenant = ss.tenant
	}
	if tenant != nil {
		if err := checkText("tenant id", *tenant, repo.MaxIDLen); err != nil {
			return repo.ListPage{}, fmt.Errorf("list sessions: %w", err)
		}
	}
	q := ss.db(ctx).Model(&models.Session{}).Select("id", "tenant_id", "parent_id", "session_type", "state", "created_at", "updated_at")
	switch {
	case tenant != nil && *tenant == "":
		q = q.Where("tenant_id IS NULL")
	case tenant != nil:
		q = q.Where("tenant_id = ?", *tenant)
	}
	if len(p.States) > 0 {
		states := make([]string, len(p.States))
		for i, st := range p.States {
			v, err := repo.ParseSessionState(string(st))
			if err != nil {
				return repo.ListPage{}, fmt.Errorf("list sessions: %w", err)
			}
			states[i] = string(v)
		}
		q = q.Where("state IN ?", states)
	}
	if p.Kind != "" {
		k, err := repo.ParseSessionKind(string(p.Kind))
		if err != nil {
			return repo.ListPage{}, fmt.Errorf("list sessions: %w", err)
		}
		q = q.Where("session_type = ?", string(k))
	}
	if p.ParentID != nil {
		q = q.Where("parent_id = ?", *p.ParentID)
	}
	if p.UpdatedFrom != nil {
		q = q.Where("updated_at >= ?", p.UpdatedFrom.UTC().Truncate(time.Microsecond))
	}
	if p.UpdatedBefore != nil {
		q = q.Where("updated_at < ?", p.UpdatedBefore.UTC().Truncate(time.Microsecond))
	}
	col := "updated_at"
	if order == repo.OrderCreated {
		col = "created_at"
	}
	if p.After != nil {
		at := p.After.UpdatedAt
		if order == repo.OrderCreated {
			at = p.After.CreatedAt
		}
		if at.IsZero() {
			return repo.ListPage{}, invalidf("list sessions: the cursor has no %s (a cursor of another order?)", col)
		}
		// A row-value comparison: one range of the (col, id) index.
		q = q.Where("("+col+", id) > (?, ?)", at.UTC().Truncate(time.Microsecond), p.After.ID)
	}
	q = q.Session(&gorm.Session{}) // reused by fetch
	fetch := func(n int) ([]listRow, error) {
		rows, err := q.Order(col + ", id").Limit(n).Rows()
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		out := make([]listRow, 0, n)
		for rows.Next() {
			var r listRaw
			if err := rows.Scan(&r.id, &r.tenant, &r.parent, &r.kind, &r.state, &r.created, &r.updated); err != nil {
				return nil, err
			}
			out = append(out, r.decode(order))
		}
		return out, rows.Err()
	}
	// A page is at most limit rows (sessions and corrupt rows together),
	// and ends on a row whose order key reads, so the next page can start
	// after it; a run of limit rows or more whose keys do not read is
	// returned whole (see repo.Sessions.List).
	n := limit + 1
	var rows []listRow
	cut := 0
	for {
		var err error
		if rows, err = fetch(n); err != nil {
			return repo.ListPage{}, fmt.Errorf("list sessions: %w", dbErr(err))
		}
		cut = min(len(rows), limit)
		if len(rows) <= cut {
			break // the last page
		}
		j := cut
		for j > 0 && !rows[j-1].keyOK {
			j--
		}
		if j > 0 {
			cut = j
			break
		}
		k := cut
		for k < len(rows) && !rows[k].keyOK {
			k++
		}
		if k < len(rows) {
			cut = k + 1
			break
		}
		if len(rows) < n {
			cut = len(rows) // the rest of the table: the last page
			break
		}
		n *= 2
	}
	page := repo.ListPage{Sessions: make([]repo.SessionRef, 0, cut)}
	var bad corruptRows
	for _, r := range rows[:cut] {
		if r.bad != nil {
			bad = append(bad, r.bad)
			continue
		}
		page.Sessions = append(page.Sessions, r.ref)
	}
	if cut < len(rows) || cut == n {
		last := rows[cut-1].ref
		page.Next = &repo.Cursor{UpdatedAt: last.UpdatedAt, CreatedAt: last.CreatedAt, ID: last.ID}
	}
	if len(bad) > 0 {
		page.Corrupt = bad
		return page, fmt.Errorf("list sessions: %w", bad)
	}
	return page, nil
}

// listRaw is one row of List as stored, each column scanned on its own so
// one value that does not decode spoils only its row.
type listRaw struct {
	id, tenant, parent, kind, state sql.NullString
	created, updated                sql.NullTime
}

// listRow is a decoded row of List: the session, or the reason it cannot
// be decoded, and whether its order key (timestamp of the order, id) read,
// so that a cursor can follow it.
type listRow struct {
	ref   repo.SessionRef
	bad   *CorruptRowError
	keyOK bool
}

// decode decodes r for List in order.
func (r *listRaw) decode(order repo.ListOrder) listRow {
	var out listRow
	fail := func(column string, err error) {
		if out.bad == nil {
			out.bad = corrupt(models.TableSessions, r.id.String, column, err).(*CorruptRowError)
		}
	}
	id, err := uuid.Parse(r.id.String)
	if err != nil {
		fail("id", fmt.Errorf("id %q is not a UUID", clip(r.id.String)))
	}
	out.ref.ID = id
	at := func(column string, v sql.NullTime) time.Time {
		if !v.Valid || v.Time.IsZero() {
			fail(column, errors.New("timestamp cannot be read"))
			return time.Time{}
		}
		return v.Time.UTC()
	}
	out.ref.CreatedAt, out.ref.UpdatedAt = at("created_at", r.created), at("updated_at", r.updated)
	key := out.ref.UpdatedAt
	if order == repo.OrderCreated {
		key = out.ref.CreatedAt
	}
	out.keyOK = err == nil && !key.IsZero()
	if kind, err := repo.ParseSessionKind(r.kind.String); err != nil {
		fail("session_type", err)
	} else {
		out.ref.Kind = kind
	}
	if state, err := repo.ParseSessionState(r.state.String); err != nil {
		fail("state", err)
	} else {
		out.ref.State = state
	}
	if r.parent.Valid {
		if p, err := uuid.Parse(r.parent.String); err != nil {
			fail("parent_id", fmt.Errorf("parent id %q is not a UUID", clip(r.parent.String)))
		} else {
			out.ref.ParentID = &p
		}
	}
	out.ref.TenantID = r.tenant.String
	return out
}

// corruptRows is the error of a List page holding undecodable rows: it
// names each and matches ErrCorruptRow (errors.As finds the first
// *CorruptRowError).
type corruptRows []*CorruptRowError

func (e corruptRows) Error() string {
	var b strings.Builder
	if len(e) == 1 {
		b.WriteString("1 row of the page cannot be decoded")
	} else {
		fmt.Fprintf(&b, "%d rows of the page cannot be decoded", len(e))
	}
	b.WriteString(" (listed in ListPage.Corrupt; the page's other rows and its Next cursor are complete): ")
	for i, c := range e {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(c.Error())
	}
	return b.String()
}

func (e corruptRows) Unwrap() []error {
	out := make([]error, len(e))
	for i, c := range e {
		out[i] = c
	}
	return out
}

// ListChildren implements repo.Sessions.
func (ss *sessionStore) ListChildren(ctx context.Context, parentID uuid.UUID) ([]uuid.UUID, error) {
	if ss.scopeErr != nil {
		return nil, ss.scopeErr
	}
	q := ss.db(ctx).Model(&models.Session{}).Where("parent_id = ?", parentID)
	if ss.tenant != nil {
		q = q.Where("tenant_id = ?", *ss.tenant)
	}
	ids := []uuid.UUID{}
	if err := q.Order("created_at, id").Pluck("id", &ids).Error; err != nil {
		return nil, fmt.Errorf("list children of %s: %w", parentID, dbErr(err))
	}
	return ids, nil
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

// childPage runs the keyset query of one page of a child table (or of
// child sessions): rows of q after the cursor c in (created_at, id)
// order, at most limit+1 of them into dest.
func childPage(q *gorm.DB, c *pageCursor, limit int, dest any) error {
	if c != nil {
		id, err := uuid.Parse(c.ID)
		if err != nil || c.T.IsZero() {
			return invalidf("page cursor holds no (created_at, id)")
		}
		// A row-value comparison: one range of the (.., created_at, id) index.
		q = q.Where("(created_at, id) > (?, ?)", c.T.UTC(), id)
	}
	return q.Order("created_at, id").Limit(limit + 1).Find(dest).Error
}

// ListChildrenPage implements repo.Sessions.
func (ss *sessionStore) ListChildrenPage(ctx context.Context, parentID uuid.UUID, p repo.PageParams) ([]uuid.UUID, string, error) {
	if ss.scopeErr != nil {
		return nil, "", ss.scopeErr
	}
	limit, err := pageLimit(p)
	if err != nil {
		return nil, "", fmt.Errorf("list children of %s: %w", parentID, err)
	}
	c, err := decodeCursor(p, curChildren)
	if err != nil {
		return nil, "", fmt.Errorf("list children of %s: %w", parentID, err)
	}
	q := ss.db(ctx).Model(&models.Session{}).Select("id", "created_at").Where("parent_id = ?", parentID)
	if ss.tenant != nil {
		q = q.Where("tenant_id = ?", *ss.tenant)
	}
	var rows []models.Session
	if err := childPage(q, c, limit, &rows); err != nil {
		return nil, "", fmt.Errorf("list children of %s: %w", parentID, dbErr(err))
	}
	next := ""
	if len(rows) > limit {
		rows = rows[:limit]
		last := rows[limit-1]
		next = encodeCursor(pageCursor{Kind: curChildren, T: last.CreatedAt.UTC(), ID: last.ID.String()})
	}
	ids := make([]uuid.UUID, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	return ids, next, nil
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
	if err := childPage(db.Where("session_id = ?"+tc, append([]any{sessionID}, targs...)...), c, limit, &rows); err != nil {
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
	out := make([]repo.SummarySnapshot, 0, len(rows))
	for _, r := range rows {
		out = append(out, repo.SummarySnapshot{ID: r.ID, SessionID: r.SessionID, Summary: r.Summary,
			LeafMessageID: r.LeafMessageID, CreatedAt: r.CreatedAt.UTC()})
	}
	return out, next, nil
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
	if err := childPage(db.Where("session_id = ?"+tc, append([]any{sessionID}, targs...)...), c, limit, &rows); err != nil {
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
