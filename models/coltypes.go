package models

import (
	"gorm.io/gorm"
)

// LogicalType is a column type the models use whose SQL spelling differs
// between databases (JSON documents, exact decimals).
type LogicalType int

// The logical column types.
const (
	// TypeJSON is a JSON document that may be normalised (PostgreSQL jsonb).
	TypeJSON LogicalType = iota
	// TypeVerbatimJSON is a JSON document kept byte for byte (PostgreSQL json).
	TypeVerbatimJSON
	// TypeDecimal is an exact decimal.
	TypeDecimal
)

// columnTypesPlugin is the name ColumnTypes registers under.
const columnTypesPlugin = "agentstore:column-types"

// ColumnTypes is a GORM plugin that gives the models' logical column types
// their SQL spellings on one *gorm.DB: install it with db.Use before
// migrating or generating DDL with the models
// (db.Use(models.ColumnTypes{models.TypeJSON: "jsonb"})). The spellings
// travel with the handle, not with a global registry, so two handles may
// spell them differently. A type missing from the map, or a handle without
// the plugin, is "text". agentstore's Store installs its dialect's
// spellings on the handles it opens.
type ColumnTypes map[LogicalType]string

// Name returns the plugin's name, "agentstore:column-types".
func (ColumnTypes) Name() string { return columnTypesPlugin }

// Initialize does nothing: the plugin is only read by the models' column
// type methods.
func (ColumnTypes) Initialize(*gorm.DB) error { return nil }

// columnType returns db's SQL type for t ("text" when the handle has no
// spelling for it).
func columnType(db *gorm.DB, t LogicalType) string {
	if db != nil && db.Config != nil {
		if p, ok := db.Config.Plugins[columnTypesPlugin].(ColumnTypes); ok {
			if v, ok := p[t]; ok {
				return v
			}
		}
	}
	return "text"
}
