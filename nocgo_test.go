//go:build !cgo

package agentstore_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
)

// testSQLiteDriver is the database/sql driver name of the build's SQLite
// driver, for tests that open a database beside agentstore
// (modernc.org/sqlite, which accepts mattn/go-sqlite3's DSN parameters).
const testSQLiteDriver = "sqlite"

// testSQLiteHasFTS4: the build's SQLite driver has FTS4 (modernc.org/sqlite
// does not).
const testSQLiteHasFTS4 = false

// TestSQLiteWithoutCgo: a CGO_ENABLED=0 build opens sqlite: DSNs with the
// pure-Go driver (modernc.org/sqlite): Migrate builds the schema (the
// search index as an FTS5 table), sessions and search work, a second
// Store sees the first one's writes; DDL renders both dialects. (CI runs
// this, and the whole SQLite conformance suite, with CGO_ENABLED=0.)
func TestSQLiteWithoutCgo(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "x.db")
	st, err := agentstore.Open(ctx, "sqlite:"+path)
	if err != nil {
		t.Fatalf("Open(sqlite) without cgo: %v", err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	s := repo.NewSession()
	if err := st.Sessions().Save(ctx, s); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Sessions().AppendMessages(ctx, s.ID, repo.Message{ID: "m1", Role: repo.RoleUser, Content: []byte(`"hello from a pure-Go build"`)}); err != nil {
		t.Fatal(err)
	}
	other, err := agentstore.Open(ctx, "sqlite:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	got, err := other.Sessions().Load(ctx, s.ID)
	if err != nil || len(got.Messages) != 1 {
		t.Fatalf("Load through another Store = %+v, %v", got, err)
	}
	page, err := other.Sessions().Search(ctx, repo.SearchParams{Query: "pure"})
	if err != nil || len(page.Hits) != 1 {
		t.Fatalf("Search = %+v, %v", page, err)
	}
	var sql string
	if err := other.DB(ctx).Raw(`SELECT sql FROM sqlite_master WHERE name = 'agentstore_message_fts'`).Scan(&sql).Error; err != nil ||
		!strings.Contains(sql, "fts5") {
		t.Fatalf("search index = %q, %v; want an FTS5 table", sql, err)
	}
	if rep, err := other.Verify(ctx); err != nil || len(rep.Issues) != 0 {
		t.Fatalf("Verify = %+v, %v", rep, err)
	}
	if ddl, err := agentstore.DDL(agentstore.SQLite); err != nil || !strings.Contains(ddl, "CREATE TABLE") {
		t.Fatalf("DDL(sqlite) without cgo: %v", err)
	}
	if ddl, err := agentstore.DDL(agentstore.Postgres); err != nil || !strings.Contains(ddl, "CREATE TABLE") {
		t.Fatalf("DDL(postgres) without cgo: %v", err)
	}
}

// TestSQLiteOtherBuildsSearchIndex: a database whose search index is an
// FTS4 table (as a cgo build made before schema version 16; modernc.org/sqlite
// lacks FTS4) opens, but a message write is ErrInvalidConfig saying that a
// cgo build must migrate it to version 16, not a raw driver error. (The FTS4 table is forged by
// rewriting the schema row: this build cannot create one.)
func TestSQLiteOtherBuildsSearchIndex(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "x.db")
	st, err := agentstore.Open(ctx, "sqlite:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	db := st.DB(ctx)
	for _, q := range []string{
		`PRAGMA writable_schema = ON`,
		`UPDATE sqlite_master SET sql = replace(sql, 'fts5', 'fts4') WHERE name = 'agentstore_message_fts'`,
		`PRAGMA writable_schema = OFF`,
	} {
		if err := db.Exec(q).Error; err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st, err = agentstore.Open(ctx, "sqlite:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := repo.NewSession()
	if err := st.Sessions().Save(ctx, s); err != nil {
		t.Fatal(err)
	}
	_, err = st.Sessions().AppendMessages(ctx, s.ID, repo.Message{ID: "m1", Role: repo.RoleUser, Content: []byte(`"hi"`)})
	if !errors.Is(err, agentstore.ErrInvalidConfig) || strings.Contains(err.Error(), "no such module") ||
		!strings.Contains(err.Error(), "cgo build") || !strings.Contains(err.Error(), "version 16") {
		t.Fatalf("append on a database with an FTS4 index = %v, want ErrInvalidConfig naming the build and the version, without the driver's text", err)
	}
	t.Logf("error: %v", err)
}
