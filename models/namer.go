package models

import (
	"strings"

	"gorm.io/gorm/schema"
)

// Namer is the GORM naming strategy agentstore installs on every handle it
// opens. It adds the configured table prefix (and, on PostgreSQL, the schema
// qualifier) to the base names the models declare, and keeps index and
// constraint names free of the schema so they are identical in every schema.
type Namer struct {
	schema.NamingStrategy
	// Prefix is prepended to every table name, e.g. "agentstore_".
	Prefix string
	// Schema, when not empty, qualifies every table name ("schema.table").
	Schema string
}

// NewNamer returns a Namer for prefix and schema. Both must already be
// validated (agentstore.Open does that).
func NewNamer(prefix, schemaName string) *Namer {
	return &Namer{NamingStrategy: schema.NamingStrategy{SingularTable: true}, Prefix: prefix, Schema: schemaName}
}

// Table returns the qualified, prefixed name of the table with base name base.
func (n *Namer) Table(base string) string {
	if n.Schema != "" {
		return n.Schema + "." + n.Prefix + base
	}
	return n.Prefix + base
}

// unqualified drops the "schema." part of a table name.
func (n *Namer) unqualified(table string) string {
	if n.Schema != "" {
		return strings.TrimPrefix(table, n.Schema+".")
	}
	return table
}

// IndexName names an index after the unqualified table and the column.
func (n *Namer) IndexName(table, column string) string {
	return n.NamingStrategy.IndexName(n.unqualified(table), column)
}

// UniqueName names a unique constraint after the unqualified table.
func (n *Namer) UniqueName(table, column string) string {
	return n.NamingStrategy.UniqueName(n.unqualified(table), column)
}

// CheckerName names a check constraint after the unqualified table.
func (n *Namer) CheckerName(table, column string) string {
	return n.NamingStrategy.CheckerName(n.unqualified(table), column)
}

// RelationshipFKName names a foreign key after the unqualified table.
func (n *Namer) RelationshipFKName(rel schema.Relationship) string {
	return "fk_" + n.unqualified(rel.Schema.Table) + "_" + n.NamingStrategy.ColumnName("", rel.Name)
}

// tableName resolves base through n when it is an agentstore Namer, so the
// models also work (unprefixed) on a handle with GORM's default naming.
func tableName(n schema.Namer, base string) string {
	if an, ok := n.(*Namer); ok {
		return an.Table(base)
	}
	return base
}
