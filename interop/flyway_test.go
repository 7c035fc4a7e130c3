package interop_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/migrations"
)

const flywayOffset = 100

// flywayName matches a Flyway versioned migration: V<version>__<description>.sql.
var flywayName = regexp.MustCompile(`^V([0-9]+)__([A-Za-z0-9_]+)\.sql$`)

// TestFlywayOffsetLayoutAndApply exports FormatFlyway with VersionOffset
// 100 and checks the names (V101__..., V102__..., the .sql.conf beside
// V102 on PostgreSQL, none on SQLite whose V2 is transactional), then
// applies the files as Flyway would (Flyway itself cannot run here): in
// version order, each in one transaction unless its .sql.conf says
// executeInTransaction=false, statement by statement (split on ";\n").
// Verify is then OK, and agentstore's own Migrate changes nothing.
func TestFlywayOffsetLayoutAndApply(t *testing.T) {
	dialects(t, func(t *testing.T, d *database) {
		ctx := testContext(t)
		dir := t.TempDir()
		paths, err := agentstore.ExportMigrations(dir, d.Dialect,
			agentstore.ExportConfig{Format: agentstore.FormatFlyway, VersionOffset: flywayOffset}, d.ExportOpts...)
		if err != nil {
			t.Fatalf("ExportMigrations(flyway, offset %d): %v", flywayOffset, err)
		}

		// The layout: the released chain renumbered, descriptions kept.
		var names []string
		for _, p := range paths {
			if filepath.Dir(p) != dir {
				t.Fatalf("%s written outside %s", p, dir)
			}
			names = append(names, filepath.Base(p))
		}
		chain, err := migrations.Chain(string(d.Dialect))
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, m := range chain {
			n := fmt.Sprintf("V%d__%s.sql", m.Version+flywayOffset, m.Description)
			want = append(want, n)
			if m.Conf != "" {
				want = append(want, n+".conf")
			}
		}
		if !slices.Equal(names, want) {
			t.Fatalf("exported %v, want %v", names, want)
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != len(want) {
			t.Fatalf("%s holds %d files, want %d (%v)", dir, len(entries), len(want), want)
		}
		first := []string{"V101__agentstore_baseline.sql", "V102__provider_status_indexes.sql"}
		if d.Dialect == agentstore.Postgres {
			first = append(first, "V102__provider_status_indexes.sql.conf")
		}
		if len(names) < len(first) || !slices.Equal(names[:len(first)], first) {
			t.Fatalf("exported %v, want it to begin with %v", names, first)
		}
		conf := filepath.Join(dir, "V102__provider_status_indexes.sql.conf")
		b, err := os.ReadFile(conf)
		switch {
		case d.Dialect == agentstore.Postgres && (err != nil || !strings.Contains(string(b), "executeInTransaction=false")):
			t.Fatalf("%s = %q, %v; want executeInTransaction=false", conf, b, err)
		case d.Dialect == agentstore.SQLite && !os.IsNotExist(err):
			t.Fatalf("SQLite export has %s (err %v); its V2 runs in a transaction", conf, err)
		}
		for _, n := range names {
			if strings.HasPrefix(n, "V1__") || strings.HasPrefix(n, "V2__") {
				t.Fatalf("%s: the offset was not applied", n)
			}
		}

		applyFlyway(t, ctx, d, dir, paths)
		requireVerifyOK(t, ctx, d, "the Flyway files")
		// The offset renames the files only: agentstore records 1..head.
		requireSchemaVersions(t, ctx, d, allVersions()...)
		requireMigrateNoop(t, ctx, d)
	})
}

// flywayFile is one versioned migration and its script configuration.
type flywayFile struct {
	version int64
	path    string
	inTx    bool
}

// applyFlyway applies the Flyway files among paths to d in version order,
// as Flyway does: each file in one transaction unless its .sql.conf sets
// executeInTransaction=false, then statement by statement without one.
func applyFlyway(t *testing.T, ctx context.Context, d *database, dir string, paths []string) {
	t.Helper()
	var files []flywayFile
	for _, p := range paths {
		m := flywayName.FindStringSubmatch(filepath.Base(p))
		if m == nil {
			if !strings.HasSuffix(p, ".sql.conf") {
				t.Fatalf("%s is neither a Flyway migration nor its .sql.conf", p)
			}
			continue
		}
		v, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		f := flywayFile{version: v, path: p, inTx: true}
		if c, err := os.ReadFile(p + ".conf"); err == nil {
			for _, line := range strings.Split(string(c), "\n") {
				if k, val, ok := strings.Cut(strings.TrimSpace(line), "="); ok &&
					strings.TrimSpace(k) == "executeInTransaction" && strings.TrimSpace(val) == "false" {
					f.inTx = false
				}
			}
		} else if !os.IsNotExist(err) {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	slices.SortFunc(files, func(a, b flywayFile) int { return int(a.version - b.version) })

	db := d.OpenSQL(t)
	for _, f := range files {
		b, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatal(err)
		}
		stmts := splitStatements(string(b))
		if len(stmts) == 0 {
			t.Fatalf("%s has no statement", f.path)
		}
		name := filepath.Base(f.path)
		if !f.inTx {
			for _, s := range stmts {
				if _, err := db.ExecContext(ctx, s); err != nil {
					t.Fatalf("%s (no transaction): %.100s: %v", name, s, err)
				}
			}
			continue
		}
		err = func() error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			for _, s := range stmts {
				if _, err := tx.ExecContext(ctx, s); err != nil {
					return fmt.Errorf("%.100s: %w", s, err)
				}
			}
			return tx.Commit()
		}()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

// splitStatements splits a file on ";\n" and drops the pieces that hold
// only comments and blank lines.
func splitStatements(content string) []string {
	var out []string
	for _, piece := range strings.Split(content, ";\n") {
		code := false
		for _, line := range strings.Split(piece, "\n") {
			if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "--") {
				code = true
				break
			}
		}
		if code {
			out = append(out, strings.TrimSpace(piece))
		}
	}
	return out
}
