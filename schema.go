package agentstore

import (
	"context"

	"github.com/agentstore/agentstore/internal/engine"
)

// SchemaVersion is the schema version this build of agentstore writes and expects.
const SchemaVersion = engine.SchemaVersion

// ErrSchemaAhead is returned by Migrate, MigrateTo and (as an issue) Verify
// when the database records a schema version newer than this build knows:
// it was migrated by a newer agentstore. Nothing was changed. The error is
// a *SchemaVersionError.
var ErrSchemaAhead = engine.ErrSchemaAhead

// SchemaVersionError reports a database whose recorded schema version is
// ahead of the version this build (or MigrateTo's target) expects. It
// matches ErrSchemaAhead.
type SchemaVersionError = engine.SchemaVersionError

// ErrMigrationFailed is in the chain of the error Migrate and MigrateTo
// return when a migration step, the index repair at head or the reading of
// the recorded version fails; that error is a *MigrationError. (A refused
// call, ErrSchemaAhead or ErrInvalidInput, is not one: nothing was tried.)
var ErrMigrationFailed = engine.ErrMigrationFailed

// MigrationError reports a failed migration step. Its message names the
// step, the failing statement (its first 80 characters) and the class of
// the failure, never the database's own text, which DatabaseMessage
// carries for the operator (the CLI prints it on a line of its own).
// errors.Is matches ErrMigrationFailed and whatever the cause matches
// (ErrRetryable for a transient failure, ErrConflict for an object that
// already exists, context.Canceled, ...); errors.As reaches the driver's
// error. A failed step recorded nothing: Migrate applies it again next
// time.
type MigrationError = engine.MigrationError

// Migrate brings the database to SchemaVersion: an empty database gets
// the whole chain, a database at any released version the migrations after
// it, each in order and each recording its version in the schema_version
// table. It is MigrateTo(ctx, SchemaVersion); see there.
func (s *Store) Migrate(ctx context.Context) error {
	return s.e.Migrate(ctx)
}

// MigrateTo applies the dialect's migrations (the embedded files of
// package migrations, rendered for the Store's table prefix and schema) up
// to version target, in order, each in its own transaction (a migration
// marked executeInTransaction=false, such as a PostgreSQL CREATE INDEX
// CONCURRENTLY, runs statement by statement). Each step takes the
// migration lock (a PostgreSQL advisory lock keyed by schema and prefix,
// SQLite's write lock), re-reads the recorded version and skips a step
// another process applied meanwhile, so concurrent callers are safe. A
// step interrupted part-way (a crash, a cancelled context) left nothing
// recorded: the next call applies it again, first dropping the INVALID
// indexes an interrupted CONCURRENTLY build leaves. It creates the
// PostgreSQL schema if missing. At SchemaVersion it then repairs index
// drift (see Verify): missing, differently defined and INVALID indexes are
// rebuilt, and indexes agentstore no longer declares (named
// idx_<prefix>...) dropped; indexes hold no data, rows are never touched.
//
// It refuses a database whose recorded version is ahead of target or of
// SchemaVersion with a *SchemaVersionError (ErrSchemaAhead) and a target
// outside 1..SchemaVersion with ErrInvalidInput, changing nothing.
// Migrations are forward-only. Without advisory locks
// (WithoutCapabilities(CapAdvisoryLocks)) a step that collided with a
// concurrent one is retried, up to 5 times, and a CONCURRENTLY step builds
// its indexes in a transaction instead (concurrent CONCURRENTLY builds of
// one index would leave it INVALID).
func (s *Store) MigrateTo(ctx context.Context, target int64) error {
	return s.e.MigrateTo(ctx, target)
}

// RecordedSchemaVersion returns the highest schema version the database
// records (0 for a database without agentstore's schema_version table).
func (s *Store) RecordedSchemaVersion(ctx context.Context) (int64, error) {
	return s.e.RecordedSchemaVersion(ctx)
}

// DDL returns the SQL that creates the whole agentstore schema of dialect
// d (both domains, every index and foreign key, the schema-version rows) on
// an empty database: every migration of the chain in order, rendered for
// WithTablePrefix and WithSchema (with CREATE SCHEMA IF NOT EXISTS first
// when a schema is given). It is what Migrate applies; psql or sqlite3 can
// run it as one script. No database is contacted.
func DDL(d Dialect, opts ...Option) (string, error) {
	return engine.DDL(dialects(), d, opts...)
}

// MigrationFormat names a migration tool's file layout for ExportMigrations.
type MigrationFormat = engine.MigrationFormat

// The formats ExportMigrations writes.
const (
	// FormatFlyway writes V<n>__<description>.sql, and
	// V<n>__<description>.sql.conf (executeInTransaction=false) beside a
	// migration that cannot run in a transaction.
	FormatFlyway = engine.FormatFlyway
	// FormatGoose writes <n>_<description>.sql with -- +goose Up (and
	// -- +goose NO TRANSACTION where needed) for github.com/pressly/goose.
	FormatGoose = engine.FormatGoose
	// FormatGolangMigrate writes <n>_<description>.up.sql for
	// github.com/golang-migrate/migrate (run a migration that cannot run in
	// a transaction with the postgres driver's x-multi-statement=true).
	FormatGolangMigrate = engine.FormatGolangMigrate
)

// ExportConfig says how ExportMigrations names the files.
type ExportConfig = engine.ExportConfig

// ExportMigrations writes the whole chain of dialect d, rendered for
// WithTablePrefix and WithSchema, into dir (created if needed) in the
// layout of ec.Format, and returns the paths written. A file that already
// exists with the same content is left alone; one with different content
// is refused with ErrConflict naming it (a released migration never
// changes), and nothing after it is written.
func ExportMigrations(dir string, d Dialect, ec ExportConfig, opts ...Option) ([]string, error) {
	return engine.ExportMigrations(dialects(), dir, d, ec, opts...)
}

// WriteFlyway writes the chain of dialect d for Flyway into dir: it is
// ExportMigrations(dir, d, ExportConfig{Format: FormatFlyway}, opts...).
func WriteFlyway(dir string, d Dialect, opts ...Option) error {
	return engine.WriteFlyway(dialects(), dir, d, opts...)
}

// FlywayFileName is the file name of the first migration of every chain
// (the V1 baseline).
const FlywayFileName = engine.FlywayFileName
