package interop_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/pressly/goose/v3"

	"github.com/agentstore/agentstore"
)

// gooseTable is goose's own version table (goose.DefaultTablename).
const gooseTable = goose.DefaultTablename

// exportGoose writes the FormatGoose files for d into a temp dir and
// returns the dir and the paths, in version order.
func exportGoose(t *testing.T, d *database) (string, []string) {
	t.Helper()
	dir := t.TempDir()
	paths, err := agentstore.ExportMigrations(dir, d.Dialect, agentstore.ExportConfig{Format: agentstore.FormatGoose}, d.ExportOpts...)
	if err != nil {
		t.Fatalf("ExportMigrations(goose): %v", err)
	}
	if int64(len(paths)) != agentstore.SchemaVersion {
		t.Fatalf("ExportMigrations(goose) wrote %v, want %d files", paths, agentstore.SchemaVersion)
	}
	return dir, paths
}

// newGoose returns a goose Provider (goose's concurrency-safe API; the
// package-level goose.Up/UpTo do the same through global state) on d for
// the files in dir.
func newGoose(t *testing.T, d *database, dir string) *goose.Provider {
	t.Helper()
	dialect := goose.DialectSQLite3
	if d.Dialect == agentstore.Postgres {
		dialect = goose.DialectPostgres
	}
	p, err := goose.NewProvider(dialect, d.OpenSQL(t), os.DirFS(dir))
	if err != nil {
		t.Fatalf("goose.NewProvider: %v", err)
	}
	return p
}

func requireGooseVersion(t *testing.T, ctx context.Context, p *goose.Provider, want int64) {
	t.Helper()
	v, err := p.GetDBVersion(ctx)
	if err != nil {
		t.Fatalf("goose GetDBVersion: %v", err)
	}
	pending, err := p.HasPending(ctx)
	if err != nil {
		t.Fatalf("goose HasPending: %v", err)
	}
	if v != want || pending != (want < agentstore.SchemaVersion) {
		t.Fatalf("goose version %d (pending %v), want %d", v, pending, want)
	}
}

// TestGooseUp applies the whole exported chain with goose on an empty
// database: Verify is OK at SchemaVersion, and agentstore's own Migrate
// afterwards changes nothing.
func TestGooseUp(t *testing.T) {
	dialects(t, func(t *testing.T, d *database) {
		ctx := testContext(t)
		dir, paths := exportGoose(t, d)
		if d.Dialect == agentstore.Postgres {
			// The CONCURRENTLY migration must be marked for goose.
			b, err := os.ReadFile(paths[1])
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(string(b), "-- +goose NO TRANSACTION\n-- +goose Up\n") {
				t.Fatalf("%s does not start with the NO TRANSACTION annotation:\n%.200s", paths[1], b)
			}
		}
		p := newGoose(t, d, dir)
		res, err := p.Up(ctx)
		if err != nil {
			t.Fatalf("goose Up: %v", err)
		}
		if int64(len(res)) != agentstore.SchemaVersion {
			t.Fatalf("goose Up applied %d migrations, want %d: %v", len(res), agentstore.SchemaVersion, res)
		}
		requireGooseVersion(t, ctx, p, agentstore.SchemaVersion)
		requireVerifyOK(t, ctx, d, "goose Up")
		// agentstore's table got one row per file (the files' own INSERTs),
		// beside goose's own record.
		requireSchemaVersions(t, ctx, d, allVersions()...)
		requireMigrateNoop(t, ctx, d, gooseTable)
		requireGooseVersion(t, ctx, p, agentstore.SchemaVersion)
	})
}

// TestGooseUpToV1ThenUp stops goose at version 1 (Verify reports the
// database behind, with only V2's indexes missing), then finishes with
// goose Up: Verify OK, and Migrate afterwards changes nothing.
func TestGooseUpToV1ThenUp(t *testing.T) {
	dialects(t, func(t *testing.T, d *database) {
		ctx := testContext(t)
		dir, paths := exportGoose(t, d)
		p := newGoose(t, d, dir)
		if _, err := p.UpTo(ctx, 1); err != nil {
			t.Fatalf("goose UpTo(1): %v", err)
		}
		requireGooseVersion(t, ctx, p, 1)
		requireSchemaVersions(t, ctx, d, 1)
		requireVerifyAtV1(t, ctx, d, laterIndexes(t, paths), "goose UpTo(1)")

		res, err := p.Up(ctx)
		if err != nil {
			t.Fatalf("goose Up after UpTo(1): %v", err)
		}
		if int64(len(res)) != agentstore.SchemaVersion-1 {
			t.Fatalf("goose Up after UpTo(1) applied %d migrations, want %d", len(res), agentstore.SchemaVersion-1)
		}
		requireGooseVersion(t, ctx, p, agentstore.SchemaVersion)
		requireVerifyOK(t, ctx, d, "goose UpTo(1) then Up")
		requireSchemaVersions(t, ctx, d, allVersions()...)
		requireMigrateNoop(t, ctx, d, gooseTable)
	})
}
