package models

import (
	"sync"

	"gorm.io/gorm"
)

// LogicalType is a column type the models use whose SQL spelling differs
// between databases (JSON documents, exact decimals). Each agentstore
// dialect registers its spellings with RegisterColumnTypes; a database
// without a registered spelling stores them as text.
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

var (
	colTypesMu sync.RWMutex
	colTypes   = map[string]map[LogicalType]string{}
)

// RegisterColumnTypes sets the SQL types of the logical types for the GORM
// dialector called gormName (gorm.Dialector.Name()). Dialects call it from
// init; types not given are "text".
func RegisterColumnTypes(gormName string, types map[LogicalType]string) {
	colTypesMu.Lock()
	defer colTypesMu.Unlock()
	m := map[LogicalType]string{}
	for k, v := range types {
		m[k] = v
	}
	colTypes[gormName] = m
}

// columnType returns db's SQL type for t ("text" when none is registered).
func columnType(db *gorm.DB, t LogicalType) string {
	colTypesMu.RLock()
	defer colTypesMu.RUnlock()
	if v, ok := colTypes[db.Dialector.Name()][t]; ok {
		return v
	}
	return "text"
}
