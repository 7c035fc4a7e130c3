package models

import "gorm.io/gorm/schema"

// Provider-domain table base names (before the prefix). Every time column of
// these tables is an epoch-millisecond BIGINT on both dialects, so PostgreSQL
// and SQLite compare times identically and no float rounding is involved.
const (
	TableInstances         = "instances"
	TableExecutions        = "executions"
	TableHistory           = "history"
	TableOrchestratorQueue = "orchestrator_queue"
	TableWorkerQueue       = "worker_queue"
	TableInstanceLocks     = "instance_locks"
	// TableActivitySessions holds activity-session leases; it is named so it
	// cannot clash with the agent sessions table.
	TableActivitySessions = "activity_sessions"
	// TableKVStore holds the key-value entries of an instance merged by its
	// completed (completed, failed or continued-as-new) executions.
	TableKVStore = "kv_store"
	// TableKVDelta holds the key-value writes of an instance's current
	// execution, merged into TableKVStore when the execution ends.
	TableKVDelta = "kv_delta"
)

// Instance is one row of {prefix}instances: an orchestration instance. It is
// created only by an orchestration ack whose metadata names the
// orchestration and its version.
//
// Roots and children have partial indexes in (created_at, instance_id)
// order (V7): roots_created for the bulk selection of roots
// (DeleteInstanceBulk: an index range, never a sort of every root), and
// parent_created, led by parent_instance_id, for the children of an
// instance (tree walks, the orphan check, child listings). Partial, so neither
// holds the other's rows, and SQLite's statistics of parent_created are
// not swamped by the NULL parent of every root (which made its planner
// scan the table for one instance's children).
type Instance struct {
	InstanceID           string  `gorm:"type:text;primaryKey;not null;index:,composite:roots_created,priority:2;index:,composite:parent_created,priority:3"`
	OrchestrationName    string  `gorm:"type:text;not null"`
	OrchestrationVersion *string `gorm:"type:text"`
	CurrentExecutionID   int64   `gorm:"not null;default:1"`
	CreatedAt            int64   `gorm:"not null;autoCreateTime:false;index;index:,composite:roots_created,priority:1,where:parent_instance_id IS NULL;index:,composite:parent_created,priority:2"`
	UpdatedAt            int64   `gorm:"not null;autoUpdateTime:false"`
	ParentInstanceID     *string `gorm:"type:text;index:,composite:parent_created,priority:1,where:parent_instance_id IS NOT NULL"`
	CustomStatus         *string `gorm:"type:text"`
	CustomStatusVersion  int64   `gorm:"not null;default:0"`
}

// TableName returns the prefixed table name.
func (Instance) TableName(n schema.Namer) string { return tableName(n, TableInstances) }

// Execution is one row of {prefix}executions.
type Execution struct {
	InstanceID           string  `gorm:"type:text;primaryKey;not null;index:,composite:status_started,priority:3"`
	ExecutionID          int64   `gorm:"primaryKey;not null;autoIncrement:false"`
	Status               string  `gorm:"type:text;not null;default:Running;index:,composite:status_started,priority:1"` // V7: ListInstancesByStatus* walk (status, started_at, instance_id); replaces V2's status index
	Output               *string `gorm:"type:text"`
	StartedAt            int64   `gorm:"not null;index:,composite:status_started,priority:2"`
	CompletedAt          *int64  `gorm:"index"` // V2: DeleteInstanceBulk / PruneExecutionsBulk CompletedBefore
	DuroxideVersionMajor *int32
	DuroxideVersionMinor *int32
	DuroxideVersionPatch *int32
}

// TableName returns the prefixed table name.
func (Execution) TableName(n schema.Namer) string { return tableName(n, TableExecutions) }

// HistoryEvent is one row of {prefix}history: one event of an execution's
// append-only history. EventData is the event's JSON kept as text (decoded
// in Go, so a corrupt row is reported, never dropped).
type HistoryEvent struct {
	InstanceID  string `gorm:"type:text;primaryKey;not null"`
	ExecutionID int64  `gorm:"primaryKey;not null;autoIncrement:false"`
	EventID     int64  `gorm:"primaryKey;not null;autoIncrement:false"`
	EventType   string `gorm:"type:text;not null"`
	EventData   string `gorm:"type:text;not null"`
	CreatedAt   int64  `gorm:"not null;autoCreateTime:false"`
}

// TableName returns the prefixed table name.
func (HistoryEvent) TableName(n schema.Namer) string { return tableName(n, TableHistory) }

// OrchestratorQueueItem is one row of {prefix}orchestrator_queue.
type OrchestratorQueueItem struct {
	// ID is the second column of the visible index: the fetch orders by
	// (visible_at, id) and must stop at the first row, not sort the queue.
	// The instance_visible index (instance_id, visible_at, id, V7) gives
	// each instance's messages in fetch order: the candidate query walks
	// the instance ids of it to skip a locked instance's backlog, and takes
	// an instance's oldest visible message from it.
	ID           int64   `gorm:"primaryKey;autoIncrement;index:,composite:visible,priority:2;index:,composite:instance_visible,priority:3"`
	InstanceID   string  `gorm:"type:text;primaryKey;not null;autoIncrement:false;index:,composite:instance_visible,priority:1"`
	WorkItem     string  `gorm:"type:text;not null"`
	VisibleAt    int64   `gorm:"not null;index:,composite:visible,priority:1;index:,composite:instance_visible,priority:2"`
	LockToken    *string `gorm:"type:text;index:,where:lock_token IS NOT NULL"`
	LockedUntil  *int64
	CreatedAt    int64 `gorm:"not null;autoCreateTime:false"`
	AttemptCount int32 `gorm:"not null;default:0"`
}

// TableName returns the prefixed table name.
func (OrchestratorQueueItem) TableName(n schema.Namer) string {
	return tableName(n, TableOrchestratorQueue)
}

// WorkerQueueItem is one row of {prefix}worker_queue. The identity columns
// (instance, execution, activity) are copied from the ActivityExecute work
// item so cancellation and deletion can find the row. InstanceID is the
// distribution column (V13: NOT NULL, in the primary key (id, instance_id)
// on PostgreSQL); an item that is not an activity of an instance has "".
type WorkerQueueItem struct {
	// The plain claim (no session, no tag) walks the partial index "ready"
	// (visible_at, id) WHERE session_id IS NULL AND tag IS NULL from its
	// start up to now, so it reads only visible rows: rows visible later
	// (delays, abandons with a delay), tagged rows and session-bound rows
	// are not in its way (V9; before, the claim walked id order and read
	// every future-visible row on each poll). Without a partial index
	// PostgreSQL, lacking statistics on a freshly filled queue,
	// bitmap-ANDs the session_id and tag indexes and sorts every queued
	// row on each claim.
	// The session_id and tag indexes are partial (IS NOT NULL): most rows
	// have neither, so those rows cost no index entries on enqueue or ack;
	// every query on these columns compares them with a value (= or IN),
	// which implies IS NOT NULL, so both planners use the partial indexes.
	ID           int64   `gorm:"primaryKey;autoIncrement;index:,composite:ready,priority:2"`
	WorkItem     string  `gorm:"type:text;not null"`
	VisibleAt    int64   `gorm:"not null;index:,composite:ready,priority:1,where:session_id IS NULL AND tag IS NULL"` // the plain claim's order (V9)
	LockToken    *string `gorm:"type:text"`                                                                           // no index: lease tokens carry the row id (see provider_worker.go)
	LockedUntil  *int64
	CreatedAt    int64   `gorm:"not null;autoCreateTime:false"`
	AttemptCount int32   `gorm:"not null;default:0"`
	InstanceID   *string `gorm:"type:text;primaryKey;not null;autoIncrement:false;index:,composite:activity,priority:1"`
	ExecutionID  *int64  `gorm:"index:,composite:activity,priority:2"`
	ActivityID   *int64  `gorm:"index:,composite:activity,priority:3"`
	SessionID    *string `gorm:"type:text;index:,where:session_id IS NOT NULL"`
	Tag          *string `gorm:"type:text;index:,where:tag IS NOT NULL"`
}

// TableName returns the prefixed table name.
func (WorkerQueueItem) TableName(n schema.Namer) string { return tableName(n, TableWorkerQueue) }

// InstanceLock is one row of {prefix}instance_locks: the per-instance
// peek-lock held by an orchestration fetch until ack or abandon.
type InstanceLock struct {
	InstanceID  string `gorm:"type:text;primaryKey;not null"`
	LockToken   string `gorm:"type:text;not null"`
	LockedUntil int64  `gorm:"not null;index"`
	LockedAt    int64  `gorm:"not null"`
}

// TableName returns the prefixed table name.
func (InstanceLock) TableName(n schema.Namer) string { return tableName(n, TableInstanceLocks) }

// ActivitySession is one row of {prefix}activity_sessions: the lease that
// pins an activity session's work items to one worker.
type ActivitySession struct {
	SessionID      string `gorm:"type:text;primaryKey;not null"`
	WorkerID       string `gorm:"type:text;not null;index"`
	LockedUntil    int64  `gorm:"not null"`
	LastActivityAt int64  `gorm:"not null"`
}

// TableName returns the prefixed table name.
func (ActivitySession) TableName(n schema.Namer) string { return tableName(n, TableActivitySessions) }

// KVStoreEntry is one row of {prefix}kv_store: a key-value entry of an
// instance as merged by its last completed execution. It lives as long as
// the instance (pruning executions never deletes it; deleting the instance
// does).
type KVStoreEntry struct {
	InstanceID      string `gorm:"column:instance_id;type:text;primaryKey;not null"`
	Key             string `gorm:"column:key;type:text;primaryKey;not null"`
	Value           string `gorm:"column:value;type:text;not null"`
	ExecutionID     int64  `gorm:"column:execution_id;not null"` // the execution that merged it last
	LastUpdatedAtMS int64  `gorm:"column:last_updated_at_ms;not null;default:0"`
}

// TableName returns the prefixed table name.
func (KVStoreEntry) TableName(n schema.Namer) string { return tableName(n, TableKVStore) }

// KVDeltaEntry is one row of {prefix}kv_delta: a key written by the
// instance's current execution. Value NULL is a tombstone (the key was
// cleared in this execution).
type KVDeltaEntry struct {
	InstanceID      string  `gorm:"column:instance_id;type:text;primaryKey;not null"`
	Key             string  `gorm:"column:key;type:text;primaryKey;not null"`
	Value           *string `gorm:"column:value;type:text"`
	LastUpdatedAtMS int64   `gorm:"column:last_updated_at_ms;not null"`
}

// TableName returns the prefixed table name.
func (KVDeltaEntry) TableName(n schema.Namer) string { return tableName(n, TableKVDelta) }
