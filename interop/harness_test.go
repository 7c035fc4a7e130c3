package interop_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx" for PostgreSQL
	_ "github.com/mattn/go-sqlite3"    // database/sql driver "sqlite3" for SQLite (cgo)

	"github.com/agentstore/agentstore"
)

const defaultPostgresDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// postgresDSN is the server the PostgreSQL half runs on.
func postgresDSN() string {
	if v := os.Getenv("AGENTSTORE_TEST_POSTGRES_DSN"); v != "" {
		return v
	}
	return defaultPostgresDSN
}

var (
	adminOnce sync.Once
	adminDB   *sql.DB
	adminErr  error
)

// admin returns a connection pool on the PostgreSQL server (for creating
// and dropping the tests' schemas), or the reason it cannot be reached.
func admin() (*sql.DB, error) {
	adminOnce.Do(func() {
		adminDB, adminErr = sql.Open("pgx", postgresDSN())
		if adminErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		adminErr = adminDB.PingContext(ctx)
	})
	return adminDB, adminErr
}

// database is one empty database private to a test, and how each tool
// reaches it.
type database struct {
	Dialect agentstore.Dialect
	// Schema is the PostgreSQL schema private to the test ("" on SQLite).
	Schema string
	// StoreDSN and StoreOpts open an agentstore.Store on it.
	StoreDSN  string
	StoreOpts []agentstore.Option
	// ExportOpts render the exported files for it (WithSchema on PostgreSQL).
	ExportOpts []agentstore.Option
	// SQLDriver and SQLDSN open it with database/sql (goose, the Flyway
	// runner, the snapshots).
	SQLDriver string
	SQLDSN    string
	// migrateBase is the golang-migrate database URL without x- options.
	migrateBase string
}

// MigrateURL is the golang-migrate database URL, with extra x- options
// (for example "x-multi-statement=true") appended.
func (d *database) MigrateURL(xopts ...string) string {
	u := d.migrateBase
	for _, o := range xopts {
		if strings.Contains(u, "?") {
			u += "&" + o
		} else {
			u += "?" + o
		}
	}
	return u
}

// Table is the name of an agentstore table (default prefix) as SQL, schema
// qualified on PostgreSQL.
func (d *database) Table(name string) string {
	if d.Schema != "" {
		return `"` + d.Schema + `"."agentstore_` + name + `"`
	}
	return `"agentstore_` + name + `"`
}

// ToolTable is the name of a tool's own bookkeeping table as SQL. On
// PostgreSQL the tools create it in the first schema of search_path, the
// test's schema.
func (d *database) ToolTable(name string) string {
	if d.Schema != "" {
		return `"` + d.Schema + `"."` + name + `"`
	}
	return `"` + name + `"`
}

// OpenSQL opens the database with database/sql and closes it at the end of
// the test.
func (d *database) OpenSQL(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open(d.SQLDriver, d.SQLDSN)
	if err != nil {
		t.Fatalf("open %s: %v", d.Dialect, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// dialects runs fn once per dialect, each as a subtest with a fresh empty
// database: "sqlite" and "postgres".
func dialects(t *testing.T, fn func(t *testing.T, d *database)) {
	t.Run("sqlite", func(t *testing.T) { fn(t, newSQLite(t)) })
	t.Run("postgres", func(t *testing.T) { fn(t, newPostgres(t)) })
}

// newSQLite returns a new SQLite file in t.TempDir().
func newSQLite(t *testing.T) *database {
	if !cgoEnabled {
		t.Skip("NOTICE: built with CGO_ENABLED=0; mattn/go-sqlite3 (used by agentstore, goose's and golang-migrate's runs here) needs cgo: skipping the SQLite half")
	}
	// The exported SQLite schema's search index is an FTS5 table (V16).
	// mattn/go-sqlite3 compiles FTS5 only with -tags sqlite_fts5; a process
	// that has opened an agentstore SQLite Store has agentstore's FTS5
	// registered for every later connection, the tools' included
	// (docs/sqlite-drivers.md). Open one before the tools run.
	reg, err := agentstore.Open(context.Background(), "sqlite::memory:")
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.SQLDB().Ping(); err != nil {
		t.Fatal(err)
	}
	_ = reg.Close()
	path := filepath.Join(t.TempDir(), "interop.db")
	return &database{
		Dialect:  agentstore.SQLite,
		StoreDSN: "sqlite:" + path,
		// The tools' connections wait for agentstore's write lock (and the
		// other way round) instead of failing with SQLITE_BUSY.
		SQLDriver:   "sqlite3",
		SQLDSN:      path + "?_busy_timeout=10000",
		migrateBase: "sqlite3://" + path + "?_busy_timeout=10000",
	}
}

// newPostgres creates the schema i_<uuid> for t and drops it (CASCADE) at
// the end of the test, or skips t when the server is unreachable (fails
// with AGENTSTORE_REQUIRE_POSTGRES=1).
//
// The exported files name the schema (ExportMigrations with WithSchema), so
// agentstore's tables land in it whatever the connection's search_path.
// The tools' connections also get search_path=<schema> (a runtime
// parameter in the DSN) so that each tool's own bookkeeping table
// (goose_db_version, schema_migrations) is created in the test's schema too,
// not shared in public between tests; and the schema must exist before a
// tool runs, since the tool creates that table before applying V1 (whose
// CREATE SCHEMA IF NOT EXISTS then does nothing).
func newPostgres(t *testing.T) *database {
	t.Helper()
	adm, err := admin()
	if err != nil {
		if os.Getenv("AGENTSTORE_REQUIRE_POSTGRES") == "1" {
			t.Fatalf("PostgreSQL required (AGENTSTORE_REQUIRE_POSTGRES=1) but unreachable at %s: %v", agentstore.RedactDSN(postgresDSN()), err)
		}
		t.Skipf("NOTICE: PostgreSQL unreachable at %s (%v); skipping the PostgreSQL half. Set AGENTSTORE_REQUIRE_POSTGRES=1 to fail instead.",
			agentstore.RedactDSN(postgresDSN()), err)
	}
	schema := "i_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := adm.ExecContext(ctx, `CREATE SCHEMA "`+schema+`"`); err != nil {
		t.Fatalf("create schema %s: %v", schema, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := adm.ExecContext(ctx, `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})

	u, err := url.Parse(postgresDSN())
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("AGENTSTORE_TEST_POSTGRES_DSN must be a postgres:// URL here (got %s)", agentstore.RedactDSN(postgresDSN()))
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	toolDSN := u.String()
	// golang-migrate's pgx/v5 driver is registered as pgx5://; it turns the
	// URL back into postgres:// for pgx after removing its x- options.
	mu := *u
	mu.Scheme = "pgx5"
	return &database{
		Dialect:     agentstore.Postgres,
		Schema:      schema,
		StoreDSN:    postgresDSN(),
		StoreOpts:   []agentstore.Option{agentstore.WithSchema(schema)},
		ExportOpts:  []agentstore.Option{agentstore.WithSchema(schema)},
		SQLDriver:   "pgx",
		SQLDSN:      toolDSN,
		migrateBase: mu.String(),
	}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// openStore opens an agentstore.Store on d, closed at the end of the test.
func openStore(t *testing.T, ctx context.Context, d *database) *agentstore.Store {
	t.Helper()
	st, err := agentstore.Open(ctx, d.StoreDSN, d.StoreOpts...)
	if err != nil {
		t.Fatalf("agentstore.Open: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// verify opens a Store on d and returns its Verify report.
func verify(t *testing.T, ctx context.Context, d *database) *agentstore.VerifyReport {
	t.Helper()
	st, err := agentstore.Open(ctx, d.StoreDSN, d.StoreOpts...)
	if err != nil {
		t.Fatalf("agentstore.Open: %v", err)
	}
	defer st.Close()
	rep, err := st.Verify(ctx)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	return rep
}

// requireVerifyOK fails t unless Verify reports no issue at SchemaVersion.
func requireVerifyOK(t *testing.T, ctx context.Context, d *database, after string) {
	t.Helper()
	rep := verify(t, ctx, d)
	if !rep.OK() || rep.DatabaseVersion != agentstore.SchemaVersion {
		t.Fatalf("after %s: Verify OK=%v at version %d (want OK at %d), %d issues:\n%s",
			after, rep.OK(), rep.DatabaseVersion, agentstore.SchemaVersion, len(rep.Issues), rep)
	}
	if d.Schema != "" && rep.Schema != d.Schema {
		t.Fatalf("after %s: Verify inspected schema %q, want %q", after, rep.Schema, d.Schema)
	}
}

// requireVerifyAtV1 fails t unless Verify reports a database at version 1:
// not OK, schema_version_behind, and every index the later migrations
// create (laterIndexes) missing, and nothing else.
func requireVerifyAtV1(t *testing.T, ctx context.Context, d *database, laterIndexes []string, after string) {
	t.Helper()
	rep := verify(t, ctx, d)
	if rep.OK() || rep.DatabaseVersion != 1 {
		t.Fatalf("after %s: Verify OK=%v at version %d, want not OK at version 1:\n%s", after, rep.OK(), rep.DatabaseVersion, rep)
	}
	// At V1 the database lacks what the later migrations add (indexes,
	// tables, columns, a wider numeric) and keeps what they drop
	// (indexes): those are the only issue kinds allowed, and the version
	// must be reported behind.
	later := map[agentstore.IssueKind]bool{agentstore.IssueMissingIndex: true, agentstore.IssueMissingTable: true,
		agentstore.IssueMissingColumn: true, agentstore.IssueColumnTypeMismatch: true, agentstore.IssueExtraIndex: true,
		agentstore.IssueSearchIndex: true, agentstore.IssueChangeFeed: true, // V8's search objects, V10's feed triggers
		agentstore.IssuePrimaryKeyMismatch: true, agentstore.IssueNullabilityMismatch: true} // V13's keys (the distribution column)
	behind := false
	var missing []string
	for _, is := range rep.Issues {
		switch {
		case is.Kind == agentstore.IssueSchemaVersionBehind:
			behind = true
		case is.Kind == agentstore.IssueMissingIndex && slices.Contains(laterIndexes, is.Object):
			missing = append(missing, is.Object)
		case later[is.Kind]:
		default:
			t.Errorf("after %s: unexpected issue at V1 (want only what the later migrations change): %s", after, is)
		}
	}
	if !behind || len(missing) == 0 {
		t.Fatalf("after %s: schema_version_behind=%v, missing later indexes %v, want true and some of %v:\n%s", after, behind, missing, laterIndexes, rep)
	}
}

var createIndexRE = regexp.MustCompile(`(?m)^CREATE (?:UNIQUE )?INDEX (?:CONCURRENTLY )?(?:IF NOT EXISTS )?"([^"]+)"`)

// laterIndexes returns the names of the indexes created by the exported
// files after the first one (paths in version order): what a database at
// V1 lacks.
func laterIndexes(t *testing.T, paths []string) []string {
	t.Helper()
	var out []string
	for _, p := range paths[1:] {
		if strings.HasSuffix(p, ".conf") {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range createIndexRE.FindAllStringSubmatch(string(b), -1) {
			out = append(out, m[1])
		}
	}
	if len(out) == 0 {
		t.Fatalf("no CREATE INDEX in the migrations after V1 (%v)", paths)
	}
	return out
}

// sqlFiles returns the exported paths without the Flyway .sql.conf files.
func sqlFiles(paths []string) []string {
	var out []string
	for _, p := range paths {
		if !strings.HasSuffix(p, ".conf") {
			out = append(out, p)
		}
	}
	return out
}

// schemaVersions returns agentstore's own record: the versions in
// agentstore_schema_version, in order.
func schemaVersions(t *testing.T, ctx context.Context, d *database) []int64 {
	t.Helper()
	db := d.OpenSQL(t)
	rows, err := db.QueryContext(ctx, "SELECT version FROM "+d.Table("schema_version")+" ORDER BY version")
	if err != nil {
		t.Fatalf("read schema versions: %v", err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func requireSchemaVersions(t *testing.T, ctx context.Context, d *database, want ...int64) {
	t.Helper()
	if got := schemaVersions(t, ctx, d); !slices.Equal(got, want) {
		t.Fatalf("agentstore_schema_version rows = %v, want %v", got, want)
	}
}

func allVersions() []int64 {
	var out []int64
	for v := int64(1); v <= agentstore.SchemaVersion; v++ {
		out = append(out, v)
	}
	return out
}

// snapshot renders the catalog of d's schema (every relation with its oid
// or root page and definition, every column, every constraint) and the
// rows of agentstore's version table and of the given tool tables, so two
// snapshots differ when anything was created, dropped, rebuilt or recorded.
func snapshot(t *testing.T, ctx context.Context, d *database, toolTables ...string) string {
	t.Helper()
	db := d.OpenSQL(t)
	var b strings.Builder
	dump := func(title, q string, args ...any) {
		fmt.Fprintf(&b, "-- %s\n", title)
		rows, err := db.QueryContext(ctx, q, args...)
		if err != nil {
			t.Fatalf("snapshot %s: %v", title, err)
		}
		defer rows.Close()
		cols, err := rows.Columns()
		if err != nil {
			t.Fatal(err)
		}
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			for i, v := range vals {
				if i > 0 {
					b.WriteString(" | ")
				}
				if bs, ok := v.([]byte); ok {
					v = string(bs)
				}
				fmt.Fprint(&b, v)
			}
			b.WriteByte('\n')
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("snapshot %s: %v", title, err)
		}
	}
	if d.Dialect == agentstore.Postgres {
		dump("relations", `SELECT c.relname, c.relkind, c.oid, COALESCE(pg_get_indexdef(c.oid), ''), COALESCE(i.indisvalid::text, '')
			FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace LEFT JOIN pg_index i ON i.indexrelid = c.oid
			WHERE n.nspname = $1 ORDER BY c.relname`, d.Schema)
		dump("columns", `SELECT table_name, column_name, data_type, is_nullable, COALESCE(column_default, '')
			FROM information_schema.columns WHERE table_schema = $1 ORDER BY table_name, ordinal_position`, d.Schema)
		dump("constraints", `SELECT c.conname, c.oid, pg_get_constraintdef(c.oid)
			FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = $1 ORDER BY c.conname`, d.Schema)
	} else {
		dump("schema_version pragma", `PRAGMA schema_version`)
		dump("sqlite_master", `SELECT type, name, tbl_name, rootpage, COALESCE(sql, '') FROM sqlite_master ORDER BY type, name`)
	}
	dump("agentstore_schema_version", "SELECT * FROM "+d.Table("schema_version")+" ORDER BY version")
	for _, tt := range toolTables {
		dump(tt, "SELECT * FROM "+d.ToolTable(tt)+" ORDER BY 1")
	}
	return b.String()
}

// requireMigrateNoop runs agentstore's own Store.Migrate on a database a
// tool built to the head of the chain and fails t unless it succeeds and
// changes nothing (catalog, agentstore's version rows, the tool's table),
// and Verify is still OK.
func requireMigrateNoop(t *testing.T, ctx context.Context, d *database, toolTables ...string) {
	t.Helper()
	before := snapshot(t, ctx, d, toolTables...)
	st := openStore(t, ctx, d)
	if err := st.Migrate(ctx); err != nil {
		t.Fatalf("Store.Migrate on the tool-built database: %v", err)
	}
	if v, err := st.RecordedSchemaVersion(ctx); err != nil || v != agentstore.SchemaVersion {
		t.Fatalf("RecordedSchemaVersion after Migrate = %d, %v; want %d", v, err, agentstore.SchemaVersion)
	}
	_ = st.Close()
	if after := snapshot(t, ctx, d, toolTables...); after != before {
		t.Fatalf("Store.Migrate changed the tool-built database:\n--- before\n%s\n--- after\n%s", before, after)
	}
	requireVerifyOK(t, ctx, d, "Store.Migrate")
	requireSchemaVersions(t, ctx, d, allVersions()...)
}
