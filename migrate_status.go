package agentstore

import (
	"context"

	"github.com/agentstore/agentstore/internal/engine"
)

// MigrationStep is one version of the migration chain, as MigrationStatus
// reports it.
type MigrationStep = engine.MigrationStep

// MigrationStatus is where a database stands against this build's
// migration chain: what Store.MigrationStatus returns.
type MigrationStatus = engine.MigrationStatus

// MigrationStatus reads the versions the database records in its
// schema_version table (none when the table does not exist) and compares
// them with this build's chain. It only reads: it works on a Store opened
// WithReadOnly, and changes nothing. It compares versions only; Verify
// compares the tables, columns and indexes with the models.
func (s *Store) MigrationStatus(ctx context.Context) (*MigrationStatus, error) {
	return s.e.MigrationStatus(ctx)
}

// PlannedMigration is one step MigrationPlan says MigrateTo would run.
type PlannedMigration = engine.PlannedMigration

// MigrationPlan returns, without running any of it, what MigrateTo(ctx,
// target) would run on the database as it is now: the steps after the
// recorded version up to target, each with its statements rendered for the
// Store's table prefix and schema (as MigrateTo changes them: without
// advisory locks a CONCURRENTLY index build is a plain one in a
// transaction), preceded on PostgreSQL with WithSchema by the CREATE
// SCHEMA IF NOT EXISTS Migrate runs. When the database is already at
// target = SchemaVersion, the plan is the index repair Migrate would run
// there (the missing, redefined and INVALID indexes and agentstore's
// undeclared idx_<prefix> indexes that Verify reports), or empty. It does
// not predict the repair after the steps it lists: a database the chain
// built has none. It only reads, so it works on a Store opened
// WithReadOnly.
//
// It refuses what MigrateTo refuses, with the same errors: a target
// outside 1..SchemaVersion (ErrInvalidInput) and a database whose recorded
// version is ahead of target (a *SchemaVersionError, ErrSchemaAhead).
func (s *Store) MigrationPlan(ctx context.Context, target int64) ([]PlannedMigration, error) {
	return s.e.MigrationPlan(ctx, target)
}
