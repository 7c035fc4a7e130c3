package interop_test

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/golang-migrate/migrate/v4/database/multistmt"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/migrations"
)

// TestExportFormatsShareSQL checks, without a database, that the three
// layouts carry the same SQL: golang-migrate's file has Flyway's statements
// (its comments may differ: golang-migrate keeps no checksum), goose's is
// Flyway's file under the goose annotations (NO TRANSACTION exactly where
// Flyway's .sql.conf says executeInTransaction=false).
func TestExportFormatsShareSQL(t *testing.T) {
	for _, d := range []agentstore.Dialect{agentstore.SQLite, agentstore.Postgres} {
		t.Run(string(d), func(t *testing.T) {
			var opts []agentstore.Option
			if d == agentstore.Postgres {
				opts = append(opts, agentstore.WithSchema("i_formats"))
			}
			export := func(f agentstore.MigrationFormat) []string {
				paths, err := agentstore.ExportMigrations(t.TempDir(), d, agentstore.ExportConfig{Format: f}, opts...)
				if err != nil {
					t.Fatalf("ExportMigrations(%s): %v", f, err)
				}
				return paths
			}
			read := func(p string) string {
				b, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				return string(b)
			}
			fw := sqlFiles(export(agentstore.FormatFlyway))
			gs := export(agentstore.FormatGoose)
			gm := export(agentstore.FormatGolangMigrate)
			if len(fw) != len(gs) || len(fw) != len(gm) || int64(len(fw)) != agentstore.SchemaVersion {
				t.Fatalf("file counts: flyway %d, goose %d, golang-migrate %d; want %d each", len(fw), len(gs), len(gm), agentstore.SchemaVersion)
			}
			for i := range fw {
				sql := read(fw[i])
				if got, want := migrations.Statements(dollarQuoted(read(gm[i]))), migrations.Statements(sql); !slices.Equal(got, want) {
					t.Errorf("the statements of %s differ from those of %s", filepath.Base(gm[i]), filepath.Base(fw[i]))
				}
				head := "-- +goose Up\n"
				if _, err := os.Stat(fw[i] + ".conf"); err == nil {
					head = "-- +goose NO TRANSACTION\n" + head
				}
				if got := read(gs[i]); got != head+sql {
					t.Errorf("%s is not %q + %s:\n%.300s", filepath.Base(gs[i]), head, filepath.Base(fw[i]), got)
				}
				if d == agentstore.Postgres && i == 0 && !strings.Contains(sql, `CREATE SCHEMA IF NOT EXISTS "i_formats"`) {
					t.Errorf("%s does not create the schema", filepath.Base(fw[i]))
				}
			}
		})
	}
}

// TestGolangMigrateSplitterSeesStatements runs golang-migrate's own
// x-multi-statement splitter (package multistmt, delimiter ";", the one the
// pgx/v5 driver uses) over the exported PostgreSQL files and requires the
// pieces it would send to be exactly the files' statements, comment lines
// aside. The splitter cuts at every ";", inside "--" comments too, so a ";"
// in a comment line sends the comment's tail to the server as SQL.
func TestGolangMigrateSplitterSeesStatements(t *testing.T) {
	paths, err := agentstore.ExportMigrations(t.TempDir(), agentstore.Postgres,
		agentstore.ExportConfig{Format: agentstore.FormatGolangMigrate}, agentstore.WithSchema("i_split"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var pieces []string
		if err := multistmt.Parse(bytes.NewReader(b), []byte(";"), 10<<20, func(m []byte) bool {
			if s := withoutComments(string(m)); s != "" {
				pieces = append(pieces, s)
			}
			return true
		}); err != nil {
			t.Fatalf("%s: multistmt.Parse: %v", filepath.Base(p), err)
		}
		want := migrations.Statements(string(b))
		if !slices.Equal(pieces, want) {
			for i := range max(len(pieces), len(want)) {
				var g, w string
				if i < len(pieces) {
					g = pieces[i]
				}
				if i < len(want) {
					w = want[i]
				}
				if g != w {
					t.Fatalf("%s: golang-migrate's x-multi-statement splitter sends %d pieces, the file has %d statements; first difference at %d:\n sent:      %.160q\n statement: %.160q\n(a \";\" in a comment line is cut at: golang-migrate splits on every \";\")",
						filepath.Base(p), len(pieces), len(want), i, g, w)
				}
			}
		}
	}
}

// withoutComments drops the blank and "--" comment lines of a piece of SQL
// and its final ";", as migrations.Statements does.
func withoutComments(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if l := strings.TrimSpace(line); l == "" || strings.HasPrefix(l, "--") {
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return strings.TrimSuffix(strings.TrimSpace(b.String()), ";")
}

// escapeStringRE finds the E'…' constants the golang-migrate export writes
// for $$-quoted bodies that hold a ";".
var escapeStringRE = regexp.MustCompile(`E'((?:[^'\\]|\\.)*)'`)

// dollarQuoted turns those constants back into the $$-quoted bodies of the
// committed files, so both exports can be compared statement by statement.
func dollarQuoted(sql string) string {
	return escapeStringRE.ReplaceAllStringFunc(sql, func(m string) string {
		body := escapeStringRE.FindStringSubmatch(m)[1]
		return "$$" + strings.NewReplacer(`\073`, ";", `\'`, "'", `\\`, `\`).Replace(body) + "$$"
	})
}
