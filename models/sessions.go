package models

import (
	"database/sql/driver"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/schema"
)

// Session-domain table base names (before the prefix).
const (
	TableSessions  = "sessions"
	TableMessages  = "messages"
	TableCompacts  = "compacts"
	TableSummaries = "summaries"
	TableQueue     = "queue"
	TableTodos     = "todos"
	TablePlans     = "plans"
	// TableSessionChanges holds the session change feed (V10).
	TableSessionChanges = "session_changes"
)

// Session is one row of {prefix}sessions: an agent session. The row carries
// denormalised counters and a version for optimistic concurrency; messages,
// compactions, summaries, queue items, todos and plans live in child tables
// that cascade on delete. ParentID is no foreign key (V13: on a distributed
// database a fork lives on another shard than its parent): deleting a
// session deletes the sessions below it in code.
type Session struct {
	ID                       uuid.UUID  `gorm:"type:uuid;primaryKey;not null;index:,composite:updated_id,priority:2;index:,composite:created_id,priority:2;index:,composite:parent_created,priority:3"`
	ParentID                 *uuid.UUID `gorm:"type:uuid;index:,composite:parent_created,priority:1"`
	SessionType              string     `gorm:"type:varchar(32);not null;default:main"`
	AgentType                *string    `gorm:"type:text"`
	AgentDescription         *string    `gorm:"type:text"`
	TenantID                 *string    `gorm:"type:text;index;index:,composite:tenant_updated,priority:1"`
	State                    string     `gorm:"type:varchar(32);not null;default:created;index"`
	Config                   JSON       `gorm:"not null;default:'{}'"`
	Permissions              JSON       `gorm:"not null;default:'{}'"`
	CurrentLeafID            *string    `gorm:"type:text"`
	Summary                  *string    `gorm:"type:text"`
	TotalInputTokens         int64      `gorm:"not null;default:0"`
	TotalOutputTokens        int64      `gorm:"not null;default:0"`
	TotalCacheReadTokens     int64      `gorm:"not null;default:0"`
	TotalCacheCreationTokens int64      `gorm:"not null;default:0"`
	CurrentInputTokens       int64      `gorm:"not null;default:0"`
	TotalCostUSD             Decimal    `gorm:"column:total_cost_usd;not null;default:'0'"`
	StaticContextHash        *string    `gorm:"type:varchar(64)"`
	Error                    *string    `gorm:"type:text"`
	MessageCount             int64      `gorm:"not null;default:0"`
	LastSeq                  int64      `gorm:"not null;default:0"`
	Version                  int64      `gorm:"not null;default:1"`
	ForkedFromSessionID      *uuid.UUID `gorm:"type:uuid"`
	ForkedFromSeq            *int64
	CreatedAt                time.Time  `gorm:"not null;index:,composite:created_id,priority:1;index:,composite:parent_created,priority:2"`
	UpdatedAt                time.Time  `gorm:"not null;index:,composite:tenant_updated,priority:2;index:,composite:updated_id,priority:1"`
	ExpiresAt                *time.Time `gorm:"index:,where:expires_at IS NOT NULL"`
}

// TableName returns the prefixed table name.
func (Session) TableName(n schema.Namer) string { return tableName(n, TableSessions) }

// Message is one row of {prefix}messages. Messages are keyed by
// (session_id, seq): seq is a per-session sequence number assigned in the
// appending transaction and is the only ordering; id is the caller's message
// id, unique within its session.
type Message struct {
	SessionID        uuid.UUID    `gorm:"type:uuid;primaryKey;not null;autoIncrement:false;uniqueIndex:,composite:session_msg,priority:1;index:,composite:session_created,priority:1"`
	Seq              int64        `gorm:"primaryKey;not null;autoIncrement:false"`
	ID               string       `gorm:"column:id;type:text;not null;uniqueIndex:,composite:session_msg,priority:2"`
	ParentID         *string      `gorm:"type:text"`
	Role             string       `gorm:"type:varchar(16);not null"`
	Content          VerbatimJSON `gorm:"not null"`
	IsSidechain      bool         `gorm:"not null;default:false"`
	IsCompactSummary bool         `gorm:"not null;default:false"`
	Usage            JSON
	Metadata         JSON
	Model            *string `gorm:"type:varchar(64)"`
	RequestID        *string `gorm:"type:text"`
	Environment      JSON
	// CreatedAt is informational (ordering is by Seq); the
	// (session_id, created_at) index serves time-range queries. Lookups by
	// session_id alone use the primary key, whose leading column it is.
	CreatedAt time.Time `gorm:"not null;index:,composite:session_created,priority:2"`

	Session *Session `gorm:"foreignKey:SessionID;references:ID;constraint:OnDelete:CASCADE" json:"-"`
}

// TableName returns the prefixed table name.
func (Message) TableName(n schema.Namer) string { return tableName(n, TableMessages) }

// Compact is one row of {prefix}compacts: a compaction record. Compacts,
// summaries, todos and plans are keyed (id, session_id) since V13 (the
// distribution column in every key); an id is unique within its session.
type Compact struct {
	ID              uuid.UUID `gorm:"type:uuid;primaryKey;not null"`
	SessionID       uuid.UUID `gorm:"type:uuid;primaryKey;not null;autoIncrement:false;index"`
	Trigger         string    `gorm:"type:varchar(32);not null;default:manual"`
	PreTokens       int64     `gorm:"not null;default:0"`
	PostTokens      int64     `gorm:"not null;default:0"`
	SavedTokens     int64     `gorm:"not null;default:0"`
	Summary         string    `gorm:"type:text;not null"`
	OriginalCount   int64     `gorm:"not null;default:0"`
	NewCount        int64     `gorm:"not null;default:0"`
	LogicalParentID *string   `gorm:"type:text"`
	CreatedAt       time.Time `gorm:"not null"`

	Session *Session `gorm:"foreignKey:SessionID;references:ID;constraint:OnDelete:CASCADE" json:"-"`
}

// TableName returns the prefixed table name.
func (Compact) TableName(n schema.Namer) string { return tableName(n, TableCompacts) }

// Summary is one row of {prefix}summaries: a summary snapshot.
type Summary struct {
	ID            uuid.UUID `gorm:"type:uuid;primaryKey;not null;index:,composite:session_created,priority:3"`
	SessionID     uuid.UUID `gorm:"type:uuid;primaryKey;not null;autoIncrement:false;index:,composite:session_created,priority:1"`
	Summary       string    `gorm:"type:text;not null"`
	LeafMessageID *string   `gorm:"type:text"`
	CreatedAt     time.Time `gorm:"not null;index:,composite:session_created,priority:2"`

	Session *Session `gorm:"foreignKey:SessionID;references:ID;constraint:OnDelete:CASCADE" json:"-"`
}

// TableName returns the prefixed table name.
func (Summary) TableName(n schema.Namer) string { return tableName(n, TableSummaries) }

// QueueItem is one row of {prefix}queue: the per-session priority queue.
// Seq is a database-assigned FIFO key; dequeue order is priority DESC, seq ASC,
// served by the partial index (session_id, priority DESC, seq) WHERE
// processed_at IS NULL, i.e. the live (pending or processing) items: a
// finished item (completed, failed, cancelled: processed_at set) stays in
// the table but leaves the index, and a claim (pending -> processing)
// changes no indexed column (on PostgreSQL it can be a HOT update).
// A dequeued item is leased until LeasedUntil (epoch milliseconds).
// The unique (session_id, idempotency_key) index also serves the session
// foreign key's ON DELETE CASCADE (the partial index cannot), so deleting
// a session never scans the queue; the partial (processed_at) index of
// finished items serves SessionQueue.PurgeFinished.
// The keys carry the distribution column (V13): primary key (seq,
// session_id), item id unique per session (id, session_id). On SQLite the
// key stays the AUTOINCREMENT seq (no AUTOINCREMENT in a composite key), as
// for every model whose key has an auto-increment column.
type QueueItem struct {
	Seq         int64      `gorm:"primaryKey;autoIncrement;index:,composite:session_status,priority:3"`
	ID          uuid.UUID  `gorm:"type:uuid;not null;uniqueIndex:,composite:item,priority:1"`
	SessionID   uuid.UUID  `gorm:"type:uuid;primaryKey;not null;autoIncrement:false;uniqueIndex:,composite:item,priority:2;index:,composite:session_status,priority:1,where:processed_at IS NULL;uniqueIndex:,composite:session_idem,priority:1"`
	Operation   string     `gorm:"type:varchar(32);not null;default:enqueue"`
	Content     string     `gorm:"type:text;not null"`
	Priority    int32      `gorm:"not null;default:0;index:,composite:session_status,priority:2,sort:desc"`
	Status      string     `gorm:"type:varchar(32);not null;default:pending"`
	Attempts    int32      `gorm:"not null;default:0"`
	LeaseToken  *uuid.UUID `gorm:"type:uuid"`
	LeaseOwner  *string    `gorm:"type:text"`
	LeasedUntil *int64
	LastError   *string   `gorm:"type:text"`
	CreatedAt   time.Time `gorm:"not null"`
	// ProcessedAt is set when the item finishes; the partial index of
	// finished items orders PurgeFinished's age walk.
	ProcessedAt *time.Time `gorm:"index:,where:processed_at IS NOT NULL"`
	// IdempotencyKey is the caller's key of EnqueueWith, unique per session
	// (NULL for none; NULLs never collide).
	IdempotencyKey *string `gorm:"type:text;uniqueIndex:,composite:session_idem,priority:2"`

	Session *Session `gorm:"foreignKey:SessionID;references:ID;constraint:OnDelete:CASCADE" json:"-"`
}

// TableName returns the prefixed table name.
func (QueueItem) TableName(n schema.Namer) string { return tableName(n, TableQueue) }

// Todo is one row of {prefix}todos.
type Todo struct {
	ID          uuid.UUID  `gorm:"type:uuid;primaryKey;not null"`
	SessionID   uuid.UUID  `gorm:"type:uuid;primaryKey;not null;autoIncrement:false;index"`
	Position    int64      `gorm:"not null;default:0"`
	Content     string     `gorm:"type:text;not null"`
	ActiveForm  string     `gorm:"type:text;not null"`
	Status      string     `gorm:"type:varchar(32);not null;default:pending"`
	PlanID      *uuid.UUID `gorm:"type:uuid"`
	CreatedAt   time.Time  `gorm:"not null"`
	StartedAt   *time.Time
	CompletedAt *time.Time

	Session *Session `gorm:"foreignKey:SessionID;references:ID;constraint:OnDelete:CASCADE" json:"-"`
}

// TableName returns the prefixed table name.
func (Todo) TableName(n schema.Namer) string { return tableName(n, TableTodos) }

// Plan is one row of {prefix}plans. Plans are history: every plan a session
// ever had stays, with its final status. A partial unique index allows at
// most one active (draft, approved or executing) plan per session.
type Plan struct {
	ID          uuid.UUID `gorm:"type:uuid;primaryKey;not null;index:,composite:session_created,priority:3"`
	SessionID   uuid.UUID `gorm:"type:uuid;primaryKey;not null;autoIncrement:false;index:,composite:session_created,priority:1;uniqueIndex:,composite:one_active,where:status = 'draft' OR status = 'approved' OR status = 'executing'"`
	Name        *string   `gorm:"type:text"`
	Content     string    `gorm:"type:text;not null"`
	Status      string    `gorm:"type:varchar(32);not null;default:draft"`
	Error       *string   `gorm:"type:text"`
	CreatedAt   time.Time `gorm:"not null;index:,composite:session_created,priority:2"`
	ApprovedAt  *time.Time
	StartedAt   *time.Time
	CompletedAt *time.Time

	Session *Session `gorm:"foreignKey:SessionID;references:ID;constraint:OnDelete:CASCADE" json:"-"`
}

// TableName returns the prefixed table name.
func (Plan) TableName(n schema.Namer) string { return tableName(n, TablePlans) }

// VerbatimJSON is a JSON document stored exactly as written: json (not
// jsonb) on PostgreSQL and text on SQLite. PostgreSQL's json type validates
// the document but keeps its bytes, so message content blocks (including
// block types this version does not know) round-trip byte for byte.
type VerbatimJSON []byte

// GormDBDataType returns the type the dialect registered for TypeVerbatimJSON
// (see ColumnTypes), text by default.
func (VerbatimJSON) GormDBDataType(db *gorm.DB, _ *schema.Field) string {
	return columnType(db, TypeVerbatimJSON)
}

// Value implements driver.Valuer: the bytes as text, SQL NULL when empty.
func (j VerbatimJSON) Value() (driver.Value, error) { return JSON(j).Value() }

// Scan implements sql.Scanner; the bytes are copied, never validated.
func (j *VerbatimJSON) Scan(src any) error { return (*JSON)(j).Scan(src) }

// SessionChange is one row of {prefix}session_changes: one committed change
// of a session (kind session.created, session.updated, session.deleted) or
// of a session-queue item's state (queue.item). The rows are written by the
// database's triggers (migration V10), never by the models; the feed's order
// is (Ord, ID): Ord is 0 on a single-writer database and the writing
// transaction's id (raised to the session's previous Ord) on PostgreSQL.
// At is the database's clock in Unix milliseconds.
type SessionChange struct {
	ID        int64      `gorm:"primaryKey;autoIncrement;index:,composite:ord,priority:2;index:,composite:session,priority:3"`
	Ord       int64      `gorm:"not null;default:0;index:,composite:ord,priority:1;index:,composite:session,priority:2"`
	TenantID  *string    `gorm:"type:text"`
	SessionID uuid.UUID  `gorm:"type:uuid;primaryKey;not null;autoIncrement:false;index:,composite:session,priority:1"`
	Kind      string     `gorm:"type:varchar(32);not null"`
	ItemID    *uuid.UUID `gorm:"type:uuid"`
	State     *string    `gorm:"type:varchar(32)"`
	FromSeq   int64      `gorm:"not null;default:0"`
	ToSeq     int64      `gorm:"not null;default:0"`
	Version   int64      `gorm:"not null;default:0"`
	At        int64      `gorm:"not null"`
}

// TableName returns the prefixed table name.
func (SessionChange) TableName(n schema.Namer) string { return tableName(n, TableSessionChanges) }
