package agentstore_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm/logger"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/internal/testkit"
	"github.com/agentstore/agentstore/migrations"
)

// TestDDLGolden fails when the committed Flyway files differ from DDL().
// Regenerate them with: go test -run TestDDLGolden -update .
// TestDDLGolden: DDL() is the committed chain (default prefix, no schema)
// concatenated (on MariaDB each compound statement, a stored function's
// BEGIN ... END, between DELIMITER lines for the mysql client), and
// migrations.FS holds exactly the committed files.
// mysqlClientScript is sql with each statement that holds a ";" written
// between DELIMITER lines on MariaDB; sql unchanged on the others.
func mysqlClientScript(d agentstore.Dialect, sql string) string {
	if d != agentstore.MariaDB {
		return sql
	}
	for _, st := range migrations.Statements(sql) {
		if strings.Contains(st, ";") {
			sql = strings.Replace(sql, st+";\n", "DELIMITER $$\n"+st+"$$\nDELIMITER ;\n", 1)
		}
	}
	return sql
}

func TestDDLGolden(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			chain, err := migrations.Chain(string(d))
			if err != nil {
				t.Fatal(err)
			}
			var want strings.Builder
			for i, m := range chain {
				disk, err := os.ReadFile(filepath.Join("migrations", string(d), m.File))
				if err != nil || !bytes.Equal(disk, []byte(m.SQL)) {
					t.Fatalf("migrations.FS does not hold the committed %s/%s: %v", d, m.File, err)
				}
				if i > 0 {
					want.WriteString("\n")
				}
				want.WriteString(mysqlClientScript(d, m.SQL))
			}
			got, err := agentstore.DDL(d)
			if err != nil {
				t.Fatal(err)
			}
			if w := buildDDL(d, want.String()); got != w {
				t.Fatalf("DDL(%s) is not the committed chain: differs at %s", d, firstDiff(w, got))
			}
		})
	}
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < max(len(al), len(bl)); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return fmt.Sprintf("line %d:\n  file: %q\n  DDL:  %q", i+1, x, y)
		}
	}
	return "(no line differs)"
}

func TestDDL_Deterministic(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		a, err := agentstore.DDL(d, agentstore.WithTablePrefix("claude_"))
		if err != nil {
			t.Fatal(err)
		}
		for range 5 {
			b, _ := agentstore.DDL(d, agentstore.WithTablePrefix("claude_"))
			if a != b {
				t.Fatalf("DDL(%s) is not deterministic", d)
			}
		}
		if strings.Contains(a, "agentstore_") || !strings.Contains(a, `claude_sessions`) {
			t.Fatalf("DDL(%s) ignores the prefix", d)
		}
	}
	if _, err := agentstore.DDL(agentstore.SQLite, agentstore.WithSchema("s")); err == nil {
		t.Fatal("DDL(sqlite, WithSchema) succeeded; SQLite has no schemas")
	}
	if _, err := agentstore.DDL("mysql"); err == nil {
		t.Fatal("DDL(mysql) succeeded")
	}
}

// requireCLI returns the path of a database CLI, or skips (fails in CI,
// AGENTSTORE_REQUIRE_POSTGRES=1) when it is not installed.
func requireCLI(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("AGENTSTORE_REQUIRE_POSTGRES") == "1" {
			t.Fatalf("%s CLI required but not installed", name)
		}
		t.Skipf("NOTICE: %s CLI not installed; skipping", name)
	}
	return p
}

// applyDDLWithCLI runs ddl with the real psql or sqlite3 client, stopping at
// the first error. For PostgreSQL, searchPath (if set) is the session's
// search_path.
func applyDDLWithCLI(t *testing.T, d agentstore.Dialect, target, searchPath, ddl string) {
	t.Helper()
	var cmd *exec.Cmd
	switch d {
	case agentstore.Postgres:
		cmd = exec.Command(requireCLI(t, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", target, "-f", "-")
		cmd.Env = os.Environ()
		if searchPath != "" {
			cmd.Env = append(cmd.Env, "PGOPTIONS=-c search_path="+searchPath)
		}
	case agentstore.SQLite:
		cmd = exec.Command(requireCLI(t, "sqlite3"), "-bail", target)
	case agentstore.MariaDB:
		// target is an agentstore mysql:// DSN naming the database
		u, err := url.Parse(target)
		if err != nil {
			t.Fatal(err)
		}
		port := u.Port()
		if port == "" {
			port = "3306"
		}
		cmd = exec.Command(requireCLI(t, "mysql"), "--protocol=TCP", "-h", u.Hostname(), "-P", port, "-u", u.User.Username(),
			strings.TrimPrefix(u.Path, "/"))
		cmd.Env = os.Environ()
		if pw, ok := u.User.Password(); ok {
			cmd.Env = append(cmd.Env, "MYSQL_PWD="+pw)
		}
	}
	cmd.Stdin = strings.NewReader(ddl)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s rejected the exported DDL: %v\n%s", cmd.Path, err, out)
	}
}

// ddlCase is one (prefix, schema) combination the exported DDL is tested with.
type ddlCase struct {
	name   string
	prefix string // "" = default
	schema bool   // PostgreSQL: put the tables in a named schema via WithSchema
	// models: build from the DDL GORM generates from the head models
	// (ModelsDDL) instead of the migration chain (DDL).
	models bool
}

var ddlCases = []ddlCase{{name: "default"}, {name: "prefix_and_schema", prefix: "claude_", schema: true}}

// storeFromExportedDDL creates the schema of c with the real CLI from
// DDL() (or ModelsDDL() for c.models) and opens a store on it (not
// migrated).
func storeFromExportedDDL(t *testing.T, h *harness, c ddlCase, opts ...agentstore.Option) *agentstore.Store {
	t.Helper()
	ddlOf := agentstore.DDL
	if c.models {
		ddlOf = agentstore.ModelsDDL
	}
	var ddlOpts []agentstore.Option
	if c.prefix != "" {
		ddlOpts = append(ddlOpts, agentstore.WithTablePrefix(c.prefix))
	}
	openOpts := slices.Clone(ddlOpts)
	dsn := h.DSN
	switch h.Dialect {
	case agentstore.SQLite:
		ddl, err := ddlOf(agentstore.SQLite, ddlOpts...)
		if err != nil {
			t.Fatal(err)
		}
		applyDDLWithCLI(t, agentstore.SQLite, strings.TrimPrefix(h.DSN, "sqlite:"), "", ddl)
	case agentstore.Postgres:
		admin := requirePostgres(t)
		schema := "d_" + strings.ReplaceAll(uuid.NewString(), "-", "")
		t.Cleanup(func() { _, _ = admin.ExecContext(context.Background(), `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`) })
		if c.schema {
			// The DDL names the schema and creates it.
			ddlOpts = append(ddlOpts, agentstore.WithSchema(schema))
			openOpts = append(openOpts, agentstore.WithSchema(schema))
			ddl, err := ddlOf(agentstore.Postgres, ddlOpts...)
			if err != nil {
				t.Fatal(err)
			}
			applyDDLWithCLI(t, agentstore.Postgres, postgresDSN(), "", ddl)
		} else {
			// The unqualified DDL runs into the session's search_path; the
			// store finds it as current_schema().
			if _, err := admin.ExecContext(context.Background(), `CREATE SCHEMA "`+schema+`"`); err != nil {
				t.Fatal(err)
			}
			ddl, err := ddlOf(agentstore.Postgres, ddlOpts...)
			if err != nil {
				t.Fatal(err)
			}
			applyDDLWithCLI(t, agentstore.Postgres, postgresDSN(), schema, ddl)
			dsn = withSearchPath(postgresDSN(), schema)
		}
	}
	if h.Dialect == agentstore.MariaDB {
		// a database of its own per case (MariaDB has no schemas within
		// a database: WithSchema is refused, the prefix tells the cases
		// apart)
		own := newHarness(t, agentstore.MariaDB)
		ddl, err := ddlOf(agentstore.MariaDB, ddlOpts...)
		if err != nil {
			t.Fatal(err)
		}
		applyDDLWithCLI(t, agentstore.MariaDB, own.DSN, "", ddl)
		dsn = own.DSN
	}
	st, err := agentstore.Open(context.Background(), dsn, append(openOpts, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func withSearchPath(dsn, schema string) string {
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + "search_path=" + schema
}

func TestDDLExported_AppliedByCLIVerifiesClean(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		for i, c := range ddlCases {
			t.Run(c.name, func(t *testing.T) {
				hh := *h
				if h.Dialect == agentstore.SQLite {
					hh.DSN = "sqlite:" + filepath.Join(t.TempDir(), fmt.Sprintf("ddl%d.db", i))
				}
				st := storeFromExportedDDL(t, &hh, c)
				rep := testkit.VerifyClean(t, st)
				if rep.DatabaseVersion != agentstore.SchemaVersion {
					t.Fatalf("database version %d, want %d", rep.DatabaseVersion, agentstore.SchemaVersion)
				}
				if h.Dialect == agentstore.Postgres && !strings.HasPrefix(rep.Schema, "d_") {
					t.Fatalf("Verify inspected schema %q, want the test's schema", rep.Schema)
				}
			})
		}
	})
}

// stmtRecorder is a GORM logger that records every statement executed.
type stmtRecorder struct {
	logger.Interface
	mu    sync.Mutex
	stmts []string
}

func (r *stmtRecorder) LogMode(logger.LogLevel) logger.Interface { return r }

func (r *stmtRecorder) Trace(_ context.Context, _ time.Time, fc func() (string, int64), _ error) {
	s, _ := fc()
	r.mu.Lock()
	r.stmts = append(r.stmts, s)
	r.mu.Unlock()
}

// schemaChanges returns the recorded statements that change the schema.
func (r *stmtRecorder) schemaChanges() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, s := range r.stmts {
		up := strings.ToUpper(strings.TrimSpace(s))
		for _, p := range []string{"CREATE ", "ALTER ", "DROP ", "COMMENT "} {
			if strings.HasPrefix(up, p) && !strings.HasPrefix(up, "CREATE SCHEMA IF NOT EXISTS") {
				out = append(out, s)
			}
		}
	}
	return out
}

// catalogSnapshot returns a textual dump of every column (type,
// nullability, default), index (definition) and constraint of the store's
// tables.
func catalogSnapshot(t *testing.T, st *agentstore.Store) string {
	t.Helper()
	db := st.SQLDB()
	var b strings.Builder
	dump := func(q string, args ...any) {
		rows, err := db.QueryContext(context.Background(), q, args...)
		if err != nil {
			t.Fatalf("snapshot %q: %v", q, err)
		}
		defer rows.Close()
		cols, _ := rows.Columns()
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			for _, v := range vals {
				b.WriteString(v.String)
				b.WriteString(" | ")
			}
			b.WriteString("\n")
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	switch st.Dialect() {
	case agentstore.Postgres:
		const nsp = `COALESCE(NULLIF($1, ''), current_schema())`
		dump(`SELECT c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
				pg_get_expr(d.adbin, d.adrelid)
			FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
			LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
			WHERE n.nspname = `+nsp+` AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
			ORDER BY 1, 2`, st.Schema())
		dump(`SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = `+nsp+` ORDER BY 1, 2`, st.Schema())
		dump(`SELECT c.relname, con.conname, pg_get_constraintdef(con.oid) FROM pg_constraint con
			JOIN pg_class c ON c.oid = con.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = `+nsp+` ORDER BY 1, 2`, st.Schema())
	case agentstore.SQLite:
		// The SQL text is compared with ", " and "," alike: ALTER TABLE
		// ADD COLUMN appends ", col ..." to the stored CREATE TABLE.
		// and the quoting of the released V1 (GORM's backticks, DEFAULT "x")
		// like the standard quoting of later files: the snapshot compares
		// structure, not spelling.
		dump(`SELECT type, name, tbl_name, replace(sql, ', ', ',') FROM sqlite_master ORDER BY name`)
		dump(`SELECT m.name, p.cid, p.name, p.type, p."notnull", replace(p.dflt_value, '"', char(39)), p.pk
			FROM sqlite_master m, pragma_table_info(m.name) p WHERE m.type = 'table' ORDER BY 1, 2`)
	}
	if st.Dialect() == agentstore.SQLite {
		out := liteDefaultRE.ReplaceAllString(b.String(), "DEFAULT '$1'")
		return strings.ReplaceAll(out, "`", `"`)
	}
	return b.String()
}

var liteDefaultRE = regexp.MustCompile(`DEFAULT "([^"]*)"`)

func TestDDLExported_MigrateChangesNothing(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		for i, c := range ddlCases {
			t.Run(c.name, func(t *testing.T) {
				hh := *h
				if h.Dialect == agentstore.SQLite {
					hh.DSN = "sqlite:" + filepath.Join(t.TempDir(), fmt.Sprintf("mig%d.db", i))
				}
				rec := &stmtRecorder{Interface: logger.Discard}
				st := storeFromExportedDDL(t, &hh, c, agentstore.WithLogger(rec))
				before := catalogSnapshot(t, st)
				if err := st.Migrate(context.Background()); err != nil {
					t.Fatal(err)
				}
				if ch := rec.schemaChanges(); len(ch) > 0 {
					t.Errorf("Migrate on the exported schema ran %d schema changes:\n%s", len(ch), strings.Join(ch, "\n"))
				}
				after := catalogSnapshot(t, st)
				if before != after {
					t.Errorf("Migrate changed the catalog of the exported schema at %s", firstDiff(before, after))
				}
				testkit.VerifyClean(t, st)
			})
		}
	})
}

// TestDDLExported_MatchesMigrate: the head of the migration chain equals
// the models: Migrate (the chain) and the DDL GORM generates from the head
// models build the same catalog (columns, types, nullability, defaults,
// indexes, constraints), so a model change without a new migration fails
// here; and re-running Migrate on its own schema changes nothing.
func TestDDLExported_MatchesMigrate(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		rec := &stmtRecorder{Interface: logger.Discard}
		migrated := h.New(t, agentstore.WithLogger(rec))
		hh := *h
		if h.Dialect == agentstore.SQLite {
			hh.DSN = "sqlite:" + filepath.Join(t.TempDir(), "exported.db")
		}
		exported := storeFromExportedDDL(t, &hh, ddlCase{name: "models", models: true})
		anon := func(st *agentstore.Store, snap string) string {
			if st.Dialect() != agentstore.Postgres {
				return snap
			}
			// Verify reports the schema it inspected; pg_get_expr omits
			// schemas on the search_path, so drop the qualifier everywhere.
			rep := testkit.MustVerify(t, st)
			return strings.ReplaceAll(snap, rep.Schema+".", "")
		}
		a, b := anon(migrated, catalogSnapshot(t, migrated)), anon(exported, catalogSnapshot(t, exported))
		if a != b {
			t.Fatalf("Migrate and the exported DDL build different schemas at %s", firstDiff(a, b))
		}
		rec.mu.Lock()
		rec.stmts = nil
		rec.mu.Unlock()
		if err := migrated.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		if ch := rec.schemaChanges(); len(ch) > 0 {
			t.Fatalf("a second Migrate ran %d schema changes:\n%s", len(ch), strings.Join(ch, "\n"))
		}
	})
}
