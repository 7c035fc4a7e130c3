package dialect

import (
	"fmt"
	"strings"
)

// IssueKind classifies a SchemaIssue. The root package re-exports it
// (agentstore.IssueKind). The values are stable strings, used
// in the JSON output of `agentstore verify --json`.
type IssueKind string

// The kinds of issue Verify reports.
const (
	// IssueMissingTable: a table of the models does not exist.
	IssueMissingTable IssueKind = "missing_table"
	// IssueMissingColumn: a column of the models does not exist in its table.
	IssueMissingColumn IssueKind = "missing_column"
	// IssueColumnTypeMismatch: a column's type differs from the model's type.
	IssueColumnTypeMismatch IssueKind = "column_type_mismatch"
	// IssueNullabilityMismatch: a column is NULL where the model says NOT NULL, or the reverse.
	IssueNullabilityMismatch IssueKind = "nullability_mismatch"
	// IssuePrimaryKeyMismatch: the table's primary key is missing or has other columns.
	IssuePrimaryKeyMismatch IssueKind = "primary_key_mismatch"
	// IssueMissingIndex: an index the models declare (by its generated name) does not exist.
	IssueMissingIndex IssueKind = "missing_index"
	// IssueIndexMismatch: an index exists but its columns, uniqueness or WHERE predicate differ.
	IssueIndexMismatch IssueKind = "index_mismatch"
	// IssueMissingForeignKey: a foreign key the models declare does not exist.
	IssueMissingForeignKey IssueKind = "missing_foreign_key"
	// IssueForeignKeyMismatch: a foreign key exists but its ON DELETE action or columns differ.
	IssueForeignKeyMismatch IssueKind = "foreign_key_mismatch"
	// IssueSchemaVersionBehind: the recorded schema version is older than SchemaVersion (or absent).
	IssueSchemaVersionBehind IssueKind = "schema_version_behind"
	// IssueSchemaVersionAhead: the database was migrated by a newer agentstore.
	IssueSchemaVersionAhead IssueKind = "schema_version_ahead"
	// IssueForeignKeysDisabled: SQLite's foreign_keys pragma is OFF on the
	// connection, so foreign keys and ON DELETE CASCADE silently do nothing.
	IssueForeignKeysDisabled IssueKind = "foreign_keys_disabled"
	// IssueExtraColumn: a column the models no longer have (left by an
	// older release or added by hand). Its fix drops it, with its data.
	IssueExtraColumn IssueKind = "extra_column"
	// IssueExtraIndex: an index the models no longer declare (a PRIMARY
	// KEY or UNIQUE-constraint index is never reported). Migrate drops it.
	IssueExtraIndex IssueKind = "extra_index"
	// IssueDefaultMismatch: a column's DEFAULT differs from the model's
	// (or one of them has none).
	IssueDefaultMismatch IssueKind = "default_mismatch"
	// IssueInvalidIndex: a PostgreSQL index marked INVALID (left by a
	// failed or interrupted CREATE INDEX CONCURRENTLY): it is kept up to
	// date but never used. Migrate rebuilds it.
	IssueInvalidIndex IssueKind = "invalid_index"
)

// SchemaIssue is one difference between the live database and the models.
// The root package re-exports it (agentstore.SchemaIssue).
type SchemaIssue struct {
	// Kind classifies the issue.
	Kind IssueKind `json:"kind"`
	// Table is the unqualified table name ("" for connection-level issues).
	Table string `json:"table,omitempty"`
	// Object names the column, index or foreign key concerned ("" for table-level issues).
	Object string `json:"object,omitempty"`
	// Expected is what the models require (a type, "NOT NULL", an index or
	// foreign-key definition, a version).
	Expected string `json:"expected,omitempty"`
	// Actual is what the database has ("" when the object is missing).
	Actual string `json:"actual,omitempty"`
	// Fix suggests how to repair the issue, usually as SQL to run. A schema fix
	// (table, column, key, index) of several SQL statements ends each one but the last with ";" and a line
	// break: run them one per call, in order, where a driver or server
	// takes one statement per call (MariaDB's driver without
	// multiStatements, PostgreSQL's extended protocol, Citus).
	Fix string `json:"fix"`
}

// String renders the issue on one line: kind, table, object, expected,
// actual and fix as key=value pairs.
func (i SchemaIssue) String() string {
	var b strings.Builder
	b.WriteString(string(i.Kind))
	if i.Table != "" {
		fmt.Fprintf(&b, " table=%s", i.Table)
	}
	if i.Object != "" {
		fmt.Fprintf(&b, " object=%s", i.Object)
	}
	if i.Expected != "" {
		fmt.Fprintf(&b, " expected=%q", i.Expected)
	}
	if i.Actual != "" {
		fmt.Fprintf(&b, " actual=%q", i.Actual)
	}
	if i.Fix != "" {
		fmt.Fprintf(&b, " fix=%q", i.Fix)
	}
	return b.String()
}

// LiveColumn is a column as the database catalog reports it.
type LiveColumn struct {
	// Type is the column type as the catalog spells it.
	Type string
	// NotNull: the column is NOT NULL.
	NotNull bool
	// Default is the DEFAULT expression as the catalog spells it; nil = none.
	Default *string
	// AutoInc: PostgreSQL column with a sequence default or identity (always true on SQLite).
	AutoInc bool
}

// LiveIndex is an index as the catalog reports it.
type LiveIndex struct {
	// Unique: a unique index.
	Unique bool
	// Where is the partial-index predicate ("" for none).
	Where string
	// Cols are the indexed columns in order.
	Cols []string
	// Constraint: the index backs a PRIMARY KEY or UNIQUE constraint (never an extra index).
	Constraint bool
	// Invalid: PostgreSQL marks the index INVALID.
	Invalid bool
}

// LiveFK is a foreign key as the catalog reports it.
type LiveFK struct {
	// Name is the constraint's name ("" where the catalog keeps none).
	Name string
	// Cols are the referencing columns, RefTable and RefCols what they reference.
	Cols     []string
	RefTable string
	RefCols  []string
	// OnDelete is the ON DELETE action as the catalog spells it.
	OnDelete string
}

// LiveTable is a table as the catalog reports it.
type LiveTable struct {
	// Cols are the columns by name.
	Cols map[string]LiveColumn
	// PK are the primary-key columns in order.
	PK []string
	// Indexes are the indexes by name.
	Indexes map[string]LiveIndex
	// FKs are the foreign keys.
	FKs []LiveFK
}

// NewLiveTable returns an empty LiveTable.
func NewLiveTable() *LiveTable {
	return &LiveTable{Cols: map[string]LiveColumn{}, Indexes: map[string]LiveIndex{}}
}

// SplitList splits a comma-separated catalog list ("" is none).
func SplitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
