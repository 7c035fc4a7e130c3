package repo

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"
)

// Input limits of the session store. Every limit is in bytes and is checked
// before any SQL runs; a longer value is ErrInvalidInput on every dialect.
const (
	// MaxIDLen bounds message ids, parent ids, leaf ids, tenant ids, lease
	// owners, request ids and agent types.
	MaxIDLen = 255
	// MaxModelLen bounds Message.Model (a varchar(64) column).
	MaxModelLen = 64
	// MaxHashLen bounds Session.StaticContextHash (a varchar(64) column).
	MaxHashLen = 64
	// MaxIdempotencyKeyLen bounds EnqueueParams.IdempotencyKey.
	MaxIdempotencyKeyLen = 255
	// MaxCostIntegerDigits and MaxCostFractionDigits bound
	// Session.TotalCostUSD: PostgreSQL numeric's integer-digit limit, and
	// the fraction digits shopspring/decimal decodes by default
	// (decimal.MaxDecodeExponent; numeric itself allows 16383). A value
	// with more digits before or after the decimal point is ErrInvalidInput
	// before any SQL. Every value within them round-trips exactly, digit
	// for digit and with its scale (1.10 stays 1.10), on every dialect.
	MaxCostIntegerDigits  = 131072
	MaxCostFractionDigits = 10000
)

// SessionState is the lifecycle state of a session.
type SessionState string

// The session states, stored as these snake_case strings.
const (
	StateCreated         SessionState = "created"
	StateActive          SessionState = "active"
	StateWaitingForTools SessionState = "waiting_for_tools"
	StateCompleted       SessionState = "completed"
	StateFailed          SessionState = "failed"
	StateCancelled       SessionState = "cancelled"
)

func norm(s string) string { return strings.ToLower(strings.TrimSpace(s)) }

func unknown(kind, v string) error {
	if len(v) > 64 {
		v = v[:64] + "..."
	}
	return fmt.Errorf("%w: unknown %s %q", ErrInvalidInput, kind, v)
}

// ParseSessionState parses s case-insensitively. It also accepts the
// spellings "waitingfortools" and "canceled"; any other unknown value is
// ErrInvalidInput.
func ParseSessionState(s string) (SessionState, error) {
	switch norm(s) {
	case "created":
		return StateCreated, nil
	case "active":
		return StateActive, nil
	case "waiting_for_tools", "waitingfortools":
		return StateWaitingForTools, nil
	case "completed":
		return StateCompleted, nil
	case "failed":
		return StateFailed, nil
	case "cancelled", "canceled":
		return StateCancelled, nil
	}
	return "", unknown("session state", s)
}

// IsRunning reports whether the state is active or waiting_for_tools.
func (s SessionState) IsRunning() bool { return s == StateActive || s == StateWaitingForTools }

// IsTerminal reports whether the state is completed, failed or cancelled.
func (s SessionState) IsTerminal() bool {
	return s == StateCompleted || s == StateFailed || s == StateCancelled
}

// SessionKind says whether a session is a main session or a subagent.
type SessionKind string

// The session kinds.
const (
	KindMain     SessionKind = "main"
	KindSubagent SessionKind = "subagent"
)

// ParseSessionKind parses "main" or "subagent" (case-insensitively).
func ParseSessionKind(s string) (SessionKind, error) {
	switch norm(s) {
	case "main":
		return KindMain, nil
	case "subagent":
		return KindSubagent, nil
	}
	return "", unknown("session type", s)
}

// SessionType says whether a session is a main session or a subagent
// session: Main, or Subagent with an agent type and a description. It is stored as three columns
// (session_type, agent_type, agent_description), so a subagent session
// round-trips exactly. The zero value is Main.
type SessionType struct {
	Kind        SessionKind // "" is treated as KindMain
	AgentType   string      // subagent only, at most MaxIDLen bytes
	Description string      // subagent only
}

// Role is the author of a message.
type Role string

// The message roles. System and tool are the roles of OpenAI-style chat
// APIs (a system prompt, a tool result); the store keeps them like any
// other message.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleSystem    Role = "system"
	RoleTool      Role = "tool"
)

// ParseRole parses "user", "assistant", "system" or "tool"
// (case-insensitively).
func ParseRole(s string) (Role, error) {
	switch norm(s) {
	case "user":
		return RoleUser, nil
	case "assistant":
		return RoleAssistant, nil
	case "system":
		return RoleSystem, nil
	case "tool":
		return RoleTool, nil
	}
	return "", unknown("role", s)
}

// PlanStatus is the lifecycle status of a plan.
type PlanStatus string

// The plan statuses.
const (
	PlanDraft     PlanStatus = "draft"
	PlanApproved  PlanStatus = "approved"
	PlanExecuting PlanStatus = "executing"
	PlanCompleted PlanStatus = "completed"
	PlanFailed    PlanStatus = "failed"
	PlanCancelled PlanStatus = "cancelled"
)

// ParsePlanStatus parses s case-insensitively; it also accepts
// "inprogress" and "in_progress" for executing and "canceled".
func ParsePlanStatus(s string) (PlanStatus, error) {
	switch norm(s) {
	case "draft":
		return PlanDraft, nil
	case "approved":
		return PlanApproved, nil
	case "executing", "inprogress", "in_progress":
		return PlanExecuting, nil
	case "completed":
		return PlanCompleted, nil
	case "failed":
		return PlanFailed, nil
	case "cancelled", "canceled":
		return PlanCancelled, nil
	}
	return "", unknown("plan status", s)
}

// IsTerminal reports whether the plan is completed, failed or cancelled.
func (p PlanStatus) IsTerminal() bool {
	return p == PlanCompleted || p == PlanFailed || p == PlanCancelled
}

// TodoStatus is the status of a todo item.
type TodoStatus string

// The todo statuses.
const (
	TodoPending    TodoStatus = "pending"
	TodoInProgress TodoStatus = "in_progress"
	TodoCompleted  TodoStatus = "completed"
)

// ParseTodoStatus parses s case-insensitively; it also accepts
// "inprogress" and "done".
func ParseTodoStatus(s string) (TodoStatus, error) {
	switch norm(s) {
	case "pending":
		return TodoPending, nil
	case "in_progress", "inprogress":
		return TodoInProgress, nil
	case "completed", "done":
		return TodoCompleted, nil
	}
	return "", unknown("todo status", s)
}

// QueueStatus is the status of a queue item.
type QueueStatus string

// The queue statuses. Processing items carry a lease; completed, failed
// and cancelled items are finished (never dequeued again).
const (
	QueuePending    QueueStatus = "pending"
	QueueProcessing QueueStatus = "processing"
	QueueCompleted  QueueStatus = "completed"
	QueueFailed     QueueStatus = "failed"
	QueueCancelled  QueueStatus = "cancelled"
)

// ParseQueueStatus parses s case-insensitively (also "canceled").
func ParseQueueStatus(s string) (QueueStatus, error) {
	switch norm(s) {
	case "pending":
		return QueuePending, nil
	case "processing":
		return QueueProcessing, nil
	case "completed":
		return QueueCompleted, nil
	case "failed":
		return QueueFailed, nil
	case "cancelled", "canceled":
		return QueueCancelled, nil
	}
	return "", unknown("queue status", s)
}

// CompactTrigger says what caused a compaction.
type CompactTrigger string

// The compaction triggers.
const (
	TriggerManual    CompactTrigger = "manual"
	TriggerAuto      CompactTrigger = "auto"
	TriggerThreshold CompactTrigger = "threshold"
)

// ParseCompactTrigger parses s case-insensitively; it also accepts
// "automatic" for auto.
func ParseCompactTrigger(s string) (CompactTrigger, error) {
	switch norm(s) {
	case "manual":
		return TriggerManual, nil
	case "auto", "automatic":
		return TriggerAuto, nil
	case "threshold":
		return TriggerThreshold, nil
	}
	return "", unknown("compact trigger", s)
}

// TokenUsage counts tokens, including the prompt-cache counters (cache
// creation and cache read input tokens).
type TokenUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
}

// Add returns u + v.
func (u TokenUsage) Add(v TokenUsage) TokenUsage {
	return TokenUsage{u.InputTokens + v.InputTokens, u.OutputTokens + v.OutputTokens,
		u.CacheReadInputTokens + v.CacheReadInputTokens, u.CacheCreationInputTokens + v.CacheCreationInputTokens}
}

// Message is one message of a session. Content is the message's content
// as raw JSON: an array of content blocks, or a string (the plain-text
// shorthand); any other JSON value (a number, an object, true, false,
// null) is refused with ErrInvalidInput, and so is content larger than
// the Store's limit (agentstore.WithMaxContentBytes, default 8 MiB). It is
// kept byte for byte on every dialect (block types this version does not
// know survive; PostgreSQL stores it as json, not jsonb). Metadata, Environment and Usage are raw JSON documents
// kept semantically, not byte for byte: PostgreSQL's jsonb normalises them
// (keys sorted by length then bytes, duplicate keys collapsed to the last,
// whitespace dropped), SQLite keeps the bytes. CreatedAt is stored with
// microsecond precision in UTC.
type Message struct {
	// ID is the caller's message id, unique within the session (1 to
	// MaxIDLen bytes). Empty means "assign a new UUID" on append.
	ID string
	// Seq is the per-session sequence number, assigned by the store in the
	// appending transaction; 0 means not stored yet. Reads order by Seq.
	Seq              int64
	ParentID         *string
	Role             Role
	Content          json.RawMessage
	IsSidechain      bool
	IsCompactSummary bool
	Usage            *TokenUsage
	Metadata         json.RawMessage
	Model            *string // copied from the metadata by callers that want it indexed; at most MaxModelLen bytes
	RequestID        *string
	Environment      json.RawMessage
	CreatedAt        time.Time // zero = the store's clock at append
}

// CompactRecord records one compaction of a session's history.
type CompactRecord struct {
	ID              uuid.UUID // zero = assigned on save
	SessionID       uuid.UUID
	Trigger         CompactTrigger
	PreTokens       int64
	PostTokens      int64
	SavedTokens     int64
	Summary         string
	OriginalCount   int64
	NewCount        int64
	LogicalParentID *string
	CreatedAt       time.Time
}

// SummarySnapshot is one stored summary of a session.
type SummarySnapshot struct {
	ID            uuid.UUID // zero = assigned by AddSummary
	SessionID     uuid.UUID
	Summary       string
	LeafMessageID *string
	CreatedAt     time.Time // zero = the store's clock
}

// TodoItem is one todo of a session. Todos are replaced by id: saving a
// list updates items whose id is stored, inserts new ones and removes the
// session's other todos.
type TodoItem struct {
	ID          uuid.UUID // zero = assigned on save
	SessionID   uuid.UUID
	Content     string
	ActiveForm  string
	Status      TodoStatus
	PlanID      *uuid.UUID
	CreatedAt   time.Time
	StartedAt   *time.Time
	CompletedAt *time.Time
}

// Start marks the todo in progress at now.
func (t *TodoItem) Start(now time.Time) { t.Status = TodoInProgress; t.StartedAt = &now }

// Complete marks the todo completed at now.
func (t *TodoItem) Complete(now time.Time) { t.Status = TodoCompleted; t.CompletedAt = &now }

// Plan is a plan of a session. Plans are history rows: a session has at
// most one active (draft, approved or executing) plan, its CurrentPlan;
// finished plans keep their status and are listed by Sessions.Plans.
type Plan struct {
	ID          uuid.UUID // zero = assigned on save
	SessionID   uuid.UUID
	Name        *string
	Content     string
	Status      PlanStatus
	Error       *string
	CreatedAt   time.Time
	ApprovedAt  *time.Time
	StartedAt   *time.Time
	CompletedAt *time.Time
}

// Approve marks the plan approved at now.
func (p *Plan) Approve(now time.Time) { p.Status = PlanApproved; p.ApprovedAt = &now }

// StartExecution marks the plan executing at now.
func (p *Plan) StartExecution(now time.Time) { p.Status = PlanExecuting; p.StartedAt = &now }

// Complete marks the plan completed at now.
func (p *Plan) Complete(now time.Time) { p.Status = PlanCompleted; p.CompletedAt = &now }

// Fail marks the plan failed at now with reason.
func (p *Plan) Fail(now time.Time, reason string) {
	p.Status = PlanFailed
	p.CompletedAt = &now
	p.Error = &reason
}

// Cancel marks the plan cancelled at now.
func (p *Plan) Cancel(now time.Time) { p.Status = PlanCancelled; p.CompletedAt = &now }

// Session is the agent-session aggregate: the session row and, as loaded,
// its messages, compaction history, todos and current plan.
//
// Timestamps (CreatedAt, UpdatedAt, ExpiresAt and those of the messages,
// todos, plans, summaries and compaction records) are stored with
// microsecond precision and read back in UTC: a finer time is truncated on
// write. UpdatedAt never moves backwards: every write sets it to the later
// of the store's clock and the stored value. Config and Permissions are
// kept semantically (jsonb on PostgreSQL: keys may be reordered); message
// Content is byte-exact. TotalCostUSD is exact within MaxCostIntegerDigits
// and MaxCostFractionDigits.
//
// Version, LastSeq and MessageCount are maintained by the store: Save and
// the other writes update them in place. A Session is not safe for
// concurrent use.
type Session struct {
	ID                 uuid.UUID  // zero = assigned (UUIDv7) by the first Save
	ParentID           *uuid.UUID // parent session (subagents, forks)
	Type               SessionType
	TenantID           string       // "" = no tenant (stored as NULL); at most MaxIDLen bytes
	State              SessionState // "" = created
	Config             json.RawMessage
	Permissions        json.RawMessage
	Messages           []Message
	CurrentLeafID      *string
	Summary            *string
	TotalUsage         TokenUsage
	CurrentInputTokens int64
	TotalCostUSD       decimal.Decimal
	StaticContextHash  *string
	Error              *string
	Todos              []TodoItem
	CurrentPlan        *Plan
	CompactHistory     []CompactRecord
	CreatedAt          time.Time
	UpdatedAt          time.Time
	ExpiresAt          *time.Time // nil = never expires; CleanupExpired deletes sessions past it

	// Version is the optimistic-concurrency version: 0 for a session never
	// saved, then the stored row's version. Save with a stale Version
	// fails with ErrConflict.
	Version int64
	// LastSeq is the highest message sequence number the store assigned.
	LastSeq int64
	// MessageCount is the number of stored messages (all branches).
	MessageCount int64
	// ForkedFromSessionID and ForkedFromSeq record where Fork copied from.
	ForkedFromSessionID *uuid.UUID
	ForkedFromSeq       *int64

	clean *cleanState
}

// cleanState is what the store last read or wrote, so Save can write only
// what changed.
type cleanState struct {
	todos    []TodoItem
	compacts map[uuid.UUID]bool
	plan     *Plan
}

// NewSession returns a new main session in state created, with empty
// config and permissions documents.
func NewSession() *Session {
	return &Session{State: StateCreated, Config: json.RawMessage(`{}`), Permissions: json.RawMessage(`{}`)}
}

// NewSubagentSession returns a new subagent session whose parent is parentID.
func NewSubagentSession(parentID uuid.UUID, agentType, description string) *Session {
	s := NewSession()
	s.ParentID = &parentID
	s.Type = SessionType{Kind: KindSubagent, AgentType: agentType, Description: description}
	return s
}

// IsSubagent reports whether the session is a subagent session.
func (s *Session) IsSubagent() bool { return s.Type.Kind == KindSubagent }

// IsExpired reports whether ExpiresAt is set and before now.
func (s *Session) IsExpired(now time.Time) bool { return s.ExpiresAt != nil && s.ExpiresAt.Before(now) }

// AddMessage appends m to the session in memory: its ParentID
// becomes the current leaf (when there is one, unless m.ParentID is already
// set), it becomes the current leaf, and its usage is added to TotalUsage.
// Save writes it as one new row. An empty m.ID gets a new UUID.
func (s *Session) AddMessage(m Message) {
	if m.ID == "" {
		m.ID = uuid.NewString()
	}
	m.Seq = 0
	if m.ParentID == nil && s.CurrentLeafID != nil && !m.IsCompactSummary {
		p := *s.CurrentLeafID
		m.ParentID = &p
	}
	id := m.ID
	s.CurrentLeafID = &id
	if m.Usage != nil {
		s.TotalUsage = s.TotalUsage.Add(*m.Usage)
	}
	s.Messages = append(s.Messages, m)
}

// CurrentBranch returns the messages on the path from CurrentLeafID to the
// root through ParentID, oldest first, among the loaded messages. The walk
// stops at a missing parent or at a message already visited.
func (s *Session) CurrentBranch() []Message {
	if s.CurrentLeafID == nil {
		return nil
	}
	byID := make(map[string]int, len(s.Messages))
	for i, m := range s.Messages {
		byID[m.ID] = i
	}
	var out []Message
	seen := make(map[string]bool)
	id := *s.CurrentLeafID
	for !seen[id] { // a cycle of parent ids ends the walk
		seen[id] = true
		i, found := byID[id]
		if !found {
			break
		}
		out = append(out, s.Messages[i])
		if s.Messages[i].ParentID == nil {
			break
		}
		id = *s.Messages[i].ParentID
	}
	slices.Reverse(out)
	return out
}

// EnterPlanMode makes a new draft plan the current plan. A plan that was
// current and still active is recorded as cancelled by the next Save.
func (s *Session) EnterPlanMode(name, content string, now time.Time) *Plan {
	p := &Plan{ID: uuid.New(), SessionID: s.ID, Content: content, Status: PlanDraft, CreatedAt: now}
	if name != "" {
		p.Name = &name
	}
	s.CurrentPlan = p
	return p
}

// IsInPlanMode reports whether the current plan is a draft.
func (s *Session) IsInPlanMode() bool {
	return s.CurrentPlan != nil && s.CurrentPlan.Status == PlanDraft
}

// MarkClean records the session's todos, compaction records and current
// plan as stored. The store calls it after Load and Save so the next Save
// writes only what changed; callers do not need it.
func (s *Session) MarkClean() {
	c := &cleanState{todos: slices.Clone(s.Todos), compacts: make(map[uuid.UUID]bool, len(s.CompactHistory))}
	for _, r := range s.CompactHistory {
		c.compacts[r.ID] = true
	}
	if s.CurrentPlan != nil {
		p := *s.CurrentPlan
		c.plan = &p
	}
	s.clean = c
}

// Changes reports what Save has to write besides the session row and the
// new messages: whether the todos differ from the stored ones, which
// compaction records are new, and whether the current plan changed. A
// session never loaded or saved reports everything as changed.
func (s *Session) Changes() SessionChanges {
	c := s.clean
	if c == nil {
		return SessionChanges{Todos: true, NewCompacts: s.CompactHistory, Plan: true}
	}
	var ch SessionChanges
	ch.Todos = !slices.EqualFunc(c.todos, s.Todos, todoEqual)
	for _, r := range s.CompactHistory {
		if r.ID == uuid.Nil || !c.compacts[r.ID] {
			ch.NewCompacts = append(ch.NewCompacts, r)
		}
	}
	ch.Plan = !planEqual(c.plan, s.CurrentPlan)
	return ch
}

// SessionChanges is the result of Session.Changes.
type SessionChanges struct {
	Todos       bool
	NewCompacts []CompactRecord
	Plan        bool
}

func timePtrEqual(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}

func strPtrEqual(a, b *string) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func todoEqual(a, b TodoItem) bool {
	pa, pb := a.PlanID, b.PlanID
	planSame := (pa == nil && pb == nil) || (pa != nil && pb != nil && *pa == *pb)
	return a.ID == b.ID && a.Content == b.Content && a.ActiveForm == b.ActiveForm && a.Status == b.Status &&
		planSame && a.CreatedAt.Equal(b.CreatedAt) && timePtrEqual(a.StartedAt, b.StartedAt) &&
		timePtrEqual(a.CompletedAt, b.CompletedAt)
}

func planEqual(a, b *Plan) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.ID == b.ID && strPtrEqual(a.Name, b.Name) && a.Content == b.Content && a.Status == b.Status &&
		strPtrEqual(a.Error, b.Error) && a.CreatedAt.Equal(b.CreatedAt) && timePtrEqual(a.ApprovedAt, b.ApprovedAt) &&
		timePtrEqual(a.StartedAt, b.StartedAt) && timePtrEqual(a.CompletedAt, b.CompletedAt)
}

// QueueItem is one item of a session's durable queue.
type QueueItem struct {
	ID          uuid.UUID
	SessionID   uuid.UUID
	Seq         int64 // FIFO key within a priority
	Operation   string
	Content     string
	Priority    int32
	Status      QueueStatus
	Attempts    int32 // number of times the item was dequeued
	LeaseOwner  *string
	LeaseToken  *uuid.UUID
	LeasedUntil *time.Time // millisecond precision (stored as epoch milliseconds), UTC
	LastError   *string    // Fail's reason
	CreatedAt   time.Time  // microsecond precision, UTC
	ProcessedAt *time.Time // set by Complete, Fail and CancelQueued; microsecond precision, UTC
	// IdempotencyKey is the key EnqueueWith was given, nil for none.
	IdempotencyKey *string
}

// EnqueueParams is the input of SessionQueue.EnqueueWith.
type EnqueueParams struct {
	Content  string
	Priority int32
	// IdempotencyKey, when not empty (at most MaxIdempotencyKeyLen bytes),
	// is unique per session: enqueuing a key the session already holds
	// returns the stored item (in its current state) instead of adding one,
	// when Content and Priority equal the stored ones, and is ErrDuplicate
	// naming the key otherwise. A key stays taken after its item finished.
	IdempotencyKey string
}

// Lease returns the lease of a dequeued item, for Complete, Fail and Release.
func (q *QueueItem) Lease() Lease {
	l := Lease{ItemID: q.ID, SessionID: q.SessionID}
	if q.LeaseToken != nil {
		l.Token = *q.LeaseToken
	}
	if q.LeasedUntil != nil {
		l.Until = *q.LeasedUntil
	}
	return l
}

// Lease identifies one claim of a queue item. A new Dequeue of the same
// item (after the lease expired) issues a new token; the old lease is lost.
type Lease struct {
	ItemID uuid.UUID
	Token  uuid.UUID
	Until  time.Time
	// SessionID, when not uuid.Nil, is the item's session (QueueItem.Lease
	// sets it): Complete, Fail and Release then find the item by session
	// and id, a statement a distributed database (Citus) routes to the
	// session's shard. A lease naming another session than the item's is
	// ErrNotFound. uuid.Nil finds the item by id alone (on the Citus
	// route, a PostgreSQL Store with CapFastPaths switched off, the Store
	// whose Dequeue handed the lease out still pins its statement to the
	// session it remembers, until the lease ends through it; the outcome
	// is the same).
	SessionID uuid.UUID
}

// DequeueParams configures Dequeue.
type DequeueParams struct {
	// Owner names the worker (informational, at most MaxIDLen bytes).
	Owner string
	// Lease is how long the item stays claimed; 0 = DefaultLease.
	Lease time.Duration
	// Wait, when > 0, makes Dequeue wait up to Wait for a claimable item
	// when none is (an Enqueue or Release on any Store on the database, a
	// lease that expires) instead of returning nil at once; 0 returns at
	// once. At most MaxDequeueWait; a negative Wait, or a Wait inside a
	// transaction, is ErrInvalidInput.
	Wait time.Duration
}

// MaxDequeueWait is the longest DequeueParams.Wait.
const MaxDequeueWait = time.Hour

// DefaultLease is the lease duration Dequeue uses when none is given.
const DefaultLease = 5 * time.Minute

// LoadOptions narrows the messages Load returns; the zero value loads every
// message. Every option is served by one query on the (session_id, seq) key.
type LoadOptions struct {
	// AfterSeq keeps messages with Seq > AfterSeq (keyset paging forward).
	AfterSeq int64
	// BeforeSeq, when > 0, keeps messages with Seq < BeforeSeq.
	BeforeSeq int64
	// Limit, when > 0, keeps the first Limit messages (by seq) after the
	// other filters. Use with AfterSeq to page forward.
	Limit int
	// LastN, when > 0, keeps the last LastN messages (by seq) after the
	// other filters: the tail of the session, or a page backwards with
	// BeforeSeq. LastN and Limit are mutually exclusive.
	LastN int
	// CurrentBranch keeps only the messages on the path from the session's
	// current leaf to the root through ParentID (a recursive query).
	CurrentBranch bool
}

// ListOrder is the order of List.
type ListOrder string

// The orders of List.
const (
	// OrderUpdated (the default, "") orders by (updated_at, id): most
	// recently active last. A session updated during a walk moves to the
	// end, so a walk that updates what it visits sees sessions again.
	OrderUpdated ListOrder = "updated"
	// OrderCreated orders by (created_at, id), which no write changes: a
	// walk visits every session that existed when it started exactly once,
	// even while the visited sessions are updated.
	OrderCreated ListOrder = "created"
)

// Cursor is a keyset position in List's order: the (UpdatedAt, ID) or
// (CreatedAt, ID) of the last row of a page, whichever the order uses.
type Cursor struct {
	UpdatedAt time.Time
	CreatedAt time.Time
	ID        uuid.UUID
}

// ListParams selects sessions for List. Filters combine with AND.
type ListParams struct {
	// TenantID, when not nil, keeps that tenant's sessions; a pointer to
	// "" keeps the sessions without a tenant; nil lists every tenant. A tenant-scoped view ignores it and
	// uses its own tenant.
	TenantID *string
	// States, when not empty, keeps sessions in one of these states.
	States []SessionState
	// Kind, when not "", keeps sessions of this kind.
	Kind SessionKind
	// ParentID, when not nil, keeps the children of that session.
	ParentID *uuid.UUID
	// UpdatedFrom and UpdatedBefore, when not nil, keep sessions with
	// UpdatedFrom <= UpdatedAt < UpdatedBefore.
	UpdatedFrom, UpdatedBefore *time.Time
	// Order is OrderUpdated ("" too) or OrderCreated.
	Order ListOrder
	// After, when not nil, starts after this position (the previous page's
	// Next, from a List with the same Order).
	After *Cursor
	// Limit is the page size; 0 = DefaultListLimit, at most MaxListLimit.
	Limit int
}

// List limits.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// SessionRef is one row of a List page.
type SessionRef struct {
	ID        uuid.UUID
	TenantID  string
	ParentID  *uuid.UUID
	Kind      SessionKind
	State     SessionState
	CreatedAt time.Time
	UpdatedAt time.Time
}

// AppendOptions configures Sessions.AppendMessagesWith.
type AppendOptions struct {
	// ExpectedVersion, when > 0, makes the append strict: it writes only
	// if the stored version equals ExpectedVersion (the version is then
	// ExpectedVersion+1), and is otherwise a *StaleVersionError carrying
	// the stored version, with nothing written. 0 appends whatever the
	// version (as AppendMessages does).
	ExpectedVersion int64
	// SiblingOf, when not "", makes the append an edit of the stored
	// message SiblingOf (see Sessions.AppendMessagesWith): the batch's
	// first message gets that message's parent, becoming its sibling (a
	// root's sibling is a root), and the last message of the batch becomes
	// the current leaf; the edited message and the messages after it stay
	// stored, on their branch (Sessions.Branches, Sessions.LoadBranch).
	SiblingOf string
}

// ListPage is one page of List, in the order asked for, ascending.
type ListPage struct {
	// Sessions are the page's rows that decoded.
	Sessions []SessionRef
	// Corrupt are the page's rows that cannot be decoded (an unknown
	// state or kind, an unreadable id, parent id or timestamp), in the
	// page's order, each naming the table ("sessions"), the row's id and
	// the column; they are not in Sessions. List returns a page with
	// Corrupt rows together with an error matching ErrCorruptRow.
	Corrupt []*CorruptRowError
	// Next is the cursor of the following page, nil on the last page. It
	// is positioned after the page's last row, corrupt or not, so a walk
	// continues past corrupt rows.
	Next *Cursor
}
