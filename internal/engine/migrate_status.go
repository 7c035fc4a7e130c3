package engine

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/agentstore/agentstore/migrations"
	"github.com/agentstore/agentstore/models"
)

// MigrationStep is one version of the migration chain, as MigrationStatus
// reports it.
type MigrationStep struct {
	// Version is the schema version the step brings the database to.
	Version int64 `json:"version"`
	// Description is the description part of the step's file name
	// ("agentstore_baseline"); "" for a version the database records but
	// this build does not know (a newer release applied it).
	Description string `json:"description,omitempty"`
	// AppliedAt is when the database recorded the step, as the database's
	// clock wrote it (in UTC); zero for a pending step.
	AppliedAt time.Time `json:"applied_at,omitzero"`
}

// MigrationStatus is where a database stands against this build's
// migration chain: what Store.MigrationStatus returns.
type MigrationStatus struct {
	// Dialect is the Store's dialect.
	Dialect Dialect `json:"dialect"`
	// Head is the last version of this build's chain (SchemaVersion).
	Head int64 `json:"head"`
	// Current is the highest version the database records (0 when it
	// records none: an empty database).
	Current int64 `json:"current"`
	// Applied lists every version the database records, in version order,
	// including versions beyond Head that a newer release applied.
	Applied []MigrationStep `json:"applied"`
	// Pending lists the steps of this build's chain after Current, in
	// order: what Migrate would apply. Empty when Current >= Head.
	Pending []MigrationStep `json:"pending"`
}

// Behind reports whether the database lacks steps of this build's chain
// (Current < Head): Migrate would apply Pending.
func (m *MigrationStatus) Behind() bool { return m.Current < m.Head }

// Ahead reports whether the database records a version newer than this
// build knows (Current > Head): a newer release migrated it, and Migrate
// refuses it with ErrSchemaAhead.
func (m *MigrationStatus) Ahead() bool { return m.Current > m.Head }

// MigrationStatus reads the versions the database records in its
// schema_version table (none when the table does not exist) and compares
// them with this build's chain. It only reads: it works on a Store opened
// WithReadOnly, and changes nothing. It compares versions only; Verify
// compares the tables, columns and indexes with the models.
func (s *Store) MigrationStatus(ctx context.Context) (*MigrationStatus, error) {
	chain, err := migrations.Chain(string(s.d.Name()))
	if err != nil {
		return nil, fmt.Errorf("migration status: %w", err)
	}
	db := s.db.WithContext(ctx)
	var rows []models.SchemaVersionRow
	if db.Migrator().HasTable(&models.SchemaVersionRow{}) {
		if err := db.Raw("SELECT version, applied_at FROM " + s.quoted(models.TableSchemaVersion) + " ORDER BY version").
			Scan(&rows).Error; err != nil {
			return nil, fmt.Errorf("migration status: read schema versions: %w", translateError(err))
		}
	} else if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("migration status: %w", err)
	}
	st := &MigrationStatus{Dialect: s.d.Name(), Head: SchemaVersion, Applied: []MigrationStep{}, Pending: []MigrationStep{}}
	for _, r := range rows {
		step := MigrationStep{Version: r.Version, AppliedAt: r.AppliedAt.UTC()}
		if r.Version >= 1 && r.Version <= int64(len(chain)) {
			step.Description = chain[r.Version-1].Description
		}
		st.Applied = append(st.Applied, step)
		st.Current = max(st.Current, r.Version)
	}
	for _, m := range chain {
		if m.Version > st.Current && m.Version <= SchemaVersion {
			st.Pending = append(st.Pending, MigrationStep{Version: m.Version, Description: m.Description})
		}
	}
	return st, nil
}

// PlannedMigration is one step MigrationPlan says MigrateTo would run.
type PlannedMigration struct {
	// Version is the step's version; 0 for the index repair at head.
	Version int64 `json:"version"`
	// Description is the step's description ("index repair" for version 0).
	Description string `json:"description"`
	// NoTransaction is set for a step MigrateTo runs statement by
	// statement outside a transaction (PostgreSQL CREATE INDEX
	// CONCURRENTLY); the other steps run each in one transaction.
	NoTransaction bool `json:"no_transaction,omitempty"`
	// Statements are the step's statements, rendered for the Store's
	// table prefix and schema, without the trailing ";". A migration step's
	// last statement records its version in the schema_version table.
	Statements []string `json:"statements"`
}

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
	if target < 1 || target > SchemaVersion {
		return nil, fmt.Errorf("migration plan: %w: target version %d is not between 1 and %d", ErrInvalidInput, target, SchemaVersion)
	}
	chain, err := migrations.Chain(string(s.d.Name()))
	if err != nil {
		return nil, fmt.Errorf("migration plan: %w", err)
	}
	if int64(len(chain)) < SchemaVersion {
		return nil, fmt.Errorf("migration plan: the %s chain ends at V%d, this build expects V%d", s.d.Name(), len(chain), SchemaVersion)
	}
	cur, err := s.RecordedSchemaVersion(ctx)
	if err != nil {
		return nil, fmt.Errorf("migration plan: %w", err)
	}
	if cur > target {
		return nil, fmt.Errorf("migration plan: %w", &SchemaVersionError{Database: cur, Expected: target})
	}
	plan := []PlannedMigration{}
	if cur == target {
		if target < SchemaVersion {
			return plan, nil
		}
		rep, err := s.Verify(ctx)
		if err != nil {
			return nil, fmt.Errorf("migration plan: %w", err)
		}
		if fixes := s.indexRepairStatements(rep.Issues); len(fixes) > 0 {
			plan = append(plan, PlannedMigration{Description: "index repair", Statements: fixes, NoTransaction: !transactionalDDL(s.d)})
		}
		return plan, nil
	}
	for _, m := range chain[cur:target] {
		stmts := migrations.Statements(s.renderMigration(m))
		noTx := m.NoTransaction
		if noTx && !s.has(CapAdvisoryLocks) && transactionalDDL(s.d) {
			noTx = false
			for i, st := range stmts {
				stmts[i] = concurrentlyRE.ReplaceAllString(st, "${1}INDEX ")
			}
		}
		plan = append(plan, PlannedMigration{Version: m.Version, Description: m.Description, NoTransaction: noTx, Statements: stmts})
	}
	if s.cfg.Schema != "" && len(plan) > 0 {
		plan[0].Statements = append([]string{`CREATE SCHEMA IF NOT EXISTS "` + s.cfg.Schema + `"`}, plan[0].Statements...)
	}
	return plan, nil
}

// indexRepairStatements returns the statements of the index repair that
// Migrate runs at head (repairIndexes) and MigrationPlan shows, for issues
// as Verify reports them: the fixes of missing, redefined and INVALID
// indexes and of undeclared indexes named idx_<prefix>... (without a
// migration lock, INVALID indexes are left alone: one may be a concurrent
// migrator's build in progress).
func (s *Store) indexRepairStatements(issues []SchemaIssue) []string {
	var fixes []string
	for _, is := range issues {
		switch is.Kind {
		case IssueInvalidIndex:
			if !s.has(CapAdvisoryLocks) && !s.has(CapSingleWriter) {
				// Without a migration lock an INVALID index may be another
				// migrator's CONCURRENTLY build in progress: leave it (Verify
				// reports it).
				continue
			}
		case IssueMissingIndex, IssueIndexMismatch:
		case IssueExtraIndex:
			if !strings.HasPrefix(is.Object, "idx_"+s.cfg.Prefix) {
				continue
			}
		default:
			continue
		}
		for _, st := range strings.Split(is.Fix, ";\n") {
			if st = strings.TrimSuffix(strings.TrimSpace(st), ";"); st != "" {
				fixes = append(fixes, st)
			}
		}
	}
	return fixes
}
