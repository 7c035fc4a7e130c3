package agentstore

import (
	"context"

	"github.com/agentstore/agentstore/internal/engine"
)

type IssueKind = engine.IssueKind

type SchemaIssue = engine.SchemaIssue

// The kinds of issue Verify reports.
const (
	IssueMissingTable        = engine.IssueMissingTable
	IssueMissingColumn       = engine.IssueMissingColumn
	IssueColumnTypeMismatch  = engine.IssueColumnTypeMismatch
	IssueNullabilityMismatch = engine.IssueNullabilityMismatch
	IssuePrimaryKeyMismatch  = engine.IssuePrimaryKeyMismatch
	IssueMissingIndex        = engine.IssueMissingIndex
	IssueIndexMismatch       = engine.IssueIndexMismatch
	IssueMissingForeignKey   = engine.IssueMissingForeignKey
	IssueForeignKeyMismatch  = engine.IssueForeignKeyMismatch
	IssueSchemaVersionBehind = engine.IssueSchemaVersionBehind
	IssueSchemaVersionAhead  = engine.IssueSchemaVersionAhead
	IssueForeignKeysDisabled = engine.IssueForeignKeysDisabled
	IssueExtraColumn         = engine.IssueExtraColumn
	IssueExtraIndex          = engine.IssueExtraIndex
	IssueDefaultMismatch     = engine.IssueDefaultMismatch
	IssueInvalidIndex        = engine.IssueInvalidIndex
)

// IssueChangeFeed is the Verify issue kind of the session change feed
// (migration V10): a trigger on the sessions or queue table, or on
// PostgreSQL the trigger function, is missing or disabled, so writes commit
// without their change rows and the feed misses them. The fix recreates it
// with the statements of the Store's migration chain (or, for a disabled
// trigger, enables it).
const IssueChangeFeed = engine.IssueChangeFeed

// VerifyReport is the result of Store.Verify.
type VerifyReport = engine.VerifyReport

// Verify compares the live database with the models of both domains and
// reports every difference: missing tables and columns, column types and
// nullability, primary keys, indexes (by the names the models generate,
// including uniqueness and partial-index predicates), foreign keys and
// their ON DELETE action, the recorded schema version and, on SQLite,
// whether foreign keys are enforced on the connection, and the objects
// outside the models that keep data complete: the message search index
// (IssueSearchIndex) and the change feed's triggers (IssueChangeFeed). It
// honours the
// store's prefix and schema (on PostgreSQL without WithSchema it inspects
// current_schema()). It changes nothing. An error means only that the
// database could not be inspected; schema differences are issues in the
// report.
func (s *Store) Verify(ctx context.Context) (*VerifyReport, error) {
	return s.e.Verify(ctx)
}
