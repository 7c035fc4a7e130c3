// Package models holds the GORM models of every agentstore table, for both
// domains (agent sessions and the durable orchestration provider). Table
// names come from the base names below plus the prefix (and PostgreSQL
// schema) of the agentstore.Store that uses them; see Namer.
package models

import (
	"time"

	"gorm.io/gorm/schema"
)

// SchemaVersion is the version of the schema these models describe. Migrate
// records it; Verify reports a database whose recorded version is behind.
const SchemaVersion = 19

// TableSchemaVersion is the base name of the table recording applied schema versions.
const TableSchemaVersion = "schema_version"

// SchemaVersionRow is one row of {prefix}schema_version.
type SchemaVersionRow struct {
	Version   int64     `gorm:"primaryKey;not null;autoIncrement:false"`
	AppliedAt time.Time `gorm:"not null"`
}

// TableName returns the prefixed table name.
func (SchemaVersionRow) TableName(n schema.Namer) string { return tableName(n, TableSchemaVersion) }

// SessionModels returns fresh values of the session-domain models, parents first.
func SessionModels() []any {
	return []any{&Session{}, &Message{}, &Compact{}, &Summary{}, &QueueItem{}, &Todo{}, &Plan{}, &SessionChange{}}
}

// ProviderModels returns fresh values of the provider-domain models.
func ProviderModels() []any {
	return []any{&Instance{}, &Execution{}, &HistoryEvent{}, &OrchestratorQueueItem{},
		&WorkerQueueItem{}, &InstanceLock{}, &ActivitySession{}, &KVStoreEntry{}, &KVDeltaEntry{}}
}

// All returns fresh values of every model in creation order (parents before
// children), ending with the schema version table.
func All() []any {
	out := append(SessionModels(), ProviderModels()...)
	return append(out, &SchemaVersionRow{})
}
