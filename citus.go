package agentstore

import "github.com/agentstore/agentstore/internal/engine"

// CitusMode names one of the two ways Citus distributes agentstore's
// tables (docs/distributed.md).
type CitusMode = engine.CitusMode

// The Citus layouts CitusDDL writes.
const (
	// CitusSchemaMode is schema-based sharding: the Store's schema
	// (WithSchema: one tenant or deployment) becomes one distributed
	// schema, all its tables on one node, foreign keys kept.
	CitusSchemaMode = engine.CitusSchemaMode
	// CitusRowsMode is row-based distribution: each table distributed by
	// its CitusLayout column and co-located by group, schema_version a
	// reference table.
	CitusRowsMode = engine.CitusRowsMode
)

// CitusTableKind says how Citus holds a table in the row-based layout.
type CitusTableKind = engine.CitusTableKind

// The kinds of table in CitusLayout.
const (
	// CitusDistributed: hash-distributed by CitusTable.Column.
	CitusDistributed = engine.CitusDistributed
	// CitusReference: a copy on every node.
	CitusReference = engine.CitusReference
)

// CitusTable is one table of the row-based Citus layout: its base name,
// kind, distribution column, the table it is co-located with and its
// co-location group.
type CitusTable = engine.CitusTable

// CitusKeyProblem is one constraint (primary key, unique index, foreign
// key, nullable column) that keeps a table from being row-distributed.
type CitusKeyProblem = engine.CitusKeyProblem

// CitusKeyError is CitusDDL's refusal of CitusRowsMode on a schema whose
// keys lack the distribution column; Problems names every table and
// constraint in the way. It matches ErrInvalidInput.
type CitusKeyError = engine.CitusKeyError

// CitusLayout returns the row-based Citus layout of every agentstore
// table in the order the distribution calls run: the session domain
// distributed by session id (sessions.id, session_id in its child tables,
// co-located with sessions), the provider by instance id (co-located with
// instances), activity_sessions by its own session_id in a group of its
// own, schema_version a reference table. It reads no database.
func CitusLayout() []CitusTable { return engine.CitusLayout() }

// CitusKeyProblems returns the constraints of this build's schema that
// Citus would refuse in the row-based layout (a primary key or unique
// index without the distribution column, a nullable distribution column, a
// foreign key between rows that may sit on different nodes); empty when
// the layout can be created as is, as it can since schema version 12
// (migration V13 put the distribution column in every key). It reads no
// database.
func CitusKeyProblems() ([]CitusKeyProblem, error) { return engine.CitusKeyProblems() }

// CitusDDL returns the SQL a Citus user runs, once the schema exists
// (Migrate, or the chain DDL returns), to distribute agentstore's tables:
// for CitusSchemaMode citus_schema_distribute of the WithSchema schema
// (required); for CitusRowsMode a create_reference_table or
// create_distributed_table call (with colocate_with) per table of
// CitusLayout, rendered for WithTablePrefix and WithSchema. CitusRowsMode
// is refused with a *CitusKeyError (ErrInvalidInput) while
// CitusKeyProblems is not empty (it is empty since schema version 12). An
// unknown mode, a missing schema in CitusSchemaMode or an invalid prefix
// or schema is ErrInvalidConfig. No database is contacted.
func CitusDDL(mode CitusMode, opts ...Option) (string, error) {
	return engine.CitusDDL(dialects(), mode, opts...)
}
