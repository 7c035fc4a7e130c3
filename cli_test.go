package agentstore_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/internal/testkit"
	"github.com/agentstore/agentstore/migrations"
	"github.com/agentstore/agentstore/models"
)

// buildCLI compiles cmd/agentstore into a temporary directory.
func buildCLI(t *testing.T) string {
	t.Helper()
	return testBinary(t, "agentstore")
}

type cliResult struct {
	code           int
	stdout, stderr string
}

func runCLI(t *testing.T, bin string, args ...string) cliResult {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "AGENTSTORE_DSN=")
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %v: %v", args, err)
	}
	r := cliResult{code: code, stdout: so.String(), stderr: se.String()}
	if strings.Contains(r.stderr, "panic") || strings.Contains(r.stderr, "goroutine ") {
		t.Fatalf("agentstore %v panicked:\n%s", args, r.stderr)
	}
	// Every line names its command once: "agentstore verify: cannot open …",
	// never "agentstore verify: agentstore: cannot open …".
	if strings.Contains(r.stderr, ": agentstore: ") {
		t.Fatalf("agentstore %v: doubled prefix in:\n%s", args, r.stderr)
	}
	return r
}

func (r cliResult) want(t *testing.T, code int, args ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("agentstore %v: exit %d, want %d\nstdout: %s\nstderr: %s", args, r.code, code, r.stdout, r.stderr)
	}
	if code != 0 && r.stderr == "" {
		t.Fatalf("agentstore %v: exit %d with nothing on stderr", args, r.code)
	}
}

func TestCLI(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	run := func(t *testing.T, code int, args ...string) cliResult {
		t.Helper()
		r := runCLI(t, bin, args...)
		r.want(t, code, args...)
		return r
	}

	t.Run("usage", func(t *testing.T) {
		t.Parallel()
		run(t, 2)
		run(t, 2, "frobnicate")
		run(t, 2, "ddl")
		run(t, 2, "ddl", "--dialect", "mysql")
		run(t, 2, "ddl", "--dialect", "sqlite", "--bogus")
		run(t, 2, "ddl", "--dialect", "sqlite", "extra")
		run(t, 2, "ddl", "--dialect", "sqlite", "--schema", "s") // SQLite has no schemas
		run(t, 2, "ddl", "--dialect", "postgres", "--prefix", "x; DROP TABLE y")
		run(t, 2, "ddl", "--dialect", "postgres", "--schema", `a"b`)
		run(t, 2, "migrate")
		run(t, 2, "verify")
		run(t, 2, "verify", "--dsn", "mysql://root@localhost/x")
		run(t, 2, "version", "extra")
		run(t, 0, "help")
		run(t, 0, "verify", "-h")
		// version and --version print the module version and each dialect's schema head.
		v := run(t, 0, "version")
		if r := run(t, 0, "--version"); r.stdout != v.stdout {
			t.Fatalf("--version printed %q, version %q", r.stdout, v.stdout)
		}
		wantV := "agentstore " + agentstore.Version + " "
		for _, d := range dialects {
			head, err := migrations.Head(string(d))
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("%s V%d", d, head); !strings.HasPrefix(v.stdout, wantV) || !strings.Contains(v.stdout, want) {
				t.Fatalf("version printed %q, want %q... and %q", v.stdout, wantV, want)
			}
		}
		// --target outside the chain is refused before any database is opened.
		run(t, 2, "migrate", "--dsn", "sqlite::memory:", "--target", "0")
		if r := run(t, 2, "migrate", "--dsn", "sqlite::memory:", "--target", strconv.FormatInt(agentstore.SchemaVersion+1, 10)); !strings.Contains(r.stderr, "head") {
			t.Fatalf("--target beyond head: %s", r.stderr)
		}
		run(t, 2, "migrate", "--dsn", "sqlite::memory:", "--target", "x")
		run(t, 2, "status")
		run(t, 2, "status", "--dsn", "sqlite::memory:", "extra")
	})

	t.Run("help_lists_every_command_and_flag", func(t *testing.T) {
		t.Parallel()
		help := run(t, 0, "help").stdout
		doc, err := os.ReadFile("docs/cli.md")
		if err != nil {
			t.Fatal(err)
		}
		cliDoc := string(doc)
		if r := run(t, 0, "--help"); r.stdout != help {
			t.Fatal("--help differs from help")
		}
		for _, cmd := range []string{"ddl", "status", "migrate", "verify", "export", "import", "copy"} {
			if !strings.Contains(help, "agentstore "+cmd+" ") || !strings.Contains(cliDoc, "agentstore "+cmd+" ") {
				t.Errorf("help or docs/cli.md does not list the %s command", cmd)
			}
			// "CMD -h" prints the command's flags (the flag package's list, to stderr).
			r := run(t, 0, cmd, "-h")
			n := 0
			for _, line := range strings.Split(r.stderr, "\n") {
				if !strings.HasPrefix(line, "  -") {
					continue
				}
				name := strings.Fields(line[3:])[0]
				n++
				short := len(name) == 1 // -o, -i: written with one dash
				if !strings.Contains(help, "--"+name+" ") && !(short && strings.Contains(help, " -"+name+" ")) {
					t.Errorf("help does not document %s's flag --%s", cmd, name)
				}
				if !strings.Contains(cliDoc, "--"+name) && !(short && strings.Contains(cliDoc, "-"+name+" FILE")) {
					t.Errorf("docs/cli.md does not document %s's flag --%s", cmd, name)
				}
			}
			if n == 0 {
				t.Errorf("%s -h listed no flags:\n%s", cmd, r.stderr)
			}
		}
		for _, c := range []string{"version", "--version", "help"} {
			if !strings.Contains(help, c) {
				t.Errorf("help does not mention %s", c)
			}
		}
		for code := 0; code <= 4; code++ {
			if !strings.Contains(help, fmt.Sprintf("\n  %d  ", code)) || !strings.Contains(cliDoc, fmt.Sprintf("\n| %d | ", code)) {
				t.Errorf("help or docs/cli.md does not document exit status %d", code)
			}
		}
	})

	t.Run("ddl", func(t *testing.T) {
		t.Parallel()
		for _, d := range dialects {
			want, err := agentstore.DDL(d, agentstore.WithTablePrefix("claude_"))
			if err != nil {
				t.Fatal(err)
			}
			if r := run(t, 0, "ddl", "--dialect", string(d), "--prefix", "claude_"); r.stdout != want {
				t.Fatalf("ddl --dialect %s differs from agentstore.DDL", d)
			}
			dir := filepath.Join(t.TempDir(), "flyway", string(d))
			if r := run(t, 0, "ddl", "--dialect", string(d), "--prefix", "claude_", "--flyway", dir); r.stdout != "" {
				t.Fatalf("ddl --flyway printed to stdout: %q", r.stdout)
			}
			// The files, in version order, are the chain DDL prints.
			sqls, _ := filepath.Glob(filepath.Join(dir, "V*__*.sql"))
			slices.SortFunc(sqls, func(a, b string) int { return cmp.Compare(flywayVersion(a), flywayVersion(b)) })
			var got []string
			for _, p := range sqls {
				b, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, string(b))
			}
			if len(got) != int(agentstore.SchemaVersion) || strings.Join(got, "\n") != want {
				t.Fatalf("--flyway wrote %d files that differ from agentstore.DDL (want %d)", len(got), agentstore.SchemaVersion)
			}
			// Re-running writes the same files; a changed file is refused (exit 2).
			run(t, 0, "ddl", "--dialect", string(d), "--prefix", "claude_", "--flyway", dir)
			if err := os.WriteFile(sqls[0], []byte("-- edited\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if r := run(t, 2, "ddl", "--dialect", string(d), "--prefix", "claude_", "--flyway", dir); !strings.Contains(r.stderr, "different content") {
				t.Fatalf("ddl --flyway over an edited file: %s", r.stderr)
			}
		}
		want, _ := agentstore.DDL(agentstore.Postgres, agentstore.WithSchema("tenant_a"))
		if r := run(t, 0, "ddl", "--dialect", "postgres", "--schema", "tenant_a"); r.stdout != want {
			t.Fatal("ddl --schema differs from agentstore.DDL(WithSchema)")
		}
	})

	t.Run("ddl_citus", func(t *testing.T) {
		t.Parallel()
		want, err := agentstore.CitusDDL(agentstore.CitusSchemaMode, agentstore.WithSchema("tenant_a"), agentstore.WithTablePrefix("claude_"))
		if err != nil {
			t.Fatal(err)
		}
		for _, flag := range []string{"--citus", "--citus=schema"} {
			if r := run(t, 0, "ddl", "--dialect", "postgres", flag, "--schema", "tenant_a", "--prefix", "claude_"); r.stdout != want {
				t.Fatalf("ddl %s printed %q, want agentstore.CitusDDL's %q", flag, r.stdout, want)
			}
		}
		// rows: one distribution call per table (the keys allow it since V13)
		wantRows, err := agentstore.CitusDDL(agentstore.CitusRowsMode, agentstore.WithSchema("tenant_a"))
		if err != nil {
			t.Fatal(err)
		}
		if r := run(t, 0, "ddl", "--dialect", "postgres", "--citus=rows", "--schema", "tenant_a"); r.stdout != wantRows {
			t.Fatalf("ddl --citus=rows printed %q, want agentstore.CitusDDL's %q", r.stdout, wantRows)
		}
		run(t, 2, "ddl", "--dialect", "postgres", "--citus")                // schema mode needs --schema
		run(t, 2, "ddl", "--dialect", "sqlite", "--citus", "--schema", "s") // Citus is PostgreSQL
		run(t, 2, "ddl", "--dialect", "postgres", "--citus=shards", "--schema", "s")
		run(t, 2, "ddl", "--dialect", "postgres", "--citus", "--schema", "s", "--flyway", t.TempDir())
	})

	t.Run("migrate_verify", func(t *testing.T) {
		t.Parallel()
		forEachDialect(t, func(t *testing.T, h *harness) {
			dsn := h.DSN
			var extra []string
			if h.Schema != "" {
				extra = []string{"--schema", h.Schema}
			}
			args := func(a ...string) []string { return append(a, extra...) }

			if h.Dialect == agentstore.SQLite {
				// verify opens read-only: a missing file is an error (exit 2), never created.
				run(t, 2, args("verify", "--dsn", dsn)...)
				if _, err := os.Stat(strings.TrimPrefix(dsn, "sqlite:")); !os.IsNotExist(err) {
					t.Fatalf("verify created the SQLite file (%v)", err)
				}
				run(t, 0, args("migrate", "--dsn", dsn)...)
				st := h.Open(t)
				if _, err := st.SQLDB().ExecContext(context.Background(), `DROP TABLE "`+st.TablePrefix()+`plans"`); err != nil {
					t.Fatal(err)
				}
				_ = st.Close()
				r := run(t, 1, args("verify", "--dsn", dsn)...)
				if !strings.HasPrefix(r.stdout, "missing_table ") {
					t.Fatalf("verify without the plans table printed:\n%s", r.stdout)
				}
				if _, err := st.SQLDB().ExecContext(context.Background(), "SELECT 1"); err == nil {
					t.Fatal("store still open")
				}
				st = h.Open(t)
				// put the table back the way V1 made it: recreate from scratch
				if _, err := st.SQLDB().ExecContext(context.Background(), `DROP TABLE "`+st.TablePrefix()+`schema_version"`); err != nil {
					t.Fatal(err)
				}
				_ = st.Close()
				if err := os.Remove(strings.TrimPrefix(dsn, "sqlite:")); err != nil {
					t.Fatal(err)
				}
			} else {
				// Nothing migrated yet: issues, exit 1, one per line.
				r := run(t, 1, args("verify", "--dsn", dsn)...)
				if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) < 2 || !strings.HasPrefix(lines[0], "missing_table ") {
					t.Fatalf("verify on an empty database printed:\n%s", r.stdout)
				}
			}
			r := run(t, 0, args("migrate", "--dsn", dsn)...)
			if !strings.Contains(r.stdout, fmt.Sprintf("from schema version 0 to %d", agentstore.SchemaVersion)) {
				t.Fatalf("migrate printed %q", r.stdout)
			}
			if r := run(t, 0, args("verify", "--dsn", dsn)...); !strings.HasPrefix(r.stdout, "ok: ") || strings.Count(r.stdout, "\n") != 1 {
				t.Fatalf("verify on a clean schema printed %q, want one ok line", r.stdout)
			}
			r = run(t, 0, args("verify", "--dsn", dsn, "--json")...)
			var rep agentstore.VerifyReport
			if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || !rep.OK() || rep.Tables == 0 {
				t.Fatalf("verify --json: %v\n%s", err, r.stdout)
			}

			// Drift: a dropped index makes verify exit 1 and name it.
			st := h.Open(t)
			idx := "idx_" + st.TablePrefix() + "sessions_state"
			q := `DROP INDEX "` + idx + `"`
			if h.Schema != "" {
				q = `DROP INDEX "` + h.Schema + `"."` + idx + `"`
			}
			if h.Dialect == agentstore.MariaDB {
				q += ` ON "` + st.TablePrefix() + `sessions"`
			}
			if _, err := st.SQLDB().ExecContext(context.Background(), q); err != nil {
				t.Fatal(err)
			}
			r = run(t, 1, args("verify", "--dsn", dsn)...)
			if !strings.HasPrefix(r.stdout, "missing_index ") || !strings.Contains(r.stdout, idx) || strings.Count(r.stdout, "\n") != 1 {
				t.Fatalf("verify after dropping %s printed:\n%s", idx, r.stdout)
			}
			r = run(t, 1, args("verify", "--dsn", dsn, "--json")...)
			rep = agentstore.VerifyReport{}
			if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || len(rep.Issues) != 1 ||
				rep.Issues[0].Kind != agentstore.IssueMissingIndex || rep.Issues[0].Object != idx {
				t.Fatalf("verify --json after dropping %s: %v\n%s", idx, err, r.stdout)
			}
			// migrate repairs it; the DSN may come from the environment.
			cmd := exec.Command(bin, args("migrate")...)
			cmd.Env = append(os.Environ(), "AGENTSTORE_DSN="+dsn)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("migrate with AGENTSTORE_DSN: %v\n%s", err, out)
			}
			run(t, 0, args("verify", "--dsn", dsn)...)
			// A database ahead of this binary: migrate and verify refuse with exit 1.
			st2 := h.Open(t)
			if _, err := st2.SQLDB().ExecContext(context.Background(), fmt.Sprintf(`INSERT INTO %s (version, applied_at) VALUES (%d, CURRENT_TIMESTAMP)`,
				quotedTable(h, st2, models.TableSchemaVersion), agentstore.SchemaVersion+1)); err != nil {
				t.Fatal(err)
			}
			if r := run(t, 1, args("migrate", "--dsn", dsn)...); !strings.Contains(r.stderr, "newer than") {
				t.Fatalf("migrate on an ahead database: %s", r.stderr)
			}
			if r := run(t, 1, args("verify", "--dsn", dsn)...); !strings.Contains(r.stdout, "schema_version_ahead") {
				t.Fatalf("verify on an ahead database: %s", r.stdout)
			}
			if _, err := st2.SQLDB().ExecContext(context.Background(), fmt.Sprintf(`DELETE FROM %s WHERE version = %d`,
				quotedTable(h, st2, models.TableSchemaVersion), agentstore.SchemaVersion+1)); err != nil {
				t.Fatal(err)
			}
			// Another prefix sees nothing.
			if h.Dialect == agentstore.Postgres {
				run(t, 1, args("verify", "--dsn", dsn, "--prefix", "nope_")...)
			}
		})
	})

	t.Run("status_target_dry_run", func(t *testing.T) {
		t.Parallel()
		forEachDialect(t, func(t *testing.T, h *harness) {
			ctx := context.Background()
			dsn := h.DSN
			var extra []string
			if h.Schema != "" {
				extra = []string{"--schema", h.Schema}
			}
			args := func(a ...string) []string { return append(a, extra...) }
			head := int64(agentstore.SchemaVersion)
			chain, err := migrations.Chain(string(h.Dialect))
			if err != nil {
				t.Fatal(err)
			}

			if h.Dialect == agentstore.SQLite {
				// status and --dry-run open read-only: a missing file is an error, never created.
				run(t, 2, args("status", "--dsn", dsn)...)
				run(t, 2, args("migrate", "--dsn", dsn, "--dry-run")...)
				if _, err := os.Stat(strings.TrimPrefix(dsn, "sqlite:")); !os.IsNotExist(err) {
					t.Fatalf("status or migrate --dry-run created the SQLite file (%v)", err)
				}
			} else {
				// An empty schema: every version pending, exit 3.
				r := run(t, 3, args("status", "--dsn", dsn)...)
				if got := strings.Count(r.stdout, " pending "); got != int(head) || !strings.Contains(r.stdout, "behind: schema version 0") {
					t.Fatalf("status of an empty schema (%d pending lines):\n%s", got, r.stdout)
				}
			}

			// --target 2: V1 and V2 only.
			r := run(t, 0, args("migrate", "--dsn", dsn, "--target", "2")...)
			if !strings.Contains(r.stdout, "applied V1 "+chain[0].Description+"\n") || !strings.Contains(r.stdout, "applied V2 "+chain[1].Description+"\n") ||
				strings.Contains(r.stdout, "applied V3") || !strings.Contains(r.stdout, "from schema version 0 to 2 ") {
				t.Fatalf("migrate --target 2 printed:\n%s", r.stdout)
			}
			st := h.Open(t)
			if v, err := st.RecordedSchemaVersion(ctx); err != nil || v != 2 {
				t.Fatalf("after --target 2 the database records %d (%v)", v, err)
			}
			r = run(t, 3, args("status", "--dsn", dsn)...)
			for v := int64(1); v <= head; v++ {
				state := "pending"
				if v <= 2 {
					state = "applied"
				}
				if !strings.Contains(r.stdout, fmt.Sprintf("V%-3d %s ", v, state)) || !strings.Contains(r.stdout, chain[v-1].Description) {
					t.Fatalf("status at V2 does not show V%d %s:\n%s", v, state, r.stdout)
				}
			}
			r = run(t, 3, args("status", "--dsn", dsn, "--json")...)
			var js struct {
				agentstore.MigrationStatus
				State string `json:"state"`
			}
			if err := json.Unmarshal([]byte(r.stdout), &js); err != nil || js.State != "behind" || js.Current != 2 ||
				len(js.Applied) != 2 || js.Applied[1].AppliedAt.IsZero() || len(js.Pending) != int(head-2) || js.Head != head {
				t.Fatalf("status --json at V2: %v\n%s", err, r.stdout)
			}

			// --dry-run prints the statements of V3..target and runs none of them.
			r = run(t, 0, args("migrate", "--dsn", dsn, "--dry-run", "--target", "4")...)
			if !strings.Contains(r.stdout, "\n-- V3 "+chain[2].Description) || !strings.Contains(r.stdout, "\n-- V4 "+chain[3].Description) ||
				strings.Contains(r.stdout, "-- V2 ") || strings.Contains(r.stdout, "-- V5 ") {
				t.Fatalf("migrate --dry-run --target 4 printed:\n%s", r.stdout)
			}
			plan, err := st.MigrationPlan(ctx, 4)
			if err != nil || len(plan) != 2 {
				t.Fatalf("MigrationPlan(4) at V2: %d steps, %v", len(plan), err)
			}
			for _, p := range plan {
				for _, stmt := range p.Statements {
					if !strings.Contains(r.stdout, stmt+";\n") {
						t.Fatalf("--dry-run output lacks the plan's statement %q", stmt)
					}
				}
			}
			if v, _ := st.RecordedSchemaVersion(ctx); v != 2 {
				t.Fatalf("--dry-run changed the database: it records %d", v)
			}
			// The printed script is exactly what Migrate would run: running it
			// brings the database to head, and Verify finds nothing.
			r = run(t, 0, args("migrate", "--dsn", dsn, "--dry-run")...)
			if !strings.Contains(r.stdout, fmt.Sprintf("\n-- V%d ", head)) {
				t.Fatalf("migrate --dry-run to head printed:\n%s", r.stdout)
			}
			for _, stmt := range migrations.Statements(r.stdout) {
				if _, err := st.SQLDB().ExecContext(ctx, stmt); err != nil {
					t.Fatalf("running the --dry-run statement %q: %v", stmt, err)
				}
			}
			if rep, err := st.Verify(ctx); err != nil || !rep.OK() || rep.DatabaseVersion != head {
				t.Fatalf("after running the --dry-run script: %v\n%v", err, rep)
			}
			r = run(t, 0, args("status", "--dsn", dsn)...)
			if !strings.Contains(r.stdout, fmt.Sprintf("current: schema version %d", head)) || strings.Contains(r.stdout, "pending") {
				t.Fatalf("status at head printed:\n%s", r.stdout)
			}
			if r := run(t, 0, args("migrate", "--dsn", dsn, "--dry-run")...); !strings.Contains(r.stdout, "-- nothing to do") {
				t.Fatalf("--dry-run at head printed:\n%s", r.stdout)
			}

			// A target below the recorded version is refused (forward-only): exit 1.
			if r := run(t, 1, args("migrate", "--dsn", dsn, "--target", "3")...); !strings.Contains(r.stderr, "forward-only") {
				t.Fatalf("migrate --target 3 at head: %s", r.stderr)
			}
			run(t, 1, args("migrate", "--dsn", dsn, "--target", "3", "--dry-run")...)
			run(t, 0, args("migrate", "--dsn", dsn, "--target", strconv.FormatInt(head, 10))...)

			// Index drift at head: status compares versions only (exit 0);
			// --dry-run prints the index repair Migrate then runs.
			idx := "idx_" + st.TablePrefix() + "sessions_state"
			q := `DROP INDEX "` + idx + `"`
			if h.Schema != "" {
				q = `DROP INDEX "` + h.Schema + `"."` + idx + `"`
			}
			if h.Dialect == agentstore.MariaDB {
				q += ` ON "` + st.TablePrefix() + `sessions"`
			}
			if _, err := st.SQLDB().ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
			run(t, 0, args("status", "--dsn", dsn)...)
			r = run(t, 0, args("migrate", "--dsn", dsn, "--dry-run")...)
			// (MariaDB's repair spells identifiers in backticks, and its DDL
			// runs outside a transaction)
			if !strings.Contains(r.stdout, "-- index repair") || !(strings.Contains(r.stdout, `"`+idx+`"`) || strings.Contains(r.stdout, "`"+idx+"`")) {
				t.Fatalf("--dry-run with a missing index printed:\n%s", r.stdout)
			}
			if rep, _ := st.Verify(ctx); rep == nil || rep.OK() {
				t.Fatal("--dry-run repaired the index")
			}
			run(t, 0, args("migrate", "--dsn", dsn)...)
			if rep, err := st.Verify(ctx); err != nil || !rep.OK() {
				t.Fatalf("migrate after --dry-run: %v %v", err, rep)
			}

			// A database ahead of this build: status exit 4, --dry-run exit 1.
			if _, err := st.SQLDB().ExecContext(ctx, fmt.Sprintf(`INSERT INTO %s (version, applied_at) VALUES (%d, CURRENT_TIMESTAMP)`,
				quotedTable(h, st, models.TableSchemaVersion), head+1)); err != nil {
				t.Fatal(err)
			}
			r = run(t, 4, args("status", "--dsn", dsn)...)
			if !strings.Contains(r.stdout, fmt.Sprintf("V%-3d applied ", head+1)) || !strings.Contains(r.stdout, "(unknown to this build)") ||
				!strings.Contains(r.stdout, "ahead: ") {
				t.Fatalf("status of an ahead database:\n%s", r.stdout)
			}
			run(t, 1, args("migrate", "--dsn", dsn, "--dry-run")...)
		})
	})

	t.Run("export_import_copy", func(t *testing.T) {
		t.Parallel()
		clock := newTestClock()
		h := newHarness(t, agentstore.SQLite)
		src := h.New(t, agentstore.WithClock(clock.Now))
		pop := testkit.PopulateTransfer(t, src, clock, 1)
		dir := t.TempDir()
		file := filepath.Join(dir, "all.jsonl")
		r := run(t, 0, "export", "--dsn", h.DSN, "-o", file)
		// stderr is not a terminal: no progress line, just the summary.
		if strings.Contains(r.stderr, "\r") || !strings.HasPrefix(r.stderr, "exported 4 sessions, ") || r.stdout != "" {
			t.Fatalf("export -o printed stdout %q stderr %q", r.stdout, r.stderr)
		}
		stream, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if r := run(t, 0, "export", "--dsn", h.DSN); r.stdout != string(stream) {
			t.Fatal("export to stdout differs from export -o")
		}
		dst := "sqlite:" + filepath.Join(dir, "dst.db")
		run(t, 0, "migrate", "--dsn", dst)
		if r := run(t, 0, "import", "--dsn", dst, "-i", file); !strings.Contains(r.stdout, "sessions: 4 imported, 0 already stored; instances: 2 imported") {
			t.Fatalf("import printed %q", r.stdout)
		}
		if r := run(t, 0, "export", "--dsn", dst); r.stdout != string(stream) {
			t.Fatal("the imported database exports another stream")
		}
		if r := run(t, 0, "import", "--dsn", dst, "-i", file); !strings.Contains(r.stdout, "sessions: 0 imported, 4 already stored") {
			t.Fatalf("second import printed %q", r.stdout)
		}
		// A truncated stream: exit 2, the line named, what came before kept.
		trunc := filepath.Join(dir, "trunc.jsonl")
		lines := strings.SplitAfter(string(stream), "\n")
		if err := os.WriteFile(trunc, []byte(strings.Join(lines[:len(lines)-4], "")), 0o644); err != nil {
			t.Fatal(err)
		}
		other := "sqlite:" + filepath.Join(dir, "other.db")
		run(t, 0, "migrate", "--dsn", other)
		if r := run(t, 2, "import", "--dsn", other, "-i", trunc); !strings.Contains(r.stderr, "truncated export stream") ||
			!strings.Contains(r.stderr, "import line "+strconv.Itoa(len(lines)-3)+":") {
			t.Fatalf("truncated import: %s", r.stderr)
		}
		// Tenant and session filters; their misuse.
		if r := run(t, 0, "export", "--dsn", h.DSN, "--tenant", "globex"); strings.Count(r.stdout, `{"type":"session"`) != 1 {
			t.Fatalf("tenant export:\n%s", r.stdout)
		}
		if r := run(t, 0, "export", "--dsn", h.DSN, "--session", pop.Sessions["acme"][0].String()+","+pop.Fork.String()); strings.Count(r.stdout, `{"type":"session"`) != 2 {
			t.Fatalf("session export:\n%s", r.stdout)
		}
		run(t, 2, "export", "--dsn", h.DSN, "--tenant", "a", "--session", pop.Fork.String())
		run(t, 2, "export", "--dsn", h.DSN, "--session", "not-a-uuid")
		run(t, 2, "export", "--dsn", h.DSN, "--session", uuid.NewString())
		run(t, 2, "import", "--dsn", dst, "-i", filepath.Join(dir, "missing.jsonl"))
		// A failed export leaves no file behind.
		bad := filepath.Join(dir, "bad.jsonl")
		run(t, 2, "export", "--dsn", h.DSN, "--session", uuid.NewString(), "-o", bad)
		if _, err := os.Stat(bad); !os.IsNotExist(err) {
			t.Fatalf("a failed export left %s: %v", bad, err)
		}
		// copy: SQLite into a new SQLite file (migrated by copy).
		cp := "sqlite:" + filepath.Join(dir, "copy.db")
		run(t, 0, "copy", "--from", h.DSN, "--to", cp)
		if r := run(t, 0, "export", "--dsn", cp); r.stdout != string(stream) {
			t.Fatal("the copy exports another stream")
		}
		run(t, 2, "copy", "--from", h.DSN)
		run(t, 2, "copy", "--from", h.DSN, "--to", cp, "--schema", "s")
	})

	t.Run("cannot_run", func(t *testing.T) {
		t.Parallel()
		// A SQLite file in a directory that does not exist.
		run(t, 2, "verify", "--dsn", "sqlite:"+filepath.Join(t.TempDir(), "no", "such", "dir", "x.db"))
		run(t, 2, "migrate", "--dsn", "sqlite:"+filepath.Join(t.TempDir(), "no", "such", "dir", "x.db"))
		run(t, 2, "status", "--dsn", "sqlite:"+filepath.Join(t.TempDir(), "no", "such", "dir", "x.db"))
		// An unreachable server: exit 2 and the password is never printed.
		const pw = "Sup3r-s3cret-pw"
		dsn := "postgres://agent:" + pw + "@127.0.0.1:1/none?sslmode=disable&connect_timeout=1"
		for _, cmd := range []string{"verify", "migrate", "status"} {
			r := run(t, 2, cmd, "--dsn", dsn)
			if strings.Contains(r.stderr+r.stdout, pw) {
				t.Fatalf("%s printed the DSN password:\n%s", cmd, r.stderr)
			}
		}
		r := run(t, 2, "verify", "--dsn", "postgres://agent:"+pw+"@127.0.0.1:1/none?sslmode=disable&connect_timeout=1", "--schema", "bad;name")
		if strings.Contains(r.stderr, pw) {
			t.Fatalf("bad schema error printed the password:\n%s", r.stderr)
		}
	})
}

// flywayVersion returns the version of a V<n>__x.sql path.
func flywayVersion(p string) int {
	b := filepath.Base(p)
	n, _ := strconv.Atoi(b[1:strings.Index(b, "__")])
	return n
}
