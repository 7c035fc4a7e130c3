package engine

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

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

// loadOptions returns the one LoadOptions of a Load or LoadBranch call
// (the zero value for none), or why they are refused (more than one, a
// negative field, Limit with LastN): the caller's ErrInvalidInput.
func loadOptions(opts []repo.LoadOptions) (o repo.LoadOptions, refused string) {
	switch len(opts) {
	case 0:
	case 1:
		o = opts[0]
	default:
		return o, "at most one LoadOptions"
	}
	if o.AfterSeq < 0 || o.BeforeSeq < 0 || o.Limit < 0 || o.LastN < 0 {
		return o, "negative load option"
	}
	if o.Limit > 0 && o.LastN > 0 {
		return o, "Limit and LastN are mutually exclusive"
	}
	return o, ""
}

// Load implements repo.Sessions.
func (ss *sessionStore) Load(ctx context.Context, id uuid.UUID, opts ...repo.LoadOptions) (*repo.Session, error) {
	if ss.scopeErr != nil {
		return nil, ss.scopeErr
	}
	o, refused := loadOptions(opts)
	if refused != "" {
		return nil, invalidf("load session %s: %s", id, refused)
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
	if sess.Summary != nil {
		v, err := ss.s.openString(models.TableSessions, encSummary, sess.ID, "", *sess.Summary)
		if err != nil {
			return nil, err
		}
		sess.Summary = &v
	}
	if sess.Messages, err = ss.loadMessages(tx, &row, o); err != nil {
		return nil, err
	}
	if sess.CompactHistory, err = loadCompacts(tx, id); err != nil {
		return nil, err
	}
	for i := range sess.CompactHistory {
		c := &sess.CompactHistory[i]
		if c.Summary, err = ss.s.openString(models.TableCompacts, encSummary, id, c.ID.String(), c.Summary); err != nil {
			return nil, err
		}
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
	msgs, err := ss.s.scanMessages(rows, row.ID, capHint, ss.s.has(CapValidatedJSON))
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
func (s *Store) scanMessages(rows *sql.Rows, sessionID uuid.UUID, capHint int64, trusted bool) ([]repo.Message, error) {
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
		var (
			m   repo.Message
			err error
		)
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
		if maybeEnvelope(content) {
			if content, err = s.openValue(models.TableMessages, encMsgContent, sessionID, m.ID, content); err != nil {
				return nil, err
			}
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
			if maybeEnvelope(meta) {
				if meta, err = s.openValue(models.TableMessages, encMsgMetadata, sessionID, m.ID, meta); err != nil {
					return nil, err
				}
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
