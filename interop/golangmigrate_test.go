package interop_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5"  // pgx5:// (PostgreSQL through pgx v5)
	_ "github.com/golang-migrate/migrate/v4/database/sqlite3" // sqlite3:// (mattn/go-sqlite3, cgo)
	"github.com/golang-migrate/migrate/v4/source/iofs"

	"github.com/agentstore/agentstore"
)

// migrateTable is golang-migrate's own version table (both drivers'
// default x-migrations-table).
const migrateTable = "schema_migrations"

// multiStatement is the pgx driver option the PostgreSQL chain needs.
// Without it the driver sends a whole file as ONE Exec; pgx sends a query
// without arguments over the simple protocol, and PostgreSQL runs a
// multi-statement simple query as one implicit transaction, in which V2's
// CREATE INDEX CONCURRENTLY fails ("cannot run inside a transaction block",
// SQLSTATE 25001). With x-multi-statement=true the driver splits the file
// on ";" and sends the statements one by one, each outside any transaction.
// (The cost: V1 is then not atomic either; a failure part-way leaves the
// database dirty, as golang-migrate always does.) The sqlite3 driver runs
// each file in a transaction of its own and needs nothing.
const multiStatement = "x-multi-statement=true"

// exportGolangMigrate writes the FormatGolangMigrate files for d into a
// temp dir and returns the dir and the paths, in version order.
func exportGolangMigrate(t *testing.T, d *database) (string, []string) {
	t.Helper()
	dir := t.TempDir()
	paths, err := agentstore.ExportMigrations(dir, d.Dialect, agentstore.ExportConfig{Format: agentstore.FormatGolangMigrate}, d.ExportOpts...)
	if err != nil {
		t.Fatalf("ExportMigrations(golang-migrate): %v", err)
	}
	if int64(len(paths)) != agentstore.SchemaVersion {
		t.Fatalf("ExportMigrations(golang-migrate) wrote %v, want %d files", paths, agentstore.SchemaVersion)
	}
	for _, p := range paths {
		if !strings.HasSuffix(p, ".up.sql") {
			t.Fatalf("%s is not an .up.sql file", p)
		}
	}
	return dir, paths
}

// newMigrate returns a golang-migrate instance on d for the files in dir
// (source driver iofs), closed at the end of the test.
func newMigrate(t *testing.T, d *database, dir string) *migrate.Migrate {
	t.Helper()
	src, err := iofs.New(os.DirFS(dir), ".")
	if err != nil {
		t.Fatalf("iofs.New: %v", err)
	}
	var xopts []string
	if d.Dialect == agentstore.Postgres {
		xopts = append(xopts, multiStatement)
	}
	m, err := migrate.NewWithSourceInstance("iofs", src, d.MigrateURL(xopts...))
	if err != nil {
		t.Fatalf("migrate.NewWithSourceInstance: %v", err)
	}
	t.Cleanup(func() { closeMigrate(t, m) })
	return m
}

func closeMigrate(t *testing.T, m *migrate.Migrate) {
	if serr, derr := m.Close(); serr != nil || derr != nil {
		t.Errorf("migrate Close: source %v, database %v", serr, derr)
	}
}

func requireMigrateVersion(t *testing.T, m *migrate.Migrate, want int64) {
	t.Helper()
	v, dirty, err := m.Version()
	if err != nil || dirty || int64(v) != want {
		t.Fatalf("golang-migrate Version = %d dirty=%v err=%v, want %d clean", v, dirty, err, want)
	}
}

// TestGolangMigrateUp applies the whole exported chain with golang-migrate
// on an empty database: Verify is OK at SchemaVersion, and agentstore's own
// Migrate afterwards changes nothing.
func TestGolangMigrateUp(t *testing.T) {
	dialects(t, func(t *testing.T, d *database) {
		ctx := testContext(t)
		dir, _ := exportGolangMigrate(t, d)
		m := newMigrate(t, d, dir)
		if err := m.Up(); err != nil {
			t.Fatalf("golang-migrate Up: %v", err)
		}
		requireMigrateVersion(t, m, agentstore.SchemaVersion)
		if err := m.Up(); !errors.Is(err, migrate.ErrNoChange) {
			t.Fatalf("second golang-migrate Up = %v, want ErrNoChange", err)
		}
		requireVerifyOK(t, ctx, d, "golang-migrate Up")
		requireSchemaVersions(t, ctx, d, allVersions()...)
		requireMigrateNoop(t, ctx, d, migrateTable)
		requireMigrateVersion(t, m, agentstore.SchemaVersion)
	})
}

// TestGolangMigrateStepsThenUp applies one step (V1: Verify reports the
// database behind, with only V2's indexes missing), then the rest with Up:
// Verify OK, and Migrate afterwards changes nothing.
func TestGolangMigrateStepsThenUp(t *testing.T) {
	dialects(t, func(t *testing.T, d *database) {
		ctx := testContext(t)
		dir, paths := exportGolangMigrate(t, d)
		m := newMigrate(t, d, dir)
		if err := m.Steps(1); err != nil {
			t.Fatalf("golang-migrate Steps(1): %v", err)
		}
		requireMigrateVersion(t, m, 1)
		requireSchemaVersions(t, ctx, d, 1)
		requireVerifyAtV1(t, ctx, d, laterIndexes(t, paths), "golang-migrate Steps(1)")

		if err := m.Up(); err != nil {
			t.Fatalf("golang-migrate Up after Steps(1): %v", err)
		}
		requireMigrateVersion(t, m, agentstore.SchemaVersion)
		requireVerifyOK(t, ctx, d, "golang-migrate Steps(1) then Up")
		requireSchemaVersions(t, ctx, d, allVersions()...)
		requireMigrateNoop(t, ctx, d, migrateTable)
	})
}

// TestGolangMigratePostgresNeedsMultiStatement documents why the pgx driver
// gets x-multi-statement=true: without it V1 applies (as one implicit
// transaction) but V2's CREATE INDEX CONCURRENTLY is refused inside the
// implicit transaction block, golang-migrate records version 2 dirty and
// nothing of V2 is applied; after Force(1) a run with the option finishes
// the chain.
func TestGolangMigratePostgresNeedsMultiStatement(t *testing.T) {
	ctx := testContext(t)
	d := newPostgres(t)
	dir, paths := exportGolangMigrate(t, d)
	src, err := iofs.New(os.DirFS(dir), ".")
	if err != nil {
		t.Fatal(err)
	}
	m, err := migrate.NewWithSourceInstance("iofs", src, d.MigrateURL())
	if err != nil {
		t.Fatalf("migrate.NewWithSourceInstance: %v", err)
	}
	err = m.Up()
	if err == nil || !strings.Contains(err.Error(), "CREATE INDEX CONCURRENTLY cannot run inside a transaction block") {
		t.Fatalf("golang-migrate Up without %s = %v, want the CONCURRENTLY-in-a-transaction-block error", multiStatement, err)
	}
	t.Logf("without %s: %v", multiStatement, err)
	v, dirty, verr := m.Version()
	if verr != nil || v != 2 || !dirty {
		t.Fatalf("after the failed V2: Version = %d dirty=%v err=%v, want 2 dirty", v, dirty, verr)
	}
	// The implicit transaction rolled V2 back whole: agentstore still
	// records V1 and V2's indexes are absent.
	requireSchemaVersions(t, ctx, d, 1)
	requireVerifyAtV1(t, ctx, d, laterIndexes(t, paths), "the failed V2")
	if err := m.Force(1); err != nil {
		t.Fatalf("golang-migrate Force(1): %v", err)
	}
	closeMigrate(t, m)

	m = newMigrate(t, d, dir) // with x-multi-statement=true
	if err := m.Up(); err != nil {
		t.Fatalf("golang-migrate Up with %s after Force(1): %v", multiStatement, err)
	}
	requireMigrateVersion(t, m, agentstore.SchemaVersion)
	requireVerifyOK(t, ctx, d, "Force(1) and Up with "+multiStatement)
	requireSchemaVersions(t, ctx, d, allVersions()...)
}
