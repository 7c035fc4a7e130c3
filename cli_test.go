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

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
)

// buildCLI compiles cmd/agentstore into a temporary directory.
func buildCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "agentstore")
	out, err := exec.Command("go", "build", "-o", bin, "./cmd/agentstore").CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./cmd/agentstore: %v\n%s", err, out)
	}
	return bin
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
		if r := run(t, 0, "version"); !strings.HasPrefix(r.stdout, "agentstore ") || !strings.Contains(r.stdout, "schema version") {
			t.Fatalf("version output %q", r.stdout)
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

	t.Run("cannot_run", func(t *testing.T) {
		t.Parallel()
		// A SQLite file in a directory that does not exist.
		run(t, 2, "verify", "--dsn", "sqlite:"+filepath.Join(t.TempDir(), "no", "such", "dir", "x.db"))
		run(t, 2, "migrate", "--dsn", "sqlite:"+filepath.Join(t.TempDir(), "no", "such", "dir", "x.db"))
		// An unreachable server: exit 2 and the password is never printed.
		const pw = "Sup3r-s3cret-pw"
		dsn := "postgres://agent:" + pw + "@127.0.0.1:1/none?sslmode=disable&connect_timeout=1"
		for _, cmd := range []string{"verify", "migrate"} {
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
